package proto

import (
	"encoding/binary"
	"fmt"
)

// The connection manager's messages (protocol 1.1, opcodes 0x0400-0x04ff):
// rdma_cm through the daemon, modelled on the kernel's ucma operations.
// docs/rvtd-protocol.md section 9 is generated from this table and the
// walks below.

// rdma_cm opcodes.
const (
	OpCMCreateEventChannel  Op = 0x0400
	OpCMDestroyEventChannel Op = 0x0401
	OpCMCreateID            Op = 0x0402
	OpCMDestroyID           Op = 0x0403
	OpCMBindAddr            Op = 0x0404
	OpCMResolveAddr         Op = 0x0405
	OpCMResolveRoute        Op = 0x0406
	OpCMQuery               Op = 0x0407
	OpCMListen              Op = 0x0408
	OpCMConnect             Op = 0x0409
	OpCMAccept              Op = 0x040a
	OpCMReject              Op = 0x040b
	OpCMDisconnect          Op = 0x040c
	OpCMInitQPAttr          Op = 0x040d
	OpCMEstablish           Op = 0x040e
	OpCMNotify              Op = 0x040f
	OpCMJoinMulticast       Op = 0x0410
	OpCMLeaveMulticast      Op = 0x0411
	OpCMSetOption           Op = 0x0412
	OpCMMigrateID           Op = 0x0413
	OpCMDiscard             Op = 0x0414 // version 1.2
)

// Address families of CMAddr (Linux values).
const (
	AFUnspec = 0
	AFInet   = 2
	AFInet6  = 10
)

// Port spaces (enum rdma_port_space).
const (
	PSIPoIB = 0x0002
	PSTCP   = 0x0106
	PSUDP   = 0x0111
	PSIB    = 0x013F
)

// set_option levels and names (librdmacm's RDMA_OPTION_*).
const (
	OptLevelID        = 0 // RDMA_OPTION_ID
	OptLevelIB        = 1 // RDMA_OPTION_IB
	OptIDTOS          = 0 // RDMA_OPTION_ID_TOS: value is the traffic class (u8)
	OptIDReuseAddr    = 1 // RDMA_OPTION_ID_REUSEADDR: value 0 or 1
	OptIDAFOnly       = 2 // RDMA_OPTION_ID_AFONLY
	OptIDAckTimeout   = 3 // RDMA_OPTION_ID_ACK_TIMEOUT: value is the exponent (u8)
	OptIBPath         = 1 // RDMA_OPTION_IB_PATH
	CMEventRecordSize = 384
	// CMMaxPrivateData is the most private data an event record carries
	// (the largest CM private data field, RTU's and DREP's 224 bytes, fits).
	CMMaxPrivateData = 256
	// RejConsumerDefined is the REJ reason rdma_reject sends (28).
	RejConsumerDefined = 28
)

// CMAddr is a socket address: family, port, and the address as 16 bytes
// (IPv4 as the IPv4-mapped IPv6 address ::ffff:a.b.c.d).
type CMAddr struct {
	Family uint16 // AFUnspec (no address), AFInet or AFInet6
	Port   uint16 // host order (little-endian here), not network order
	Addr   [16]byte
}

func walkCMAddr(c *Codec, p string, a *CMAddr) {
	c.U16(p+"family", &a.Family)
	c.U16(p+"port", &a.Port)
	c.Pad(4)
	c.GID(p+"addr", &a.Addr)
}

// CMChannelReply names an rdma_cm event channel and passes its socket.
type CMChannelReply struct {
	Channel uint32
	FD      int
}

func (m *CMChannelReply) Walk(c *Codec) {
	c.U32("channel", &m.Channel)
	c.Pad(4)
	c.FD("event_fd", &m.FD)
}

// CMCreateID is rdma_create_id.
type CMCreateID struct {
	Context   uint64 // echoed in every event of the ID
	PortSpace uint16 // PSTCP, PSUDP, PSIB, PSIPoIB
	QPType    uint8  // ibv_qp_type: RC 2, UC 3, UD 4
}

func (m *CMCreateID) Walk(c *Codec) {
	c.U64("context", &m.Context)
	c.U16("port_space", &m.PortSpace)
	c.U8("qp_type", &m.QPType)
	c.Pad(5)
}

// CMIDReply names a new ID.
type CMIDReply struct{ ID uint32 }

func (m *CMIDReply) Walk(c *Codec) {
	c.U32("id", &m.ID)
	c.Pad(4)
}

// CMEventsReply answers destroy_id and migrate_id: how many event
// records the daemon wrote about the ID to its (old) channel.
type CMEventsReply struct{ EventsReported uint32 }

func (m *CMEventsReply) Walk(c *Codec) {
	c.U32("events_reported", &m.EventsReported)
	c.Pad(4)
}

// CMBindAddr is rdma_bind_addr.
type CMBindAddr struct{ Addr CMAddr }

func (m *CMBindAddr) Walk(c *Codec) { walkCMAddr(c, "addr.", &m.Addr) }

// CMResolveAddr is rdma_resolve_addr.
type CMResolveAddr struct {
	Src       CMAddr // family AFUnspec: none
	Dst       CMAddr
	TimeoutMS uint32
}

func (m *CMResolveAddr) Walk(c *Codec) {
	walkCMAddr(c, "src.", &m.Src)
	walkCMAddr(c, "dst.", &m.Dst)
	c.U32("timeout_ms", &m.TimeoutMS)
	c.Pad(4)
}

// CMTimeout is rdma_resolve_route's argument.
type CMTimeout struct{ TimeoutMS uint32 }

func (m *CMTimeout) Walk(c *Codec) {
	c.U32("timeout_ms", &m.TimeoutMS)
	c.Pad(4)
}

// CMQueryReply is what an rdma_cm_id exposes: its addresses, its device,
// its port and its route (one path record's essentials on RoCE).
type CMQueryReply struct {
	Src, Dst     CMAddr
	SGID, DGID   [16]byte
	NodeGUID     uint64 // the device's (0: the ID has no device yet)
	DeviceName   string // "" : no device yet (an unbound or wildcard ID)
	Device       uint32 // this session's handle of the device if it opened it, else 0
	PKey         uint16
	Port         uint8 // 1, or 0 with no device
	NumPaths     uint8 // 1 once the route is resolved (or the ID is connected)
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	MTU          uint8 // ibv_mtu of the path
	FlowLabel    uint32
	PacketLife   uint8 // the path's packet lifetime exponent
	SL           uint8
	State        uint8 // the CM state (informational, for rdma resource show)
	QPType       uint8
	PortSpace    uint16
}

func (m *CMQueryReply) Walk(c *Codec) {
	walkCMAddr(c, "src_addr.", &m.Src)
	walkCMAddr(c, "dst_addr.", &m.Dst)
	c.GID("sgid", &m.SGID)
	c.GID("dgid", &m.DGID)
	c.U64("node_guid", &m.NodeGUID)
	c.Str("device_name", &m.DeviceName, 64)
	c.U32("device", &m.Device)
	c.U16("pkey", &m.PKey)
	c.U8("port_num", &m.Port)
	c.U8("num_paths", &m.NumPaths)
	c.U8("sgid_index", &m.SGIDIndex)
	c.U8("hop_limit", &m.HopLimit)
	c.U8("traffic_class", &m.TrafficClass)
	c.U8("mtu", &m.MTU)
	c.U32("flow_label", &m.FlowLabel)
	c.U8("packet_life_time", &m.PacketLife)
	c.U8("sl", &m.SL)
	c.U8("state", &m.State)
	c.U8("qp_type", &m.QPType)
	c.U16("port_space", &m.PortSpace)
	c.Pad(2)
}

// CMListen is rdma_listen.
type CMListen struct{ Backlog uint32 }

func (m *CMListen) Walk(c *Codec) {
	c.U32("backlog", &m.Backlog)
	c.Pad(4)
}

// CMConnParam is rdma_connect's and rdma_accept's struct rdma_conn_param
// (plus the UD Q_Key), the private data as the tail.
type CMConnParam struct {
	QP                 uint32 // a QP handle of this session, or 0
	QPNum              uint32 // used when QP is 0
	QKey               uint32 // accept of a UD request: 0 is the port space's Q_Key
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                bool
	PrivateData        []byte
}

func (m *CMConnParam) Walk(c *Codec) {
	c.U32("qp", &m.QP)
	c.U32("qp_num", &m.QPNum)
	c.U32("qkey", &m.QKey)
	c.U8("responder_resources", &m.ResponderResources)
	c.U8("initiator_depth", &m.InitiatorDepth)
	c.U8("flow_control", &m.FlowControl)
	c.U8("retry_count", &m.RetryCount)
	c.U8("rnr_retry_count", &m.RNRRetryCount)
	c.Bool("srq", &m.SRQ)
	c.Pad(6)
	Tail(c, "private_data", &m.PrivateData, func(c *Codec, b *byte) { c.U8("byte", b) })
}

// CMReject is rdma_reject.
type CMReject struct {
	Reason      uint16 // 0 or RejConsumerDefined (28)
	PrivateData []byte
}

func (m *CMReject) Walk(c *Codec) {
	c.U16("reason", &m.Reason)
	c.Pad(6)
	Tail(c, "private_data", &m.PrivateData, func(c *Codec, b *byte) { c.U8("byte", b) })
}

// CMInitQPAttr is rdma_init_qp_attr.
type CMInitQPAttr struct{ State uint8 }

func (m *CMInitQPAttr) Walk(c *Codec) {
	c.U8("qp_state", &m.State)
	c.Pad(7)
}

// CMInitQPAttrReply is the attributes and the ibv_qp_attr_mask that move
// the ID's QP to the asked state.
type CMInitQPAttrReply struct {
	Mask uint32
	Attr QPAttr
}

func (m *CMInitQPAttrReply) Walk(c *Codec) {
	c.U32("attr_mask", &m.Mask)
	c.Pad(4)
	walkQPAttr(c, &m.Attr)
}

// CMNotify is ucma's notify: an ibv_event_type seen on the ID's QP.
type CMNotify struct{ Event uint32 }

func (m *CMNotify) Walk(c *Codec) {
	c.U32("event", &m.Event)
	c.Pad(4)
}

// CMMulticast is rdma_join_multicast and rdma_leave_multicast.
type CMMulticast struct {
	Addr      CMAddr
	Context   uint64
	JoinFlags uint32
}

func (m *CMMulticast) Walk(c *Codec) {
	walkCMAddr(c, "addr.", &m.Addr)
	c.U64("context", &m.Context)
	c.U32("join_flags", &m.JoinFlags)
	c.Pad(4)
}

// CMSetOption is rdma_set_option with an integer value.
type CMSetOption struct {
	Level uint32
	Name  uint32
	Value uint64
}

func (m *CMSetOption) Walk(c *Codec) {
	c.U32("level", &m.Level)
	c.U32("optname", &m.Name)
	c.U64("value", &m.Value)
}

// CMMigrateID is rdma_migrate_id: the channel the ID's events go to now.
type CMMigrateID struct{ Channel uint32 }

func (m *CMMigrateID) Walk(c *Codec) {
	c.U32("channel", &m.Channel)
	c.Pad(4)
}

// CMEvent is the record read from an rdma_cm event channel's socket (one
// per read, CMEventRecordSize bytes).
type CMEvent struct {
	Context            uint64 // the ID's context (CONNECT_REQUEST: the listener's)
	ID                 uint32 // the ID (CONNECT_REQUEST: the new ID the daemon made)
	ListenID           uint32 // CONNECT_REQUEST: the listening ID; else 0
	Event              uint32 // RDMA_CM_EVENT_*
	Status             int32  // 0; REJECTED: the REJ reason; errors: a negative errno
	QPNum              uint32 // the peer's QP number (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, UD)
	QKey               uint32 // UD: the peer's Q_Key
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                bool
	PrivateDataLen     uint8
	UD                 bool // the UD fields (qp_num, qkey, ah_attr) are set
	Src, Dst           CMAddr
	AH                 AV // UD: the address vector to the peer
	PrivateData        [CMMaxPrivateData]byte
}

func (m *CMEvent) Walk(c *Codec) {
	c.U64("context", &m.Context)
	c.U32("id", &m.ID)
	c.U32("listen_id", &m.ListenID)
	c.U32("event", &m.Event)
	c.I32("status", &m.Status)
	c.U32("qp_num", &m.QPNum)
	c.U32("qkey", &m.QKey)
	c.U8("responder_resources", &m.ResponderResources)
	c.U8("initiator_depth", &m.InitiatorDepth)
	c.U8("flow_control", &m.FlowControl)
	c.U8("retry_count", &m.RetryCount)
	c.U8("rnr_retry_count", &m.RNRRetryCount)
	c.Bool("srq", &m.SRQ)
	c.U8("private_data_len", &m.PrivateDataLen)
	c.Bool("ud", &m.UD)
	walkCMAddr(c, "src_addr.", &m.Src)
	walkCMAddr(c, "dst_addr.", &m.Dst)
	walkAV(c, "ah_attr.", &m.AH)
	c.Pad(8)
	c.Bytes("private_data", m.PrivateData[:])
}

var cmTable = [...]Spec{
	{Op: OpCMCreateEventChannel, Name: "cm_create_event_channel", Reply: mk[CMChannelReply](),
		Doc: "rdma_create_event_channel; passes the channel's socket"},
	{Op: OpCMDestroyEventChannel, Name: "cm_destroy_event_channel", Handle: "cm_channel",
		Doc: "rdma_destroy_event_channel (EBUSY while IDs use it)"},
	{Op: OpCMCreateID, Name: "cm_create_id", Handle: "cm_channel", Request: mk[CMCreateID](), Reply: mk[CMIDReply](),
		Doc: "rdma_create_id"},
	{Op: OpCMDestroyID, Name: "cm_destroy_id", Handle: "cm_id", Reply: mk[CMEventsReply](), Doc: "rdma_destroy_id"},
	{Op: OpCMBindAddr, Name: "cm_bind_addr", Handle: "cm_id", Request: mk[CMBindAddr](), Doc: "rdma_bind_addr"},
	{Op: OpCMResolveAddr, Name: "cm_resolve_addr", Handle: "cm_id", Request: mk[CMResolveAddr](),
		Doc: "rdma_resolve_addr; ADDR_RESOLVED or ADDR_ERROR follows, or the call fails (ENETUNREACH: no route, no event)"},
	{Op: OpCMResolveRoute, Name: "cm_resolve_route", Handle: "cm_id", Request: mk[CMTimeout](),
		Doc: "rdma_resolve_route; ROUTE_RESOLVED or ROUTE_ERROR follows"},
	{Op: OpCMQuery, Name: "cm_query", Handle: "cm_id", Reply: mk[CMQueryReply](),
		Doc: "the ID's addresses, device, port and route"},
	{Op: OpCMListen, Name: "cm_listen", Handle: "cm_id", Request: mk[CMListen](), Doc: "rdma_listen; the backlog as Linux's ucma takes it (section 9)"},
	{Op: OpCMConnect, Name: "cm_connect", Handle: "cm_id", Request: mk[CMConnParam](), Doc: "rdma_connect"},
	{Op: OpCMAccept, Name: "cm_accept", Handle: "cm_id", Request: mk[CMConnParam](), Doc: "rdma_accept"},
	{Op: OpCMReject, Name: "cm_reject", Handle: "cm_id", Request: mk[CMReject](), Doc: "rdma_reject"},
	{Op: OpCMDisconnect, Name: "cm_disconnect", Handle: "cm_id", Doc: "rdma_disconnect"},
	{Op: OpCMInitQPAttr, Name: "cm_init_qp_attr", Handle: "cm_id", Request: mk[CMInitQPAttr](), Reply: mk[CMInitQPAttrReply](),
		Doc: "rdma_init_qp_attr"},
	{Op: OpCMEstablish, Name: "cm_establish", Handle: "cm_id", Doc: "rdma_establish"},
	{Op: OpCMNotify, Name: "cm_notify", Handle: "cm_id", Request: mk[CMNotify](), Doc: "rdma_notify"},
	{Op: OpCMJoinMulticast, Name: "cm_join_multicast", Handle: "cm_id", Request: mk[CMMulticast](),
		Doc: "rdma_join_multicast_ex; MULTICAST_JOIN follows"},
	{Op: OpCMLeaveMulticast, Name: "cm_leave_multicast", Handle: "cm_id", Request: mk[CMMulticast](),
		Doc: "rdma_leave_multicast (addr only)"},
	{Op: OpCMSetOption, Name: "cm_set_option", Handle: "cm_id", Request: mk[CMSetOption](), Doc: "rdma_set_option"},
	{Op: OpCMMigrateID, Name: "cm_migrate_id", Handle: "cm_id", Request: mk[CMMigrateID](), Reply: mk[CMEventsReply](),
		Doc: "rdma_migrate_id"},
	{Op: OpCMDiscard, Name: "cm_discard", Handle: "cm_id", Reply: mk[CMEventsReply](),
		Doc: "1.2: cm_destroy_id that leaves an unanswered request unanswered (a full backlog, section 9)"},
}

// IsCM reports whether op is in the connection manager's range.
func IsCM(op Op) bool { return op >= OpCMFirst && op <= OpCMLast }

// I32 is a little-endian 32-bit signed integer.
func (c *Codec) I32(name string, v *int32) {
	if p := c.take(name, "i32", 4); p != nil {
		if c.mode == modeEncode {
			binary.LittleEndian.PutUint32(p, uint32(*v))
		} else {
			*v = int32(binary.LittleEndian.Uint32(p))
		}
	}
}

// Bytes is a fixed array of len(v) bytes, copied as they are.
func (c *Codec) Bytes(name string, v []byte) {
	if p := c.take(name, fmt.Sprintf("u8[%d]", len(v)), len(v)); p != nil {
		if c.mode == modeEncode {
			copy(p, v)
		} else {
			copy(v, p)
		}
	}
}

// PutRecord lays out a record body (CMEvent, CompEvent, AsyncEvent) into
// b, which must be exactly its size.
func PutRecord(b []byte, r Body) error {
	c := Codec{mode: modeEncode, b: b[:0], name: "record"}
	r.Walk(&c)
	if c.err != nil {
		return c.err
	}
	if len(c.b) != len(b) || (len(b) > 0 && &c.b[0] != &b[0]) {
		return &Error{Msg: "record", Err: ErrMalformed, Detail: fmt.Sprintf("%d bytes, the record has %d", len(b), len(c.b))}
	}
	return nil
}

// ParseRecord reads a record body from b, which must be exactly its size.
func ParseRecord(b []byte, r Body) error {
	c := Codec{mode: modeDecode, b: b, name: "record"}
	r.Walk(&c)
	if c.err != nil {
		return c.err
	}
	if c.off != len(b) {
		return &Error{Msg: "record", Err: ErrMalformed, Detail: fmt.Sprintf("%d bytes, the record has %d", len(b), c.off)}
	}
	return nil
}

// The rdma_cm errno values beside errno.go's.
const (
	EADDRNOTAVAIL = Errno(99)  // cm_bind_addr, cm_resolve_addr: an address no device has
	EHOSTUNREACH  = Errno(113) // cm_resolve_addr: no device has an address of the destination's kind
	ENETUNREACH   = Errno(101) // cm_resolve_addr: no device has a route to the destination
)

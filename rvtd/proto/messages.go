package proto

// Opcodes, in ranges by object. 0x0400-0x04ff is reserved for the
// connection manager (rdma_cm); 0x8000 and above are never assigned.
const (
	OpHello         Op = 0x0001
	OpProtocolError Op = 0x0002

	OpListDevices Op = 0x0010
	OpOpenDevice  Op = 0x0011
	OpCloseDevice Op = 0x0012
	OpQueryDevice Op = 0x0013
	OpQueryPort   Op = 0x0014
	OpQueryGID    Op = 0x0015
	OpQueryPKey   Op = 0x0016

	OpAllocPD   Op = 0x0020
	OpDeallocPD Op = 0x0021

	OpShmAlloc  Op = 0x0030
	OpShmAttach Op = 0x0031
	OpShmFree   Op = 0x0032
	OpRegMR     Op = 0x0033
	OpDeregMR   Op = 0x0034
	OpAllocMR   Op = 0x0035
	OpAllocMW   Op = 0x0036
	OpDeallocMW Op = 0x0037
	OpBindMW    Op = 0x0038

	OpCreateCompChannel  Op = 0x0040
	OpDestroyCompChannel Op = 0x0041
	OpCreateCQ           Op = 0x0042
	OpResizeCQ           Op = 0x0043
	OpDestroyCQ          Op = 0x0044

	OpCreateQP  Op = 0x0050
	OpModifyQP  Op = 0x0051
	OpQueryQP   Op = 0x0052
	OpDestroyQP Op = 0x0053

	OpCreateSRQ  Op = 0x0058
	OpModifySRQ  Op = 0x0059
	OpQuerySRQ   Op = 0x005a
	OpDestroySRQ Op = 0x005b
	OpResizeSRQ  Op = 0x005c

	OpCreateAH  Op = 0x0060
	OpDestroyAH Op = 0x0061

	OpAttachMcast Op = 0x0068
	OpDetachMcast Op = 0x0069

	OpListQPs         Op = 0x0070
	OpQueryCounters   Op = 0x0071
	OpCMFirst         Op = 0x0400 // first opcode reserved for rdma_cm
	OpCMLast          Op = 0x04ff // last opcode reserved for rdma_cm
	OpFirstUnassigned Op = 0x8000
)

// MR kinds (RegMR.Kind).
const (
	MRShm uint32 = 1 // memory in a shared-memory segment the daemon maps
	MRVM  uint32 = 2 // any other client memory, reached with process_vm_readv/writev
)

// Hello is the first message of a connection.
type Hello struct {
	Magic    uint32
	Major    uint16
	Minor    uint16
	Features uint32
	PID      uint32 // informational: the daemon uses SO_PEERCRED
	Client   string // e.g. "libibverbs-softverbs 0.1"
}

func (m *Hello) Walk(c *Codec) {
	c.U32("magic", &m.Magic)
	c.U16("major", &m.Major)
	c.U16("minor", &m.Minor)
	c.U32("features", &m.Features)
	c.U32("pid", &m.PID)
	c.Str("client", &m.Client, 32)
}

// HelloReply is the daemon's answer to Hello.
type HelloReply struct {
	Magic      uint32
	Major      uint16
	Minor      uint16 // the minor version both will use
	Features   uint32
	DaemonPID  uint32 // for prctl(PR_SET_PTRACER)
	Session    uint32
	MaxMessage uint32
	PageSize   uint32
	Daemon     string
}

func (m *HelloReply) Walk(c *Codec) {
	c.U32("magic", &m.Magic)
	c.U16("major", &m.Major)
	c.U16("minor", &m.Minor)
	c.U32("features", &m.Features)
	c.U32("daemon_pid", &m.DaemonPID)
	c.U32("session", &m.Session)
	c.U32("max_message", &m.MaxMessage)
	c.U32("page_size", &m.PageSize)
	c.Pad(4)
	c.Str("daemon", &m.Daemon, 32)
}

// ProtocolError is sent before the daemon closes a connection it can no
// longer trust.
type ProtocolError struct {
	Errno    Errno
	BadReqID uint32
	BadOp    uint16
	Text     []byte // UTF-8, no NUL
}

func (m *ProtocolError) Walk(c *Codec) {
	c.U32("errno", (*uint32)(&m.Errno))
	c.U32("bad_request_id", &m.BadReqID)
	c.U16("bad_opcode", &m.BadOp)
	c.Pad(6)
	Tail(c, "text", &m.Text, func(c *Codec, b *byte) { c.U8("byte", b) })
}

// DeviceEntry is one device of ListDevicesReply.
type DeviceEntry struct {
	Name         string
	NodeGUID     uint64
	SysImageGUID uint64
	NodeType     uint32 // ibv_node_type: 1 (CA)
	Transport    uint32 // ibv_transport_type: 0 (IB), as rxe
}

func walkDeviceEntry(c *Codec, d *DeviceEntry) {
	c.Str("name", &d.Name, 64)
	c.U64("node_guid", &d.NodeGUID)
	c.U64("sys_image_guid", &d.SysImageGUID)
	c.U32("node_type", &d.NodeType)
	c.U32("transport_type", &d.Transport)
}

// ListDevicesReply lists the daemon's devices.
type ListDevicesReply struct{ Devices []DeviceEntry }

func (m *ListDevicesReply) Walk(c *Codec) { Tail(c, "devices", &m.Devices, walkDeviceEntry) }

// OpenDevice opens a device by name.
type OpenDevice struct{ Name string }

func (m *OpenDevice) Walk(c *Codec) { c.Str("name", &m.Name, 64) }

// OpenDeviceReply names the opened device and passes its async event socket.
type OpenDeviceReply struct {
	Device  uint32
	AsyncFD int
}

func (m *OpenDeviceReply) Walk(c *Codec) {
	c.U32("device", &m.Device)
	c.Pad(4)
	c.FD("async_fd", &m.AsyncFD)
}

// DeviceAttr is ibv_device_attr (plus max_msg_size and max_inline_data).
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	MaxMsgSize            uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 uint32
	MaxQPWR               uint32
	DeviceCapFlags        uint32
	MaxSGE                uint32
	MaxSGERd              uint32
	MaxCQ                 uint32
	MaxCQE                uint32
	MaxMR                 uint32
	MaxPD                 uint32
	MaxQPRdAtom           uint32
	MaxResRdAtom          uint32
	MaxQPInitRdAtom       uint32
	AtomicCap             uint32
	MaxMW                 uint32
	MaxAH                 uint32
	MaxSRQ                uint32
	MaxSRQWR              uint32
	MaxSRQSGE             uint32
	MaxMcastGrp           uint32
	MaxMcastQPAttach      uint32
	MaxTotalMcastQPAttach uint32
	MaxInlineData         uint32
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
}

func (m *DeviceAttr) Walk(c *Codec) {
	c.Str("fw_ver", &m.FWVer, 64)
	c.U64("node_guid", &m.NodeGUID)
	c.U64("sys_image_guid", &m.SysImageGUID)
	c.U64("max_mr_size", &m.MaxMRSize)
	c.U64("page_size_cap", &m.PageSizeCap)
	c.U64("max_msg_size", &m.MaxMsgSize)
	c.U32("vendor_id", &m.VendorID)
	c.U32("vendor_part_id", &m.VendorPartID)
	c.U32("hw_ver", &m.HWVer)
	c.U32("max_qp", &m.MaxQP)
	c.U32("max_qp_wr", &m.MaxQPWR)
	c.U32("device_cap_flags", &m.DeviceCapFlags)
	c.U32("max_sge", &m.MaxSGE)
	c.U32("max_sge_rd", &m.MaxSGERd)
	c.U32("max_cq", &m.MaxCQ)
	c.U32("max_cqe", &m.MaxCQE)
	c.U32("max_mr", &m.MaxMR)
	c.U32("max_pd", &m.MaxPD)
	c.U32("max_qp_rd_atom", &m.MaxQPRdAtom)
	c.U32("max_res_rd_atom", &m.MaxResRdAtom)
	c.U32("max_qp_init_rd_atom", &m.MaxQPInitRdAtom)
	c.U32("atomic_cap", &m.AtomicCap)
	c.U32("max_mw", &m.MaxMW)
	c.U32("max_ah", &m.MaxAH)
	c.U32("max_srq", &m.MaxSRQ)
	c.U32("max_srq_wr", &m.MaxSRQWR)
	c.U32("max_srq_sge", &m.MaxSRQSGE)
	c.U32("max_mcast_grp", &m.MaxMcastGrp)
	c.U32("max_mcast_qp_attach", &m.MaxMcastQPAttach)
	c.U32("max_total_mcast_qp_attach", &m.MaxTotalMcastQPAttach)
	c.U32("max_inline_data", &m.MaxInlineData)
	c.U16("max_pkeys", &m.MaxPKeys)
	c.U8("local_ca_ack_delay", &m.LocalCAAckDelay)
	c.U8("phys_port_cnt", &m.PhysPortCnt)
}

// PortReq names a port.
type PortReq struct{ Port uint8 }

func (m *PortReq) Walk(c *Codec) {
	c.U8("port_num", &m.Port)
	c.Pad(7)
}

// PortAttr is ibv_port_attr, with the enumerations' libibverbs values.
type PortAttr struct {
	State        uint8 // ibv_port_state: 4 ACTIVE
	MaxMTU       uint8 // ibv_mtu
	ActiveMTU    uint8
	LinkLayer    uint8 // 2: Ethernet
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8 // 5: LinkUp
	LMC          uint8
	GIDTblLen    uint32
	PortCapFlags uint32
	MaxMsgSize   uint32
	PKeyTblLen   uint16
	LID          uint16
	SMLID        uint16
}

func (m *PortAttr) Walk(c *Codec) {
	c.U8("state", &m.State)
	c.U8("max_mtu", &m.MaxMTU)
	c.U8("active_mtu", &m.ActiveMTU)
	c.U8("link_layer", &m.LinkLayer)
	c.U8("active_width", &m.ActiveWidth)
	c.U8("active_speed", &m.ActiveSpeed)
	c.U8("phys_state", &m.PhysState)
	c.U8("lmc", &m.LMC)
	c.U32("gid_tbl_len", &m.GIDTblLen)
	c.U32("port_cap_flags", &m.PortCapFlags)
	c.U32("max_msg_sz", &m.MaxMsgSize)
	c.U16("pkey_tbl_len", &m.PKeyTblLen)
	c.U16("lid", &m.LID)
	c.U16("sm_lid", &m.SMLID)
	c.Pad(6)
}

// TableReq names an entry of a port's GID or P_Key table.
type TableReq struct {
	Port  uint8
	Index uint32
}

func (m *TableReq) Walk(c *Codec) {
	c.U8("port_num", &m.Port)
	c.Pad(3)
	c.U32("index", &m.Index)
}

// GIDReply is one GID table entry.
type GIDReply struct {
	GID  [16]byte
	Type uint32 // ibv_gid_type: 2 (RoCE v2)
}

func (m *GIDReply) Walk(c *Codec) {
	c.GID("gid", &m.GID)
	c.U32("gid_type", &m.Type)
	c.Pad(4)
}

// PKeyReply is one P_Key table entry.
type PKeyReply struct{ PKey uint16 }

func (m *PKeyReply) Walk(c *Codec) {
	c.U16("pkey", &m.PKey)
	c.Pad(6)
}

// HandleReply names the object a request created.
type HandleReply struct{ Handle uint32 }

func (m *HandleReply) Walk(c *Codec) {
	c.U32("handle", &m.Handle)
	c.Pad(4)
}

// ShmAlloc asks the daemon for a shared-memory segment.
type ShmAlloc struct{ Size uint64 }

func (m *ShmAlloc) Walk(c *Codec) { c.U64("size", &m.Size) }

// ShmAllocReply passes the segment (a sealed memfd).
type ShmAllocReply struct {
	Shm  uint32
	Size uint64
	FD   int
}

func (m *ShmAllocReply) Walk(c *Codec) {
	c.U32("shm", &m.Shm)
	c.Pad(4)
	c.U64("size", &m.Size)
	c.FD("memfd", &m.FD)
}

// ShmAttach gives the daemon a memfd of the client's, sealed against
// shrinking.
type ShmAttach struct {
	Size uint64
	FD   int
}

func (m *ShmAttach) Walk(c *Codec) {
	c.U64("size", &m.Size)
	c.FD("memfd", &m.FD)
}

// RegMR registers memory (ibv_reg_mr, ibv_reg_mr_iova).
type RegMR struct {
	Kind      uint32 // MRShm or MRVM
	Access    uint32 // ibv_access_flags
	Addr      uint64 // client virtual address of the first byte
	Length    uint64
	IOVA      uint64 // the address SGEs and peers use (ibv_reg_mr: = addr)
	Shm       uint32 // MRShm: the segment
	ShmOffset uint64 // MRShm: where addr lies in the segment
}

func (m *RegMR) Walk(c *Codec) {
	c.U32("kind", &m.Kind)
	c.U32("access", &m.Access)
	c.U64("addr", &m.Addr)
	c.U64("length", &m.Length)
	c.U64("iova", &m.IOVA)
	c.U32("shm", &m.Shm)
	c.Pad(4)
	c.U64("shm_offset", &m.ShmOffset)
}

// MRReply names a new MR and its keys.
type MRReply struct {
	MR   uint32
	LKey uint32
	RKey uint32
}

func (m *MRReply) Walk(c *Codec) {
	c.U32("mr", &m.MR)
	c.U32("lkey", &m.LKey)
	c.U32("rkey", &m.RKey)
	c.Pad(4)
}

// AllocMR allocates a fast-register MR.
type AllocMR struct{ MaxPages uint32 }

func (m *AllocMR) Walk(c *Codec) {
	c.U32("max_pages", &m.MaxPages)
	c.Pad(4)
}

// AllocMW allocates a memory window.
type AllocMW struct{ Type uint8 }

func (m *AllocMW) Walk(c *Codec) {
	c.U8("type", &m.Type)
	c.Pad(7)
}

// MWReply names a new window.
type MWReply struct {
	MW   uint32
	RKey uint32
}

func (m *MWReply) Walk(c *Codec) {
	c.U32("mw", &m.MW)
	c.U32("rkey", &m.RKey)
}

// BindMW binds a type-1 window at once.
type BindMW struct {
	MR     uint32
	Access uint32
	Addr   uint64
	Length uint64
}

func (m *BindMW) Walk(c *Codec) {
	c.U32("mr", &m.MR)
	c.U32("access", &m.Access)
	c.U64("addr", &m.Addr)
	c.U64("length", &m.Length)
}

// RKeyReply is a window's new rkey.
type RKeyReply struct{ RKey uint32 }

func (m *RKeyReply) Walk(c *Codec) {
	c.U32("rkey", &m.RKey)
	c.Pad(4)
}

// ChannelReply names a completion channel and passes its socket.
type ChannelReply struct {
	Channel uint32
	FD      int
}

func (m *ChannelReply) Walk(c *Codec) {
	c.U32("channel", &m.Channel)
	c.Pad(4)
	c.FD("event_fd", &m.FD)
}

// RingLayout says where one ring lies in a queue's memfd.
type RingLayout struct {
	Offset  uint64 // of the ring header, from the start of the memfd
	Entries uint32 // a power of two (0: no ring)
	Stride  uint32 // bytes per entry, a power of two
}

func walkRing(c *Codec, prefix string, r *RingLayout) {
	c.U64(prefix+"offset", &r.Offset)
	c.U32(prefix+"entries", &r.Entries)
	c.U32(prefix+"stride", &r.Stride)
}

// CreateCQ creates a completion queue (ibv_create_cq).
type CreateCQ struct {
	CQE        uint32
	CompVector uint32
	Channel    uint32 // 0: none
	Cookie     uint64 // echoed in completion and async events
}

func (m *CreateCQ) Walk(c *Codec) {
	c.U32("cqe", &m.CQE)
	c.U32("comp_vector", &m.CompVector)
	c.U32("channel", &m.Channel)
	c.Pad(4)
	c.U64("cookie", &m.Cookie)
}

// CQReply describes a CQ's ring and passes its memfd.
type CQReply struct {
	CQ      uint32
	CQE     uint32 // usable entries (>= requested)
	MapSize uint64
	Ring    RingLayout
	FD      int
}

func (m *CQReply) Walk(c *Codec) {
	c.U32("cq", &m.CQ)
	c.U32("cqe", &m.CQE)
	c.U64("map_size", &m.MapSize)
	walkRing(c, "ring.", &m.Ring)
	c.FD("memfd", &m.FD)
}

// ResizeCQ resizes a CQ (ibv_resize_cq): the reply passes a new ring.
type ResizeCQ struct{ CQE uint32 }

func (m *ResizeCQ) Walk(c *Codec) {
	c.U32("cqe", &m.CQE)
	c.Pad(4)
}

// EventsReply is how many events the daemon has sent about an object being
// destroyed, so a library can wait until they are acknowledged.
type EventsReply struct {
	CompEvents  uint32
	AsyncEvents uint32
}

func (m *EventsReply) Walk(c *Codec) {
	c.U32("comp_events_reported", &m.CompEvents)
	c.U32("async_events_reported", &m.AsyncEvents)
}

// Cap are queue capacities (ibv_qp_cap).
type Cap struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData uint32
}

func walkCap(c *Codec, m *Cap) {
	c.U32("cap.max_send_wr", &m.MaxSendWR)
	c.U32("cap.max_recv_wr", &m.MaxRecvWR)
	c.U32("cap.max_send_sge", &m.MaxSendSGE)
	c.U32("cap.max_recv_sge", &m.MaxRecvSGE)
	c.U32("cap.max_inline_data", &m.MaxInlineData)
}

// CreateQP creates a queue pair (ibv_create_qp).
type CreateQP struct {
	Type   uint8 // ibv_qp_type: 2 RC, 3 UC, 4 UD
	SigAll bool
	SendCQ uint32
	RecvCQ uint32
	SRQ    uint32 // 0: none
	Cap    Cap
	Cookie uint64
}

func (m *CreateQP) Walk(c *Codec) {
	c.U8("qp_type", &m.Type)
	c.Bool("sq_sig_all", &m.SigAll)
	c.Pad(2)
	c.U32("send_cq", &m.SendCQ)
	c.U32("recv_cq", &m.RecvCQ)
	c.U32("srq", &m.SRQ)
	walkCap(c, &m.Cap)
	c.Pad(4)
	c.U64("cookie", &m.Cookie)
}

// QPReply describes a new QP: its number, capacities and rings.
type QPReply struct {
	QP       uint32
	QPN      uint32
	Cap      Cap
	MapSize  uint64
	SQ, RQ   RingLayout
	MemFD    int
	Doorbell int
}

func (m *QPReply) Walk(c *Codec) {
	c.U32("qp", &m.QP)
	c.U32("qp_num", &m.QPN)
	walkCap(c, &m.Cap)
	c.Pad(4)
	c.U64("map_size", &m.MapSize)
	walkRing(c, "sq.", &m.SQ)
	walkRing(c, "rq.", &m.RQ)
	c.FD("memfd", &m.MemFD)
	c.FD("doorbell", &m.Doorbell)
}

// AV is an address vector: ibv_ah_attr with its GRH.
type AV struct {
	DGID         [16]byte
	FlowLabel    uint32
	DLID         uint16
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	StaticRate   uint8
	Port         uint8
	IsGlobal     bool
	SrcPathBits  uint8
}

func walkAV(c *Codec, p string, m *AV) {
	c.GID(p+"dgid", &m.DGID)
	c.U32(p+"flow_label", &m.FlowLabel)
	c.U16(p+"dlid", &m.DLID)
	c.U8(p+"sgid_index", &m.SGIDIndex)
	c.U8(p+"hop_limit", &m.HopLimit)
	c.U8(p+"traffic_class", &m.TrafficClass)
	c.U8(p+"sl", &m.SL)
	c.U8(p+"static_rate", &m.StaticRate)
	c.U8(p+"port_num", &m.Port)
	c.Bool(p+"is_global", &m.IsGlobal)
	c.U8(p+"src_path_bits", &m.SrcPathBits)
	c.Pad(2)
}

// QPAttr is ibv_qp_attr (without the alternate path, which RoCE does not
// use).
type QPAttr struct {
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     uint32
	Cap             Cap
	PKeyIndex       uint16
	State           uint8
	CurState        uint8
	PathMTU         uint8
	PathMigState    uint8
	EnSQDAsync      bool
	SQDraining      bool
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Port            uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	AV              AV
}

func walkQPAttr(c *Codec, m *QPAttr) {
	c.U32("qkey", &m.QKey)
	c.U32("rq_psn", &m.RQPSN)
	c.U32("sq_psn", &m.SQPSN)
	c.U32("dest_qp_num", &m.DestQPN)
	c.U32("qp_access_flags", &m.AccessFlags)
	walkCap(c, &m.Cap)
	c.U16("pkey_index", &m.PKeyIndex)
	c.U8("qp_state", &m.State)
	c.U8("cur_qp_state", &m.CurState)
	c.U8("path_mtu", &m.PathMTU)
	c.U8("path_mig_state", &m.PathMigState)
	c.Bool("en_sqd_async_notify", &m.EnSQDAsync)
	c.Bool("sq_draining", &m.SQDraining)
	c.U8("max_rd_atomic", &m.MaxRdAtomic)
	c.U8("max_dest_rd_atomic", &m.MaxDestRdAtomic)
	c.U8("min_rnr_timer", &m.MinRNRTimer)
	c.U8("port_num", &m.Port)
	c.U8("timeout", &m.Timeout)
	c.U8("retry_cnt", &m.RetryCnt)
	c.U8("rnr_retry", &m.RNRRetry)
	c.Pad(1)
	walkAV(c, "ah_attr.", &m.AV)
}

// ModifyQP is ibv_modify_qp.
type ModifyQP struct {
	Mask uint32 // ibv_qp_attr_mask
	Attr QPAttr
}

func (m *ModifyQP) Walk(c *Codec) {
	c.U32("attr_mask", &m.Mask)
	c.Pad(4)
	walkQPAttr(c, &m.Attr)
}

// QueryQP is ibv_query_qp.
type QueryQP struct{ Mask uint32 }

func (m *QueryQP) Walk(c *Codec) {
	c.U32("attr_mask", &m.Mask)
	c.Pad(4)
}

// QueryQPReply is the QP's attributes and the creation attributes
// ibv_query_qp returns beside them.
type QueryQPReply struct {
	Attr   QPAttr
	Type   uint8
	SigAll bool
}

func (m *QueryQPReply) Walk(c *Codec) {
	walkQPAttr(c, &m.Attr)
	c.U8("qp_type", &m.Type)
	c.Bool("sq_sig_all", &m.SigAll)
	c.Pad(6)
}

// CreateSRQ is ibv_create_srq.
type CreateSRQ struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
	Cookie   uint64
}

func (m *CreateSRQ) Walk(c *Codec) {
	c.U32("max_wr", &m.MaxWR)
	c.U32("max_sge", &m.MaxSGE)
	c.U32("srq_limit", &m.SRQLimit)
	c.Pad(4)
	c.U64("cookie", &m.Cookie)
}

// SRQReply describes a new SRQ and its ring.
type SRQReply struct {
	SRQ     uint32
	MaxWR   uint32
	MaxSGE  uint32
	MapSize uint64
	Ring    RingLayout
	FD      int
}

func (m *SRQReply) Walk(c *Codec) {
	c.U32("srq", &m.SRQ)
	c.U32("max_wr", &m.MaxWR)
	c.U32("max_sge", &m.MaxSGE)
	c.Pad(4)
	c.U64("map_size", &m.MapSize)
	walkRing(c, "ring.", &m.Ring)
	c.FD("memfd", &m.FD)
}

// ResizeSRQ is ibv_modify_srq with IBV_SRQ_MAX_WR: the reply passes a
// new ring holding the WQEs the daemon has not taken yet.
type ResizeSRQ struct{ MaxWR uint32 }

func (m *ResizeSRQ) Walk(c *Codec) {
	c.U32("max_wr", &m.MaxWR)
	c.Pad(4)
}

// SRQAttr is ibv_srq_attr, with ibv_modify_srq's mask.
type SRQAttr struct {
	Mask     uint32 // ibv_srq_attr_mask (modify only; 0 in a query reply)
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

func (m *SRQAttr) Walk(c *Codec) {
	c.U32("srq_attr_mask", &m.Mask)
	c.U32("max_wr", &m.MaxWR)
	c.U32("max_sge", &m.MaxSGE)
	c.U32("srq_limit", &m.SRQLimit)
}

// CreateAH is ibv_create_ah.
type CreateAH struct{ AV AV }

func (m *CreateAH) Walk(c *Codec) { walkAV(c, "ah_attr.", &m.AV) }

// Mcast is ibv_attach_mcast / ibv_detach_mcast.
type Mcast struct {
	GID [16]byte
	LID uint16
}

func (m *Mcast) Walk(c *Codec) {
	c.GID("gid", &m.GID)
	c.U16("lid", &m.LID)
	c.Pad(6)
}

// ListQPs asks for the device's QPs from a QP number on.
type ListQPs struct{ StartQPN uint32 }

func (m *ListQPs) Walk(c *Codec) {
	c.U32("start_qpn", &m.StartQPN)
	c.Pad(4)
}

// QPEntry is one QP of ListQPsReply (rdma resource show qp).
type QPEntry struct {
	QPN         uint32
	PID         uint32 // the owning client's process
	Handle      uint32 // the asking session's handle for it, 0 if not its own
	NextPSN     uint32
	UnackedPSN  uint32
	ExpectedPSN uint32
	MSN         uint32
	SQPosted    uint32
	RQPosted    uint32
	Type        uint8
	State       uint8
	Comm        string
}

func walkQPEntry(c *Codec, m *QPEntry) {
	c.U32("qp_num", &m.QPN)
	c.U32("pid", &m.PID)
	c.U32("handle", &m.Handle)
	c.U32("next_psn", &m.NextPSN)
	c.U32("unacked_psn", &m.UnackedPSN)
	c.U32("expected_psn", &m.ExpectedPSN)
	c.U32("msn", &m.MSN)
	c.U32("sq_posted", &m.SQPosted)
	c.U32("rq_posted", &m.RQPosted)
	c.U8("qp_type", &m.Type)
	c.U8("qp_state", &m.State)
	c.Pad(2)
	c.Str("comm", &m.Comm, 16)
}

// ListQPsReply holds QPs in QP-number order; an empty list ends the walk.
type ListQPsReply struct{ QPs []QPEntry }

func (m *ListQPsReply) Walk(c *Codec) { Tail(c, "qps", &m.QPs, walkQPEntry) }

// Counter is one named counter.
type Counter struct {
	Name  string
	Value uint64
}

func walkCounter(c *Codec, m *Counter) {
	c.Str("name", &m.Name, 48)
	c.U64("value", &m.Value)
}

// CountersReply holds a device's or a QP's counters.
type CountersReply struct{ Counters []Counter }

func (m *CountersReply) Walk(c *Codec) { Tail(c, "counters", &m.Counters, walkCounter) }

// CompEvent is the record read from a completion channel's socket.
type CompEvent struct {
	Cookie uint64 // CreateCQ.Cookie
	CQ     uint32
}

func (m *CompEvent) Walk(c *Codec) {
	c.U64("cq_cookie", &m.Cookie)
	c.U32("cq", &m.CQ)
	c.Pad(4)
}

// AsyncEvent is the record read from a device's async event socket.
type AsyncEvent struct {
	Cookie  uint64 // the QP's, CQ's or SRQ's cookie; 0 for port and device events
	Element uint32 // the QP, CQ or SRQ handle, or the port number
	Type    uint32 // ibv_event_type
}

func (m *AsyncEvent) Walk(c *Codec) {
	c.U64("element_cookie", &m.Cookie)
	c.U32("element", &m.Element)
	c.U32("event_type", &m.Type)
}

func mk[T any, P interface {
	*T
	Body
}]() func() Body {
	return func() Body { return P(new(T)) }
}

// table is every message: baseTable, then the connection manager's
// (cm.go).
var table = append(baseTable[:len(baseTable):len(baseTable)], cmTable[:]...)

var baseTable = [...]Spec{
	{Op: OpHello, Name: "hello", Request: mk[Hello](), Reply: mk[HelloReply](),
		Doc: "the first message; agrees on the version"},
	{Op: OpProtocolError, Name: "protocol_error", Event: true, Reply: mk[ProtocolError](),
		Doc: "sent before the daemon closes a connection it cannot trust"},

	{Op: OpListDevices, Name: "list_devices", Reply: mk[ListDevicesReply](), Doc: "ibv_get_device_list"},
	{Op: OpOpenDevice, Name: "open_device", Request: mk[OpenDevice](), Reply: mk[OpenDeviceReply](),
		Doc: "ibv_open_device; passes the async event socket"},
	{Op: OpCloseDevice, Name: "close_device", Handle: "device", Doc: "ibv_close_device"},
	{Op: OpQueryDevice, Name: "query_device", Handle: "device", Reply: mk[DeviceAttr](), Doc: "ibv_query_device"},
	{Op: OpQueryPort, Name: "query_port", Handle: "device", Request: mk[PortReq](), Reply: mk[PortAttr](), Doc: "ibv_query_port"},
	{Op: OpQueryGID, Name: "query_gid", Handle: "device", Request: mk[TableReq](), Reply: mk[GIDReply](), Doc: "ibv_query_gid, ibv_query_gid_ex"},
	{Op: OpQueryPKey, Name: "query_pkey", Handle: "device", Request: mk[TableReq](), Reply: mk[PKeyReply](), Doc: "ibv_query_pkey"},

	{Op: OpAllocPD, Name: "alloc_pd", Handle: "device", Reply: mk[HandleReply](), Doc: "ibv_alloc_pd"},
	{Op: OpDeallocPD, Name: "dealloc_pd", Handle: "pd", Doc: "ibv_dealloc_pd"},

	{Op: OpShmAlloc, Name: "shm_alloc", Handle: "device", Request: mk[ShmAlloc](), Reply: mk[ShmAllocReply](),
		Doc: "a shared-memory segment from the daemon (sealed memfd)"},
	{Op: OpShmAttach, Name: "shm_attach", Handle: "device", Request: mk[ShmAttach](), Reply: mk[HandleReply](),
		Doc: "a memfd of the client's, sealed against shrinking"},
	{Op: OpShmFree, Name: "shm_free", Handle: "shm", Doc: "releases a segment (EBUSY while MRs use it)"},
	{Op: OpRegMR, Name: "reg_mr", Handle: "pd", Request: mk[RegMR](), Reply: mk[MRReply](), Doc: "ibv_reg_mr, ibv_reg_mr_iova"},
	{Op: OpDeregMR, Name: "dereg_mr", Handle: "mr", Doc: "ibv_dereg_mr"},
	{Op: OpAllocMR, Name: "alloc_mr", Handle: "pd", Request: mk[AllocMR](), Reply: mk[MRReply](), Doc: "a fast-register MR"},
	{Op: OpAllocMW, Name: "alloc_mw", Handle: "pd", Request: mk[AllocMW](), Reply: mk[MWReply](), Doc: "ibv_alloc_mw"},
	{Op: OpDeallocMW, Name: "dealloc_mw", Handle: "mw", Doc: "ibv_dealloc_mw"},
	{Op: OpBindMW, Name: "bind_mw", Handle: "mw", Request: mk[BindMW](), Reply: mk[RKeyReply](),
		Doc: "binds a type-1 window at once (Go clients; C posts a BIND_MW WQE)"},

	{Op: OpCreateCompChannel, Name: "create_comp_channel", Handle: "device", Reply: mk[ChannelReply](), Doc: "ibv_create_comp_channel"},
	{Op: OpDestroyCompChannel, Name: "destroy_comp_channel", Handle: "channel", Doc: "ibv_destroy_comp_channel (EBUSY while CQs use it)"},
	{Op: OpCreateCQ, Name: "create_cq", Handle: "device", Request: mk[CreateCQ](), Reply: mk[CQReply](), Doc: "ibv_create_cq"},
	{Op: OpResizeCQ, Name: "resize_cq", Handle: "cq", Request: mk[ResizeCQ](), Reply: mk[CQReply](), Doc: "ibv_resize_cq: a new ring replaces the old"},
	{Op: OpDestroyCQ, Name: "destroy_cq", Handle: "cq", Reply: mk[EventsReply](), Doc: "ibv_destroy_cq"},

	{Op: OpCreateQP, Name: "create_qp", Handle: "pd", Request: mk[CreateQP](), Reply: mk[QPReply](), Doc: "ibv_create_qp"},
	{Op: OpModifyQP, Name: "modify_qp", Handle: "qp", Request: mk[ModifyQP](), Doc: "ibv_modify_qp"},
	{Op: OpQueryQP, Name: "query_qp", Handle: "qp", Request: mk[QueryQP](), Reply: mk[QueryQPReply](), Doc: "ibv_query_qp"},
	{Op: OpDestroyQP, Name: "destroy_qp", Handle: "qp", Reply: mk[EventsReply](), Doc: "ibv_destroy_qp"},

	{Op: OpCreateSRQ, Name: "create_srq", Handle: "pd", Request: mk[CreateSRQ](), Reply: mk[SRQReply](), Doc: "ibv_create_srq"},
	{Op: OpModifySRQ, Name: "modify_srq", Handle: "srq", Request: mk[SRQAttr](), Doc: "ibv_modify_srq"},
	{Op: OpQuerySRQ, Name: "query_srq", Handle: "srq", Reply: mk[SRQAttr](), Doc: "ibv_query_srq"},
	{Op: OpDestroySRQ, Name: "destroy_srq", Handle: "srq", Reply: mk[EventsReply](), Doc: "ibv_destroy_srq"},
	{Op: OpResizeSRQ, Name: "resize_srq", Handle: "srq", Request: mk[ResizeSRQ](), Reply: mk[SRQReply](),
		Doc: "ibv_modify_srq with IBV_SRQ_MAX_WR: a new ring replaces the old"},

	{Op: OpCreateAH, Name: "create_ah", Handle: "pd", Request: mk[CreateAH](), Reply: mk[HandleReply](), Doc: "ibv_create_ah"},
	{Op: OpDestroyAH, Name: "destroy_ah", Handle: "ah", Doc: "ibv_destroy_ah"},

	{Op: OpAttachMcast, Name: "attach_mcast", Handle: "qp", Request: mk[Mcast](), Doc: "ibv_attach_mcast"},
	{Op: OpDetachMcast, Name: "detach_mcast", Handle: "qp", Request: mk[Mcast](), Doc: "ibv_detach_mcast"},

	{Op: OpListQPs, Name: "list_qps", Handle: "device", Request: mk[ListQPs](), Reply: mk[ListQPsReply](),
		Doc: "every QP of the device, with its owner (rdma resource show qp)"},
	{Op: OpQueryCounters, Name: "query_counters", Handle: "device or qp", Reply: mk[CountersReply](),
		Doc: "the device's or a QP's counters by name"},
}

// Records are the fixed-size records read from the event sockets, laid
// out by the same walk as the messages.
func Records() []struct {
	Name string
	Body Body
} {
	return []struct {
		Name string
		Body Body
	}{
		{"comp_event", &CompEvent{}},
		{"async_event", &AsyncEvent{}},
		{"cm_event", &CMEvent{}},
	}
}

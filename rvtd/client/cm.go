package client

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// The connection manager's calls (docs/rvtd-protocol.md section 9):
// librdmacm's operations, one message each, and the event channel's
// 384-byte records.

// CMAddr converts an address and port to the protocol's form (family 0
// for the zero AddrPort).
func CMAddr(ap netip.AddrPort) proto.CMAddr {
	ip := ap.Addr()
	if !ip.IsValid() {
		return proto.CMAddr{}
	}
	fam := uint16(proto.AFInet6)
	if ip.Unmap().Is4() {
		fam = proto.AFInet
	}
	return proto.CMAddr{Family: fam, Port: ap.Port(), Addr: ip.As16()}
}

// AddrPort converts the protocol's address back (the zero AddrPort for
// family 0).
func AddrPort(a proto.CMAddr) netip.AddrPort {
	if a.Family == proto.AFUnspec {
		return netip.AddrPort{}
	}
	ip := netip.AddrFrom16(a.Addr)
	if a.Family == proto.AFInet {
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, a.Port)
}

// CMChannel is an rdma_cm event channel: a socket of cm_event records.
type CMChannel struct {
	c      *Client
	Handle uint32
	File   *os.File
}

// CreateEventChannel is rdma_create_event_channel.
func (c *Client) CreateEventChannel() (*CMChannel, error) {
	r, err := c.Call(proto.OpCMCreateEventChannel, 0, nil)
	if err != nil {
		return nil, err
	}
	o := r.(*proto.CMChannelReply)
	// Non-blocking, so that the runtime's poller serves reads with
	// deadlines (GetEventTimeout).
	_ = unix.SetNonblock(o.FD, true)
	ch := &CMChannel{c: c, Handle: o.Channel, File: os.NewFile(uintptr(o.FD), "rvtd-cm-channel")}
	c.own(func() { ch.File.Close() })
	return ch, nil
}

// Destroy is rdma_destroy_event_channel (EBUSY while IDs use it).
func (ch *CMChannel) Destroy() error {
	_, err := ch.c.Call(proto.OpCMDestroyEventChannel, ch.Handle, nil)
	if err == nil {
		ch.File.Close()
	}
	return err
}

// GetEvent reads the next event record (rdma_get_cm_event), waiting at
// most d (0: forever).
func (ch *CMChannel) GetEvent(d time.Duration) (proto.CMEvent, error) {
	var ev proto.CMEvent
	if d > 0 {
		_ = ch.File.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = ch.File.SetReadDeadline(time.Time{})
	}
	b := make([]byte, proto.CMEventRecordSize+1)
	n, err := ch.File.Read(b)
	if err != nil {
		return ev, err
	}
	if n != proto.CMEventRecordSize {
		return ev, fmt.Errorf("cm event of %d bytes", n)
	}
	err = proto.ParseRecord(b[:n], &ev)
	return ev, err
}

// CMID is an rdma_cm ID of the session.
type CMID struct {
	c      *Client
	Handle uint32
}

// CreateID is rdma_create_id: port space ps (proto.PSTCP, ...), QP type
// (ibv_qp_type), and the context echoed in the ID's events.
func (ch *CMChannel) CreateID(ctx uint64, ps uint16, qpType uint8) (*CMID, error) {
	r, err := ch.c.Call(proto.OpCMCreateID, ch.Handle, &proto.CMCreateID{Context: ctx, PortSpace: ps, QPType: qpType})
	if err != nil {
		return nil, err
	}
	return &CMID{c: ch.c, Handle: r.(*proto.CMIDReply).ID}, nil
}

// EventID is the ID an event names (for CONNECT_REQUEST, the new one).
func (c *Client) EventID(ev proto.CMEvent) *CMID { return &CMID{c: c, Handle: ev.ID} }

func (id *CMID) call(op proto.Op, body proto.Body) (proto.Body, error) {
	return id.c.Call(op, id.Handle, body)
}

// Destroy is rdma_destroy_id; it returns how many events were reported
// about the ID.
func (id *CMID) Destroy() (uint32, error) { return id.destroy(proto.OpCMDestroyID) }

// Discard is Destroy for a connection request the client will not take:
// the request stays unanswered (no REJ; the peer resends its REQ), as
// Linux leaves a request its listener's full backlog refused. Daemons of
// protocol 1.1 have no cm_discard: there it is Destroy (a REJ 28).
func (id *CMID) Discard() (uint32, error) {
	if id.c.Hello.Minor < 2 {
		return id.Destroy()
	}
	return id.destroy(proto.OpCMDiscard)
}

// destroy sends cm_destroy_id or cm_discard and returns the events
// reported about the ID.
func (id *CMID) destroy(op proto.Op) (uint32, error) {
	r, err := id.call(op, nil)
	if err != nil {
		return 0, err
	}
	return r.(*proto.CMEventsReply).EventsReported, nil
}

// BindAddr is rdma_bind_addr.
func (id *CMID) BindAddr(ap netip.AddrPort) error {
	_, err := id.call(proto.OpCMBindAddr, &proto.CMBindAddr{Addr: CMAddr(ap)})
	return err
}

// ResolveAddr is rdma_resolve_addr (src may be the zero Addr).
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeoutMS uint32) error {
	m := &proto.CMResolveAddr{Dst: CMAddr(dst), TimeoutMS: timeoutMS}
	if src.IsValid() {
		m.Src = CMAddr(netip.AddrPortFrom(src, 0))
	}
	_, err := id.call(proto.OpCMResolveAddr, m)
	return err
}

// ResolveRoute is rdma_resolve_route.
func (id *CMID) ResolveRoute(timeoutMS uint32) error {
	_, err := id.call(proto.OpCMResolveRoute, &proto.CMTimeout{TimeoutMS: timeoutMS})
	return err
}

// Query returns the ID's addresses, device and route.
func (id *CMID) Query() (*proto.CMQueryReply, error) {
	r, err := id.call(proto.OpCMQuery, nil)
	if err != nil {
		return nil, err
	}
	return r.(*proto.CMQueryReply), nil
}

// Listen is rdma_listen.
func (id *CMID) Listen(backlog uint32) error {
	_, err := id.call(proto.OpCMListen, &proto.CMListen{Backlog: backlog})
	return err
}

// Connect is rdma_connect (p.QP: a QP handle of the session, or 0).
func (id *CMID) Connect(p proto.CMConnParam) error {
	_, err := id.call(proto.OpCMConnect, &p)
	return err
}

// Accept is rdma_accept.
func (id *CMID) Accept(p proto.CMConnParam) error {
	_, err := id.call(proto.OpCMAccept, &p)
	return err
}

// Reject is rdma_reject.
func (id *CMID) Reject(priv []byte) error {
	_, err := id.call(proto.OpCMReject, &proto.CMReject{PrivateData: priv})
	return err
}

// Disconnect is rdma_disconnect.
func (id *CMID) Disconnect() error {
	_, err := id.call(proto.OpCMDisconnect, nil)
	return err
}

// InitQPAttr is rdma_init_qp_attr: the attributes and mask for state.
func (id *CMID) InitQPAttr(state uint8) (proto.QPAttr, uint32, error) {
	r, err := id.call(proto.OpCMInitQPAttr, &proto.CMInitQPAttr{State: state})
	if err != nil {
		return proto.QPAttr{}, 0, err
	}
	o := r.(*proto.CMInitQPAttrReply)
	return o.Attr, o.Mask, nil
}

// ModifyQP moves q to state with the attributes InitQPAttr gives.
func (id *CMID) ModifyQP(q *QP, state uint8) error {
	a, mask, err := id.InitQPAttr(state)
	if err != nil {
		return err
	}
	return q.Modify(a, mask)
}

// Establish is rdma_establish.
func (id *CMID) Establish() error {
	_, err := id.call(proto.OpCMEstablish, nil)
	return err
}

// Notify is rdma_notify (ibv_event_type).
func (id *CMID) Notify(event uint32) error {
	_, err := id.call(proto.OpCMNotify, &proto.CMNotify{Event: event})
	return err
}

// SetOption is rdma_set_option with an integer value.
func (id *CMID) SetOption(level, name uint32, v uint64) error {
	_, err := id.call(proto.OpCMSetOption, &proto.CMSetOption{Level: level, Name: name, Value: v})
	return err
}

// JoinMulticast is rdma_join_multicast_ex of an IPv4 group (flags 0: a
// full member, 1: send-only). MULTICAST_JOIN follows, with the address
// vector to the group; attaching the ID's QP is the caller's (AttachMcast
// with the event's DGID), as librdmacm does.
func (id *CMID) JoinMulticast(addr netip.AddrPort, ctx uint64, flags uint32) error {
	_, err := id.call(proto.OpCMJoinMulticast, &proto.CMMulticast{Addr: CMAddr(addr), Context: ctx, JoinFlags: flags})
	return err
}

// LeaveMulticast is rdma_leave_multicast (detach the QP first).
func (id *CMID) LeaveMulticast(addr netip.AddrPort) error {
	_, err := id.call(proto.OpCMLeaveMulticast, &proto.CMMulticast{Addr: CMAddr(addr)})
	return err
}

// Migrate is rdma_migrate_id; it returns how many events the old channel
// got about the ID.
func (id *CMID) Migrate(ch *CMChannel) (uint32, error) {
	r, err := id.call(proto.OpCMMigrateID, &proto.CMMigrateID{Channel: ch.Handle})
	if err != nil {
		return 0, err
	}
	return r.(*proto.CMEventsReply).EventsReported, nil
}

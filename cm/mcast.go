package cm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvt"
)

// Multicast on RoCE (rdma_join_multicast): there is no SA, so a join is
// settled at once, as Linux's cma does for an Ethernet port
// (cma_iboe_join_multicast): the MGID is the group's IPv4 address mapped
// (::ffff:a.b.c.d, the RoCE v2 form), the Q_Key the port space's, and
// MULTICAST_JOIN carries the address vector to the group (hop limit 64)
// with QP number MulticastQPN. IPv6 groups are ErrNotSupported, as the
// kernel answers for RoCE v2. The QP given to JoinMulticast is attached
// to the group (as librdmacm does after the event) unless the join is
// send-only, and detached by LeaveMulticast or Destroy.

// MulticastQPN is the destination QP number of a multicast group.
const MulticastQPN = 0xFFFFFF

// MulticastHopLimit is the hop limit of a group's address vector
// (IPV6_DEFAULT_HOPLIMIT, the kernel's for an IPv4 group on RoCE v2).
const MulticastHopLimit = 64

// ErrNotSupported is returned for what the CM does not do (an IPv6
// multicast group on RoCE v2).
var ErrNotSupported = errors.New("cm: not supported")

// MulticastMGID returns the MGID of IPv4 multicast group g.
func MulticastMGID(g netip.Addr) (netdev.GID, error) {
	g = g.Unmap()
	switch {
	case !g.IsValid() || g.IsUnspecified():
		return netdev.GID{}, fmt.Errorf("multicast group %v: %w", g, ErrInvalidArgument)
	case !g.Is4():
		return netdev.GID{}, fmt.Errorf("multicast group %v: %w: IPv6 groups on RoCE v2", g, ErrNotSupported)
	case !g.IsMulticast():
		return netdev.GID{}, fmt.Errorf("multicast group %v: %w: not a multicast address", g, ErrInvalidArgument)
	}
	return netdev.GIDFromIP(g), nil
}

// mcJoin is one group an ID joined: the QP attached to it, if any.
type mcJoin struct{ q *rvt.QP }

// JoinMulticast joins IPv4 multicast group (rdma_join_multicast_ex). The
// ID must have an address (bound or resolved) and a UD port space (UDP,
// IPoIB or IB). q, if not nil and the join is not send-only, is attached
// to the group first. MULTICAST_JOIN follows with the group's UDParam
// (QPN MulticastQPN, the port space's Q_Key, the AV for PD.CreateAH).
func (id *ID) JoinMulticast(group netip.Addr, q *rvt.QP, sendOnly bool) error {
	mgid, err := MulticastMGID(group)
	if err != nil {
		return err
	}
	g := group.Unmap()
	a := id.a
	a.mu.Lock()
	switch {
	case id.r == nil && a.closed:
		a.mu.Unlock()
		return fmt.Errorf("join %v: %w", g, ErrDeviceRemoved)
	case id.destroyed:
		a.mu.Unlock()
		return fmt.Errorf("join %v: %w", g, ErrClosed)
	case id.ps == PSTCP:
		a.mu.Unlock()
		return fmt.Errorf("join %v: %w: port space %v is not UD", g, ErrInvalidArgument, id.ps)
	case id.r == nil && !id.portBound && !id.addrOK:
		a.mu.Unlock()
		return fmt.Errorf("join %v: %w: the ID has no address", g, ErrInvalidState)
	}
	if _, dup := id.mc[g]; dup {
		a.mu.Unlock()
		return fmt.Errorf("join %v: %w: already joined", g, ErrAddrInUse)
	}
	if id.mc == nil {
		id.mc = map[netip.Addr]mcJoin{}
	}
	id.mc[g] = mcJoin{} // reserved while the QP is attached
	a.mu.Unlock()
	var j mcJoin
	if q != nil && !sendOnly {
		if err := a.dev.AttachMcast(q, rvt.GID(mgid), 0); err != nil {
			id.forgetJoin(g)
			return fmt.Errorf("join %v: %w", g, err)
		}
		j.q = q
	}
	if id.r != nil {
		var flags uint32
		if sendOnly {
			flags = 1 // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
		}
		// The daemon's MULTICAST_JOIN comes through the agent's channel.
		if err = id.r.err; err == nil {
			err = rerr(fmt.Sprintf("join %v", g), id.r.cid.JoinMulticast(netip.AddrPortFrom(g, 0), 0, flags))
		}
	} else if err = id.emitJoin(mgid); err != nil {
		err = fmt.Errorf("join %v: %w", g, err)
	}
	if err != nil {
		id.forgetJoin(g)
		if j.q != nil {
			_ = a.dev.DetachMcast(j.q, rvt.GID(mgid), 0)
		}
		return err
	}
	a.mu.Lock()
	if _, ok := id.mc[g]; ok {
		id.mc[g] = j
	}
	a.mu.Unlock()
	return nil
}

// emitJoin queues MULTICAST_JOIN for an ID of an embedded device.
func (id *ID) emitJoin(mgid netdev.GID) error {
	a := id.a
	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	src := id.local.Addr()
	idx := -1
	for i := 0; ; i++ {
		gid, err := a.dev.QueryGID(1, i)
		if err != nil {
			break
		}
		if gid.IP() == src {
			idx = i
			break
		}
	}
	if idx < 0 {
		return fmt.Errorf("%w: %v is not an address of %s", ErrInvalidState, src, a.dev.Name())
	}
	qkey := uint32(0)
	if id.ps == PSUDP || id.ps == PSIB {
		qkey = UDPQKey
	}
	a.emitLocked(id, Event{Type: EventMulticastJoin, UD: &UDParam{QPN: MulticastQPN, QKey: qkey,
		AV: rvt.AddressVector{DGID: mgid, SGIDIndex: uint8(idx), HopLimit: MulticastHopLimit, TrafficClass: id.tc, Port: 1}}})
	return nil
}

// forgetJoin drops g from the ID's joins; it returns the join.
func (id *ID) forgetJoin(g netip.Addr) (mcJoin, bool) {
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	j, ok := id.mc[g]
	delete(id.mc, g)
	return j, ok
}

// LeaveMulticast leaves group (rdma_leave_multicast): the QP attached by
// JoinMulticast is detached. ErrInvalidArgument if the ID did not join it.
func (id *ID) LeaveMulticast(group netip.Addr) error {
	g := group.Unmap()
	j, ok := id.forgetJoin(g)
	if !ok {
		return fmt.Errorf("leave %v: %w: not joined", g, ErrInvalidArgument)
	}
	var err error
	if j.q != nil {
		err = id.a.dev.DetachMcast(j.q, rvt.GID(netdev.GIDFromIP(g)), 0)
	}
	if id.r != nil && id.r.err == nil {
		if e := id.r.cid.LeaveMulticast(netip.AddrPortFrom(g, 0)); e != nil && err == nil {
			err = rerr(fmt.Sprintf("leave %v", g), e)
		}
	}
	return err
}

// leaveAllMulticast detaches the QPs of the ID's joins (Destroy; the
// daemon forgets a remote ID's joins with the ID).
func (id *ID) leaveAllMulticast() {
	id.a.mu.Lock()
	mc := id.mc
	id.mc = nil
	id.a.mu.Unlock()
	for g, j := range mc {
		if j.q != nil {
			_ = id.a.dev.DetachMcast(j.q, rvt.GID(netdev.GIDFromIP(g)), 0)
		}
	}
}

package rvtd

import (
	"errors"
	"net/netip"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// rdma_cm multicast on RoCE (docs/rvtd-protocol.md section 9): there is
// no SA to ask, so a join is answered at once, as Linux's cma does for
// an Ethernet port (cma_iboe_join_multicast): the MGID is the group's
// IPv4 address mapped (::ffff:a.b.c.d, the RoCE v2 form), the Q_Key the
// port space's (RDMA_UDP_QKEY for RDMA_PS_UDP), and MULTICAST_JOIN
// carries the address vector to the group (DGID the MGID, hop limit 64)
// with QP number 0xFFFFFF. Attaching the QP to the group is the
// library's part, after the event (ibv_attach_mcast, as librdmacm does;
// not for a send-only join). IPv6 groups are EOPNOTSUPP, as the kernel
// answers for RoCE v2. The MGID and constants are the cm package's (its
// ID.JoinMulticast is the same for embedded devices).

// mcJoinFlagSendOnly is RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER.
const mcJoinFlagSendOnly = 1

func (ss *session) cmJoinMulticast(o *cmIDObj, m *proto.CMMulticast) error {
	ap, ok := fromCMAddr(m.Addr)
	if !ok || m.JoinFlags > mcJoinFlagSendOnly {
		return proto.EINVAL
	}
	mgid, err := cm.MulticastMGID(ap.Addr())
	if errors.Is(err, cm.ErrNotSupported) {
		return proto.EOPNOTSUPP
	} else if err != nil {
		return proto.EINVAL
	}
	g := ap.Addr().Unmap()
	ss.mu.Lock()
	id := o.b.id
	if id == nil || qp.Type(o.qpType) != qp.UD {
		ss.mu.Unlock()
		return proto.EINVAL // no device yet (unbound or wildcard), or not UD
	}
	if o.mc[g] {
		ss.mu.Unlock()
		return proto.EADDRINUSE
	}
	// The agent's lock comes after session.mu.
	src := id.LocalAddr()
	sgid, ok := ss.gidIndex(o.b.d, src.Addr())
	if !ok {
		ss.mu.Unlock()
		return proto.EINVAL
	}
	if o.mc == nil {
		o.mc = map[netip.Addr]bool{}
	}
	o.mc[g] = true
	r := proto.CMEvent{Context: o.ctx, ID: o.handle, Event: uint32(cm.EventMulticastJoin),
		QPNum: cm.MulticastQPN, QKey: o.udQKey(), UD: true, Src: toCMAddr(src), Dst: toCMAddr(ap),
		AH: proto.AV{DGID: mgid, SGIDIndex: sgid, HopLimit: cm.MulticastHopLimit, TrafficClass: o.tos,
			Port: 1, IsGlobal: true}}
	b := make([]byte, proto.CMEventRecordSize)
	if err := proto.PutRecord(b, &r); err != nil {
		panic(err) // a fixed layout: cannot fail
	}
	o.reported++
	ch := o.ch
	ss.mu.Unlock()
	ch.send(ss, b)
	return nil
}

func (ss *session) cmLeaveMulticast(o *cmIDObj, m *proto.CMMulticast) error {
	ap, ok := fromCMAddr(m.Addr)
	if !ok {
		return proto.EINVAL
	}
	g := ap.Addr().Unmap()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !o.mc[g] {
		return proto.ENOENT // ucma: no such join on the ID
	}
	delete(o.mc, g)
	delete(o.mcLost, g)
	return nil
}

// gidIndex returns the index of ip in d's GID table.
func (ss *session) gidIndex(d *device, ip netip.Addr) (uint8, bool) {
	ip = ip.Unmap()
	for i := 0; i < 256; i++ {
		g, err := d.dev.QueryGID(1, i)
		if err != nil {
			break
		}
		if g.IP() == ip {
			return uint8(i), true
		}
	}
	return 0, false
}

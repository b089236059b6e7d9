//go:build linux

package xdp_test

// Two softverbs devices in two network namespaces, each on an AF_XDP link
// on its end of a veth pair, running RC WRITE, READ, SEND and atomics over
// IPv4, IPv6 and IPv6 link-local GIDs, UC SEND and WRITE with immediate, UD
// SEND with immediate (GRH checked) and UD multicast to IPv4 and IPv6
// groups joined on both links, while the kernel keeps answering ping (and
// ARP and neighbour discovery) on the same interfaces.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/netdev/xdp"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/transport"
)

// xdpNode is a device on an xdp.Link with a PD and a CQ.
type xdpNode struct {
	l     *xdp.Link
	dev   *rvt.Device
	pd    *rvt.PD
	cq    *rvt.CQ
	addrs []netip.Addr
}

func xdpNewNode(t testing.TB, name string, l *xdp.Link) *xdpNode {
	t.Helper()
	addrs, err := l.Neighbours().Addrs()
	require.NoError(t, err)
	require.Len(t, addrs, 3, "link-local, IPv4 and ULA addresses: %v", addrs)
	require.True(t, addrs[0].IsLinkLocalUnicast() && addrs[1].Is4() && addrs[2].Is6(), "GID order: %v", addrs)
	dev, err := rvt.Open(rvt.Options{Name: name, Link: l, MAC: l.HardwareAddr(), Addrs: addrs,
		Resolve: l.Neighbours().Resolve, Workers: 2})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	port, err := dev.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, qp.MTU4096, port.ActiveMTU, "a 9000-byte link carries path MTU 4096")
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	c, err := dev.CreateCQ(4096, nil)
	require.NoError(t, err)
	return &xdpNode{l: l, dev: dev, pd: pd, cq: c, addrs: addrs}
}

func (n *xdpNode) newQP(t testing.TB, typ qp.Type) *rvt.QP {
	t.Helper()
	q, err := n.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: rvt.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Destroy() })
	return q
}

func (n *xdpNode) newMR(t testing.TB, size int) *rvt.MR {
	t.Helper()
	mr, err := n.pd.Reg(make([]byte, size), keys.LocalWrite|keys.RemoteWrite|keys.RemoteRead|keys.RemoteAtomic)
	require.NoError(t, err)
	return mr
}

// xdpQKey is the Q_Key of every UD QP of the tests.
const xdpQKey = 0x1111

// xdpBringUp moves q (RC, UC or UD) to RTS towards peer (on node pn), from
// GID index gid of q's device to the same index of the peer's. A UD QP
// gets Q_Key xdpQKey and no destination (peer and pn are then unused).
func xdpBringUp(t testing.TB, q, peer *rvt.QP, pn *xdpNode, gid int) {
	t.Helper()
	typ := q.Type()
	if typ == qp.UD {
		require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Init, Port: 1, QKey: xdpQKey},
			qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrQKey))
		require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTR}, qp.AttrState))
		require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTS, SQPSN: 0x10}, qp.AttrState|qp.AttrSQPSN))
		return
	}
	dgid, err := pn.dev.QueryGID(1, gid)
	require.NoError(t, err)
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Init, Port: 1,
		AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic},
		qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	rtr := &rvt.QPAttr{State: qp.RTR, PathMTU: qp.MTU4096, DestQPN: peer.Num(),
		RQPSN: 0x10, MaxDestRdAtomic: 16, MinRNRTimer: 1,
		AV: rvt.AddressVector{DGID: dgid, SGIDIndex: uint8(gid), HopLimit: 64, Port: 1}}
	rts := &rvt.QPAttr{State: qp.RTS, SQPSN: 0x10, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	if typ == qp.UC {
		require.NoError(t, q.Modify(rtr, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN))
		require.NoError(t, q.Modify(rts, qp.AttrState|qp.AttrSQPSN))
		return
	}
	require.NoError(t, q.Modify(rtr,
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	require.NoError(t, q.Modify(rts,
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
}

// xdpByWRID polls n successful completions on c and indexes them by WRID.
func xdpByWRID(t testing.TB, c *rvt.CQ, n int) map[uint64]rvt.WC {
	t.Helper()
	out := map[uint64]rvt.WC{}
	for _, w := range xdpPoll(t, c, n, 10*time.Second) {
		out[w.WRID] = w
	}
	require.Len(t, out, n, "distinct WRIDs")
	return out
}

// xdpPoll waits for n completions on c.
func xdpPoll(t testing.TB, c *rvt.CQ, n int, timeout time.Duration) []rvt.WC {
	t.Helper()
	var out []rvt.WC
	buf := make([]rvt.WC, 64)
	deadline := time.Now().Add(timeout)
	for len(out) < n {
		k := c.Poll(buf)
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				require.Failf(t, "timeout", "got %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	for _, w := range out {
		require.Equal(t, cq.Success, w.Status, "%+v", w)
	}
	return out
}

func xdpPattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + seed*7 + i>>9)
	}
	return b
}

// xdpExchange runs RC WRITE and SEND (with immediate) and READ between qa and
// qb and checks every byte.
func xdpExchange(t testing.TB, na, nb *xdpNode, qa, qb *rvt.QP, size, seed int) {
	t.Helper()
	src, dst := na.newMR(t, 2*size), nb.newMR(t, 2*size)
	defer func() { na.dev.DeregMR(src); nb.dev.DeregMR(dst) }()
	want := xdpPattern(size, seed)
	src.WriteAt(want, src.IOVA)

	// WRITE a -> b. With immediate, so that b's completion orders b's
	// memory writes before the check (the race detector cannot see the
	// ordering through the kernel that a's completion carries).
	require.NoError(t, qb.PostRecv(rvt.RecvWR{WRID: 5}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 1, Opcode: qp.OpRDMAWriteWithImm, Flags: qp.Signaled,
		ImmData: 0x1234, SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}},
		RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	xdpPoll(t, na.cq, 1, 20*time.Second)
	w := xdpPoll(t, nb.cq, 1, 20*time.Second)
	require.Equal(t, cq.RecvRDMAWithImm, w[0].Opcode)
	require.Equal(t, uint32(size), w[0].ByteLen)
	got := make([]byte, size)
	dst.ReadAt(got, dst.IOVA)
	require.True(t, bytes.Equal(want, got), "WRITE of %d bytes differs", size)

	// READ it back from b into the second half of a's buffer.
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 2, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL:        []rvt.SGE{{Addr: src.IOVA + uint64(size), Length: uint32(size), Lkey: src.Lkey}},
		RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	w = xdpPoll(t, na.cq, 1, 20*time.Second)
	require.Equal(t, cq.RDMARead, w[0].Opcode)
	src.ReadAt(got, src.IOVA+uint64(size))
	require.True(t, bytes.Equal(want, got), "READ of %d bytes differs", size)

	// SEND with immediate b -> a into a posted receive.
	want2 := xdpPattern(size, seed+1)
	dst.WriteAt(want2, dst.IOVA+uint64(size))
	require.NoError(t, qa.PostRecv(rvt.RecvWR{WRID: 3, SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}}}))
	require.NoError(t, qb.PostSend(rvt.SendWR{WRID: 4, Opcode: qp.OpSendWithImm, Flags: qp.Signaled, ImmData: uint32(seed),
		SGL: []rvt.SGE{{Addr: dst.IOVA + uint64(size), Length: uint32(size), Lkey: dst.Lkey}}}))
	xdpPoll(t, nb.cq, 1, 20*time.Second)
	w = xdpPoll(t, na.cq, 1, 20*time.Second)
	require.Equal(t, cq.Recv, w[0].Opcode)
	require.Equal(t, uint32(size), w[0].ByteLen)
	require.Equal(t, uint32(seed), w[0].ImmData)
	src.ReadAt(got, src.IOVA)
	require.True(t, bytes.Equal(want2, got), "SEND of %d bytes differs", size)
}

// xdpAtomics runs FETCH_AND_ADD and CMP_AND_SWP from qa on a word of b's
// memory that a WRITE initialised, and reads the result back with a READ,
// so every check is of a's memory after a's completions (b's memory is only
// touched by b's device).
func xdpAtomics(t testing.TB, na, nb *xdpNode, qa *rvt.QP, seed int) {
	t.Helper()
	src, dst := na.newMR(t, 64), nb.newMR(t, 64)
	defer func() { na.dev.DeregMR(src); nb.dev.DeregMR(dst) }()
	initial := uint64(1000 + seed)
	binary.NativeEndian.PutUint64(src.Word(src.IOVA+16), initial)
	sge := func(off uint64) []rvt.SGE { return []rvt.SGE{{Addr: src.IOVA + off, Length: 8, Lkey: src.Lkey}} }
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 10, Opcode: qp.OpRDMAWrite,
		SGL: sge(16), RemoteAddr: dst.IOVA + 8, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 11, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled,
		CompareAdd: 23, SGL: sge(0), RemoteAddr: dst.IOVA + 8, Rkey: dst.Rkey}))
	// A compare that fails leaves the word alone, one that matches swaps.
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 12, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled,
		CompareAdd: initial, Swap: 5, SGL: sge(24), RemoteAddr: dst.IOVA + 8, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 13, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled,
		CompareAdd: initial + 23, Swap: 77, SGL: sge(32), RemoteAddr: dst.IOVA + 8, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 14, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL: sge(40), RemoteAddr: dst.IOVA + 8, Rkey: dst.Rkey}))
	w := xdpByWRID(t, na.cq, 4)
	require.Equal(t, cq.FetchAdd, w[11].Opcode)
	require.Equal(t, cq.CompSwap, w[12].Opcode)
	require.Equal(t, cq.CompSwap, w[13].Opcode)
	word := func(off uint64) uint64 { return binary.NativeEndian.Uint64(src.Word(src.IOVA + off)) }
	require.Equal(t, initial, word(0), "FETCH_AND_ADD returns the original")
	require.Equal(t, initial+23, word(24), "failed CMP_AND_SWP returns the current value")
	require.Equal(t, initial+23, word(32), "matching CMP_AND_SWP returns the current value")
	require.Equal(t, uint64(77), word(40), "the word after add and swap")
}

// xdpUC runs UC SEND and RDMA WRITE with immediate a -> b and checks every
// byte after b's completion.
func xdpUC(t testing.TB, na, nb *xdpNode, qa, qb *rvt.QP, size, seed int) {
	t.Helper()
	src, dst := na.newMR(t, size), nb.newMR(t, 2*size)
	defer func() { na.dev.DeregMR(src); nb.dev.DeregMR(dst) }()
	want := xdpPattern(size, seed)
	src.WriteAt(want, src.IOVA)
	got := make([]byte, size)

	require.NoError(t, qb.PostRecv(rvt.RecvWR{WRID: 20, SGL: []rvt.SGE{{Addr: dst.IOVA, Length: uint32(size), Lkey: dst.Lkey}}}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 21, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}}}))
	xdpByWRID(t, na.cq, 1)
	w := xdpByWRID(t, nb.cq, 1)[20]
	require.Equal(t, cq.Recv, w.Opcode)
	require.Equal(t, uint32(size), w.ByteLen)
	dst.ReadAt(got, dst.IOVA)
	require.True(t, bytes.Equal(want, got), "UC SEND of %d bytes differs", size)

	require.NoError(t, qb.PostRecv(rvt.RecvWR{WRID: 22}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 23, Opcode: qp.OpRDMAWriteWithImm, Flags: qp.Signaled,
		ImmData: uint32(seed), SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}},
		RemoteAddr: dst.IOVA + uint64(size), Rkey: dst.Rkey}))
	xdpByWRID(t, na.cq, 1)
	w = xdpByWRID(t, nb.cq, 1)[22]
	require.Equal(t, cq.RecvRDMAWithImm, w.Opcode)
	require.Equal(t, uint32(size), w.ByteLen)
	require.Equal(t, uint32(seed), w.ImmData)
	dst.ReadAt(got, dst.IOVA+uint64(size))
	require.True(t, bytes.Equal(want, got), "UC WRITE of %d bytes differs", size)
}

// xdpGRHSource returns the source address a received GRH carries: for an
// IPv4 datagram the GRH's last 20 bytes are the IPv4 header, otherwise it
// is the IPv6 header.
func xdpGRHSource(grh []byte, v4 bool) netip.Addr {
	if v4 {
		return netip.AddrFrom4([4]byte(grh[20+12 : 20+16]))
	}
	return netip.AddrFrom16([16]byte(grh[8:24]))
}

// xdpUD sends one UD SEND with immediate from qa to qb over GID index gid
// and checks the payload, the completion and the GRH's source address.
func xdpUD(t testing.TB, na, nb *xdpNode, qa, qb *rvt.QP, gid, size, seed int) {
	t.Helper()
	src, dst := na.newMR(t, size), nb.newMR(t, 40+size)
	defer func() { na.dev.DeregMR(src); nb.dev.DeregMR(dst) }()
	want := xdpPattern(size, seed)
	src.WriteAt(want, src.IOVA)
	dgid, err := nb.dev.QueryGID(1, gid)
	require.NoError(t, err)
	ah, err := na.pd.CreateAH(rvt.AddressVector{DGID: dgid, SGIDIndex: uint8(gid), HopLimit: 64, Port: 1})
	require.NoError(t, err)
	defer na.dev.DestroyAH(ah)

	require.NoError(t, qb.PostRecv(rvt.RecvWR{WRID: 30, SGL: []rvt.SGE{{Addr: dst.IOVA, Length: uint32(40 + size), Lkey: dst.Lkey}}}))
	require.NoError(t, qa.PostSend(rvt.SendWR{WRID: 31, Opcode: qp.OpSendWithImm, Flags: qp.Signaled,
		ImmData: uint32(0xabc0000 + seed), SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}},
		AH: ah, RemoteQPN: qb.Num(), RemoteQKey: xdpQKey}))
	xdpByWRID(t, na.cq, 1)
	w := xdpByWRID(t, nb.cq, 1)[30]
	require.Equal(t, cq.Recv, w.Opcode)
	require.Equal(t, uint32(40+size), w.ByteLen)
	require.Equal(t, qa.Num(), w.SrcQP)
	require.Equal(t, uint32(0xabc0000+seed), w.ImmData)
	require.NotZero(t, w.Flags&cq.GRH, "GRH flag: %v", w.Flags)
	require.NotZero(t, w.Flags&cq.WithImm, "WITH_IMM flag: %v", w.Flags)
	got := make([]byte, 40+size)
	dst.ReadAt(got, dst.IOVA)
	require.True(t, bytes.Equal(want, got[40:]), "UD payload of %d bytes differs", size)
	require.Equal(t, na.addrs[gid], xdpGRHSource(got[:40], na.addrs[gid].Is4()), "GRH source")
}

// xdpMaddrs lists the multicast addresses of the interface in namespace ns
// (ip maddr: group MACs and IP groups).
func xdpMaddrs(t testing.TB, ns xdpNetns) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "maddr", "show", "dev", ns.ifname).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// xdpMulticast attaches a UD QP on each device to group (which makes each
// xdp.Link join it on its interface), sends one datagram from a third QP on
// a over GID index gid and checks that both members receive it: a's by
// local delivery, b's over the veth through b's XDP program. Detaching
// both leaves the group on the interfaces again.
func xdpMulticast(t testing.TB, p *xdpPair, na, nb *xdpNode, group netip.Addr, gid, size, seed int) {
	t.Helper()
	mgid := netdev.GIDFromIP(group)
	gmac, ok := netdev.MulticastMAC(group)
	require.True(t, ok)
	var members []*rvt.QP
	var dsts []*rvt.MR
	for i, n := range []*xdpNode{na, nb} {
		q := n.newQP(t, qp.UD)
		xdpBringUp(t, q, nil, nil, gid)
		require.NoError(t, n.dev.AttachMcast(q, mgid, 0))
		dst := n.newMR(t, 40+size)
		require.NoError(t, q.PostRecv(rvt.RecvWR{WRID: uint64(40 + i), SGL: []rvt.SGE{{Addr: dst.IOVA, Length: uint32(40 + size), Lkey: dst.Lkey}}}))
		members, dsts = append(members, q), append(dsts, dst)
	}
	for _, ns := range []xdpNetns{p.a, p.b} {
		m := xdpMaddrs(t, ns)
		require.Contains(t, m, gmac.String(), "group MAC on %s", ns.ifname)
		require.Contains(t, m, group.String(), "group on %s", ns.ifname)
	}
	redirected := nb.l.Stats().Program["redirect"]

	sender := na.newQP(t, qp.UD)
	xdpBringUp(t, sender, nil, nil, gid)
	src := na.newMR(t, size)
	want := xdpPattern(size, seed)
	src.WriteAt(want, src.IOVA)
	ah, err := na.pd.CreateAH(rvt.AddressVector{DGID: mgid, SGIDIndex: uint8(gid), HopLimit: 8, Port: 1})
	require.NoError(t, err)
	defer na.dev.DestroyAH(ah)
	require.NoError(t, sender.PostSend(rvt.SendWR{WRID: 50, Opcode: qp.OpSendWithImm, Flags: qp.Signaled,
		ImmData: uint32(seed), SGL: []rvt.SGE{{Addr: src.IOVA, Length: uint32(size), Lkey: src.Lkey}},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: xdpQKey}))
	// The sender's completion and member 0's receive share a's CQ.
	wa := xdpByWRID(t, na.cq, 2)
	require.Contains(t, wa, uint64(50))
	wb := xdpByWRID(t, nb.cq, 1)
	for i, w := range []rvt.WC{wa[40], wb[41]} {
		require.Equal(t, cq.Recv, w.Opcode, "member %d", i)
		require.Equal(t, uint32(40+size), w.ByteLen, "member %d", i)
		require.Equal(t, sender.Num(), w.SrcQP, "member %d", i)
		require.Equal(t, uint32(seed), w.ImmData, "member %d", i)
		require.NotZero(t, w.Flags&cq.GRH, "member %d", i)
		got := make([]byte, 40+size)
		dsts[i].ReadAt(got, dsts[i].IOVA)
		require.True(t, bytes.Equal(want, got[40:]), "member %d payload", i)
		require.Equal(t, na.addrs[gid], xdpGRHSource(got[:40], group.Is4()), "member %d GRH source", i)
	}
	require.Greater(t, nb.l.Stats().Program["redirect"], redirected, "b's copy came through b's XDP program")

	for i, n := range []*xdpNode{na, nb} {
		require.NoError(t, n.dev.DetachMcast(members[i], mgid, 0))
	}
	for _, ns := range []xdpNetns{p.a, p.b} {
		m := xdpMaddrs(t, ns)
		require.NotContains(t, m, group.String(), "group left on %s", ns.ifname)
		require.NotContains(t, m, gmac.String(), "group MAC removed on %s", ns.ifname)
	}
}

func TestXDPRvt(t *testing.T) {
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 9000)
	la := xdpOpen(t, p.a, xdp.Options{})
	lb := xdpOpen(t, p.b, xdp.Options{})
	na, nb := xdpNewNode(t, "xdpA", la), xdpNewNode(t, "xdpB", lb)

	// The kernel still answers ping on the interfaces before any RoCE.
	require.NoError(t, xdpPing(p.a, p.b.v4, 1, 3*time.Second))
	require.NoError(t, xdpPing(p.b, p.a.v6, 2, 3*time.Second))

	// Keep pinging both ways over both families while RoCEv2 flows.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop) // before the namespaces go, also when the test fails
	var pingMu sync.Mutex
	var pingErrs []error
	pings := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint16(100); ctx.Err() == nil; id++ {
			for _, c := range []struct {
				ns  xdpNetns
				dst netip.Addr
			}{{p.a, p.b.v4}, {p.b, p.a.v4}, {p.a, p.b.v6}, {p.b, p.a.v6}} {
				err := xdpPing(c.ns, c.dst, id, 3*time.Second)
				pingMu.Lock()
				pings++
				if err != nil {
					pingErrs = append(pingErrs, fmt.Errorf("ping %s from %s: %w", c.dst, c.ns.Name, err))
				}
				pingMu.Unlock()
			}
		}
	}()

	gids := []struct {
		name string
		gid  int
	}{{"ipv4", 1}, {"ipv6", 2}, {"ipv6 link-local", 0}}
	t.Run("RC", func(t *testing.T) {
		for _, g := range gids {
			t.Run(g.name, func(t *testing.T) {
				qa, qb := na.newQP(t, qp.RC), nb.newQP(t, qp.RC)
				xdpBringUp(t, qa, qb, nb, g.gid)
				xdpBringUp(t, qb, qa, na, g.gid)
				for i, size := range []int{1, 4096, 4097, 1 << 20} {
					xdpExchange(t, na, nb, qa, qb, size, g.gid*10+i)
				}
				xdpAtomics(t, na, nb, qa, g.gid)
				xdpAtomics(t, nb, na, qb, g.gid+100)
			})
		}
	})
	t.Run("UC", func(t *testing.T) {
		for _, g := range gids {
			t.Run(g.name, func(t *testing.T) {
				qa, qb := na.newQP(t, qp.UC), nb.newQP(t, qp.UC)
				xdpBringUp(t, qa, qb, nb, g.gid)
				xdpBringUp(t, qb, qa, na, g.gid)
				for i, size := range []int{1, 4096, 20000, 256 << 10} {
					xdpUC(t, na, nb, qa, qb, size, 40+g.gid*10+i)
				}
			})
		}
	})
	t.Run("UD", func(t *testing.T) {
		for _, g := range gids {
			t.Run(g.name, func(t *testing.T) {
				qa, qb := na.newQP(t, qp.UD), nb.newQP(t, qp.UD)
				xdpBringUp(t, qa, nil, nil, g.gid)
				xdpBringUp(t, qb, nil, nil, g.gid)
				for i, size := range []int{1, 1000, 4096} {
					xdpUD(t, na, nb, qa, qb, g.gid, size, 70+g.gid*10+i)
					xdpUD(t, nb, na, qb, qa, g.gid, size, 80+g.gid*10+i)
				}
			})
		}
	})
	t.Run("Multicast", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			group netip.Addr
			gid   int
		}{{"ipv4", netip.MustParseAddr("239.20.1.9"), 1}, {"ipv6", netip.MustParseAddr("ff15::20:1:9"), 2}} {
			t.Run(c.name, func(t *testing.T) {
				for i, size := range []int{1, 500, 4096} {
					xdpMulticast(t, p, na, nb, c.group, c.gid, size, 90+c.gid*10+i)
				}
			})
		}
	})
	stop()
	pingMu.Lock()
	require.Empty(t, pingErrs)
	require.Positive(t, pings)
	pingMu.Unlock()

	sa, sb := la.Stats(), lb.Stats()
	t.Logf("pings %d; A: %+v", pings, sa)
	t.Logf("B: %+v", sb)
	require.Positive(t, sa.Program["redirect"])
	require.Positive(t, sb.Program["redirect"])
	require.Positive(t, sa.Program["pass_not_udp"], "ICMP went to the kernel")
	require.Zero(t, sa.Program["pass_no_socket"]+sb.Program["pass_no_socket"])
	for _, n := range []*xdpNode{na, nb} {
		c := n.dev.Counters()
		t.Logf("%s counters: %v", n.dev.Name(), c)
		require.Zero(t, c["drop_"+transport.DropBadICRC.Name()], "no ICRC failures on %s", n.dev.Name())
	}
}

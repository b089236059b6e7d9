//go:build linux

package netdev_test

// Two softverbs devices in two network namespaces, each on an AF_XDP link
// on its end of a veth pair, running RC WRITE, READ and SEND over IPv4,
// IPv6 and IPv6 link-local GIDs, while the kernel keeps answering ping (and
// ARP and neighbour discovery) on the same interfaces.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// xdpNode is a device on an XDPLink with a PD and a CQ.
type xdpNode struct {
	l     *netdev.XDPLink
	dev   *rvt.Device
	pd    *rvt.PD
	cq    *rvt.CQ
	addrs []netip.Addr
}

func xdpNewNode(t testing.TB, name string, l *netdev.XDPLink) *xdpNode {
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

func (n *xdpNode) newQP(t testing.TB) *rvt.QP {
	t.Helper()
	q, err := n.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: rvt.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return q
}

func (n *xdpNode) newMR(t testing.TB, size int) *rvt.MR {
	t.Helper()
	mr, err := n.pd.Reg(make([]byte, size), keys.LocalWrite|keys.RemoteWrite|keys.RemoteRead|keys.RemoteAtomic)
	require.NoError(t, err)
	return mr
}

// xdpBringUp moves q to RTS towards peer (on node pn), from GID index gid
// of q's device to the same index of the peer's.
func xdpBringUp(t testing.TB, q, peer *rvt.QP, pn *xdpNode, gid int) {
	t.Helper()
	dgid, err := pn.dev.QueryGID(1, gid)
	require.NoError(t, err)
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Init, Port: 1,
		AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic},
		qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTR, PathMTU: qp.MTU4096, DestQPN: peer.Num(),
		RQPSN: 0x10, MaxDestRdAtomic: 16, MinRNRTimer: 1,
		AV: rvt.AddressVector{DGID: dgid, SGIDIndex: uint8(gid), HopLimit: 64, Port: 1}},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTS, SQPSN: 0x10, Timeout: 14, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 16},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
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

func TestXDPRvtRC(t *testing.T) {
	xdpRequireRoot(t)
	p := xdpNewPair(t, 9000)
	la := xdpOpen(t, p.a, netdev.XDPOptions{})
	lb := xdpOpen(t, p.b, netdev.XDPOptions{})
	na, nb := xdpNewNode(t, "xdpA", la), xdpNewNode(t, "xdpB", lb)

	// The kernel still answers ping on the interfaces before any RoCE.
	require.NoError(t, xdpPing(p.a.name, p.b.v4, 1, 3*time.Second))
	require.NoError(t, xdpPing(p.b.name, p.a.v6, 2, 3*time.Second))

	// Keep pinging both ways over both families while RoCEv2 flows.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var pingMu sync.Mutex
	var pingErrs []error
	pings := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint16(100); ctx.Err() == nil; id++ {
			for _, c := range []struct {
				ns  string
				dst netip.Addr
			}{{p.a.name, p.b.v4}, {p.b.name, p.a.v4}, {p.a.name, p.b.v6}, {p.b.name, p.a.v6}} {
				err := xdpPing(c.ns, c.dst, id, 3*time.Second)
				pingMu.Lock()
				pings++
				if err != nil {
					pingErrs = append(pingErrs, fmt.Errorf("ping %s from %s: %w", c.dst, c.ns, err))
				}
				pingMu.Unlock()
			}
		}
	}()

	for _, g := range []struct {
		name string
		gid  int
	}{{"ipv4", 1}, {"ipv6", 2}, {"ipv6 link-local", 0}} {
		t.Run(g.name, func(t *testing.T) {
			qa, qb := na.newQP(t), nb.newQP(t)
			xdpBringUp(t, qa, qb, nb, g.gid)
			xdpBringUp(t, qb, qa, na, g.gid)
			for i, size := range []int{1, 4096, 4097, 1 << 20} {
				xdpExchange(t, na, nb, qa, qb, size, g.gid*10+i)
			}
		})
	}
	cancel()
	wg.Wait()
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
	}
}

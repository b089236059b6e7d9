//go:build linux

package rvt

// Root-only integration tests: two softverbs devices in two network
// namespaces joined by a veth pair, over each real link kind, running RC,
// UC, UD and multicast traffic with byte-exact checks. They skip (with the
// reason) when not root or without the ip command; CI runs them as root,
// where a broken TAP, veth or netns fails them.

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/netdev/tap"
	"github.com/softverbs/softverbs/netdev/udp"
	"github.com/softverbs/softverbs/qp"
)

// wirePeer is one softverbs device on a real link.
type wirePeer struct {
	n      *node
	joiner netdev.GroupJoiner
}

// TestNetnsTAP: in each namespace a bridge joins the veth end and a TAP;
// softverbs is a host of its own behind the TAP (own MAC and IP, ARP by
// host.Host). The kernel sides have no addresses at all.
func TestNetnsTAP(t *testing.T) {
	nettest.RequireRoot(t)
	nsA, nsB := nettest.New(t), nettest.New(t)
	va, vb := nettest.Veth(t, nsA, nsB)
	open := func(ns *nettest.Netns, veth string, ip netip.Addr, mac netdev.MAC) *wirePeer {
		name := nettest.Name("t")
		var tl *tap.Link
		require.NoError(t, ns.Do(func() error {
			var err error
			tl, err = tap.Open(name, 1500)
			return err
		}))
		t.Cleanup(func() { tl.Close() })
		ns.Bridge(veth, name)
		gids := netdev.GIDOrder(mac, []netip.Addr{ip})
		h := host.New(tl, mac, gids, nil)
		n := newNode(t, Options{Name: "tap-" + ip.String(), Workers: 2, Link: h, MAC: mac, Addrs: gids, Resolve: h.Resolve})
		return &wirePeer{n: n, joiner: h}
	}
	a := open(nsA, va, netip.MustParseAddr("10.201.0.1"), netdev.MAC{0x02, 0x5f, 0, 0, 0, 1})
	b := open(nsB, vb, netip.MustParseAddr("10.201.0.2"), netdev.MAC{0x02, 0x5f, 0, 0, 0, 2})
	runWireSuite(t, a, b)
}

// TestNetnsUDP: the UDP-socket link bound to each namespace's veth address.
func TestNetnsUDP(t *testing.T) {
	nettest.RequireRoot(t)
	nsA, nsB := nettest.New(t), nettest.New(t)
	va, vb := nettest.Veth(t, nsA, nsB)
	nsA.Run("ip", "addr", "add", "10.202.0.1/24", "dev", va)
	nsB.Run("ip", "addr", "add", "10.202.0.2/24", "dev", vb)
	open := func(ns *nettest.Netns, ip netip.Addr) *wirePeer {
		var l *udp.Link
		require.NoError(t, ns.Do(func() error {
			var err error
			l, err = udp.Open(netip.AddrPortFrom(ip, netdev.RoCEv2Port))
			return err
		}))
		t.Cleanup(func() { l.Close() })
		gids := netdev.GIDOrder(l.HardwareAddr(), []netip.Addr{ip})
		n := newNode(t, Options{Name: "udp-" + ip.String(), Workers: 2, Link: l, MAC: l.HardwareAddr(),
			Addrs: gids, Resolve: l.Resolve})
		return &wirePeer{n: n, joiner: l}
	}
	a := open(nsA, netip.MustParseAddr("10.202.0.1"))
	b := open(nsB, netip.MustParseAddr("10.202.0.2"))
	runWireSuite(t, a, b)
}

// TestUDPLinkDevices: two devices over UDP links on 127.0.0.1 and
// 127.0.0.2. As root they bind in a namespace of their own, where port 4791
// is always free; otherwise in this one, and the test is skipped if
// something (rxe) holds the port.
func TestUDPLinkDevices(t *testing.T) {
	bind := func(ap netip.AddrPort) (*udp.Link, error) { return udp.Open(ap) }
	if os.Geteuid() == 0 {
		nettest.RequireRoot(t)
		ns := nettest.New(t)
		bind = func(ap netip.AddrPort) (l *udp.Link, err error) {
			err = ns.Do(func() error { l, err = udp.Open(ap); return err })
			return l, err
		}
	}
	open := func(ip netip.Addr) *wirePeer {
		l, err := bind(netip.AddrPortFrom(ip, netdev.RoCEv2Port))
		if err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("bind %v:4791 in a fresh namespace: %v", ip, err)
			}
			t.Skipf("not root, and cannot bind %v:4791 here (rxe or another user holds it?): %v", ip, err)
		}
		t.Cleanup(func() { l.Close() })
		gids := netdev.GIDOrder(l.HardwareAddr(), []netip.Addr{ip})
		n := newNode(t, Options{Workers: 2, Link: l, MAC: l.HardwareAddr(), Addrs: gids, Resolve: l.Resolve})
		return &wirePeer{n: n}
	}
	a := open(netip.MustParseAddr("127.0.0.1"))
	b := open(netip.MustParseAddr("127.0.0.2"))
	t.Run("RC", func(t *testing.T) { wireRC(t, a.n, b.n) })
	t.Run("UD", func(t *testing.T) { wireUD(t, a.n, b.n) })
}

func runWireSuite(t *testing.T, a, b *wirePeer) {
	t.Run("RC", func(t *testing.T) { wireRC(t, a.n, b.n) })
	t.Run("UC", func(t *testing.T) { wireUC(t, a.n, b.n) })
	t.Run("UD", func(t *testing.T) { wireUD(t, a.n, b.n) })
	t.Run("Multicast", func(t *testing.T) { wireMulticast(t, a, b) })
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// byWRID polls n completions and indexes them, checking success.
func byWRID(t *testing.T, c *CQ, n int) map[uint64]WC {
	t.Helper()
	out := map[uint64]WC{}
	for _, w := range poll(t, c, n, nil) {
		require.Equal(t, cq.Success, w.Status, "%+v", w)
		out[w.WRID] = w
	}
	return out
}

func wireRC(t *testing.T, a, b *node) {
	qa, qb := a.qp(t, qp.RC), b.qp(t, qp.RC)
	connect(t, qa, a.d, qb, b.d, defaultAttrs())
	src, dst := a.mr(t, 1<<20), b.mr(t, 1<<20)
	const size = 200000 // about 200 packets at MTU 1024
	data := pattern(size, 0x5a)
	src.WriteAt(data, src.IOVA)

	// SEND with immediate, multi-packet.
	require.NoError(t, qb.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, size)}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 2, Opcode: qp.OpSendWithImm, ImmData: 0xfeedf00d,
		Flags: qp.Signaled, SGL: sge(src, 0, size)}))
	wb := byWRID(t, b.cq, 1)
	wa := byWRID(t, a.cq, 1)
	require.Equal(t, uint32(size), wb[1].ByteLen)
	require.Equal(t, uint32(0xfeedf00d), wb[1].ImmData)
	require.Equal(t, cq.Send, wa[2].Opcode)
	got := make([]byte, size)
	dst.ReadAt(got, dst.IOVA)
	require.Equal(t, data, got, "SEND payload")

	// RDMA WRITE with immediate (b's completion orders b's memory before
	// the check below, also for the race detector, which cannot see the
	// kernel between the devices), then READ it back into a.
	require.NoError(t, qb.PostRecv(RecvWR{WRID: 7}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 3, Opcode: qp.OpRDMAWriteWithImm, ImmData: 3, Flags: qp.Signaled,
		SGL: sge(src, 0, size), RemoteAddr: dst.IOVA + 300000, Rkey: dst.Rkey}))
	byWRID(t, a.cq, 1)
	byWRID(t, b.cq, 1)
	dst.ReadAt(got, dst.IOVA+300000)
	require.Equal(t, data, got, "WRITE payload")
	require.NoError(t, qa.PostSend(SendWR{WRID: 4, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL: sge(src, 500000, size), RemoteAddr: dst.IOVA + 300000, Rkey: dst.Rkey}))
	w := byWRID(t, a.cq, 1)
	require.Equal(t, cq.RDMARead, w[4].Opcode)
	src.ReadAt(got, src.IOVA+500000)
	require.Equal(t, data, got, "READ payload")

	// Atomics on a word that a WRITE initialised; the result is read back
	// with a READ, so every access to b's memory is b's own.
	binary.NativeEndian.PutUint64(src.Word(src.IOVA+900016), 1000)
	require.NoError(t, qa.PostSend(SendWR{WRID: 8, Opcode: qp.OpRDMAWrite,
		SGL: sge(src, 900016, 8), RemoteAddr: dst.IOVA + 900000, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 5, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, CompareAdd: 23,
		SGL: sge(src, 900000, 8), RemoteAddr: dst.IOVA + 900000, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 6, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, CompareAdd: 1023, Swap: 77,
		SGL: sge(src, 900008, 8), RemoteAddr: dst.IOVA + 900000, Rkey: dst.Rkey}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 9, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL: sge(src, 900024, 8), RemoteAddr: dst.IOVA + 900000, Rkey: dst.Rkey}))
	byWRID(t, a.cq, 3)
	require.Equal(t, uint64(1000), binary.NativeEndian.Uint64(src.Word(src.IOVA+900000)))
	require.Equal(t, uint64(1023), binary.NativeEndian.Uint64(src.Word(src.IOVA+900008)))
	require.Equal(t, uint64(77), binary.NativeEndian.Uint64(src.Word(src.IOVA+900024)))
	require.Zero(t, a.d.Counters()["drop_bad_icrc"]+b.d.Counters()["drop_bad_icrc"], "no ICRC failures")
}

func wireUC(t *testing.T, a, b *node) {
	qa, qb := a.qp(t, qp.UC), b.qp(t, qp.UC)
	connect(t, qa, a.d, qb, b.d, defaultAttrs())
	src, dst := a.mr(t, 1<<16), b.mr(t, 1<<16)
	data := pattern(20000, 0x33)
	src.WriteAt(data, src.IOVA)
	require.NoError(t, qb.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 20000)}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 20000)}))
	wb := byWRID(t, b.cq, 1)
	byWRID(t, a.cq, 1)
	require.Equal(t, uint32(20000), wb[1].ByteLen)
	got := make([]byte, 20000)
	dst.ReadAt(got, dst.IOVA)
	require.Equal(t, data, got)

	require.NoError(t, qb.PostRecv(RecvWR{WRID: 3}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 4, Opcode: qp.OpRDMAWriteWithImm, ImmData: 9, Flags: qp.Signaled,
		SGL: sge(src, 0, 20000), RemoteAddr: dst.IOVA + 30000, Rkey: dst.Rkey}))
	wb = byWRID(t, b.cq, 1)
	byWRID(t, a.cq, 1)
	require.Equal(t, uint32(9), wb[3].ImmData)
	dst.ReadAt(got, dst.IOVA+30000)
	require.Equal(t, data, got)
}

func wireUD(t *testing.T, a, b *node) {
	qa, qb := a.qp(t, qp.UD), b.qp(t, qp.UD)
	connect(t, qa, a.d, qb, b.d, defaultAttrs())
	src, dst := a.mr(t, 4096), b.mr(t, 4096)
	data := pattern(1000, 0x77)
	src.WriteAt(data, src.IOVA)
	gid, err := b.d.QueryGID(1, 1)
	require.NoError(t, err)
	ah, err := a.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1})
	require.NoError(t, err)
	require.NoError(t, qb.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 40+1000)}))
	require.NoError(t, qa.PostSend(SendWR{WRID: 2, Opcode: qp.OpSendWithImm, ImmData: 5, Flags: qp.Signaled,
		SGL: sge(src, 0, 1000), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x1111}))
	wb := byWRID(t, b.cq, 1)
	byWRID(t, a.cq, 1)
	require.Equal(t, uint32(1040), wb[1].ByteLen)
	require.Equal(t, qa.Num(), wb[1].SrcQP)
	got := make([]byte, 1000)
	dst.ReadAt(got, dst.IOVA+40)
	require.Equal(t, data, got)
	grh := make([]byte, 40)
	dst.ReadAt(grh, dst.IOVA)
	gidA, _ := a.d.QueryGID(1, 1)
	require.Equal(t, netip.Addr(gidA.IP()).As4(), [4]byte(grh[32:36]), "GRH carries the sender's IPv4 header")
}

// wireMulticast sends one UD datagram to a group that a QP on each device
// joined; both receive it (a's by local delivery, b's over the wire).
func wireMulticast(t *testing.T, a, b *wirePeer) {
	group := netip.MustParseAddr("239.20.1.7")
	mgid := netdev.GIDFromIP(group)
	payload := pattern(500, 0x99)
	var dsts []*MR
	for i, p := range []*wirePeer{a, b} {
		q := p.n.qp(t, qp.UD)
		bringUp(t, q, q, p.n.d, defaultAttrs())
		require.NoError(t, p.n.d.AttachMcast(q, mgid, 0))
		if p.joiner != nil {
			require.NoError(t, p.joiner.JoinGroup(group))
			j := p.joiner
			t.Cleanup(func() { _ = j.LeaveGroup(group) })
		}
		dst := p.n.mr(t, 4096)
		require.NoError(t, q.PostRecv(RecvWR{WRID: uint64(100 + i), SGL: sge(dst, 0, 2048)}))
		dsts = append(dsts, dst)
	}
	sender := a.n.qp(t, qp.UD)
	bringUp(t, sender, sender, a.n.d, defaultAttrs())
	src := a.n.mr(t, 4096)
	src.WriteAt(payload, src.IOVA)
	ah, err := a.n.pd.CreateAH(AddressVector{DGID: mgid, SGIDIndex: 1, HopLimit: 8, Port: 1})
	require.NoError(t, err)
	require.NoError(t, sender.PostSend(SendWR{WRID: 50, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: sge(src, 0, 500), AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x1111}))
	// The sender's completion and member 0's receive share a's CQ.
	wa := byWRID(t, a.n.cq, 2)
	require.Contains(t, wa, uint64(50))
	wb := byWRID(t, b.n.cq, 1)
	for i, w := range []WC{wa[100], wb[101]} {
		require.Equal(t, uint32(40+500), w.ByteLen, "member %d", i)
		got := make([]byte, 500)
		dsts[i].ReadAt(got, dsts[i].IOVA+40)
		require.Equal(t, payload, got, "member %d payload", i)
	}
}

//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// roceFrame builds a RoCEv2 frame from src to dst with a BTH-sized header
// and payload, and a correct ICRC.
func roceFrame(t *testing.T, src, dst netdev.Endpoint, payload []byte) []byte {
	t.Helper()
	v6 := netdev.UsesIPv6(src.IP, dst.IP)
	hl := netdev.HeaderLen(v6)
	udpLen := 12 + len(payload) + 4
	b := make([]byte, hl+udpLen)
	b[hl] = 0x64 // BTH: UD SEND_ONLY
	copy(b[hl+12:], payload)
	require.NotZero(t, netdev.EncodeRoCEv2(b, src, dst, 64, 0, udpLen))
	c, err := netdev.ICRC(b[netdev.EthernetHeaderLen : len(b)-4])
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(b[len(b)-4:], c)
	if v6 {
		netdev.EncodeRoCEv2(b, src, dst, 64, 0, udpLen)
	}
	return b
}

// udpLinkPair opens UDP links on 127.0.0.1 and 127.0.0.2, both on port
// 4791 (the port RoCEv2 sends to), closed at cleanup. As root (CI) they
// open in a fresh network namespace, where nothing else can hold the
// port, and any failure fails the test. Otherwise they open in the
// test's own namespace, and the test is skipped if the port is taken
// (rxe, another user).
func udpLinkPair(t *testing.T) (a, b *Link) {
	t.Helper()
	return udpLinkPairClock(t, nil)
}

// udpLinkPairClock is udpLinkPair with a's clock (FlushLazy's timer) clk.
func udpLinkPairClock(t *testing.T, clk clock.Clock) (a, b *Link) {
	t.Helper()
	if os.Geteuid() != 0 {
		a, b, err := openUDPLinkPair(clk)
		if err != nil {
			t.Skipf("not root, so no namespace of its own, and cannot bind port 4791 on 127.0.0.1 and 127.0.0.2 (rxe or another user holds it?): %v", err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	nettest.RequireRoot(t)
	return udpLinkPairIn(t, nettest.New(t), clk)
}

// udpLinkPairIn opens the links of udpLinkPair inside ns.
func udpLinkPairIn(t *testing.T, ns *nettest.Netns, clk clock.Clock) (a, b *Link) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		var err error
		a, b, err = openUDPLinkPair(clk)
		return err
	}))
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func openUDPLinkPair(clk clock.Clock) (a, b *Link, err error) {
	if a, err = OpenConfig(Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Clock: clk}); err != nil {
		return nil, nil, err
	}
	if b, err = Open(netip.MustParseAddrPort("127.0.0.2:4791")); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

func TestUDPLinkLoopback(t *testing.T) {
	a, b := udpLinkPair(t)
	got := make(frametest.Chan, 4)
	b.SetHandler(got.Handler)

	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC123}
	bMAC, _ := a.Resolve(netip.MustParseAddr("127.0.0.2"))
	dst := netdev.Endpoint{MAC: bMAC, IP: netip.MustParseAddr("127.0.0.2"), Port: netdev.RoCEv2Port}
	f := roceFrame(t, src, dst, []byte("hello over a kernel socket"))
	require.NoError(t, a.Send(f))
	r := got.Next(t)
	// The synthesised frame is the sent one: same MACs (both derived from
	// the IPs), same IP header (ID 0, DF, TTL 64), ports, payload, ICRC.
	require.Equal(t, f, r)
	require.Equal(t, uint64(1), a.Stats().TxSockets, "one socket for source port 0xC123")

	// A frame from an address that is not the link's cannot be sent.
	bad := roceFrame(t, netdev.Endpoint{IP: netip.MustParseAddr("127.0.0.9"), Port: 0xC000}, dst, nil)
	require.Error(t, a.Send(bad))

	// A non-zero ID on the wire (as rxe sends) is recovered from the ICRC.
	raw := append([]byte(nil), f...)
	netdev.IPv4(raw[netdev.EthernetHeaderLen:]).SetID(0x4242)
	netdev.IPv4(raw[netdev.EthernetHeaderLen:]).UpdateChecksum()
	fi, err := netdev.ParseFrame(raw)
	require.NoError(t, err)
	c, err := netdev.ICRC(raw[fi.IPOff : fi.End()-4])
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(raw[fi.End()-4:], c)
	require.NoError(t, a.Send(raw)) // the kernel sends it with ID 0; the ICRC says 0x4242
	r = got.Next(t)
	require.Equal(t, raw, r)
	require.Equal(t, uint64(1), b.Stats().RxIDRecovered)

	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Send(f), netdev.ErrClosed)
}

// TestUDPLinkIPv6 sends a datagram between two IPv6 UDP links (in a
// namespace of its own, on two addresses of its loopback) and checks that
// the receiver synthesises the sent frame.
func TestUDPLinkIPv6(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	ipA, ipB := netip.MustParseAddr("fd00:5f::1"), netip.MustParseAddr("fd00:5f::2")
	for _, ip := range []netip.Addr{ipA, ipB} {
		ns.Run("ip", "addr", "add", ip.String()+"/128", "dev", "lo", "nodad")
	}
	var a, b *Link
	require.NoError(t, ns.Do(func() error {
		var err error
		if a, err = Open(netip.AddrPortFrom(ipA, 0)); err != nil {
			return err
		}
		b, err = Open(netip.AddrPortFrom(ipB, 0))
		return err
	}))
	t.Cleanup(func() { a.Close(); b.Close() })
	got := make(frametest.Chan, 1)
	b.SetHandler(got.Handler)
	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: ipA, Port: 0xC125}
	dst := netdev.Endpoint{MAC: b.HardwareAddr(), IP: ipB, Port: netdev.RoCEv2Port}
	f := roceFrame(t, src, dst, []byte("hello over IPv6"))
	require.NoError(t, a.Send(f))
	require.Equal(t, f, got.Next(t))
	require.EqualValues(t, 1, b.Stats().RxPackets)
}

// TestUDPLinkTruncated checks that a datagram longer than the link's
// buffers (a peer with a larger MTU) is counted as an error and dropped,
// not passed on cut short.
func TestUDPLinkTruncated(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	var l *Link
	var c *net.UDPConn
	require.NoError(t, ns.Do(func() error {
		var err error
		if l, err = OpenConfig(Config{Addr: netip.MustParseAddrPort("127.0.0.1:4791"), MTU: 1500}); err != nil {
			return err
		}
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
		return err
	}))
	t.Cleanup(func() { l.Close(); c.Close() })
	got := make(frametest.Chan, 2)
	l.SetHandler(got.Handler)
	to := net.UDPAddrFromAddrPort(l.Addr())

	_, err := c.WriteToUDP(make([]byte, 3000), to)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.Stats().RxErrors == 1 }, 5*time.Second, time.Millisecond)
	require.Zero(t, l.Stats().RxPackets)
	require.Empty(t, got, "a truncated datagram is not passed on")

	_, err = c.WriteToUDP(make([]byte, 1000), to)
	require.NoError(t, err)
	f := got.Next(t)
	require.Len(t, f, netdev.HeaderLen(false)+1000)
	st := l.Stats()
	require.EqualValues(t, 1, st.RxPackets)
	require.EqualValues(t, 1, st.RxErrors)
}

// TestUDPLinkNoHandler checks that a datagram arriving before a handler is
// set is counted as dropped, not as received.
func TestUDPLinkNoHandler(t *testing.T) {
	a, b := udpLinkPair(t)
	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC124}
	dst := netdev.Endpoint{MAC: b.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.2"), Port: netdev.RoCEv2Port}
	f := roceFrame(t, src, dst, []byte("nobody listens"))
	require.NoError(t, a.Send(f))
	require.Eventually(t, func() bool { return b.Stats().RxDropped == 1 }, 5*time.Second, time.Millisecond)
	require.Zero(t, b.Stats().RxPackets)

	got := make(frametest.Chan, 1)
	b.SetHandler(got.Handler)
	require.NoError(t, a.Send(f))
	require.Equal(t, f, got.Next(t))
	st := b.Stats()
	require.EqualValues(t, 1, st.RxPackets)
	require.EqualValues(t, 1, st.RxDropped)
}

// TestUDPLinkHoldFlush checks that datagrams sent under Hold wait for the
// last Flush, then arrive complete and in order from a few sendmmsg calls,
// also when they alternate between source-port sockets.
func TestUDPLinkHoldFlush(t *testing.T) {
	a, b := udpLinkPair(t)
	const n = 200
	got := make(frametest.Chan, n)
	b.SetHandler(got.Handler)
	bMAC, _ := a.Resolve(netip.MustParseAddr("127.0.0.2"))
	dst := netdev.Endpoint{MAC: bMAC, IP: netip.MustParseAddr("127.0.0.2"), Port: netdev.RoCEv2Port}

	var sent [][]byte
	a.Hold()
	a.Hold() // holds nest
	for i := range n {
		// Runs of three datagrams per source port: several sockets.
		src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC200 + uint16(i/3%4)}
		f := roceFrame(t, src, dst, bytes.Repeat([]byte{byte(i)}, 100+i*7))
		sent = append(sent, f)
		require.NoError(t, a.Send(f))
		if i == udpBatchMax/2 {
			a.Flush() // the inner hold ends: still held
		}
	}
	st := a.Stats()
	require.Equal(t, uint64(n/udpBatchMax*udpBatchMax), st.TxPackets, "only full queues go out under a hold")
	require.Less(t, st.TxPackets, uint64(n))
	a.Flush()
	for i := range sent {
		require.Equal(t, sent[i], got.Next(t), "datagram %d", i)
	}
	st = a.Stats()
	t.Logf("%d datagrams, %d sendmmsg calls", st.TxPackets, st.TxBatches)
	require.Equal(t, uint64(n), st.TxPackets)
	require.Zero(t, st.TxErrors)
	require.Less(t, st.TxBatches, uint64(n), "fewer system calls than datagrams")

	// Without a hold, Send sends at once.
	f := roceFrame(t, netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC200}, dst, []byte("now"))
	require.NoError(t, a.Send(f))
	require.Equal(t, f, got.Next(t))
	require.Equal(t, st.TxBatches, a.Stats().TxBatches)
}

// TestUDPLinkFlushLazy checks that what FlushLazy leaves goes out with
// the next datagram sent, in one sendmmsg and in order, or on its own
// after LazyFlushDelay; at once if another holder ended with Flush
// meanwhile; and at Close.
func TestUDPLinkFlushLazy(t *testing.T) {
	clk := clock.NewManual()
	a, b := udpLinkPairClock(t, clk)
	got := make(frametest.Chan, 16)
	b.SetHandler(got.Handler)
	bMAC, _ := a.Resolve(netip.MustParseAddr("127.0.0.2"))
	dst := netdev.Endpoint{MAC: bMAC, IP: netip.MustParseAddr("127.0.0.2"), Port: netdev.RoCEv2Port}
	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC300}
	frame := func(i int) []byte { return roceFrame(t, src, dst, bytes.Repeat([]byte{byte(i)}, 64+i)) }
	none := func(why string) {
		t.Helper()
		select {
		case f := <-got:
			t.Fatalf("%s: a frame arrived (%d bytes)", why, len(f))
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Alone: the timer sends it, not before LazyFlushDelay.
	f0 := frame(0)
	a.Hold()
	require.NoError(t, a.Send(f0))
	a.FlushLazy()
	clk.Advance(netdev.LazyFlushDelay - 1)
	none("before LazyFlushDelay")
	clk.Advance(1)
	require.Equal(t, f0, got.Next(t))

	// Followed by an eager flush: both in one sendmmsg, in order.
	ack, reply := frame(1), frame(2)
	batches := a.Stats().TxBatches
	a.Hold()
	require.NoError(t, a.Send(ack))
	a.FlushLazy()
	a.Hold()
	require.NoError(t, a.Send(reply))
	a.Flush()
	require.Equal(t, ack, got.Next(t))
	require.Equal(t, reply, got.Next(t))
	require.Equal(t, batches+1, a.Stats().TxBatches, "one sendmmsg for both")
	clk.Advance(netdev.LazyFlushDelay)
	none("the timer finds nothing left")

	// Followed by a Send with no hold: the same.
	ack, reply = frame(3), frame(4)
	batches = a.Stats().TxBatches
	a.Hold()
	require.NoError(t, a.Send(ack))
	a.FlushLazy()
	require.NoError(t, a.Send(reply))
	require.Equal(t, ack, got.Next(t))
	require.Equal(t, reply, got.Next(t))
	require.Equal(t, batches+1, a.Stats().TxBatches)

	// An eager Flush while another hold is open, that hold then ending
	// with FlushLazy (a reply posted while the receive goroutine's batch
	// ends with an ACK): sent at once, not at the timer.
	clk.Advance(netdev.LazyFlushDelay)
	reply = frame(5)
	a.Hold() // the receive batch
	a.Hold() // the post
	require.NoError(t, a.Send(reply))
	a.Flush()
	a.FlushLazy()
	require.Equal(t, reply, got.Next(t))

	// Close sends what FlushLazy left: a program's last ACK.
	last := frame(6)
	a.Hold()
	require.NoError(t, a.Send(last))
	a.FlushLazy()
	require.NoError(t, a.Close())
	require.Equal(t, last, got.Next(t))
	require.Zero(t, a.Stats().TxErrors)
}

// TestUDPLinkWireHeader checks on a real capture (AF_PACKET in a fresh
// namespace) that the kernel puts ID 0 and DF on what the UDP link sends,
// and that the header the receiving link synthesises equals the one on
// the wire byte for byte.
func TestUDPLinkWireHeader(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	a, b := udpLinkPairIn(t, ns, nil)
	var sock int
	require.NoError(t, ns.Do(func() error {
		var err error
		sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		return unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	}))
	defer unix.Close(sock)
	got := make(frametest.Chan, 4)
	b.SetHandler(got.Handler)

	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.1"), Port: 0xC777}
	dst := netdev.Endpoint{MAC: b.HardwareAddr(), IP: netip.MustParseAddr("127.0.0.2"), Port: netdev.RoCEv2Port}
	payload := bytes.Repeat([]byte{0xab}, 1000)
	f := roceFrame(t, src, dst, payload)
	require.NoError(t, a.Send(f))
	r := got.Next(t)

	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		require.NoError(t, err, "no packet captured")
		fi, err := netdev.ParseFrame(buf[:n])
		if err != nil || fi.DstPort != netdev.RoCEv2Port || fi.SrcPort != 0xC777 {
			continue
		}
		ip := netdev.IPv4(buf[fi.IPOff:])
		require.Equal(t, uint16(0), ip.ID(), "Linux uses ID 0 for DF datagrams of unconnected sockets")
		require.Equal(t, uint8(netdev.IPv4FlagDontFragment), ip.Flags())
		require.Equal(t, buf[fi.IPOff:fi.End()], r[netdev.EthernetHeaderLen:], "synthesised header and payload equal the wire's")
		break
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestUDPLinkGroupsNested: joins nest as with every GroupJoiner (see
// TestGroupRefs): the group's socket, and the kernel's membership, stay
// until the last LeaveGroup, and one leave too many is an error.
func TestUDPLinkGroupsNested(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	var l *Link
	require.NoError(t, ns.Do(func() error {
		var err error
		l, err = Open(netip.MustParseAddrPort("127.0.0.1:0"))
		return err
	}))
	t.Cleanup(func() { l.Close() })
	g := netip.MustParseAddr("239.1.2.3")
	socket := func() bool {
		l.mu.RLock()
		defer l.mu.RUnlock()
		_, ok := l.groups[g]
		return ok
	}
	// /proc/net/igmp lists groups as the hex of the address's bytes read
	// as a native-endian word.
	word := fmt.Sprintf("%08X", binary.NativeEndian.Uint32(g.AsSlice()))
	kernel := func() bool {
		var member bool
		require.NoError(t, ns.Do(func() error {
			b, err := os.ReadFile("/proc/thread-self/net/igmp")
			member = strings.Contains(string(b), word)
			return err
		}))
		return member
	}
	steps := []struct {
		join    bool // else leave
		wantErr bool
		member  bool // afterwards
	}{
		{join: false, wantErr: true},
		{join: true, member: true},
		{join: true, member: true},
		{join: false, member: true}, // the second join's leave
		{join: false, member: false},
		{join: false, wantErr: true},
		{join: true, member: true},
	}
	for i, s := range steps {
		name := fmt.Sprintf("step %d: join=%v", i, s.join)
		var err error
		if s.join {
			err = l.JoinGroup(g)
		} else {
			err = l.LeaveGroup(g)
		}
		if s.wantErr {
			require.ErrorIs(t, err, netdev.ErrNotJoined, name)
			require.ErrorContains(t, err, g.String(), name)
		} else {
			require.NoError(t, err, name)
		}
		require.Equal(t, s.member, socket(), name)
		require.Equal(t, s.member, kernel(), name)
	}
	require.NoError(t, l.Close())
	require.False(t, socket(), "Close drops the group")
	require.ErrorIs(t, l.LeaveGroup(g), netdev.ErrNotJoined, "and its joins")
}

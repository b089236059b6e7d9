//go:build linux

package xdp_test

import (
	"bytes"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/netdev/xdp"
)

// xdpOpen opens an xdp.Link on ns's interface from inside ns; Close is
// registered with t.Cleanup.
func xdpOpen(t testing.TB, ns xdpNetns, opts xdp.Options) *xdp.Link {
	t.Helper()
	var l *xdp.Link
	xdpInNetns(t, ns, func() error {
		var err error
		l, err = xdp.Open(ns.ifname, opts)
		return err
	})
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// xdpResolve waits until the kernel of l's namespace has resolved ip.
func xdpResolve(t testing.TB, l *xdp.Link, ip netip.Addr) netdev.MAC {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m, ok := l.Neighbours().Resolve(ip); ok {
			return m
		}
		if time.Now().After(deadline) {
			require.Failf(t, "neighbour not resolved", "%s via %s", ip, l.Name())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// frameSink collects received frames.
type frameSink struct {
	mu     sync.Mutex
	frames [][]byte
	signal chan struct{}
}

func newFrameSink() *frameSink { return &frameSink{signal: make(chan struct{}, 1)} }

func (s *frameSink) handle(f []byte) {
	s.mu.Lock()
	s.frames = append(s.frames, f)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// wait returns the frames once n have arrived, or fails after timeout.
func (s *frameSink) wait(t testing.TB, n int, timeout time.Duration) [][]byte {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		if len(s.frames) >= n {
			out := s.frames
			s.frames = nil
			s.mu.Unlock()
			return out
		}
		got := len(s.frames)
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-deadline:
			require.Failf(t, "timeout", "received %d of %d frames", got, n)
		}
	}
}

func roceFrame(src, dst netdev.Endpoint, payload []byte) []byte {
	hl := netdev.HeaderLen(netdev.UsesIPv6(src.IP, dst.IP))
	buf := make([]byte, hl+len(payload))
	copy(buf[hl:], payload)
	if netdev.EncodeRoCEv2(buf, src, dst, 64, 0, len(payload)) == 0 {
		panic("encode")
	}
	return buf
}

// TestXDPLinkFrames sends RoCEv2 frames of every size from a few bytes to
// the 9000-byte MTU (multi-buffer past a chunk) over IPv4 and IPv6 between
// two AF_XDP links, checks them byte for byte, and checks that other UDP
// goes to the kernel.
func TestXDPLinkFrames(t *testing.T) {
	nettest.RequireRoot(t)
	for _, c := range []struct {
		name string
		opts xdp.Options
		mtu  int // what MTU() must report on a 9000-byte interface
	}{
		{"default", xdp.Options{}, 9000},
		{"2048-byte chunks", xdp.Options{FrameSize: 2048, NumFrames: 1024, RingSize: 512}, 9000},
		{"generic mode", xdp.Options{Mode: xdp.ModeGeneric}, 9000},
		// One chunk per frame: 4096 less the kernel's 256 bytes of headroom,
		// the Ethernet header and a VLAN tag.
		{"no multi-buffer", xdp.Options{NoMultiBuffer: true}, 4096 - 256 - 18},
	} {
		t.Run(c.name, func(t *testing.T) { testXDPLinkFrames(t, c.opts, c.mtu) })
	}
}

func testXDPLinkFrames(t *testing.T, opts xdp.Options, mtu int) {
	p := xdpNewPair(t, 9000)
	la := xdpOpen(t, p.a, opts)
	lb := xdpOpen(t, p.b, opts)
	require.Equal(t, mtu, la.MTU())
	require.Equal(t, !opts.NoMultiBuffer, la.MultiBuffer(), "the kernel should support AF_XDP multi-buffer (6.6+)")
	if opts.Mode != xdp.ModeAuto {
		require.Equal(t, opts.Mode, la.Mode())
	} else {
		require.Equal(t, xdp.ModeDriver, la.Mode(), "veth has native XDP")
	}
	sink := newFrameSink()
	lb.SetHandler(sink.handle)

	macB := xdpResolve(t, la, p.b.v4)
	require.Equal(t, lb.HardwareAddr(), macB)
	macB6 := xdpResolve(t, la, p.b.v6)
	require.Equal(t, lb.HardwareAddr(), macB6)

	sizes := []int{1, 100, 1000, 3000, 3800, 3900, 4096, 4200, 5000, 8192, 8900}
	for _, v6 := range []bool{false, true} {
		src := netdev.Endpoint{MAC: la.HardwareAddr(), IP: p.a.v4, Port: 0xc001}
		dst := netdev.Endpoint{MAC: macB, IP: p.b.v4, Port: netdev.RoCEv2Port}
		if v6 {
			src.IP, dst.IP = p.a.v6, p.b.v6
		}
		var sent [][]byte
		for i, n := range sizes {
			n = min(n, la.MTU()-netdev.HeaderLen(v6)+netdev.EthernetHeaderLen)
			require.Positive(t, n)
			payload := make([]byte, n)
			for j := range payload {
				payload[j] = byte(i*31 + j*7)
			}
			f := roceFrame(src, dst, payload)
			sent = append(sent, f)
			require.NoError(t, la.Send(f))
		}
		got := sink.wait(t, len(sent), 5*time.Second)
		require.Len(t, got, len(sent))
		for i := range sent {
			require.True(t, bytes.Equal(sent[i], got[i]), "v6=%v frame %d (%d bytes): got %d bytes", v6, i, len(sent[i]), len(got[i]))
		}
	}

	// UDP to another port is not ours: the kernel gets it (and answers
	// with port unreachable, which is passed back to A's kernel).
	other := roceFrame(netdev.Endpoint{MAC: la.HardwareAddr(), IP: p.a.v4, Port: 1234},
		netdev.Endpoint{MAC: macB, IP: p.b.v4, Port: 4792}, []byte("not rocev2"))
	require.NoError(t, la.Send(other))
	require.Eventually(t, func() bool { return lb.Stats().Program["pass_other_port"] >= 1 }, 5*time.Second, 5*time.Millisecond)
	sink.mu.Lock()
	require.Empty(t, sink.frames)
	sink.mu.Unlock()

	st := lb.Stats()
	t.Logf("b stats: %+v", st)
	require.Equal(t, uint64(2*len(sizes)), st.RxFrames)
	require.Equal(t, uint64(2*len(sizes)), st.Program["redirect"])
	require.Zero(t, st.RxDropped)
	sa := la.Stats()
	t.Logf("a stats: %+v", sa)
	require.Equal(t, uint64(2*len(sizes)+1), sa.TxFrames)
	require.Zero(t, sa.TxDropped)
}

// xdpLinkPair opens AF_XDP links with default options on both ends of a
// fresh veth pair and returns them with endpoints from a (source port
// srcPort) to b's RoCEv2 port, b's address already resolved.
func xdpLinkPair(t *testing.T, srcPort uint16) (la, lb *xdp.Link, src, dst netdev.Endpoint) {
	t.Helper()
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 9000)
	la = xdpOpen(t, p.a, xdp.Options{})
	lb = xdpOpen(t, p.b, xdp.Options{})
	src = netdev.Endpoint{MAC: la.HardwareAddr(), IP: p.a.v4, Port: srcPort}
	dst = netdev.Endpoint{MAC: xdpResolve(t, la, p.b.v4), IP: p.b.v4, Port: netdev.RoCEv2Port}
	return la, lb, src, dst
}

// TestXDPLinkNoHandler checks that a frame arriving before a handler is set
// is counted as dropped, not as received.
func TestXDPLinkNoHandler(t *testing.T) {
	la, lb, src, dst := xdpLinkPair(t, 0xc003)
	f := roceFrame(src, dst, []byte("nobody listens"))
	require.NoError(t, la.Send(f))
	require.Eventually(t, func() bool { return lb.Stats().RxDropped == 1 }, 5*time.Second, time.Millisecond)
	require.Zero(t, lb.Stats().RxFrames)

	sink := newFrameSink()
	lb.SetHandler(sink.handle)
	require.NoError(t, la.Send(f))
	got := sink.wait(t, 1, 5*time.Second)
	require.Equal(t, f, got[0])
	st := lb.Stats()
	require.EqualValues(t, 1, st.RxFrames)
	require.EqualValues(t, 1, st.RxDropped)
}

// TestXDPLinkHoldFlush checks that frames sent under Hold wait for the last
// Flush, then all arrive in order for a handful of sendto calls.
func TestXDPLinkHoldFlush(t *testing.T) {
	la, lb, src, dst := xdpLinkPair(t, 0xc002)
	sink := newFrameSink()
	lb.SetHandler(sink.handle)

	const n = 300
	var sent [][]byte
	kicks := la.Stats().TxKicks
	la.Hold()
	la.Hold() // holds nest
	for i := range n {
		payload := bytes.Repeat([]byte{byte(i)}, 1000+i)
		f := roceFrame(src, dst, payload)
		sent = append(sent, f)
		require.NoError(t, la.Send(f))
	}
	la.Flush()
	require.Equal(t, kicks, la.Stats().TxKicks, "no sendto while a hold is open")
	time.Sleep(20 * time.Millisecond)
	sink.mu.Lock()
	require.Empty(t, sink.frames, "copy mode transmits only from sendto")
	sink.mu.Unlock()
	la.Flush()
	got := sink.wait(t, n, 5*time.Second)
	require.Len(t, got, n)
	for i := range sent {
		require.True(t, bytes.Equal(sent[i], got[i]), "frame %d", i)
	}
	st := la.Stats()
	t.Logf("%d frames for %d sendto calls", n, st.TxKicks-kicks)
	require.Less(t, st.TxKicks-kicks, uint64(n/4), "a flush batches the kicks")
	require.Zero(t, st.TxDropped)
}

// xdpLinkPairManual is xdpLinkPair with la on a manual clock, so that
// its FlushLazy timer fires only when the test advances the clock. The
// destination MAC is lb's own (la's neighbour cache runs on the manual
// clock too).
func xdpLinkPairManual(t *testing.T, srcPort uint16) (la, lb *xdp.Link, src, dst netdev.Endpoint, clk *clock.Manual) {
	t.Helper()
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 9000)
	clk = clock.NewManual()
	la = xdpOpen(t, p.a, xdp.Options{Clock: clk})
	lb = xdpOpen(t, p.b, xdp.Options{})
	src = netdev.Endpoint{MAC: la.HardwareAddr(), IP: p.a.v4, Port: srcPort}
	dst = netdev.Endpoint{MAC: lb.HardwareAddr(), IP: p.b.v4, Port: netdev.RoCEv2Port}
	return la, lb, src, dst, clk
}

// TestXDPLinkFlushLazy checks that frames left by FlushLazy go out on
// their own after LazyFlushDelay, and with the next Flush if it comes
// first: one sendto for both, and the timer then finds nothing to send.
func TestXDPLinkFlushLazy(t *testing.T) {
	la, lb, src, dst, clk := xdpLinkPairManual(t, 0xc003)
	sink := newFrameSink()
	lb.SetHandler(sink.handle)
	frame := func(i int) []byte { return roceFrame(src, dst, bytes.Repeat([]byte{byte(i)}, 64+i)) }

	// Alone: the timer sends it, not before LazyFlushDelay.
	f0 := frame(0)
	kicks := la.Stats().TxKicks
	la.Hold()
	require.NoError(t, la.Send(f0))
	la.FlushLazy()
	require.EqualValues(t, 1, la.Stats().TxLazyFlushes)
	clk.Advance(netdev.LazyFlushDelay - 1)
	require.Equal(t, kicks, la.Stats().TxKicks, "no sendto before LazyFlushDelay")
	clk.Advance(1)
	got := sink.wait(t, 1, 5*time.Second)
	require.Equal(t, f0, got[0])
	require.Equal(t, kicks+1, la.Stats().TxKicks, "the timer's sendto")

	// Followed by an eager flush: both go out together, with one sendto,
	// in order while the receive goroutine takes the link's frames.
	f1, f2 := frame(1), frame(2)
	kicks = la.Stats().TxKicks
	la.Hold()
	require.NoError(t, la.Send(f1))
	la.FlushLazy()
	la.Hold()
	require.NoError(t, la.Send(f2))
	la.Flush()
	require.Equal(t, kicks+1, la.Stats().TxKicks, "one sendto for both frames")
	got = sink.wait(t, 2, 5*time.Second)
	require.Equal(t, [][]byte{f1, f2}, got)
	clk.Advance(netdev.LazyFlushDelay)

	// When the application busy-polls the link, the eager frame first (a
	// reply ahead of the ACK left before it).
	la.SetPolled(true)
	f1, f2 = frame(1), frame(2)
	kicks = la.Stats().TxKicks
	la.Hold()
	require.NoError(t, la.Send(f1))
	la.FlushLazy()
	require.EqualValues(t, 3, la.Stats().TxLazyFlushes, "FlushLazy armed its timer again")
	la.Hold()
	require.NoError(t, la.Send(f2))
	la.Flush()
	require.Equal(t, kicks+1, la.Stats().TxKicks, "one sendto for both frames")
	got = sink.wait(t, 2, 5*time.Second)
	require.Equal(t, [][]byte{f2, f1}, got)
	clk.Advance(netdev.LazyFlushDelay)
	require.Equal(t, kicks+1, la.Stats().TxKicks, "the timer finds the ring empty")

	// Followed by a Send with no hold: the same.
	f3, f4, f5 := frame(3), frame(4), frame(5)
	la.Hold()
	require.NoError(t, la.Send(f3))
	require.NoError(t, la.Send(f4))
	la.FlushLazy()
	require.NoError(t, la.Send(f5))
	got = sink.wait(t, 3, 5*time.Second)
	require.Equal(t, [][]byte{f5, f3, f4}, got)

	// Followed by more eager frames than MaxAhead: they queue behind, so
	// that a burst of data does not hold the ACK back.
	lazy := frame(6)
	la.Hold()
	require.NoError(t, la.Send(lazy))
	la.FlushLazy()
	want := [][]byte{lazy}
	la.Hold()
	for i := range xdp.MaxAhead + 1 {
		f := frame(7 + i)
		want = append(want, f)
		require.NoError(t, la.Send(f))
	}
	la.Flush()
	got = sink.wait(t, len(want), 5*time.Second)
	require.Equal(t, want, got)
	clk.Advance(netdev.LazyFlushDelay)

	// An eager Flush while another hold is open, that hold then ending
	// with FlushLazy (an application's reply posted while the receive
	// goroutine's batch ends with an ACK): the reply goes at once, not
	// at the lazy timer.
	reply := frame(30)
	kicks = la.Stats().TxKicks
	la.Hold() // the receive batch
	la.Hold() // the post
	require.NoError(t, la.Send(reply))
	la.Flush()
	la.FlushLazy()
	require.Equal(t, kicks+1, la.Stats().TxKicks, "the last holder kicked for the other's frame")
	got = sink.wait(t, 1, 5*time.Second)
	require.Equal(t, [][]byte{reply}, got)
	require.Zero(t, la.Stats().TxDropped)
}

// TestXDPLinkCloseSendsQueued checks that Close sends what FlushLazy left
// on the TX ring instead of dropping it: a program that closes right after
// its last receive would lose its last ACK, and its peer would retry. The
// clock is manual, so FlushLazy's timer cannot send the frame first.
func TestXDPLinkCloseSendsQueued(t *testing.T) {
	la, lb, src, dst, _ := xdpLinkPairManual(t, 0xc005)
	sink := newFrameSink()
	lb.SetHandler(sink.handle)
	f := roceFrame(src, dst, bytes.Repeat([]byte{7}, 64))
	la.Hold()
	require.NoError(t, la.Send(f))
	la.FlushLazy()
	require.NoError(t, la.Close())
	got := sink.wait(t, 1, 5*time.Second)
	require.Equal(t, f, got[0])
}

// TestXDPLinkPollReceive checks that a busy poller and the receive
// goroutine share the RX ring: every frame is handled exactly once, in
// order, whoever takes it; and that PollReceive after Close is harmless.
func TestXDPLinkPollReceive(t *testing.T) {
	la, lb, src, dst := xdpLinkPair(t, 0xc004)
	var mu sync.Mutex
	var seen []byte
	lb.SetHandler(func(f []byte) {
		mu.Lock()
		seen = append(seen, f[len(f)-1])
		mu.Unlock()
	})

	// Send in bursts until the poller has taken frames at least once
	// (which goroutine wins the ring is up to the scheduler) and at
	// least 1000 frames went out.
	const burst, most = 100, 20000
	stop := make(chan struct{})
	var polled atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if lb.PollReceive() {
				polled.Add(1)
			}
		}
	}()
	n := 0
	for n < 1000 || polled.Load() == 0 {
		require.Less(t, n, most, "the spinning poller never got the ring")
		for range burst {
			require.NoError(t, la.Send(roceFrame(src, dst, []byte{byte(n)})))
			n++
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		}, 10*time.Second, time.Millisecond)
	}
	close(stop)
	<-done
	t.Logf("%d frames, %d batches taken by the poller", n, polled.Load())
	mu.Lock()
	require.Len(t, seen, n)
	for i, v := range seen {
		require.Equal(t, byte(i), v, "frame %d", i)
	}
	mu.Unlock()
	require.EqualValues(t, n, lb.Stats().RxFrames)
	require.NoError(t, lb.Close())
	require.False(t, lb.PollReceive())
}

// TestXDPLinkClose checks that Close detaches the program and frees the
// queue (a second link can bind it), and that Send then fails.
func TestXDPLinkClose(t *testing.T) {
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 1500)
	attached := func() bool {
		out, err := exec.Command("ip", "-n", p.a.Name, "link", "show", "dev", p.a.ifname).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Contains(string(out), "prog/xdp")
	}
	require.False(t, attached())
	for range 2 { // the second round shows the first left nothing behind
		var l *xdp.Link
		xdpInNetns(t, p.a, func() (err error) {
			l, err = xdp.Open(p.a.ifname, xdp.Options{})
			return err
		})
		require.True(t, attached())
		require.Equal(t, 1500, l.MTU())
		require.NoError(t, l.Close())
		require.NoError(t, l.Close())
		require.False(t, attached())
		require.ErrorIs(t, l.Send(make([]byte, 60)), netdev.ErrClosed)
	}
	// The kernel has the interface back: ping works.
	require.NoError(t, xdpPing(p.a, p.b.v4, 7, 3*time.Second))
}

func TestXDPOpenErrors(t *testing.T) {
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 1500)
	for _, c := range []struct {
		name, ifname string
		opts         xdp.Options
	}{
		{"no such interface", "svx-nonexistent", xdp.Options{}},
		{"frame size", p.a.ifname, xdp.Options{FrameSize: 3000}},
		{"ring size", p.a.ifname, xdp.Options{RingSize: 1000}},
		{"queue", p.a.ifname, xdp.Options{Queue: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			xdpInNetns(t, p.a, func() error {
				_, err = xdp.Open(c.ifname, c.opts)
				return nil
			})
			require.Error(t, err)
		})
	}
	// Failed opens leave nothing attached.
	out, err := exec.Command("ip", "-n", p.a.Name, "link", "show", "dev", p.a.ifname).CombinedOutput()
	require.NoError(t, err)
	require.NotContains(t, string(out), "prog/xdp")
}

// TestXDPLinkGroups: JoinGroup makes the kernel a member of the group on
// the interface (the group and its MAC show in ip maddr), joins are
// counted, and Close drops the memberships.
func TestXDPLinkGroups(t *testing.T) {
	nettest.RequireRoot(t)
	p := xdpNewPair(t, 1500)
	l := xdpOpen(t, p.a, xdp.Options{})
	var _ netdev.GroupJoiner = l
	g4 := netip.MustParseAddr("::ffff:239.20.2.9") // IPv4-mapped, as an MGID carries it
	g6 := netip.MustParseAddr("ff15::20:2:9")
	has := func(g netip.Addr) bool {
		m, _ := netdev.MulticastMAC(g)
		s := xdpMaddrs(t, p.a)
		in, mac := strings.Contains(s, g.Unmap().String()), strings.Contains(s, m.String())
		require.Equal(t, in, mac, "group and MAC together: %s", s)
		return in
	}
	for _, g := range []netip.Addr{g4, g6} {
		require.False(t, has(g))
		require.NoError(t, l.JoinGroup(g))
		require.NoError(t, l.JoinGroup(g))
		require.True(t, has(g), "%v joined", g)
		require.NoError(t, l.LeaveGroup(g))
		require.True(t, has(g), "%v still joined once", g)
		require.NoError(t, l.LeaveGroup(g))
		require.False(t, has(g), "%v left", g)
		require.ErrorIs(t, l.LeaveGroup(g), netdev.ErrNotJoined, "not joined")
	}
	require.Error(t, l.JoinGroup(p.b.v4), "not a multicast address")
	require.NoError(t, l.JoinGroup(g4))
	require.NoError(t, l.JoinGroup(g6))
	require.NoError(t, l.Close())
	require.False(t, has(g4), "Close drops the memberships")
	require.False(t, has(g6), "Close drops the memberships")
	require.ErrorIs(t, l.JoinGroup(g4), netdev.ErrClosed)
	require.ErrorIs(t, l.JoinGroup(g6), netdev.ErrClosed)
}

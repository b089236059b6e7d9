package fabric

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

type fabricSetup struct {
	fab   *Fabric
	ports []*Port
	recs  []*frametest.Recorder
}

func newFabricSetup(t *testing.T, macs ...netdev.MAC) *fabricSetup {
	t.Helper()
	s := &fabricSetup{fab: New(clock.NewManual(), 1)}
	for _, m := range macs {
		p := s.fab.NewPort(m, 1500)
		r := &frametest.Recorder{}
		p.SetHandler(r.Handler)
		s.ports = append(s.ports, p)
		s.recs = append(s.recs, r)
	}
	return s
}

func (s *fabricSetup) counts() []int {
	var out []int
	for _, r := range s.recs {
		out = append(out, r.Count())
	}
	return out
}

func TestFabricDelivery(t *testing.T) {
	mcast, _ := netdev.MulticastMAC(netip.MustParseAddr("239.1.2.3"))
	learned := netdev.MAC{0x02, 0, 0, 0, 0, 0x99} // a MAC behind port 2, not its own
	tests := []struct {
		name  string
		setup func(s *fabricSetup) // frames sent before the one under test
		from  int
		dst   netdev.MAC
		want  []int
	}{
		{"unicast to a static mac", nil, 0, frametest.MACB, []int{0, 1, 0}},
		{"unicast the other way", nil, 2, frametest.MACA, []int{1, 0, 0}},
		{"broadcast", nil, 0, netdev.BroadcastMAC(), []int{0, 1, 1}},
		{"ipv4 multicast", nil, 1, mcast, []int{1, 0, 1}},
		{"unknown unicast floods", nil, 0, netdev.MAC{0x02, 0, 0, 0, 0, 0x77}, []int{0, 1, 1}},
		{"own mac is not hairpinned", nil, 0, frametest.MACA, []int{0, 0, 0}},
		{"learned mac", func(s *fabricSetup) {
			require.NoError(t, s.ports[2].Send(frametest.RawFrame(learned, frametest.MACA, 0, 10)))
		}, 0, learned, []int{1, 0, 1}}, // port 0 got the learning frame, port 2 the test frame
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFabricSetup(t, frametest.MACA, frametest.MACB, frametest.MACC)
			if tt.setup != nil {
				tt.setup(s)
			}
			frame := frametest.RawFrame(s.ports[tt.from].HardwareAddr(), tt.dst, 0x5a, 46)
			require.NoError(t, s.ports[tt.from].Send(frame))
			require.Equal(t, tt.want, s.counts())
			for i, r := range s.recs {
				for _, f := range r.Got() {
					if netdev.Ethernet(f).Dst() == tt.dst {
						require.Equal(t, frame, f, "port %d", i)
					}
				}
			}
		})
	}
}

func TestFabricCopiesFrames(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB)
	frame := frametest.RawFrame(frametest.MACA, frametest.MACB, 1, 46)
	require.NoError(t, s.ports[0].Send(frame))
	frame[netdev.EthernetHeaderLen] = 2 // the caller reuses its buffer
	got := s.recs[1].Got()
	require.Len(t, got, 1)
	require.EqualValues(t, 1, got[0][netdev.EthernetHeaderLen])
}

func TestFabricMTU(t *testing.T) {
	fab := New(clock.NewManual(), 1)
	big := fab.NewPort(frametest.MACA, 9000)
	small := fab.NewPort(frametest.MACB, 1500)
	r := &frametest.Recorder{}
	small.SetHandler(r.Handler)

	require.NoError(t, big.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 1500)))
	require.Equal(t, 1, r.Count())
	require.NoError(t, big.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 1501)), "the sender's MTU allows it")
	require.Equal(t, 1, r.Count(), "the receiver's MTU drops it")
	require.Equal(t, PortStats{RxFrames: 1, RxBytes: 1514, RxDropped: 1}, small.Stats())

	err := small.Send(frametest.RawFrame(frametest.MACB, frametest.MACA, 0, 1501))
	require.ErrorIs(t, err, netdev.ErrFrameTooLong)
	require.ErrorIs(t, small.Send(make([]byte, 10)), netdev.ErrTruncated)
	require.EqualValues(t, 2, small.Stats().TxDropped)
	require.Equal(t, PortStats{TxFrames: 2, TxBytes: 1514 + 1515}, big.Stats())

	// An 802.1Q-tagged frame may be 4 bytes longer.
	tagged := frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 1504)
	netdev.Ethernet(tagged).SetEtherType(netdev.EtherTypeVLAN)
	require.NoError(t, big.Send(tagged))
	require.Equal(t, 2, r.Count())
}

func TestFabricNoHandlerAndClose(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB, frametest.MACC)
	s.ports[1].SetHandler(nil)
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 46)))
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, netdev.BroadcastMAC(), 0, 46)))
	require.Equal(t, PortStats{RxDropped: 2}, s.ports[1].Stats(), "dropped, not received")
	require.Equal(t, []int{0, 0, 1}, s.counts(), "the broadcast reached port 2")
	s.recs[2].Reset()

	require.NoError(t, s.ports[2].Close())
	require.NoError(t, s.ports[2].Close(), "idempotent")
	require.ErrorIs(t, s.ports[2].Send(frametest.RawFrame(frametest.MACC, frametest.MACA, 0, 46)), netdev.ErrClosed)
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, netdev.BroadcastMAC(), 0, 46)))
	require.Equal(t, []int{0, 0, 0}, s.counts(), "a closed port gets nothing")
	require.Zero(t, s.ports[2].Stats().RxDropped, "it is detached, not dropping")

	// Its MAC is now unknown, so a frame to it floods.
	s.ports[1].SetHandler(s.recs[1].Handler)
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, frametest.MACC, 0, 46)))
	require.Equal(t, []int{0, 1, 0}, s.counts())
}

// TestFabricClosedPortNotLearned replays a Send that passed its closed
// check before a concurrent Close: the learning that follows must not
// record the closed port, whose own MAC would never be re-learned.
func TestFabricClosedPortNotLearned(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB, frametest.MACC)
	require.NoError(t, s.ports[2].Close())
	s.fab.lookup(s.ports[2], frametest.MACC, frametest.MACA) // the rest of the racing Send
	require.NotContains(t, *s.fab.fdb.Load(), frametest.MACC)

	// So a frame to frametest.MACC still floods to the live ports.
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, frametest.MACC, 0, 46)))
	require.Equal(t, []int{0, 1, 0}, s.counts())
}

func TestFabricStaticMACNotStolen(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB, frametest.MACC)
	// Port 2 spoofs port 1's MAC as its source; frames to frametest.MACB still go to 1.
	require.NoError(t, s.ports[2].Send(frametest.RawFrame(frametest.MACB, frametest.MACA, 0, 46)))
	require.NoError(t, s.ports[0].Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 46)))
	require.Equal(t, []int{1, 1, 0}, s.counts())
}

func TestFabricAutoMAC(t *testing.T) {
	macsOf := func(seed int64) []netdev.MAC {
		fab := New(nil, seed)
		var out []netdev.MAC
		for range 4 {
			m := fab.NewPort(netdev.MAC{}, 1500).HardwareAddr()
			require.False(t, m.IsZero())
			require.False(t, m.IsMulticast())
			require.EqualValues(t, 2, m[0]&2, "locally administered")
			out = append(out, m)
		}
		return out
	}
	require.Equal(t, macsOf(7), macsOf(7))
	require.NotEqual(t, macsOf(7), macsOf(8))
}

func TestFabricResolve(t *testing.T) {
	fab := New(nil, 1)
	fab.AddAddr(netip.MustParseAddr("10.0.0.1"), frametest.MACA)
	fab.AddAddr(netip.MustParseAddr("fe80::2"), frametest.MACB)
	tests := []struct {
		ip   string
		want netdev.MAC
		ok   bool
	}{
		{"10.0.0.1", frametest.MACA, true},
		{"::ffff:10.0.0.1", frametest.MACA, true},
		{"fe80::2", frametest.MACB, true},
		{"10.0.0.3", netdev.MAC{}, false},
		{"224.0.0.251", netdev.MAC{0x01, 0, 0x5e, 0, 0, 0xfb}, true},
		{"ff02::1:ff00:2", netdev.MAC{0x33, 0x33, 0xff, 0, 0, 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			m, ok := fab.Resolve(netip.MustParseAddr(tt.ip))
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, m)
		})
	}
	fab.RemoveAddr(netip.MustParseAddr("::ffff:10.0.0.1"))
	_, ok := fab.Resolve(netip.MustParseAddr("10.0.0.1"))
	require.False(t, ok)
}

// TestFabricReentrantSend checks that a handler may send (an echo) while the
// fabric is delivering.
func TestFabricReentrantSend(t *testing.T) {
	fab := New(nil, 1)
	a, b := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	b.SetHandler(func(f []byte) {
		e := netdev.Ethernet(f)
		src, dst := e.Src(), e.Dst()
		e.SetSrc(dst)
		e.SetDst(src)
		require.NoError(t, b.Send(f))
		b.Release(f)
	})
	r := &frametest.Recorder{}
	a.SetHandler(r.Handler)
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 9, 46)))
	require.Equal(t, 1, r.Count())
	require.Equal(t, frametest.MACB, netdev.Ethernet(r.Got()[0]).Src())
}

func TestFabricSendNoAlloc(t *testing.T) {
	if frametest.RaceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	fab := New(nil, 1)
	tx, rx := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	rx.SetHandler(func(f []byte) { rx.Release(f) })
	frame := frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 1000)
	allocs := testing.AllocsPerRun(1000, func() { _ = tx.Send(frame) })
	require.Less(t, allocs, 0.1)
}

func TestFabricConcurrent(t *testing.T) {
	fab := New(nil, 1)
	const n, per = 4, 500
	var ports []*Port
	var mu sync.Mutex
	got := 0
	for i := range n {
		p := fab.NewPort(netdev.MAC{2, 0, 0, 0, 1, byte(i)}, 1500)
		p.SetHandler(func(f []byte) {
			mu.Lock()
			got++
			mu.Unlock()
			p.Release(f)
		})
		ports = append(ports, p)
	}
	var wg sync.WaitGroup
	for i, p := range ports {
		wg.Go(func() {
			dst := ports[(i+1)%n].HardwareAddr()
			f := frametest.RawFrame(p.HardwareAddr(), dst, 0, 100)
			for range per {
				require.NoError(t, p.Send(f))
			}
		})
	}
	wg.Wait()
	require.Equal(t, n*per, got)
}

func TestFramePool(t *testing.T) {
	p := netdev.NewFramePool(100)
	b := p.Get()
	require.Len(t, b, 100)
	p.Put(b[:10])
	p.Put(make([]byte, 5)) // too small: ignored
	if frametest.RaceEnabled {
		return
	}
	allocs := testing.AllocsPerRun(1000, func() {
		p.Put(p.Get())
	})
	require.Less(t, allocs, 0.1)
}

func BenchmarkFabricSend(b *testing.B) {
	fab := New(nil, 1)
	tx, rx := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	rx.SetHandler(func(f []byte) { rx.Release(f) })
	frame := frametest.BuildFrame(b, frametest.EP(frametest.MACA, "10.0.0.1", 0xc000), frametest.EP(frametest.MACB, "10.0.0.2", netdev.RoCEv2Port), 64, 0, 1024+28)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := tx.Send(frame); err != nil {
			b.Fatal(err)
		}
	}
}

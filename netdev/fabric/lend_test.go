package fabric

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// ownedFrame builds a frame of n bytes from src to dst in a buffer p
// lends, as the transport does.
func ownedFrame(t *testing.T, p *Port, src, dst netdev.MAC, n int) []byte {
	t.Helper()
	buf := p.TxFrame(n)
	require.GreaterOrEqual(t, len(buf), n)
	return buf[:copy(buf, frametest.RawFrame(src, dst, 7, n-netdev.EthernetHeaderLen))]
}

// TestFabricSendOwned checks SendOwned against Send: the same frames
// reach the same ports, a unicast frame in the sender's buffer itself
// (no copy), a flooded one in copies.
func TestFabricSendOwned(t *testing.T) {
	tests := []struct {
		name     string
		dst      netdev.MAC
		want     []int
		sameBuf  bool // port 1 receives the very buffer sent
		closeDst bool
	}{
		{"unicast travels in the sender's buffer", frametest.MACB, []int{0, 1, 0}, true, false},
		{"broadcast is copied to each port", netdev.BroadcastMAC(), []int{0, 1, 1}, false, false},
		{"unknown unicast floods in copies", netdev.MAC{2, 0, 0, 0, 0, 0x77}, []int{0, 1, 1}, false, false},
		{"own mac is not hairpinned", frametest.MACA, []int{0, 0, 0}, false, false},
		{"a closed port's mac is unknown: it floods", frametest.MACB, []int{0, 0, 1}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFabricSetup(t, frametest.MACA, frametest.MACB, frametest.MACC)
			if tt.closeDst {
				require.NoError(t, s.ports[1].Close())
			}
			f := ownedFrame(t, s.ports[0], frametest.MACA, tt.dst, 200)
			want := append([]byte(nil), f...)
			require.NoError(t, s.ports[0].SendOwned(f))
			require.Equal(t, tt.want, s.counts())
			for i, r := range s.recs {
				for _, g := range r.Got() {
					require.Equal(t, want, g, "port %d", i)
				}
			}
			if tt.sameBuf {
				require.Same(t, &f[0], &s.recs[1].Got()[0][0])
			}
			st := s.ports[0].Stats()
			require.Equal(t, uint64(1), st.TxFrames)
		})
	}
}

func TestFabricSendOwnedErrors(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB)
	long := ownedFrame(t, s.ports[0], frametest.MACA, frametest.MACB, 1500+netdev.EthernetHeaderLen+1)
	require.ErrorIs(t, s.ports[0].SendOwned(long), netdev.ErrFrameTooLong)
	require.ErrorIs(t, s.ports[0].SendOwned(s.ports[0].TxFrame(100)[:10]), netdev.ErrTruncated)
	require.NoError(t, s.ports[0].Close())
	require.ErrorIs(t, s.ports[0].SendOwned(s.ports[0].TxFrame(100)), netdev.ErrClosed)
	require.Equal(t, []int{0, 0}, s.counts())
}

// TestFabricTxFrame checks TxFrame's sizes: the fabric's small buffers
// for short frames, the port's own buffers when they are long enough, the
// fabric's pool of a larger size otherwise, and that released buffers go
// back to the pool of their size.
func TestFabricTxFrame(t *testing.T) {
	fab := New(nil, 1)
	a, b := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 9000)
	require.Len(t, a.TxFrame(100), smallFrame)
	require.Len(t, b.TxFrame(smallFrame), smallFrame)
	require.Len(t, a.TxFrame(smallFrame+1), netdev.MaxFrameLen(1500))
	require.Len(t, b.TxFrame(smallFrame+1), netdev.MaxFrameLen(9000))
	big := a.TxFrame(4200)
	require.GreaterOrEqual(t, len(big), 4200)
	require.Equal(t, 0, cap(big)%1024)
	require.Nil(t, a.TxFrame(1<<17))
	// Ports of one MTU share a pool, and a buffer from one port's pool may
	// be released on any port.
	b.Release(big)
	b.Release(a.TxFrame(10))
	if frametest.RaceEnabled {
		return
	}
	rx := fab.NewPort(frametest.MACC, 1500)
	rx.SetHandler(func(f []byte) { rx.Release(f) })
	raw := frametest.RawFrame(frametest.MACA, frametest.MACC, 0, 1000)
	allocs := testing.AllocsPerRun(1000, func() {
		f := a.TxFrame(4200)
		copy(f, raw)
		_ = a.SendOwned(f[:1014])
	})
	require.Less(t, allocs, 0.1)
}

// watchLink embeds a port to watch its Send, as tests' links do: it
// inherits the port's FrameLender methods, and Lender says they are not
// its own.
type watchLink struct{ *Port }

func (w *watchLink) Send(frame []byte) error { return w.Port.Send(frame) }

func TestFabricLenderIdentity(t *testing.T) {
	fab := New(nil, 1)
	p := fab.NewPort(frametest.MACA, 1500)
	var l netdev.Link = p
	fl, ok := l.(netdev.FrameLender)
	require.True(t, ok)
	require.Equal(t, l, fl.Lender(), "a port lends for itself")
	var w netdev.Link = &watchLink{p}
	wl, ok := w.(netdev.FrameLender)
	require.True(t, ok, "embedding passes the methods on")
	require.NotEqual(t, w, wl.Lender(), "but not the identity")
}

func TestBufPool(t *testing.T) {
	p := newBufPool(100)
	b := p.Get()
	require.Len(t, b, 100)
	p.Put(b[:10])           // its capacity counts
	p.Put(make([]byte, 50)) // too small: not kept
	require.Equal(t, 1, p.kept())
	require.Same(t, &b[0], &p.Get()[0])
	for range p.max + 10 {
		p.Put(make([]byte, 100))
	}
	require.Equal(t, p.max, p.kept(), "bounded")
	// The bound is in bytes, and at least minPooled buffers.
	for _, tt := range []struct{ size, max int }{
		{smallFrame, maxPooledBytes / smallFrame},
		{9018, 512},
		{1 << 16, minPooled},
	} {
		require.Equal(t, tt.max, newBufPool(tt.size).max, "size %d", tt.size)
	}
}

// TestFabricSmallFrameReuse checks that a short frame, sent owned or
// copied, travels in a small buffer and that the receiver's Release puts
// it back in the fabric's small pool, which the next TxFrame reuses.
func TestFabricSmallFrameReuse(t *testing.T) {
	fab := New(nil, 1)
	a := fab.NewPort(frametest.MACA, 9000)
	rx := fab.NewPort(frametest.MACB, 9000)
	var got [][]byte
	rx.SetHandler(func(f []byte) { got = append(got, f); rx.Release(f) })
	f := ownedFrame(t, a, frametest.MACA, frametest.MACB, 80)
	require.NoError(t, a.SendOwned(f))
	require.Len(t, got, 1)
	require.Equal(t, smallFrame, cap(got[0]), "owned: the sender's small buffer")
	require.Same(t, &f[0], &a.TxFrame(80)[0], "released to the small pool and reused")
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 60)))
	require.Len(t, got, 2)
	require.Equal(t, smallFrame, cap(got[1]), "copied: into a small buffer too")
	require.Equal(t, 1, fab.small.kept())
}

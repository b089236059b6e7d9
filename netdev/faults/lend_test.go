package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/faults"
)

// A loss-only fault link over a fabric port lends the port's buffers, and
// SendOwned loses exactly the frames Send would with the same seed.
func TestLendLossOnly(t *testing.T) {
	const n = 2000
	sent := newFaultBench(t, 7, faults.Profile{Loss: 0.3})
	lent := newFaultBench(t, 7, faults.Profile{Loss: 0.3})
	var l netdev.Link = lent.a
	fl, ok := l.(netdev.FrameLender)
	require.True(t, ok)
	require.Equal(t, l, fl.Lender(), "lends for itself")
	fr, ok := l.(netdev.FrameRecycler)
	require.True(t, ok)
	require.True(t, fr.RecyclesFrames(), "the fabric port below recycles")
	for i := range n {
		f := seqFrame(uint32(i), 200)
		require.NoError(t, sent.a.Send(f))
		buf := fl.TxFrame(len(f))
		require.NotNil(t, buf)
		copy(buf, f)
		require.NoError(t, fl.SendOwned(buf[:len(f)]))
	}
	seqs := func(b *faultBench) []uint32 {
		var s []uint32
		for _, a := range b.got {
			s = append(s, a.seq)
		}
		return s
	}
	require.Equal(t, seqs(sent), seqs(lent), "the same frames lost")
	st := lent.a.Stats()
	require.Equal(t, sent.a.Stats(), st)
	require.EqualValues(t, n, st.Frames)
	require.EqualValues(t, n, st.Lost+st.Delivered)
	require.InDelta(t, 0.3*n, float64(st.Lost), 0.05*n)
}

// Any fault that keeps or changes a frame, or an inner link that does not
// lend, and the fault link does not lend: the engine sends through Send.
func TestNoLendOtherwise(t *testing.T) {
	for _, fl := range []faults.Profile{
		{Loss: 0.1, Duplicate: 0.1},
		{Corrupt: 0.1},
		{Reorder: 0.1},
		{Delay: time.Microsecond},
		{Loss: 0.1, Jitter: time.Microsecond},
		{BandwidthBps: 1e9},
	} {
		b := newFaultBench(t, 1, fl)
		require.Nil(t, b.a.Lender(), "%+v", fl)
		require.Nil(t, b.a.TxFrame(100), "%+v", fl)
		require.False(t, b.a.RecyclesFrames(), "%+v", fl)
	}
	inner := newFaultBench(t, 1, faults.Profile{Delay: time.Microsecond}) // does not lend
	outer, err := faults.New(inner.a, inner.clk, 2, faults.Profile{Loss: 0.1})
	require.NoError(t, err)
	require.Nil(t, outer.Lender())
}

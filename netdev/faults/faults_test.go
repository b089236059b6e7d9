package faults_test

import (
	"encoding/binary"
	"math/bits"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// arrival is a frame as the receiving port saw it.
type arrival struct {
	seq   uint32
	at    time.Duration // since the epoch of the test
	frame []byte
}

// faultBench is a two-port fabric under a manual clock, with faults on the
// sending side of port a.
type faultBench struct {
	clk   *clock.Manual
	start time.Time
	a     *faults.Link
	got   []arrival
}

func newFaultBench(t testing.TB, seed int64, fl faults.Profile) *faultBench {
	t.Helper()
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	pa, pb := fab.NewPort(frametest.MACA, 9000), fab.NewPort(frametest.MACB, 9000)
	fb := &faultBench{clk: clk, start: clk.Now()}
	pb.SetHandler(func(f []byte) {
		var seq uint32
		if len(f) >= netdev.EthernetHeaderLen+4 {
			seq = binary.BigEndian.Uint32(f[netdev.EthernetHeaderLen:])
		}
		fb.got = append(fb.got, arrival{seq: seq, at: clk.Now().Sub(fb.start), frame: f})
	})
	fl2, err := faults.New(pa, clk, seed, fl)
	require.NoError(t, err)
	fb.a = fl2
	return fb
}

// frame returns a frame a->b of n bytes (n >= 18) carrying seq.
func seqFrame(seq uint32, n int) []byte {
	f := frametest.RawFrame(frametest.MACA, frametest.MACB, 0, n-netdev.EthernetHeaderLen)
	binary.BigEndian.PutUint32(f[netdev.EthernetHeaderLen:], seq)
	for i := netdev.EthernetHeaderLen + 4; i < n; i++ {
		f[i] = byte(seq) ^ byte(i)
	}
	return f
}

func (fb *faultBench) send(t testing.TB, seqs ...uint32) {
	t.Helper()
	f := seqFrame(0, 100)
	for _, s := range seqs {
		binary.BigEndian.PutUint32(f[netdev.EthernetHeaderLen:], s)
		if err := fb.a.Send(f); err != nil {
			t.Fatalf("send %d: %v", s, err)
		}
	}
}

func (fb *faultBench) drain() {
	for fb.clk.AdvanceToNext() {
	}
}

func (fb *faultBench) seqs() []uint32 {
	var out []uint32
	for _, a := range fb.got {
		out = append(out, a.seq)
	}
	return out
}

func seqRange(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

func TestFaultsValidate(t *testing.T) {
	tests := []struct {
		name string
		fl   faults.Profile
		ok   bool
	}{
		{"zero", faults.Profile{}, true},
		{"all", faults.Profile{Loss: 1, Duplicate: 0.5, Reorder: 0.1, Corrupt: 0, Delay: time.Millisecond, Jitter: time.Millisecond, BandwidthBps: 1e9}, true},
		{"loss above 1", faults.Profile{Loss: 1.01}, false},
		{"negative duplicate", faults.Profile{Duplicate: -0.1}, false},
		{"nan reorder", faults.Profile{Reorder: nan()}, false},
		{"corrupt 2", faults.Profile{Corrupt: 2}, false},
		{"negative delay", faults.Profile{Delay: -1}, false},
		{"negative jitter", faults.Profile{Jitter: -1}, false},
		{"negative bandwidth", faults.Profile{BandwidthBps: -1}, false},
		{"nan bandwidth", faults.Profile{BandwidthBps: nan()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fab := fabric.New(nil, 1)
			_, err := faults.New(fab.NewPort(frametest.MACA, 1500), nil, 1, tt.fl)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, faults.ErrInvalid)
			require.Panics(t, func() { faults.Wrap(fab.NewPort(frametest.MACB, 1500), nil, 1, tt.fl) })
			_, _, err = fab.NewFaultyPort(frametest.MACC, 1500, tt.fl)
			require.ErrorIs(t, err, faults.ErrInvalid)
		})
	}
}

func nan() float64 { var z float64; return z / z }

func TestFaultsNoneIsTransparent(t *testing.T) {
	fb := newFaultBench(t, 1, faults.Profile{})
	fb.send(t, seqRange(100)...)
	require.Equal(t, seqRange(100), fb.seqs(), "delivered synchronously, in order")
	require.Zero(t, fb.clk.Pending())
	require.Equal(t, faults.Stats{Frames: 100, Delivered: 100}, fb.a.Stats())
	if !frametest.RaceEnabled {
		f := seqFrame(1, 100)
		fb.got = fb.got[:0:0]
		require.Less(t, testing.AllocsPerRun(100, func() { _ = fb.a.Send(f) }), 1.5,
			"only the recorder's append may allocate")
	}
}

func TestFaultsReproducible(t *testing.T) {
	fl := faults.Profile{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1,
		Delay: time.Millisecond, Jitter: 500 * time.Microsecond, BandwidthBps: 1e8}
	run := func(seed int64) []arrival {
		fb := newFaultBench(t, seed, fl)
		for i := range 2000 {
			fb.send(t, uint32(i))
			if i%7 == 0 {
				fb.clk.Advance(37 * time.Microsecond)
			}
		}
		fb.drain()
		return fb.got
	}
	a, b, c := run(42), run(42), run(43)
	require.Equal(t, a, b, "same seed, same delivered sequence")
	require.NotEqual(t, a, c, "another seed, another sequence")
	// Everything not lost arrived; some arrived out of order.
	outOfOrder := 0
	for i := 1; i < len(a); i++ {
		if a[i].seq < a[i-1].seq {
			outOfOrder++
		}
	}
	require.Positive(t, outOfOrder)
}

func TestFaultsLossRate(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.2, 0.5, 1} {
		fb := newFaultBench(t, 7, faults.Profile{Loss: loss})
		const n = 10000
		fb.send(t, seqRange(n)...)
		st := fb.a.Stats()
		require.EqualValues(t, n, st.Frames)
		require.EqualValues(t, n-len(fb.got), st.Lost)
		rate := float64(st.Lost) / n
		require.InDelta(t, loss, rate, 0.02, "loss %v", loss)
		// What was not lost arrives in order.
		for i := 1; i < len(fb.got); i++ {
			if fb.got[i-1].seq >= fb.got[i].seq {
				t.Fatalf("loss %v: frame %d after %d", loss, fb.got[i].seq, fb.got[i-1].seq)
			}
		}
	}
}

func TestFaultsDuplicate(t *testing.T) {
	fb := newFaultBench(t, 3, faults.Profile{Duplicate: 1})
	fb.send(t, 1, 2, 3)
	require.Equal(t, []uint32{1, 1, 2, 2, 3, 3}, fb.seqs())
	require.Equal(t, fb.got[0].frame, fb.got[1].frame)
	require.EqualValues(t, 3, fb.a.Stats().Duplicated)

	fb = newFaultBench(t, 3, faults.Profile{Duplicate: 0.25})
	fb.send(t, seqRange(10000)...)
	require.InDelta(t, 12500, len(fb.got), 300)
	require.EqualValues(t, len(fb.got)-10000, fb.a.Stats().Duplicated)
}

func TestFaultsReorder(t *testing.T) {
	fb := newFaultBench(t, 3, faults.Profile{Reorder: 1, ReorderHold: 5 * time.Millisecond})
	fb.send(t, 1, 2, 3, 4, 5)
	require.Equal(t, []uint32{2, 1, 4, 3}, fb.seqs(), "each held frame follows the next one")
	require.Equal(t, 1, fb.clk.Pending(), "frame 5 waits for a successor")
	fb.clk.Advance(5*time.Millisecond - 1)
	require.Len(t, fb.got, 4)
	fb.clk.Advance(1)
	require.Equal(t, []uint32{2, 1, 4, 3, 5}, fb.seqs(), "released when the hold expires")
	require.Equal(t, 5*time.Millisecond, fb.got[4].at)
	require.EqualValues(t, 3, fb.a.Stats().Reordered)
	require.Zero(t, fb.clk.Pending())

	// The held copy is ours: the caller may reuse its buffer.
	fb = newFaultBench(t, 3, faults.Profile{Reorder: 1})
	f := seqFrame(7, 100)
	require.NoError(t, fb.a.Send(f))
	binary.BigEndian.PutUint32(f[netdev.EthernetHeaderLen:], 8)
	require.NoError(t, fb.a.Send(f))
	require.Equal(t, []uint32{8, 7}, fb.seqs())
	require.Equal(t, seqFrame(7, 100)[18:], fb.got[1].frame[18:])
}

func TestFaultsCorrupt(t *testing.T) {
	fb := newFaultBench(t, 11, faults.Profile{Corrupt: 1})
	const n = 500
	orig := make([][]byte, n)
	for i := range n {
		orig[i] = seqFrame(uint32(i), 64+i)
		keep := append([]byte(nil), orig[i]...)
		require.NoError(t, fb.a.Send(orig[i]))
		require.Equal(t, keep, orig[i], "the caller's frame is not modified")
	}
	require.Len(t, fb.got, n)
	positions := map[int]bool{}
	for i, a := range fb.got {
		require.Len(t, a.frame, len(orig[i]))
		flipped := 0
		for j := range a.frame {
			if d := a.frame[j] ^ orig[i][j]; d != 0 {
				flipped += bits.OnesCount8(d)
				positions[j*8+bits.TrailingZeros8(d)] = true
			}
		}
		require.Equal(t, 1, flipped, "frame %d", i)
	}
	require.Greater(t, len(positions), n/2, "bits are spread over the frame")
	require.EqualValues(t, n, fb.a.Stats().Corrupted)
}

func TestFaultsDelay(t *testing.T) {
	fb := newFaultBench(t, 5, faults.Profile{Delay: 10 * time.Millisecond})
	fb.send(t, 1)
	fb.clk.Advance(3 * time.Millisecond)
	fb.send(t, 2)
	fb.clk.Advance(10*time.Millisecond - 3*time.Millisecond - 1)
	require.Empty(t, fb.got)
	fb.clk.Advance(1)
	require.Equal(t, []uint32{1}, fb.seqs())
	fb.drain()
	require.Equal(t, []uint32{1, 2}, fb.seqs())
	require.Equal(t, 10*time.Millisecond, fb.got[0].at)
	require.Equal(t, 13*time.Millisecond, fb.got[1].at)
	require.EqualValues(t, 2, fb.a.Stats().Delayed)

	// Same instant: sent order is kept (timers fire in creation order).
	fb = newFaultBench(t, 5, faults.Profile{Delay: time.Millisecond})
	fb.send(t, seqRange(50)...)
	fb.drain()
	require.Equal(t, seqRange(50), fb.seqs())
}

func TestFaultsJitter(t *testing.T) {
	const d, j = 2 * time.Millisecond, 500 * time.Microsecond
	// Frames sent far apart: each one's delay spans [d-j, d+j].
	const step = 2*d + 2*j
	fb := newFaultBench(t, 9, faults.Profile{Delay: d, Jitter: j})
	for i := range 1000 {
		fb.send(t, uint32(i))
		fb.clk.Advance(step)
	}
	fb.drain()
	require.Len(t, fb.got, 1000)
	var lo, hi time.Duration = time.Hour, 0
	for i, a := range fb.got {
		delay := a.at - time.Duration(i)*step
		if delay < d-j || delay > d+j {
			t.Fatalf("frame %d delayed %v, outside [%v, %v]", a.seq, delay, d-j, d+j)
		}
		lo, hi = min(lo, delay), max(hi, delay)
	}
	require.Less(t, lo, d-j+50*time.Microsecond)
	require.Greater(t, hi, d+j-50*time.Microsecond)

	// Frames sent back to back: jitter delays but never reorders.
	fb = newFaultBench(t, 9, faults.Profile{Delay: d, Jitter: j})
	fb.send(t, seqRange(1000)...)
	fb.drain()
	require.Equal(t, seqRange(1000), fb.seqs())
	for _, a := range fb.got {
		require.LessOrEqual(t, a.at, d+j)
	}

	// Jitter wider than the delay clamps at zero: some frames go at once.
	fb = newFaultBench(t, 9, faults.Profile{Delay: 100 * time.Microsecond, Jitter: time.Millisecond})
	fb.send(t, seqRange(100)...)
	immediate := len(fb.got)
	require.Positive(t, immediate)
	fb.drain()
	require.Len(t, fb.got, 100)
}

func TestFaultsBandwidth(t *testing.T) {
	// 1000-byte frames at 8 Mbit/s take 1 ms each.
	fb := newFaultBench(t, 5, faults.Profile{BandwidthBps: 8e6, Delay: 100 * time.Microsecond})
	for i := range 3 {
		require.NoError(t, fb.a.Send(seqFrame(uint32(i), 1000)))
	}
	fb.drain()
	require.Equal(t, []uint32{0, 1, 2}, fb.seqs())
	ms := time.Millisecond
	require.Equal(t, []time.Duration{ms + 100*time.Microsecond, 2*ms + 100*time.Microsecond, 3*ms + 100*time.Microsecond},
		[]time.Duration{fb.got[0].at, fb.got[1].at, fb.got[2].at})

	// After the link went idle a frame starts at once; a frame sent during
	// another's transmission waits for it.
	fb.clk.Advance(10 * ms) // now 13.1 ms
	require.NoError(t, fb.a.Send(seqFrame(3, 500)))
	fb.clk.Advance(ms / 4)
	require.NoError(t, fb.a.Send(seqFrame(4, 500)))
	fb.drain()
	require.Equal(t, 13*ms+100*time.Microsecond+ms/2+100*time.Microsecond, fb.got[3].at)
	require.Equal(t, 13*ms+100*time.Microsecond+ms+100*time.Microsecond, fb.got[4].at)
}

func TestFaultsClose(t *testing.T) {
	fb := newFaultBench(t, 5, faults.Profile{Delay: time.Millisecond})
	fb.send(t, 1)
	require.NoError(t, fb.a.Close())
	require.NoError(t, fb.a.Close())
	fb.drain()
	require.Empty(t, fb.got, "a pending frame vanishes")
	require.ErrorIs(t, fb.a.Send(seqFrame(2, 100)), netdev.ErrClosed)

	fb = newFaultBench(t, 5, faults.Profile{Reorder: 1})
	fb.send(t, 1)
	require.NoError(t, fb.a.Close())
	fb.drain()
	require.Empty(t, fb.got, "a held frame vanishes")
}

func TestFaultyPort(t *testing.T) {
	clk := clock.NewManual()
	run := func() []uint32 {
		fab := fabric.New(clk, 99)
		_, fa, err := fab.NewFaultyPort(frametest.MACA, 1500, faults.Profile{Loss: 0.5})
		require.NoError(t, err)
		pb := fab.NewPort(frametest.MACB, 1500)
		var got []uint32
		pb.SetHandler(func(f []byte) { got = append(got, binary.BigEndian.Uint32(f[netdev.EthernetHeaderLen:])) })
		for i := range 100 {
			require.NoError(t, fa.Send(seqFrame(uint32(i), 100)))
		}
		return got
	}
	a := run()
	require.Equal(t, a, run(), "the fabric seed fixes the port's faults")
	require.InDelta(t, 50, len(a), 20)
}

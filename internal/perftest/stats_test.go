package perftest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// posts turns deltas into post times from a non-zero start, as a cycle
// counter would be.
func posts(deltas ...Cycles) []Cycles {
	t := []Cycles{1_000_000}
	for _, d := range deltas {
		t = append(t, t[len(t)-1]+d)
	}
	return t
}

func TestLatency(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tp     []Cycles
		rtt    int
		want   LatResult
		stdevD float64
	}{
		{
			// 6 round trips; the 2 largest (17 and 100 us) dropped; an even
			// count of 4: the median is the mean of the middle two in whole
			// cycles; every difference from the mean truncates to 0.
			name: "even count, truncated stdev",
			tp:   posts(10000, 11000, 12000, 10000, 17000, 100000),
			rtt:  2,
			want: LatResult{Min: 5, Max: 8.5, Typical: 5.25, Avg: 5.375, Stdev: 0, P99: 8.5, P999: 8.5},
		},
		{
			// READ: no halving. 5 samples, 3 kept (1, 3, 5): median 3,
			// stdev sqrt(8/3); t_max is the 4th smallest of the 5.
			name: "odd count",
			tp:   posts(9000, 1000, 5000, 8000, 3000),
			rtt:  1,
			want: LatResult{Min: 1, Max: 8, Typical: 3, Avg: 3, Stdev: 1.632993161855452, P99: 8, P999: 8},
		},
		{
			// The shape of the golden send_lat: 19 samples, 17 kept; t_max,
			// 99% and 99.9% all land on index 17, the second largest.
			name: "twenty iterations",
			tp:   posts(1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000, 17000, 18000, 19000),
			rtt:  1,
			want: LatResult{Min: 1, Max: 18, Typical: 9, Avg: 9, Stdev: 4.898979485566356, P99: 18, P999: 18},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Latency(tc.tp, CyclesPerUsec, tc.rtt)
			require.NoError(t, err)
			require.InDeltaMapValues(t,
				map[string]float64{"min": tc.want.Min, "max": tc.want.Max, "typ": tc.want.Typical, "avg": tc.want.Avg, "stdev": tc.want.Stdev, "p99": tc.want.P99, "p999": tc.want.P999},
				map[string]float64{"min": got.Min, "max": got.Max, "typ": got.Typical, "avg": got.Avg, "stdev": got.Stdev, "p99": got.P99, "p999": got.P999},
				1e-9)
		})
	}
	_, err := Latency(posts(1, 2), CyclesPerUsec, 2)
	require.ErrorIs(t, err, ErrTooFewSamples)
}

func TestBandwidth(t *testing.T) {
	// 4 WRs of 1000 bytes, CQ moderation 2: completions recorded at
	// entries 1 and 3 only.
	run := BWRun{
		TPosted:    []Cycles{1000, 1010, 1020, 1030},
		TCompleted: []Cycles{0, 1100, 0, 1200},
		Size:       1000, Iters: 4, QPs: 1, CQMod: 2, PostList: 1, CyclesPerSec: CyclesPerSec,
	}
	got := Bandwidth(run)
	// Best window: 50 cycles a message (posts 0..3 over 200 cycles, or
	// 0..1 over 100); the average: 4 messages in 200 ns.
	require.InDelta(t, 1e12/(50*1048576.0), got.Peak, 1e-9)
	require.InDelta(t, 4e12/(200*1048576.0), got.Avg, 1e-9)
	require.InDelta(t, 20.0, got.MsgRate, 1e-12)
	require.Equal(t, uint64(4), got.Iters)

	run.Gbits = true
	got = Bandwidth(run)
	require.InDelta(t, 1e12/(50*125e6), got.Peak, 1e-9)
	require.InDelta(t, 4e12/(200*125e6), got.Avg, 1e-9)

	// NoPeak (the send_bw server): peak 0, the time is TCompleted[0] -
	// TPosted[0].
	got = Bandwidth(BWRun{TPosted: []Cycles{1000}, TCompleted: []Cycles{3000}, Size: 4096, Iters: 20, QPs: 1,
		CQMod: 1, NoPeak: true, CyclesPerSec: CyclesPerSec})
	require.Zero(t, got.Peak)
	require.InDelta(t, 4096*20*1e9/(2000*1048576.0), got.Avg, 1e-6)

	// An iteration count that is not a multiple of the moderation: the
	// last WR is signalled too and counts as a window end.
	got = Bandwidth(BWRun{TPosted: []Cycles{1000, 1001, 1002}, TCompleted: []Cycles{0, 1100, 1103}, Size: 100, Iters: 3, QPs: 1,
		CQMod: 2, CyclesPerSec: CyclesPerSec})
	require.InDelta(t, 100e9/(34*1048576.0), got.Peak, 1e-9) // (1103-1000)/3 = 34

	require.Equal(t, BWReport{Peak: 3, Avg: 5, MsgRate: 7}, BWReport{Peak: 1, Avg: 2, MsgRate: 3}.Sum(BWReport{Peak: 2, Avg: 3, MsgRate: 4}))
}

func TestLatencyTimed(t *testing.T) {
	r := LatencyTimed(1000, 1000+2_000_000, 1000, CyclesPerUsec, 2)
	require.InDelta(t, 1.0, r.Avg, 1e-12) // 2 ms / 1000 round trips / 2
	require.InDelta(t, 500000.0, r.TPS, 1e-6)
}

package perftest

import (
	"errors"
	"math"
	"slices"
)

// Time stamps are "cycles" as perftest keeps them (get_cycles): unsigned
// counts of a clock. softverbs counts nanoseconds, so a microsecond is
// 1000 cycles (perftest's get_cpu_mhz) and a second 1e9.
const (
	CyclesPerUsec = 1000
	CyclesPerSec  = 1e9
)

// Cycles is a time stamp in cycles.
type Cycles = uint64

// latTail is LAT_MEASURE_TAIL: the largest samples a latency report drops.
const latTail = 2

// LatResult is one latency row, in microseconds.
type LatResult struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// ErrTooFewSamples is returned for a latency run too short to report.
var ErrTooFewSamples = errors.New("too few iterations for a latency report")

// Latency computes a latency row from the post times of one run as
// print_report_lat does:
//
//   - the samples are the differences of consecutive post times (so
//     iters-1 of them), divided by cyclesPerUsec times rttFactor (2 for the
//     ping-pong tests, where each sample is a round trip; 1 for READ and
//     atomics, which measure the round trip);
//   - they are sorted, and the latTail largest are dropped;
//   - t_typical is the median of the rest (the mean of the middle two,
//     in whole cycles, for an even count);
//   - t_avg is their mean; t_stdev is the root of the mean squared
//     difference from t_avg, with each difference truncated to a whole
//     microsecond first, as perftest stores it in an int;
//   - t_min is the smallest sample; t_max, 99% and 99.9% are the samples at
//     index n, ceil(0.99 n) and ceil(0.999 n) of the sorted array (n the
//     count kept), so t_max is the largest sample kept after the dropped
//     ones, counted from the full array: the (latTail)-th largest.
func Latency(tposted []Cycles, cyclesPerUsec float64, rttFactor int) (LatResult, error) {
	n := len(tposted) - 1
	if n-latTail < 1 {
		return LatResult{}, ErrTooFewSamples
	}
	delta := make([]Cycles, n)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	return latencyFromDeltas(delta, cyclesPerUsec, rttFactor), nil
}

func latencyFromDeltas(delta []Cycles, cyclesPerUsec float64, rttFactor int) LatResult {
	slices.Sort(delta)
	q := cyclesPerUsec * float64(rttFactor)
	m := len(delta) - latTail
	var median Cycles
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	sum := 0.0
	for _, d := range delta[:m] {
		sum += float64(d) / q
	}
	avg := sum / float64(m)
	varSum := 0.0
	for _, d := range delta[:m] {
		diff := int64(avg - float64(d)/q) // C's int conversion truncates
		varSum += float64(diff * diff)
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	return LatResult{
		Min:     float64(delta[0]) / q,
		Max:     float64(delta[m]) / q,
		Typical: float64(median) / q,
		Avg:     avg,
		Stdev:   math.Sqrt(varSum / float64(m)),
		P99:     float64(delta[i99]) / q,
		P999:    float64(delta[i999]) / q,
	}
}

// LatDurResult is a latency row of a timed run (-D): iterations, average
// latency and transactions per second.
type LatDurResult struct {
	Iters uint64
	Avg   float64 // usec
	TPS   float64
}

// BWRun is what a bandwidth run recorded.
type BWRun struct {
	// TPosted[i] is when WR i was posted; TCompleted[j] is when the
	// completion covering WR j was polled. perftest sets only the last
	// entry of each CQ-moderation group (the others stay 0); with NoPeak
	// only TCompleted[0], the end of the run, and TPosted[0] count.
	TPosted, TCompleted []Cycles
	Size                uint64
	Iters               uint64 // per QP (or, timed, the total)
	QPs                 int
	CQMod, PostList     int
	NoPeak              bool
	Timed               bool // -D: Iters is the total count already
	Gbits               bool // report Gb/s (10^9 bits) rather than MB/s (2^20 bytes)
	CyclesPerSec        float64
}

// Bandwidth computes a bandwidth report as print_report_bw does:
//
//   - the average is size * count / (TCompleted[last] - TPosted[0]), and
//     the message rate count / time / 10^6;
//   - the peak is size / the smallest time per message over every window
//     from a post i to a moderated completion j at or after it, (TCompleted[j]
//   - TPosted[i]) / (j-i+1) in whole cycles, and over the whole run;
//     with NoPeak it is 0.
//   - MB/s are 2^20 bytes per second; Gb/s 1.25e8 bytes per second.
func Bandwidth(r BWRun) BWReport {
	total := r.Iters
	if !r.Timed {
		total *= uint64(max(r.QPs, 1))
	}
	if total == 0 || len(r.TPosted) == 0 || len(r.TCompleted) == 0 {
		return BWReport{Size: r.Size, Iters: total}
	}
	cqMod := uint64(max(r.CQMod, 1))
	postList := uint64(max(r.PostList, 1))
	optDelta := r.TCompleted[0] - r.TPosted[0]
	if !r.NoPeak && uint64(len(r.TPosted)) >= total && uint64(len(r.TCompleted)) >= total {
		for i := uint64(0); i < total; i += postList {
			for j := roundUp(i+1, cqMod) - 1; j < total; j += cqMod {
				if t := (r.TCompleted[j] - r.TPosted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			if total%cqMod != 0 {
				j := total - 1
				if t := (r.TCompleted[j] - r.TPosted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	format := float64(0x100000)
	if r.Gbits {
		format = 125000000
	}
	last := total - 1
	if r.NoPeak {
		last = 0
	}
	if last >= uint64(len(r.TCompleted)) {
		last = uint64(len(r.TCompleted)) - 1
	}
	sum := float64(r.TCompleted[last] - r.TPosted[0])
	rep := BWReport{Size: r.Size, Iters: total}
	if sum > 0 {
		rep.Avg = float64(r.Size) * float64(total) * r.CyclesPerSec / (sum * format)
		rep.MsgRate = float64(total) * r.CyclesPerSec / (sum * 1e6)
	}
	if !r.NoPeak {
		up := r.Size * uint64(r.CyclesPerSec)
		down := optDelta * uint64(format)
		if down > 0 {
			rep.Peak = float64(up) / float64(down)
		}
	}
	return rep
}

// roundUp is ROUND_UP: v rounded up to a multiple of a.
func roundUp(v, a uint64) uint64 {
	if v%a == 0 {
		return v
	}
	return a * (v/a + 1)
}

// Sum adds a peer's report to ours, as a bidirectional run reports both.
func (r BWReport) Sum(o BWReport) BWReport {
	r.Peak += o.Peak
	r.Avg += o.Avg
	r.MsgRate += o.MsgRate
	return r
}

// LatencyTimed computes a timed latency row (-D) as
// print_report_lat_duration does: the sample time over the iterations,
// per round trip.
func LatencyTimed(start, end Cycles, iters uint64, cyclesPerUsec float64, rttFactor int) LatDurResult {
	r := LatDurResult{Iters: iters}
	t := float64(end - start)
	if iters == 0 || t <= 0 {
		return r
	}
	r.Avg = t / cyclesPerUsec / float64(rttFactor) / float64(iters)
	r.TPS = float64(iters) / (t / (cyclesPerUsec * 1e6))
	return r
}

package vethperf

// CPU time beside the wall-clock figures of `rvt perf` (issue 19): the
// machine is shared, so a ratio of wall-clock times is read beside what
// each side spent. Both ends of every measurement run in this process,
// so the process's user+system time over a run is the cost of both, the
// kernel's work in their system calls (veth transmit and receive run in
// the sender's sendto/sendmmsg) included; softirq work done on behalf of
// no process is not.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
)

// cpuSince is the CPU time spent since start (a traffic.ProcessCPU value).
func cpuSince(start time.Duration) time.Duration { return traffic.ProcessCPU() - start }

// baselines are the kernel UDP measurements of one path MTU.
type baselines struct {
	stream, mmsg       traffic.Result  // one datagram per write(); sendmmsg/recvmmsg batches
	lat, busy          traffic.Latency // ping-pong, blocking and spinning
	streamCPU, mmsgCPU time.Duration
	latCPU, busyCPU    time.Duration
}

// perByte is cpu per size bytes of r's goodput, in µs.
func perBytes(cpu time.Duration, r traffic.Result, size int) float64 {
	if r.Bytes == 0 {
		return 0
	}
	return cpu.Seconds() * 1e6 / float64(r.Bytes) * float64(size)
}

// perRTT is cpu per round trip of l, in µs (warm-up round trips are not
// counted, so it reads a little high).
func perRTT(cpu time.Duration, l traffic.Latency) float64 {
	if len(l.RTTs) == 0 {
		return 0
	}
	return cpu.Seconds() * 1e6 / float64(len(l.RTTs))
}

// CPURow is the line under a link's rows: its goodput against the
// batched UDP baseline, and CPU time per MTU-sized packet of goodput and
// per round trip, for the link and for the kernel baselines.
func CPURow(kind string, m MTU, res perfLinkResult, b baselines) string {
	g3 := func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	xm := 0.0
	if b.mmsg.GBps() > 0 {
		xm = res.write.GBps() / b.mmsg.GBps()
	}
	s := fmt.Sprintf("  cpu %s %d: WRITE %s x UDP sendmmsg/recvmmsg (%s GB/s); CPU µs per %d B: WRITE %s, UDP write() %s, UDP sendmmsg %s;"+
		" CPU µs per round trip: SEND %s, UDP %s",
		kind, m.Size, g3(xm), strconv.FormatFloat(b.mmsg.GBps(), 'f', 3, 64), m.Size,
		f2(perBytes(res.writeCPU, res.write, m.Size)), f2(perBytes(b.streamCPU, b.stream, m.Size)), f2(perBytes(b.mmsgCPU, b.mmsg, m.Size)),
		f2(perRTT(res.latCPU, res.lat)), f2(perRTT(b.latCPU, b.lat)))
	if len(res.busy.RTTs) > 0 {
		s += fmt.Sprintf(", busy SEND %s, busy UDP %s", f2(perRTT(res.busyCPU, res.busy)), f2(perRTT(b.busyCPU, b.busy)))
	}
	return s + "\n"
}

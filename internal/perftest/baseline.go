package perftest

// Baselines measured in the same process as a run on the in-memory pair,
// so that a table or plot shows each figure beside what the machine does
// without softverbs in the way.

import (
	"time"

	"github.com/softverbs/softverbs/clock"
)

// MemcpyBW is the bandwidth baseline of a size-byte message: Go's copy()
// from one buffer to another, back to back, for at least d on clk (and at
// least 5 copies), reported as perftest reports bandwidth (no peak). The
// buffers are fresh, so a large size measures memory, a small one cache.
func MemcpyBW(clk clock.Clock, size int, d time.Duration, gbits bool) BWReport {
	if clk == nil {
		clk = clock.Real()
	}
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	var n uint64
	start := clk.Now()
	var el time.Duration
	for batch := uint64(1); ; batch *= 2 {
		for range batch {
			copy(dst, src)
		}
		n += batch
		if el = clk.Now().Sub(start); el >= d && n >= 5 {
			break
		}
	}
	return Bandwidth(BWRun{TPosted: []Cycles{1}, TCompleted: []Cycles{1 + Cycles(el)}, Size: uint64(size), Iters: n,
		QPs: 1, Timed: true, NoPeak: true, Gbits: gbits, CyclesPerSec: CyclesPerSec})
}

// ChanPingPong is the latency baseline of a size-byte message: two
// goroutines pass a message back and forth over unbuffered Go channels,
// each copying it into its own buffer on arrival (as a receive lands in
// its buffer), iters round trips, stamped and reduced exactly as a
// ping-pong tool's (rttFactor 2: half a round trip; 1: the whole trip, as
// ib_read_lat reports).
func ChanPingPong(clk clock.Clock, size, iters, rttFactor int) (LatResult, error) {
	if clk == nil {
		clk = clock.Real()
	}
	ping, pong := make(chan []byte), make(chan []byte)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, out := make([]byte, size), make([]byte, size)
		for m := range ping {
			copy(buf, m)
			pong <- out
		}
	}()
	msg, in := make([]byte, size), make([]byte, size)
	tposted := make([]Cycles, iters)
	base := clk.Now().Add(-time.Second)
	for i := range tposted {
		tposted[i] = Cycles(clk.Now().Sub(base))
		ping <- msg
		copy(in, <-pong)
	}
	close(ping)
	<-done
	return Latency(tposted, CyclesPerUsec, rttFactor)
}

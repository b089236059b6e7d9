package traffic

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Poller waits for completions of a CQ.
type Poller interface {
	Poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error)
}

// BusyWaiter waits by spinning: it polls the CQ and, while it is empty,
// drains the device's link itself (PollLink), yielding the processor now
// and then.
type BusyWaiter struct{ Dev *rvt.Device }

// Poll returns at least one completion of c in buf, spinning until
// deadline or stop.
func (w BusyWaiter) Poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error) {
	for i := 1; ; i++ {
		if k := c.Poll(buf); k > 0 {
			return k, nil
		}
		if w.Dev.PollLink() {
			continue
		}
		if i%256 == 0 {
			// Both peers spin in this one process, on two CPUs, beside
			// the links' goroutines and timers: yield now and then.
			runtime.Gosched()
			if time.Now().After(deadline) {
				return 0, ErrTimeout
			}
			select {
			case <-stop:
				return 0, context.Canceled
			default:
			}
		}
	}
}

// CQWaiter turns a CQ's completion handler into something to wait on.
// One goroutine at a time waits on it (Poll or Wait).
type CQWaiter struct {
	ch chan struct{}
	// timer bounds a wait with a deadline: made by the first such wait
	// and left running for the deadline it was set to (armed), so that
	// the next wait with that deadline (a run's waits all have the run's)
	// neither resets nor stops it: a wait takes no timer lock. Since Go
	// 1.23 Reset leaves no stale tick in timer.C, so it needs no
	// draining, and a timer that fired with nobody waiting still ticks
	// for the next receive.
	timer *time.Timer
	armed time.Time
}

// NewCQWaiter returns a waiter whose Notify is the CQ handler to pass.
func NewCQWaiter() *CQWaiter { return &CQWaiter{ch: make(chan struct{}, 1)} }

// Notify is the CQ's completion handler: it must not block.
func (w *CQWaiter) Notify(*rvt.CQ) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Wait sleeps until the completion handler runs (or has run since the
// last wait), until deadline (the zero Time: no deadline) or until stop
// closes (nil: never). It returns ErrTimeout at the deadline, and
// context.Canceled on stop.
func (w *CQWaiter) Wait(deadline time.Time, stop <-chan struct{}) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return ErrTimeout
		}
		switch {
		case w.timer == nil:
			w.timer = time.NewTimer(left)
		case !deadline.Equal(w.armed):
			w.timer.Reset(left)
		}
		w.armed = deadline
		expired = w.timer.C
	}
	select {
	case <-w.ch:
		return nil
	case <-expired:
		return ErrTimeout
	case <-stop:
		return context.Canceled
	}
}

// Poll returns at least one completion of c in buf, event-driven like
// ibv_rc_pingpong -e: it polls, arms the CQ and sleeps until the completion
// handler wakes it, until deadline (the zero Time: none) or stop. It does not spin: a goroutine
// that spins with runtime.Gosched keeps its P from ever checking the
// netpoller, which on two CPUs delays the links' receive goroutines by
// as long as the spinning lasts.
func (w *CQWaiter) Poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error) {
	for {
		if k := c.Poll(buf); k > 0 {
			return k, nil
		}
		queued, err := c.ArmAndCheck(false)
		if err != nil {
			return 0, err
		}
		if queued {
			continue
		}
		switch err := w.Wait(deadline, stop); err {
		case nil:
		case ErrTimeout: // a completion may have come with the deadline
			if k := c.Poll(buf); k > 0 {
				return k, nil
			}
			return 0, ErrTimeout
		default:
			return 0, err
		}
	}
}

// Latency is a set of round-trip times, reported as half round trips.
type Latency struct {
	RTTs []time.Duration // sorted once the run is over (see Sorted)
}

// Sorted sorts the round trips in place and returns l. A run calls it once
// when it ends, so that each quantile is an index rather than a sort.
func (l Latency) Sorted() Latency {
	slices.Sort(l.RTTs)
	return l
}

// Quantile returns the q quantile of the round trips, which must be sorted.
func (l Latency) Quantile(q float64) time.Duration {
	if len(l.RTTs) == 0 {
		return 0
	}
	return l.RTTs[min(len(l.RTTs)-1, int(q*float64(len(l.RTTs))))]
}

// HalfMicros returns the q quantile of the half round trip, in µs.
func (l Latency) HalfMicros(q float64) float64 {
	return float64(l.Quantile(q)) / 2 / float64(time.Microsecond)
}

// Ping-pong parameters shared by softverbs and the kernel UDP baseline.
const (
	PingSize   = 8
	PingWarmup = 100
	// PingMinSamples round trips are recorded however long they take
	// (until the hard timeout): a short run on a busy machine still
	// measures something.
	PingMinSamples = 50
	PingMaxIter    = 1 << 20
	PingRecvs      = 16
)

// PingMore reports whether a ping-pong goes on to iteration it: always
// through the warm-up and the minimum samples, then until deadline or
// cancellation, and never past PingMaxIter.
func PingMore(ctx context.Context, it int, deadline time.Time) bool {
	if it >= PingMaxIter {
		return false
	}
	return it < PingWarmup+PingMinSamples || (time.Now().Before(deadline) && ctx.Err() == nil)
}

// SendPingpong bounces an 8-byte RC SEND between a and b, like
// ibv_rc_pingpong: a sends, b's receive completion triggers b's reply, and
// an iteration ends when a has both its send completion and the reply.
// Each iteration's round trip (post to reply received) is recorded, after
// PingWarmup unrecorded ones, for dur.
func SendPingpong(ctx context.Context, a, b *Endpoint, wa, wb Poller, dur time.Duration) (Latency, error) {
	var lat Latency
	// Each side's receive slots, one SGE each, made once: the QP copies
	// the SGL it is given, so reposting a slot allocates nothing.
	var slots [2][]rvt.SGE
	for i, e := range []*Endpoint{a, b} {
		mr, _, err := Buffer(e.N, PingSize*PingRecvs, 0)
		if err != nil {
			return lat, err
		}
		slots[i] = SlotSGEs(mr, PingRecvs, PingSize)
		for s := range uint64(PingRecvs) {
			if err := e.PostRecv(rvt.RecvWR{WRID: s, SGL: SlotSGL(slots[i], s)}); err != nil {
				return lat, err
			}
		}
	}
	repost := func(e *Endpoint, slots []rvt.SGE, slot uint64) error {
		return e.PostRecv(rvt.RecvWR{WRID: slot, SGL: SlotSGL(slots, slot)})
	}
	msg := make([]byte, PingSize)
	hard := time.Now().Add(dur + WaitTimeout)

	// b answers every message until stopped.
	stop := make(chan struct{})
	srvErr := make(chan error, 1)
	go func() {
		buf := make([]rvt.WC, 16)
		reply := make([]byte, PingSize)
		for {
			k, err := wb.Poll(b.CQ, buf, hard, stop)
			if err != nil {
				if err == context.Canceled {
					err = nil
				}
				srvErr <- err
				return
			}
			for _, wc := range buf[:k] {
				if wc.Status != cq.Success {
					srvErr <- fmt.Errorf("responder wr_id %d: %v", wc.WRID, wc.Status)
					return
				}
				if !wc.Opcode.IsRecv() {
					continue
				}
				if err := repost(b, slots[1], wc.WRID); err != nil {
					srvErr <- err
					return
				}
				if err := b.PostSend(rvt.SendWR{WRID: wc.WRID, Opcode: qp.OpSend,
					Flags: qp.Signaled | qp.Inline, InlineData: reply}); err != nil {
					srvErr <- err
					return
				}
			}
		}
	}()
	finish := func(err error) (Latency, error) {
		close(stop)
		if serr := <-srvErr; err == nil {
			err = serr
		}
		return lat.Sorted(), err
	}

	buf := make([]rvt.WC, 16)
	deadline := time.Now().Add(dur)
	for it := 0; PingMore(ctx, it, deadline); it++ {
		msg[0] = byte(it)
		start := time.Now()
		if err := a.PostSend(rvt.SendWR{WRID: uint64(it), Opcode: qp.OpSend,
			Flags: qp.Signaled | qp.Inline, InlineData: msg}); err != nil {
			return finish(err)
		}
		var rtt time.Duration
		for sent, got := false, false; !sent || !got; {
			k, err := wa.Poll(a.CQ, buf, hard, nil)
			if err != nil {
				return finish(fmt.Errorf("iteration %d: %w", it, err))
			}
			for _, wc := range buf[:k] {
				if wc.Status != cq.Success {
					return finish(fmt.Errorf("requester wr_id %d: %v", wc.WRID, wc.Status))
				}
				if !wc.Opcode.IsRecv() {
					sent = true
					continue
				}
				if wc.ByteLen != PingSize {
					return finish(fmt.Errorf("reply of %d bytes", wc.ByteLen))
				}
				rtt, got = time.Since(start), true
				if err := repost(a, slots[0], wc.WRID); err != nil {
					return finish(err)
				}
			}
		}
		if it >= PingWarmup {
			lat.RTTs = append(lat.RTTs, rtt)
		}
	}
	return finish(nil)
}

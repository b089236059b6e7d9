package transport

// The engine's retransmit timers: one clock timer for the whole engine,
// set for the earliest deadline of a heap of QP deadlines, in place of a
// clock timer per QP.
//
// With a clock timer per QP, each active QP's timer fired once per timeout
// period (an active QP always has something unacknowledged), ran its
// callback on a goroutine of its own, woke the QP's send task only to see
// that ACKs had come meanwhile, and allocated the next timer: with 10,000
// active QPs and the 67 ms of timeout code 14, 150,000 wake-ups a second
// for nothing, a fifth of the CPU time of 8-byte SENDs on 10,000 QPs
// (BenchmarkFabricScale). The engine's timer instead visits every QP due
// in one pass, takes each one's lock briefly, puts one that made progress
// since it was armed back on the heap, and wakes a send task only when its
// QP really timed out. The deadlines are those of the per-QP timers (a
// timer armed at t is due at t+d, exactly): only the mechanism changed.
//
// An entry is never removed early: a QP disarmed, reset or destroyed
// leaves its entry to be dropped when due (Conn.timerDue finds it stale).
// A clock timer is pending only while the heap holds entries: an idle QP
// costs no timer, and an idle engine none.

import (
	"sync"
	"time"

	"github.com/softverbs/softverbs/clock"
)

type sweeper struct {
	e     *Engine
	mu    sync.Mutex
	epoch time.Time   // deadlines are nanoseconds since epoch
	heap  []timerEnt  // min-heap by (at, seq)
	seq   uint64      // arms so far: entry identity and tie order
	cur   clock.Timer // the pending clock timer, if any
	curAt int64       // its deadline
	gen   uint64      // counts clock timers set, so a stale one knows
	due   []timerEnt  // fire's batch, reused
}

type timerEnt struct {
	at  int64
	seq uint64
	c   *Conn
}

func (a timerEnt) less(b timerEnt) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (s *sweeper) now() int64 { return int64(s.e.clk.Now().Sub(s.epoch)) }

// arm puts c on the heap, due d from now; the caller holds c's QP lock
// (which orders it before s.mu).
func (s *sweeper) arm(c *Conn, d time.Duration) {
	at := s.now() + int64(d)
	s.mu.Lock()
	s.seq++
	c.req.timerSeq = s.seq
	s.push(timerEnt{at: at, seq: s.seq, c: c})
	s.kickLocked(at)
	s.mu.Unlock()
}

// kickLocked makes sure a clock timer is set for the earliest deadline;
// now is the current time, or later (only the delay depends on it).
func (s *sweeper) kickLocked(now int64) {
	if len(s.heap) == 0 {
		return
	}
	top := s.heap[0].at
	if s.cur != nil {
		if s.curAt <= top {
			return
		}
		s.cur.Stop() // if it fired already, its fire finds itself stale
	}
	s.gen++
	gen := s.gen
	s.curAt = top
	s.cur = s.e.clk.AfterFunc(time.Duration(max(0, top-now)), func() { s.fire(gen) })
}

// fire runs on the clock's goroutine: it visits the QPs due and sets the
// clock timer for the next deadline.
func (s *sweeper) fire(gen uint64) {
	now := s.now()
	s.mu.Lock()
	if gen == s.gen {
		s.cur = nil
	}
	due := s.due[:0]
	s.due = nil // a concurrent fire makes its own
	for len(s.heap) > 0 && s.heap[0].at <= now {
		due = append(due, s.pop())
	}
	s.mu.Unlock()
	for _, t := range due {
		t.c.timerDue(t.seq)
	}
	clear(due)
	s.mu.Lock()
	if s.due == nil {
		s.due = due[:0]
	}
	s.kickLocked(now)
	s.mu.Unlock()
}

func (s *sweeper) push(t timerEnt) {
	h := append(s.heap, t)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *sweeper) pop() timerEnt {
	h := s.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = timerEnt{}
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return top
}

// timerDue handles c's retransmit timer (the arm numbered seq) running
// out, as the first part of onTimeoutLocked would, without waking the send
// task unless the QP timed out.
func (c *Conn) timerDue(seq uint64) {
	if c.stopped.Load() {
		return
	}
	c.qp.Lock()
	r := &c.req
	if !r.timerOn || r.timerSeq != seq {
		c.qp.Unlock() // stale: disarmed, reset or armed again since
		return
	}
	r.timerSeq = 0
	wake := false
	switch {
	case c.comp.psn == r.maxPSN:
		r.timerOn = false // nothing outstanding
	case r.rnrWait || r.progressed:
		r.timerOn = false
		c.armTimerLocked()
	default:
		wake = true // onTimeoutLocked decides, in the send task
	}
	c.qp.Unlock()
	if wake {
		c.onTimer()
	}
}

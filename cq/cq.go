// Package cq implements completion queues, in the manner of rdmavt's rvt_cq:
// a fixed ring of work completions filled by transport workers and drained by
// a poller, with one-shot arming (next or solicited), an overflow event and
// ibv_comp_channel-like completion channels.
//
// Lock order: CQ.mu is the only lock in a CQ. A Channel is a buffered Go
// channel; a CQ sends to it without blocking while holding CQ.mu, and
// Channel.Get takes CQ.mu only after it has received. User handlers are never
// called with CQ.mu held, so a handler may call Poll, Arm or Push.
package cq

import (
	"errors"
	"fmt"
	"sync"

	"github.com/softverbs/softverbs/internal/verr"
)

// MaxDepth is the largest depth New and Resize accept.
const MaxDepth = 1 << 20

// Errors returned by this package, wrapped with context.
var (
	// ErrInvalidArgument: a depth out of range, or a resize below the
	// number of queued completions.
	ErrInvalidArgument = verr.ErrInvalidArgument
	// ErrBusy: Destroy of a CQ that QPs still reference or whose channel
	// events have not all been acknowledged.
	ErrBusy = verr.ErrBusy
	// ErrDestroyed: the CQ has been destroyed.
	ErrDestroyed = errors.New("cq destroyed")
	// ErrOverflow: the CQ overflowed and is in the error state.
	ErrOverflow = errors.New("cq overflow")
)

// arm is the notification request of a CQ (rdmavt's cq->notify).
type arm uint8

const (
	armNone      arm = iota
	armSolicited     // IB_CQ_SOLICITED
	armNext          // IB_CQ_NEXT_COMP
)

// CQ is a completion queue. Its methods are safe for concurrent use: any
// number of producers may Push while a consumer Polls.
type CQ struct {
	mu sync.Mutex
	// Guarded by mu.
	buf        []WC // ring of exactly Depth entries
	head       int  // index of the oldest entry
	count      int  // entries queued
	notify     arm
	overflowed bool
	destroyed  bool
	onComp     func(*CQ)
	onError    func(*CQ)
	refs       int
	ch         *Channel
	pending    bool   // an event for this CQ sits in ch, not yet taken by Get
	events     uint64 // events handed out by ch.Get
	acked      uint64 // events acknowledged by AckEvents

	src Source // an external CQ's completions (NewExternal); nil: the ring above

	owner any // what made the CQ (SetOwner), for its checks
}

// New returns an empty CQ holding up to depth completions,
// 1 <= depth <= MaxDepth. It returns ErrInvalidArgument otherwise.
func New(depth int) (*CQ, error) {
	if depth < 1 || depth > MaxDepth {
		return nil, fmt.Errorf("create cq: depth %d not in [1, %d]: %w", depth, MaxDepth, ErrInvalidArgument)
	}
	return &CQ{buf: make([]WC, depth)}, nil
}

// SetOwner records what made c (rvt: its device), before c is used.
func (c *CQ) SetOwner(o any) { c.owner = o }

// Owner returns what SetOwner recorded (nil if nothing): a device refuses
// a QP over another device's CQ.
func (c *CQ) Owner() any { return c.owner }

// SetHandlers sets the completion handler, called when a pushed completion
// meets the arm condition (then the arm is cleared), and the error handler,
// called once when the CQ overflows (rdmavt raises IB_EVENT_CQ_ERR). Either
// may be nil. Handlers run on the producer's goroutine without the CQ lock
// held; they should be short.
func (c *CQ) SetHandlers(onComp func(*CQ), onError func(*CQ)) {
	c.mu.Lock()
	c.onComp, c.onError = onComp, onError
	c.mu.Unlock()
}

// Attach makes ch the completion channel of c: each time the completion
// handler condition is met, c is also delivered to ch. Attach(nil) detaches.
// A CQ has at most one channel; attaching another replaces it.
func (c *CQ) Attach(ch *Channel) {
	c.mu.Lock()
	if c.ch != ch {
		c.ch = ch
		c.pending = false
	}
	c.mu.Unlock()
}

// Push copies *wc into the queue. It does not allocate. It returns false, and
// the completion is lost, when the CQ is destroyed or in the error state, or
// when the queue is full: then the CQ enters the error state and the error
// handler is called, once for the life of the CQ.
//
// If the CQ is armed and wc meets the condition (any completion when armed
// for the next one; wc.Solicited or a status other than Success when armed
// for solicited ones, as IBTA requires), the arm is cleared, the CQ is
// delivered to its channel and the completion handler is called.
func (c *CQ) Push(wc *WC) bool {
	one := [1]WC{*wc} // stays on the stack: PushBatch keeps no reference
	return c.PushBatch(one[:]) == 1
}

// PushBatch is Push for each of wcs in order under one lock, as a device
// writes several CQEs before it raises one interrupt: the completion
// handler is called at most once, after all of them are queued. It returns
// how many were queued; the rest are lost, as with Push.
func (c *CQ) PushBatch(wcs []WC) int {
	n, due := c.PushBatchDeferred(wcs)
	due.Call(c)
	return n
}

// Due holds the handlers a push made due (PushBatchDeferred), and
// whether it lost completions (the CQ overflowed, or had).
type Due struct {
	comp, fail func(*CQ)
	lost       bool
}

// Any reports whether a handler is due or completions were lost.
func (d Due) Any() bool { return d.comp != nil || d.fail != nil || d.lost }

// Lost reports whether the push lost completions: the producer's QP must
// go to ERR (IBTA class G; rxe's responder and rdmavt do so).
func (d Due) Lost() bool { return d.lost }

// Call calls the due handlers for c: the completion handler, then the
// error handler.
func (d Due) Call(c *CQ) {
	if d.comp != nil {
		d.comp(c)
	}
	if d.fail != nil {
		d.fail(c)
	}
}

// PushBatchDeferred is PushBatch that returns the handlers it made due
// instead of calling them, for a producer that must get ready first (the
// transport hands work that a handler might wait for to other goroutines)
// or that pushes to several CQs before it calls any handler.
func (c *CQ) PushBatchDeferred(wcs []WC) (n int, due Due) {
	c.mu.Lock()
	n, due = c.pushBatchLocked(wcs)
	c.mu.Unlock()
	return n, due
}

// PushPairDeferred is PushBatchDeferred of a and then of b under one
// lock: what the two calls in a row push, with nothing of another
// producer (and no Poll) between them. The handlers each part made due
// come back apart, for a producer that pushes the completions of two
// QPs to one CQ and leaves each QP's handlers to that QP (the
// transport's loopback hand-off): one lock round trip where two calls
// take two.
func (c *CQ) PushPairDeferred(a, b []WC) (dueA, dueB Due) {
	c.mu.Lock()
	_, dueA = c.pushBatchLocked(a)
	_, dueB = c.pushBatchLocked(b)
	c.mu.Unlock()
	return dueA, dueB
}

// pushBatchLocked is PushBatchDeferred's work under c.mu.
func (c *CQ) pushBatchLocked(wcs []WC) (n int, due Due) {
	for i := range wcs {
		h, f, ok := c.pushLocked(&wcs[i])
		if h != nil {
			due.comp = h
		}
		if !ok {
			due.fail, due.lost = f, true
			break
		}
		n++
	}
	return n, due
}

// pushLocked queues *wc. It returns the completion handler to call if wc
// met the arm condition, the error handler to call if it overflowed the
// CQ, and whether wc was queued.
func (c *CQ) pushLocked(wc *WC) (comp, fail func(*CQ), ok bool) {
	if c.destroyed || c.overflowed {
		return nil, nil, false
	}
	if c.count == len(c.buf) {
		c.overflowed = true
		c.notify = armNone
		return nil, c.onError, false
	}
	tail := c.head + c.count
	if tail >= len(c.buf) {
		tail -= len(c.buf)
	}
	c.buf[tail] = *wc
	c.count++
	if c.notify == armNext || (c.notify == armSolicited && (wc.Solicited || wc.Status != Success)) {
		c.notify = armNone
		comp = c.onComp
		c.deliverLocked()
	}
	return comp, nil, true
}

// deliverLocked queues c on its channel unless an event for c is already
// pending there (events coalesce) or the channel is full (the event is
// dropped and counted in Channel.Dropped).
func (c *CQ) deliverLocked() {
	if c.ch == nil || c.pending {
		return
	}
	select {
	case c.ch.events <- c:
		c.pending = true
	default:
		c.ch.dropped.Add(1)
	}
}

// Poll moves up to len(out) of the oldest completions into out and returns
// how many it moved. A destroyed CQ returns 0. A CQ in the error state can
// still be drained.
func (c *CQ) Poll(out []WC) int {
	if c.src != nil {
		return c.src.Poll(out)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return 0
	}
	n := min(len(out), c.count)
	if n == 0 {
		return 0
	}
	first := copy(out[:n], c.buf[c.head:min(c.head+n, len(c.buf))])
	copy(out[first:n], c.buf[:n-first])
	c.head += n
	if c.head >= len(c.buf) {
		c.head -= len(c.buf)
	}
	c.count -= n
	if c.count == 0 {
		// Empty: the next push goes to the ring's start, where the
		// last ones went, rather than on round a ring of up to MaxDepth
		// entries. A poller that keeps up then writes and reads the
		// same few cache lines, still in this core's cache, instead
		// of lines a whole ring ago that the producer must fetch
		// again before its stores leave (at the unlock's fence).
		c.head = 0
	}
	return n
}

// Len returns the number of completions queued.
func (c *CQ) Len() int {
	if c.src != nil {
		return c.src.Len()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// Depth returns the capacity of the ring.
func (c *CQ) Depth() int {
	if c.src != nil {
		return c.src.Depth()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// Arm requests one notification: for the next completion pushed, or when
// solicitedOnly for the next solicited or unsuccessful one. Arming is
// one-shot. An outstanding next-completion arm is not narrowed by a later
// solicited-only request (as in rdmavt). Completions already queued do not
// trigger the notification; use ArmAndCheck to learn of them.
// Errors: ErrDestroyed, ErrOverflow.
func (c *CQ) Arm(solicitedOnly bool) error {
	_, err := c.ArmAndCheck(solicitedOnly)
	return err
}

// ArmAndCheck arms like Arm and also reports whether completions are already
// queued (rdmavt's IB_CQ_REPORT_MISSED_EVENTS), so a consumer can poll again
// instead of waiting for an event that will not come.
func (c *CQ) ArmAndCheck(solicitedOnly bool) (queued bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("arm cq"); err != nil {
		return false, err
	}
	if c.src != nil {
		return c.src.Arm(solicitedOnly)
	}
	want := armNext
	if solicitedOnly {
		want = armSolicited
	}
	if c.notify != armNext {
		c.notify = want
	}
	return c.count > 0, nil
}

// Resize changes the depth of the ring, keeping the queued completions in
// order. Errors: ErrInvalidArgument when depth is out of [1, MaxDepth] or
// smaller than Len(); ErrDestroyed; ErrOverflow.
func (c *CQ) Resize(depth int) error {
	if depth < 1 || depth > MaxDepth {
		return fmt.Errorf("resize cq: depth %d not in [1, %d]: %w", depth, MaxDepth, ErrInvalidArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("resize cq"); err != nil {
		return err
	}
	if c.src != nil {
		return c.src.Resize(depth)
	}
	if depth < c.count {
		return fmt.Errorf("resize cq: depth %d below %d queued completions: %w", depth, c.count, ErrInvalidArgument)
	}
	if depth == len(c.buf) {
		return nil
	}
	buf := make([]WC, depth)
	first := copy(buf, c.buf[c.head:min(c.head+c.count, len(c.buf))])
	copy(buf[first:c.count], c.buf[:c.count-first])
	c.buf, c.head = buf, 0
	return nil
}

// TryRef records a reference to c (a QP using it as send or receive CQ);
// it fails with ErrDestroyed on a destroyed CQ, so a QP cannot bind to a CQ
// being destroyed concurrently.
func (c *CQ) TryRef() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("ref cq: %w", ErrDestroyed)
	}
	c.refs++
	return nil
}

// Unref drops a reference taken by TryRef. It panics if there is none:
// that is a reference-counting bug in the caller.
func (c *CQ) Unref() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == 0 {
		panic("cq: Unref without TryRef")
	}
	c.refs--
}

// Refs returns the number of references held.
func (c *CQ) Refs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refs
}

// AckEvents acknowledges n events obtained from the channel with Get, like
// ibv_ack_cq_events.
func (c *CQ) AckEvents(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.acked += uint64(n)
	c.mu.Unlock()
}

// Destroy destroys c: queued completions are discarded, later Push returns
// false, Poll returns 0 and other methods return ErrDestroyed; any event for c
// still queued on its channel is skipped by Get. Errors: ErrBusy while
// references are held or while events handed out by Get are unacknowledged
// (ibv_destroy_cq would wait for them); ErrDestroyed if already destroyed.
func (c *CQ) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("destroy cq: %w", ErrDestroyed)
	}
	if c.refs > 0 {
		return fmt.Errorf("destroy cq: %d references held: %w", c.refs, ErrBusy)
	}
	if c.acked < c.events {
		return fmt.Errorf("destroy cq: %d channel events unacknowledged: %w", c.events-c.acked, ErrBusy)
	}
	if c.src != nil {
		if err := c.src.Destroy(); err != nil {
			return err
		}
	}
	c.destroyed = true
	c.buf, c.head, c.count = nil, 0, 0
	c.notify = armNone
	c.onComp, c.onError = nil, nil
	c.ch, c.pending = nil, false
	return nil
}

// Err returns nil for a working CQ, ErrOverflow once it has overflowed and
// ErrDestroyed once it has been destroyed.
func (c *CQ) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usableLocked("cq")
}

func (c *CQ) usableLocked(op string) error {
	switch {
	case c.destroyed:
		return fmt.Errorf("%s: %w", op, ErrDestroyed)
	case c.overflowed:
		return fmt.Errorf("%s: %w", op, ErrOverflow)
	}
	return nil
}

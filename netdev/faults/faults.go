// Package faults wraps any netdev.Link with seeded send-side fault
// injection: loss, duplication, reordering, delay and jitter, corruption
// and a bandwidth limit, timed on an injected clock.
package faults

// Lock order: Link.mu only. It is never held while the inner link's Send
// runs, so delivery may recurse into this link.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
)

// ErrInvalid is returned (wrapped) for a fault profile that is out of
// range.
var ErrInvalid = errors.New("netdev: invalid fault profile")

// DefaultReorderHold is how long a frame held back for reordering waits for a
// following frame before it is sent anyway, when Profile.ReorderHold is zero.
const DefaultReorderHold = time.Millisecond

// Profile is a send-side fault profile. Probabilities are per frame, in
// [0, 1]; the zero value passes every frame through untouched and
// synchronously.
type Profile struct {
	Loss      float64 // drop the frame
	Duplicate float64 // send it twice
	Reorder   float64 // hold it back and send it after the next frame
	Corrupt   float64 // flip one random bit (of each copy, decided per copy)

	// Delay is added to every frame; Jitter spreads it uniformly over
	// [Delay-Jitter, Delay+Jitter], clamped at zero. Frames with different
	// delays may overtake each other.
	Delay, Jitter time.Duration

	// BandwidthBps caps the link rate in bits per second (0: unlimited).
	// Frames are serialised: each leaves at max(now, previous departure) +
	// len*8/BandwidthBps and is delivered after that plus its delay.
	BandwidthBps float64

	// ReorderHold bounds how long a held-back frame waits for the next
	// frame (0: DefaultReorderHold).
	ReorderHold time.Duration
}

// Validate checks that probabilities are in [0, 1] and durations and the
// bandwidth are not negative.
func (fl Profile) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", fl.Loss}, {"duplicate", fl.Duplicate}, {"reorder", fl.Reorder}, {"corrupt", fl.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%s probability %v not in [0,1]: %w", p.name, p.v, ErrInvalid)
		}
	}
	if fl.Delay < 0 || fl.Jitter < 0 || fl.ReorderHold < 0 {
		return fmt.Errorf("negative delay, jitter or reorder hold: %w", ErrInvalid)
	}
	if !(fl.BandwidthBps >= 0) || math.IsInf(fl.BandwidthBps, 0) {
		return fmt.Errorf("bandwidth %v: %w", fl.BandwidthBps, ErrInvalid)
	}
	return nil
}

// Stats counts what a Link did.
type Stats struct {
	Frames     uint64 // frames given to Send
	Lost       uint64
	Duplicated uint64
	Corrupted  uint64 // copies with a bit flipped
	Reordered  uint64 // copies held back
	Delayed    uint64 // copies delivered by a timer (delay or bandwidth)
	Delivered  uint64 // copies handed to the inner link
	Errors     uint64 // inner Send errors (the copy is lost)
}

// Link wraps a Link and applies a fault profile to what it sends. Its
// random decisions come from a PCG source seeded by the constructor and are
// drawn in Send, in the order frames are sent, so one seed and one send
// sequence give one outcome. Under a manual clock, delayed frames are
// delivered by the clock's timers (same instant: creation order). Receiving
// is passed through untouched.
//
// Unwrap returns the inner link, so As finds the inner link's optional
// interfaces through the fault link. None of them bypasses the faults: a
// hold (Holder) only delays the inner link's transmit of frames that have
// already been through Send's decisions (a delayed frame a timer sends
// while a hold is open goes out with that hold's last Flush), and polling
// (Poller), the receive goroutine (OwnReceiver) and group membership
// (GroupJoiner) concern receiving, which the fault link does not touch.
// A link with a loss-only profile over a lending link lends that link's
// buffers (netdev.FrameLender, lend.go); its SendOwned draws the same
// decisions as Send.
type Link struct {
	inner netdev.Link
	clk   clock.Clock
	fl    Profile
	rel   netdev.Releaser    // inner as a Releaser, or nil
	lend  netdev.FrameLender // inner, when f lends its buffers (lend.go), or nil
	pool  *netdev.FramePool

	mu         sync.Mutex
	rng        *rand.Rand
	closed     bool
	held       *heldFrame // a frame held back for reordering
	linkFree   time.Time  // when the bandwidth-capped link is next idle
	lastArrive time.Time  // the latest arrival scheduled: delays keep FIFO order
	stats      Stats
	heldTimer  clock.Timer
}

type heldFrame struct {
	buf []byte // from l.pool
}

var (
	_ netdev.Link     = (*Link)(nil)
	_ netdev.Releaser = (*Link)(nil)
	_ netdev.Wrapper  = (*Link)(nil)
)

// Wrap wraps l with the fault profile fl, using clk (nil: the real
// clock) for delays and seed for the decisions. It panics if fl is invalid
// (see Profile.Validate); use New to get an error instead.
func Wrap(l netdev.Link, clk clock.Clock, seed int64, fl Profile) netdev.Link {
	fln, err := New(l, clk, seed, fl)
	if err != nil {
		panic("faults.Wrap: " + err.Error())
	}
	return fln
}

// New is Wrap returning the concrete type (for Stats) and an
// error wrapping ErrInvalid for an invalid profile.
func New(l netdev.Link, clk clock.Clock, seed int64, fl Profile) (*Link, error) {
	if err := fl.Validate(); err != nil {
		return nil, fmt.Errorf("new fault link: %w", err)
	}
	if fl.ReorderHold == 0 {
		fl.ReorderHold = DefaultReorderHold
	}
	f := &Link{
		inner: l,
		clk:   clock.OrReal(clk),
		fl:    fl,
		pool:  netdev.NewFramePool(netdev.MaxFrameLen(l.MTU())),
		rng:   rand.New(rand.NewPCG(uint64(seed), 0x6661756c7473)),
	}
	f.rel, _ = l.(netdev.Releaser)
	f.lend = lenderFor(l, fl)
	return f, nil
}

// Profile returns the link's fault profile.
func (f *Link) Profile() Profile { return f.fl }

// Stats returns a snapshot of the counters.
func (f *Link) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Unwrap returns the wrapped link (for As).
func (f *Link) Unwrap() netdev.Link { return f.inner }

// hitLocked draws one decision with probability p; it draws nothing when p is 0.
func (f *Link) hitLocked(p float64) bool {
	return p > 0 && f.rng.Float64() < p
}

// Send applies the profile to frame. It returns ErrClosed after Close; a
// frame that is sent synchronously also returns the inner link's error.
func (f *Link) Send(frame []byte) error {
	// Frames sent now, in order, after the lock is released: at most the
	// released held frame plus two copies.
	var now [3]outFrame
	n := 0

	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return netdev.ErrClosed
	}
	f.stats.Frames++
	if f.hitLocked(f.fl.Loss) {
		f.stats.Lost++
		f.mu.Unlock()
		return nil
	}
	copies := 1
	if f.hitLocked(f.fl.Duplicate) {
		copies = 2
		f.stats.Duplicated++
	}
	for range copies {
		out := outFrame{data: frame}
		if f.hitLocked(f.fl.Corrupt) && len(frame) > 0 {
			out = f.copyLocked(frame)
			bit := f.rng.IntN(len(frame) * 8)
			out.data[bit/8] ^= 1 << (bit % 8)
			f.stats.Corrupted++
		}
		reorder := f.hitLocked(f.fl.Reorder)
		at := f.departureLocked(len(frame))
		if at > 0 {
			// Delivered later by a timer: take a copy now.
			if out.pooled == nil {
				out = f.copyLocked(frame)
			}
			f.stats.Delayed++
			f.clk.AfterFunc(at, func() { f.fire(out, reorder) })
			continue
		}
		n = f.emitLocked(now[:], n, out, reorder, frame)
	}
	f.mu.Unlock()
	return f.sendAll(now[:n])
}

// outFrame is a frame on its way out; pooled is set when data is our copy
// from f.pool (returned after sending).
type outFrame struct {
	data   []byte
	pooled []byte
}

func (f *Link) copyLocked(frame []byte) outFrame {
	b := f.pool.Get()
	if len(b) < len(frame) {
		b = make([]byte, len(frame))
	}
	b = b[:len(frame)]
	copy(b, frame)
	return outFrame{data: b, pooled: b}
}

// departureLocked returns how long from now a frame of n bytes is delivered:
// its serialisation under the bandwidth cap plus its (jittered) delay.
func (f *Link) departureLocked(n int) time.Duration {
	var d time.Duration
	if f.fl.BandwidthBps > 0 {
		now := f.clk.Now()
		start := f.linkFree
		if start.Before(now) {
			start = now
		}
		tx := time.Duration(float64(n) * 8 / f.fl.BandwidthBps * float64(time.Second))
		f.linkFree = start.Add(tx)
		d = f.linkFree.Sub(now)
	}
	delay := f.fl.Delay
	if f.fl.Jitter > 0 {
		delay += time.Duration(f.rng.Int64N(2*int64(f.fl.Jitter)+1)) - f.fl.Jitter
		if delay < 0 {
			delay = 0
		}
	}
	// A link delays but does not reorder: a frame never arrives before one
	// sent earlier (reordering is the Reorder fault's job). Timers due at
	// the same instant fire in creation order, which keeps FIFO.
	now := f.clk.Now()
	arrive := now.Add(d + delay)
	if arrive.Before(f.lastArrive) {
		arrive = f.lastArrive
	}
	f.lastArrive = arrive
	return arrive.Sub(now)
}

// emitLocked queues out (or holds it back) for sending now into q[n:] and
// returns the new count. A held frame is released after the next one.
// orig is the caller's frame, copied if out must outlive Send.
func (f *Link) emitLocked(q []outFrame, n int, out outFrame, reorder bool, orig []byte) int {
	if reorder && f.held == nil {
		if out.pooled == nil {
			out = f.copyLocked(orig)
		}
		f.stats.Reordered++
		h := &heldFrame{buf: out.pooled}
		f.held = h
		f.heldTimer = f.clk.AfterFunc(f.fl.ReorderHold, func() { f.releaseHeld(h) })
		return n
	}
	q[n] = out
	n++
	if h := f.held; h != nil {
		f.held = nil
		if f.heldTimer != nil {
			f.heldTimer.Stop()
			f.heldTimer = nil
		}
		q[n] = outFrame{data: h.buf, pooled: h.buf}
		n++
	}
	return n
}

// fire delivers a delayed frame when its timer expires.
func (f *Link) fire(out outFrame, reorder bool) {
	var q [2]outFrame
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.pool.Put(out.pooled)
		return
	}
	n := f.emitLocked(q[:], 0, out, reorder, out.data)
	f.mu.Unlock()
	_ = f.sendAll(q[:n])
}

// releaseHeld sends a held frame whose hold expired with no frame after it.
func (f *Link) releaseHeld(h *heldFrame) {
	f.mu.Lock()
	if f.held != h || f.closed {
		f.mu.Unlock()
		return
	}
	f.held = nil
	f.heldTimer = nil
	f.mu.Unlock()
	_ = f.sendAll([]outFrame{{data: h.buf, pooled: h.buf}})
}

// sendAll hands frames to the inner link in order, returns pooled copies, and
// reports the first error.
func (f *Link) sendAll(q []outFrame) error {
	var first error
	var ok, failed uint64
	for _, o := range q {
		err := f.inner.Send(o.data)
		if o.pooled != nil {
			f.pool.Put(o.pooled)
		}
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
			continue
		}
		ok++
	}
	if ok+failed > 0 {
		f.mu.Lock()
		f.stats.Delivered += ok
		f.stats.Errors += failed
		f.mu.Unlock()
	}
	return first
}

// SetHandler sets the inner link's handler.
func (f *Link) SetHandler(h netdev.Handler) { f.inner.SetHandler(h) }

// HardwareAddr returns the inner link's MAC.
func (f *Link) HardwareAddr() netdev.MAC { return f.inner.HardwareAddr() }

// MTU returns the inner link's MTU.
func (f *Link) MTU() int { return f.inner.MTU() }

// Release passes a received frame back to the inner link, if it pools.
func (f *Link) Release(frame []byte) {
	if f.rel != nil {
		f.rel.Release(frame)
	}
}

// Close drops a held frame, makes pending delayed frames vanish, and closes
// the inner link.
func (f *Link) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	if f.heldTimer != nil {
		f.heldTimer.Stop()
		f.heldTimer = nil
	}
	f.held = nil
	f.mu.Unlock()
	return f.inner.Close()
}

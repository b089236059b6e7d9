package clock

import (
	"container/heap"
	"sync"
	"time"
)

// epoch is the time at which a new Manual clock starts.
var epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// Manual is a clock whose time moves only when told to. Timers fire during
// Advance and AdvanceToNext, on the goroutine that calls them, in order of
// deadline and, for equal deadlines, in order of creation.
//
// A Manual is safe for concurrent use. Callbacks run with no lock held, so
// they may call Now, AfterFunc and Stop. Advance and AdvanceToNext are meant
// to be driven by one goroutine at a time; concurrent calls do not corrupt
// the clock (time never goes backwards), but the order in which their timers
// fire relative to each other is then unspecified.
type Manual struct {
	mu     sync.Mutex // guards the fields below
	now    time.Time
	seq    uint64 // creation sequence of the next timer
	timers timerHeap
}

// NewManual returns a manual clock set to 2000-01-01 00:00:00 UTC with no
// pending timers.
func NewManual() *Manual {
	return &Manual{now: epoch}
}

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// AfterFunc schedules f to run when the clock reaches Now()+d. A d <= 0 makes
// the timer due immediately: it fires at the next Advance (including
// Advance(0)) or AdvanceToNext, not inside AfterFunc.
func (m *Manual) AfterFunc(d time.Duration, f func()) Timer {
	if d < 0 {
		d = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{m: m, when: m.now.Add(d), seq: m.seq, f: f}
	m.seq++
	heap.Push(&m.timers, t)
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline is
// at or before the new time, including timers that the callbacks themselves
// schedule. While a callback runs, Now returns that timer's deadline. When
// Advance returns, Now is the old time plus d. A negative d is treated as 0.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	m.mu.Lock()
	target := m.now.Add(d)
	m.mu.Unlock()
	m.advanceTo(target)
}

// AdvanceToNext moves the clock to the earliest pending deadline (or leaves
// it where it is, if that deadline has already passed) and fires every timer
// due at that time. It returns false, without moving the clock, if no timer
// is pending.
func (m *Manual) AdvanceToNext() bool {
	m.mu.Lock()
	if len(m.timers) == 0 {
		m.mu.Unlock()
		return false
	}
	target := m.timers[0].when
	if target.Before(m.now) {
		target = m.now
	}
	m.mu.Unlock()
	m.advanceTo(target)
	return true
}

// Pending returns the number of timers that have neither fired nor been
// stopped.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// advanceTo fires due timers one at a time, releasing the lock around each
// callback, then sets the clock to target.
func (m *Manual) advanceTo(target time.Time) {
	m.mu.Lock()
	for len(m.timers) > 0 && !m.timers[0].when.After(target) {
		t := heap.Pop(&m.timers).(*manualTimer)
		if t.when.After(m.now) {
			m.now = t.when
		}
		f := t.f
		t.f = nil
		m.mu.Unlock()
		f()
		m.mu.Lock()
	}
	if target.After(m.now) {
		m.now = target
	}
	m.mu.Unlock()
}

// manualTimer is one pending call on a Manual clock. Its fields are guarded
// by m.mu.
type manualTimer struct {
	m     *Manual
	when  time.Time
	seq   uint64
	f     func()
	index int // position in m.timers, or -1 once fired or stopped
}

// Stop removes the timer if it is still pending.
func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.m.timers, t.index)
	t.f = nil
	return true
}

// timerHeap orders timers by (deadline, creation sequence). It implements
// heap.Interface.
type timerHeap []*manualTimer

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.when.Equal(b.when) {
		return a.when.Before(b.when)
	}
	return a.seq < b.seq
}

func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	n := len(old) - 1
	t := old[n]
	old[n] = nil
	t.index = -1
	*h = old[:n]
	return t
}

var _ Clock = (*Manual)(nil)

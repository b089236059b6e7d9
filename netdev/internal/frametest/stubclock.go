package frametest

import (
	"time"

	"github.com/softverbs/softverbs/clock"
)

// StubClock has room for one pending call and allocates nothing, so that
// AllocsPerRun counts only the code under test's allocations. Its timers
// can be reset if Resettable, like *time.Timer, else not, like
// clock.Manual's. Now is always the zero time. Fire runs the pending call.
type StubClock struct {
	Resettable     bool
	Afters, Resets int // AfterFunc and Reset calls

	timers  [2]stubTimer // reused in turn; resettable, only two are made
	pending func()       // the call due, nil if none
}

func (c *StubClock) Now() time.Time { return time.Time{} }

func (c *StubClock) AfterFunc(_ time.Duration, f func()) clock.Timer {
	t := &c.timers[c.Afters%len(c.timers)]
	c.Afters++
	t.c, t.f = c, f
	c.pending = f
	if c.Resettable {
		return (*stubResetTimer)(t)
	}
	return t
}

// Fire runs the pending call; it reports false if there was none.
func (c *StubClock) Fire() bool {
	f := c.pending
	c.pending = nil
	if f == nil {
		return false
	}
	f()
	return true
}

type stubTimer struct {
	c *StubClock
	f func()
}

func (t *stubTimer) Stop() bool {
	ok := t.c.pending != nil
	t.c.pending = nil
	return ok
}

type stubResetTimer stubTimer

func (t *stubResetTimer) Stop() bool { return (*stubTimer)(t).Stop() }

func (t *stubResetTimer) Reset(time.Duration) bool {
	t.c.Resets++
	ok := t.c.pending != nil
	t.c.pending = t.f
	return ok
}

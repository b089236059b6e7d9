// Package rearm has the timer the links use to send later what a
// transmit hold left queued (netdev.Holder's FlushLazy, a kick that gave
// up): at most one call pending, no allocation per arm.
package rearm

import (
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/clock"
)

// Timer calls f once after a delay each time it is armed, with at most
// one call pending: ArmOnce does nothing while a call is pending, and the
// armed flag is cleared just before f runs, so an arm from inside f (or
// after it began) schedules another call. It allocates nothing per arm:
// the callback is bound once, and a timer that can be reset (the real
// clock's *time.Timer) is made once and reset, which then always finds it
// stopped or fired. A clock whose timers cannot be reset (clock.Manual)
// gets one AfterFunc per arm. Its address must not change after Init.
type Timer struct {
	clk   clock.Clock
	fire  func() // clears armed, then calls the caller's f
	armed atomic.Bool
	t     interface{ Reset(time.Duration) bool } // nil: AfterFunc per arm
}

// Init binds f and makes the timer, stopped.
func (r *Timer) Init(clk clock.Clock, f func()) {
	r.clk = clk
	r.fire = func() {
		r.armed.Store(false)
		f()
	}
	t := clk.AfterFunc(time.Hour, r.fire)
	t.Stop()
	r.t, _ = t.(interface{ Reset(time.Duration) bool })
}

// ArmOnce schedules a call after d unless one is pending; it reports
// whether it armed the timer.
func (r *Timer) ArmOnce(d time.Duration) bool {
	if !r.armed.CompareAndSwap(false, true) {
		return false
	}
	if r.t != nil {
		r.t.Reset(d)
	} else {
		r.clk.AfterFunc(d, r.fire)
	}
	return true
}

// Armed reports whether a call is pending.
func (r *Timer) Armed() bool { return r.armed.Load() }

// Reused reports whether the clock's timer is made once and reset at each
// arm (the real clock's), rather than made anew per arm.
func (r *Timer) Reused() bool { return r.t != nil }

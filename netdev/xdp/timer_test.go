//go:build linux

package xdp

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// stubClock has room for one pending call and allocates nothing, so that
// AllocsPerRun counts the link's allocations only. Its timers can be
// reset if resettable, like *time.Timer, else not, like clock.Manual's.
type stubClock struct {
	resettable     bool
	timers         [2]stubTimer // reused in turn; resettable, only two are made
	pending        func()       // the call due, nil if none
	afters, resets int
}

func (c *stubClock) Now() time.Time { return time.Time{} }

func (c *stubClock) AfterFunc(_ time.Duration, f func()) clock.Timer {
	t := &c.timers[c.afters%len(c.timers)]
	c.afters++
	t.c, t.f = c, f
	c.pending = f
	if c.resettable {
		return (*stubResetTimer)(t)
	}
	return t
}

// hookClock is a stubClock whose Now calls hook (if set), then returns a
// time that moves on by step at every call.
type hookClock struct {
	stubClock
	hook func()
	step time.Duration
	now  time.Time
}

func (c *hookClock) Now() time.Time {
	if c.hook != nil {
		c.hook()
	}
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// fire runs the pending call; it reports false if there was none.
func (c *stubClock) fire() bool {
	f := c.pending
	c.pending = nil
	if f == nil {
		return false
	}
	f()
	return true
}

type stubTimer struct {
	c *stubClock
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
	t.c.resets++
	ok := t.c.pending != nil
	t.c.pending = t.f
	return ok
}

// stubXDPLink is a Link with no socket: its TX ring is three words
// in memory saying one descriptor is queued and no wake-up is needed, so
// a kick finds nothing to do and makes no system call.
func stubXDPLink(clk clock.Clock) *Link {
	l := &Link{fd: -1, clk: clk, mcFD4: -1, mcFD6: -1}
	var words [3]uint32
	l.tx.prod, l.tx.cons, l.tx.flags = &words[0], &words[1], &words[2]
	words[0] = 1
	l.tx.cached = 1 // produced and published
	l.lazyTimer.init(clk, l.lazyKick)
	l.flushTimer.init(clk, l.kickIfOpen)
	return l
}

// TestXDPFlushTimersAllocs checks that arming FlushLazy's and a stalled
// kick's timers, and their firing, allocate nothing: with a clock whose
// timers can be reset the timer is made once, and otherwise the clock's
// AfterFunc is the only allocation left.
func TestXDPFlushTimersAllocs(t *testing.T) {
	if frametest.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, resettable := range []bool{false, true} {
		name := map[bool]string{false: "AfterFunc", true: "Reset"}[resettable]
		t.Run(name, func(t *testing.T) {
			c := &stubClock{resettable: resettable}
			l := stubXDPLink(c)
			require.Equal(t, 2, c.afters, "one timer each, made and stopped at open")
			const runs = 100
			lazy := testing.AllocsPerRun(runs, func() {
				l.Hold()
				l.FlushLazy()
				if !c.fire() {
					panic("FlushLazy armed no timer")
				}
			})
			flush := testing.AllocsPerRun(runs, func() {
				l.armFlush()
				if !c.fire() {
					panic("armFlush armed no timer")
				}
			})
			require.Zero(t, lazy, "FlushLazy")
			require.Zero(t, flush, "armFlush")
			require.EqualValues(t, runs+1, l.lazyFlushes.Load()) // AllocsPerRun runs once more to warm up
			require.EqualValues(t, runs+1, l.flushTimers.Load())
			require.False(t, l.lazyTimer.armed.Load())
			require.False(t, l.flushTimer.armed.Load())
			require.Zero(t, l.kickers.Load())
			if resettable {
				require.Equal(t, 2, c.afters)
				require.Equal(t, 2*(runs+1), c.resets)
			} else {
				require.Equal(t, 2+2*(runs+1), c.afters)
			}
		})
	}
}

// TestXDPFlushLazyRealClock checks FlushLazy's timer on the real clock:
// it fires after each arm, and an arm costs no allocation.
func TestXDPFlushLazyRealClock(t *testing.T) {
	if frametest.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	l := stubXDPLink(clock.Real())
	require.NotNil(t, l.lazyTimer.t, "the real clock's timers can be reset")
	wait := func() {
		for deadline := time.Now().Add(5 * time.Second); l.lazyTimer.armed.Load(); {
			if time.Now().After(deadline) {
				panic("FlushLazy's timer did not fire")
			}
			runtime.Gosched()
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		l.Hold()
		l.FlushLazy()
		wait()
	})
	require.Zero(t, allocs)
	require.EqualValues(t, 101, l.lazyFlushes.Load())
}

// TestRearmTimerArmOnce checks rearmTimer's rule: at most one call is
// pending, the armed flag is clear when f runs, and an arm from inside f
// schedules another call.
func TestRearmTimerArmOnce(t *testing.T) {
	for _, resettable := range []bool{false, true} {
		name := map[bool]string{false: "AfterFunc", true: "Reset"}[resettable]
		t.Run(name, func(t *testing.T) {
			c := &stubClock{resettable: resettable}
			var r rearmTimer
			calls, rearm, armedInF := 0, false, false
			r.init(c, func() {
				calls++
				armedInF = armedInF || r.armed.Load()
				if rearm {
					rearm = false
					require.True(t, r.armOnce(time.Millisecond), "an arm from inside f")
				}
			})
			require.False(t, c.fire(), "init leaves the timer stopped")

			arm := func() bool { return r.armOnce(time.Millisecond) }
			armRearming := func() bool { rearm = true; return arm() }
			steps := []struct {
				name      string
				do        func() bool
				want      bool // what do returns
				wantCalls int
				wantArmed bool
			}{
				{name: "arm", do: arm, want: true, wantArmed: true},
				{name: "arm while pending", do: arm, want: false, wantArmed: true},
				{name: "fire", do: c.fire, want: true, wantCalls: 1},
				{name: "nothing left to fire", do: c.fire, want: false, wantCalls: 1},
				{name: "arm, f will arm", do: armRearming, want: true, wantCalls: 1, wantArmed: true},
				{name: "fire, f arms", do: c.fire, want: true, wantCalls: 2, wantArmed: true},
				{name: "fire f's arm", do: c.fire, want: true, wantCalls: 3},
				{name: "then nothing", do: c.fire, want: false, wantCalls: 3},
			}
			for _, s := range steps {
				require.Equal(t, s.want, s.do(), s.name)
				require.Equal(t, s.wantCalls, calls, s.name)
				require.Equal(t, s.wantArmed, r.armed.Load(), s.name)
			}
			require.False(t, armedInF, "the flag is cleared before f runs")
		})
	}
}

// TestXDPCloseWaitsForTX: Close gives the kernel a bounded time to take
// the descriptors left on the TX ring before it tears the socket down (a
// kick that stalls leaves the rest to a timer Close disarms). The stub's ring
// asks for a wake-up, so each kick is one failing sendto (fd -1), counted
// in txKickErrs.
func TestXDPCloseWaitsForTX(t *testing.T) {
	t.Run("drains", func(t *testing.T) {
		// "The kernel" takes the queued descriptor after the first kick,
		// by the time Close next reads the clock: deterministic, where a
		// goroutine doing it raced Close's wall-clock bound under load.
		c := &hookClock{}
		l := stubXDPLink(c)
		atomic.StoreUint32(l.tx.flags, unix.XDP_RING_NEED_WAKEUP)
		c.hook = func() {
			if l.txKickErrs.Load() == 1 {
				atomic.StoreUint32(l.tx.cons, 1)
			}
		}
		require.NoError(t, l.Close())
		require.Zero(t, l.tx.pending(), "Close returned before the TX ring was consumed")
		// The kick after it finds nothing pending and sends nothing.
		require.EqualValues(t, 1, l.txKickErrs.Load(), "failed kicks")
	})
	t.Run("bounded", func(t *testing.T) {
		// A ring the kernel never consumes: Close gives up after
		// closeDrainWait on the link's clock (here one that moves 1 ms at
		// each reading: one kick a millisecond), after closeDrainPolls
		// kicks on a clock that does not move, and soon on a real clock.
		l := stubXDPLink(&hookClock{step: time.Millisecond})
		atomic.StoreUint32(l.tx.flags, unix.XDP_RING_NEED_WAKEUP)
		require.NoError(t, l.Close())
		require.EqualValues(t, closeDrainWait/time.Millisecond, l.txKickErrs.Load())

		l = stubXDPLink(clock.Real())
		atomic.StoreUint32(l.tx.flags, unix.XDP_RING_NEED_WAKEUP)
		start := time.Now()
		require.NoError(t, l.Close())
		require.Less(t, time.Since(start), 5*time.Second)

		l = stubXDPLink(&stubClock{})
		atomic.StoreUint32(l.tx.flags, unix.XDP_RING_NEED_WAKEUP)
		require.NoError(t, l.Close())
		require.EqualValues(t, closeDrainPolls, l.txKickErrs.Load())
		require.EqualValues(t, 1, l.tx.pending(), "still queued: dropped by teardown")
	})
}

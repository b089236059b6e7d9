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

// hookClock is a frametest.StubClock whose Now calls hook (if set), then
// returns a time that moves on by step at every call.
type hookClock struct {
	frametest.StubClock
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

// stubXDPLink is a Link with no socket: its TX ring is three words
// in memory saying one descriptor is queued and no wake-up is needed, so
// a kick finds nothing to do and makes no system call.
func stubXDPLink(clk clock.Clock) *Link {
	l := &Link{fd: -1, clk: clk, mcFD4: -1, mcFD6: -1}
	var words [3]uint32
	l.tx.prod, l.tx.cons, l.tx.flags = &words[0], &words[1], &words[2]
	words[0] = 1
	l.tx.cached = 1 // produced and published
	l.lazyTimer.Init(clk, l.lazyKick)
	l.flushTimer.Init(clk, l.kickIfOpen)
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
			c := &frametest.StubClock{Resettable: resettable}
			l := stubXDPLink(c)
			require.Equal(t, 2, c.Afters, "one timer each, made and stopped at open")
			const runs = 100
			lazy := testing.AllocsPerRun(runs, func() {
				l.Hold()
				l.FlushLazy()
				if !c.Fire() {
					panic("FlushLazy armed no timer")
				}
			})
			flush := testing.AllocsPerRun(runs, func() {
				l.armFlush()
				if !c.Fire() {
					panic("armFlush armed no timer")
				}
			})
			require.Zero(t, lazy, "FlushLazy")
			require.Zero(t, flush, "armFlush")
			require.EqualValues(t, runs+1, l.lazyFlushes.Load()) // AllocsPerRun runs once more to warm up
			require.EqualValues(t, runs+1, l.flushTimers.Load())
			require.False(t, l.lazyTimer.Armed())
			require.False(t, l.flushTimer.Armed())
			require.Zero(t, l.kickers.Load())
			if resettable {
				require.Equal(t, 2, c.Afters)
				require.Equal(t, 2*(runs+1), c.Resets)
			} else {
				require.Equal(t, 2+2*(runs+1), c.Afters)
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
	require.True(t, l.lazyTimer.Reused(), "the real clock's timers can be reset")
	wait := func() {
		for deadline := time.Now().Add(5 * time.Second); l.lazyTimer.Armed(); {
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

		l = stubXDPLink(&frametest.StubClock{})
		atomic.StoreUint32(l.tx.flags, unix.XDP_RING_NEED_WAKEUP)
		require.NoError(t, l.Close())
		require.EqualValues(t, closeDrainPolls, l.txKickErrs.Load())
		require.EqualValues(t, 1, l.tx.pending(), "still queued: dropped by teardown")
	})
}

package task_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
)

const waitFor = 10 * time.Second

// counted wraps fn to count its returns (the task's completed runs).
func counted(fn task.Func) (task.Func, *atomic.Int32) {
	n := new(atomic.Int32)
	return func() bool {
		more := fn()
		n.Add(1)
		return more
	}, n
}

func TestNameAndRuns(t *testing.T) {
	fn, runs := counted(func() bool { return false })
	tk := task.New(task.NewInline(), "qp7.send", fn)
	require.Equal(t, "qp7.send", tk.Name())
	require.Equal(t, "qp7.send", tk.String())
	require.Zero(t, runs.Load())
	tk.Schedule()
	require.EqualValues(t, 1, runs.Load())
}

func TestInlineRunsBeforeScheduleReturns(t *testing.T) {
	ex := task.NewInline()
	ran := 0
	tk := task.New(ex, "t", func() bool { ran++; return false })
	for i := 1; i <= 3; i++ {
		tk.Schedule()
		require.Equal(t, i, ran)
	}
	require.True(t, ex.Idle())
}

func TestInlineScheduleWhileBusyRunsAgain(t *testing.T) {
	ex := task.NewInline()
	var tk *task.Task
	runs := 0
	tk = task.New(ex, "self", func() bool {
		runs++
		if runs == 1 {
			tk.Schedule() // busy -> armed
			tk.Schedule() // armed: no-op, still one extra run
		}
		return false
	})
	tk.Schedule()
	require.Equal(t, 2, runs)
}

func TestInlineOrder(t *testing.T) {
	tests := []struct {
		name  string
		moreA int // batches A reports more work after
		moreB int
		want  string
	}{
		{"no more", 0, 0, "SAB"},
		{"A requeues behind B", 2, 0, "SABAA"},
		{"alternate", 2, 2, "SABABAB"},
		{"B longer", 0, 3, "SABBBB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ex := task.NewInline()
			var order []byte
			batches := func(name byte, more int) task.Func {
				n := 0
				return func() bool {
					order = append(order, name)
					n++
					return n <= more
				}
			}
			a := task.New(ex, "A", batches('A', tc.moreA))
			b := task.New(ex, "B", batches('B', tc.moreB))
			s := task.New(ex, "S", func() bool {
				order = append(order, 'S')
				a.Schedule() // re-entrant: only enqueue
				b.Schedule()
				a.Schedule() // already queued: no-op
				require.Empty(t, order[1:], "nothing runs inside a task")
				return false
			})
			s.Schedule()
			require.Equal(t, tc.want, string(order))
			require.True(t, ex.Idle())
		})
	}
}

// TestInlineConcurrentSchedulers: goroutines schedule tasks while one of
// them drains, and (chain) the tasks hand work to one another as a QP
// hands a packet on; no wake-up is lost and no two tasks run at once.
func TestInlineConcurrentSchedulers(t *testing.T) {
	for _, chain := range []bool{false, true} {
		t.Run(fmt.Sprintf("chain=%v", chain), func(t *testing.T) {
			ex := task.NewInline()
			const nTasks, goroutines, rounds = 16, 8, 500
			var inRun atomic.Int32 // Inline runs one task at a time across all tasks
			var overlap atomic.Bool
			var produced, consumed [nTasks]atomic.Int64
			tasks := make([]*task.Task, nTasks)
			for i := range tasks {
				tasks[i] = task.New(ex, fmt.Sprint(i), func() bool {
					if inRun.Add(1) != 1 {
						overlap.Store(true)
					}
					consumed[i].Store(produced[i].Load())
					if chain && consumed[i].Load()%3 == 0 {
						j := (i + 1) % nTasks
						produced[j].Add(1)
						tasks[j].Chain()
					}
					inRun.Add(-1)
					return false
				})
			}
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for r := range rounds {
						i := (g*rounds + r) % nTasks
						produced[i].Add(1)
						if r%2 == 0 {
							tasks[i].Schedule()
						} else {
							tasks[i].RunHere() // Claim, fn, Release
						}
					}
				})
			}
			wg.Wait()
			// Every Schedule has returned, and the drainer empties the queue
			// before it stops draining, so all work must have been seen.
			require.True(t, ex.Idle())
			require.False(t, overlap.Load(), "two tasks ran at once on an Inline executor")
			for i := range tasks {
				require.Equal(t, produced[i].Load(), consumed[i].Load(), "task %d", i)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		ex := task.NewInline()
		runs := 0
		tk := task.New(ex, "t", func() bool { runs++; return false })
		tk.Stop()
		tk.Stop() // idempotent
		tk.Schedule()
		require.Zero(t, runs)
	})
	t.Run("queued", func(t *testing.T) {
		ex := task.NewInline()
		runs := 0
		victim := task.New(ex, "victim", func() bool { runs++; return false })
		killer := task.New(ex, "killer", func() bool {
			victim.Schedule() // queued behind us
			victim.Stop()     // not running, so Stop returns at once
			return false
		})
		killer.Schedule()
		require.Zero(t, runs)
		require.True(t, ex.Idle())
		victim.Schedule()
		require.Zero(t, runs)
	})
	t.Run("requeued with more", func(t *testing.T) {
		ex := task.NewInline()
		var looper *task.Task
		runs := 0
		looper = task.New(ex, "looper", func() bool {
			runs++
			if runs == 3 {
				// Ask a second task to stop us: it runs after we requeue.
				task.New(ex, "stopper", func() bool { looper.Stop(); return false }).Schedule()
			}
			return true // always more
		})
		looper.Schedule()
		require.Equal(t, 3, runs)
	})
}

// blocker is a task function that parks inside its run until released.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	runs    atomic.Int32 // runs started
	done    atomic.Int32 // runs returned
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocker) fn() bool {
	b.runs.Add(1)
	b.entered <- struct{}{}
	<-b.release
	b.done.Add(1)
	return false
}

// startBlocked starts a blocker's task on a two-worker pool, closed when
// the test ends, and waits until its first run is parked in fn.
func startBlocked(t *testing.T) (*blocker, *task.Task) {
	p := task.NewPool(2)
	t.Cleanup(p.Close)
	b := newBlocker()
	tk := task.New(p, "t", b.fn)
	tk.Schedule()
	<-b.entered
	return b, tk
}

func TestStopWaitsForRun(t *testing.T) {
	for _, armed := range []bool{false, true} {
		t.Run(fmt.Sprintf("armed=%v", armed), func(t *testing.T) {
			b, tk := startBlocked(t)
			if armed {
				tk.Schedule()
			}

			stopped := make(chan struct{})
			go func() { tk.Stop(); close(stopped) }()
			select {
			case <-stopped:
				t.Fatal("Stop returned while the task was running")
			case <-time.After(20 * time.Millisecond):
			}
			close(b.release)
			select {
			case <-stopped:
			case <-time.After(waitFor):
				t.Fatal("Stop did not return after the run ended")
			}
			tk.Schedule()
			tk.Stop()
			require.EqualValues(t, 1, b.runs.Load(), "an armed task must not run after Stop")
			require.EqualValues(t, 1, b.done.Load())
		})
	}
}

// A wake-up while the task runs on a worker (Schedule, or RunHere, which
// must not run it concurrently) arms it: it runs once more, on the pool.
func TestPoolWakeWhileBusyRunsAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		wake func(*task.Task)
	}{
		{"Schedule", func(tk *task.Task) {
			tk.Schedule() // busy -> armed
			tk.Schedule() // armed: no-op
		}},
		{"RunHere", func(tk *task.Task) { tk.RunHere() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, tk := startBlocked(t)
			// A wake-up that ran fn here would park in it beside the
			// first run: it must return while that run is still parked.
			woke := make(chan struct{})
			go func() { tc.wake(tk); close(woke) }()
			select {
			case <-woke:
			case <-b.entered:
				close(b.release) // let both runs end, so the pool can close
				t.Fatal("the wake-up ran the task concurrently")
			case <-time.After(waitFor):
				close(b.release)
				t.Fatal("the wake-up did not return: it ran the task concurrently")
			}
			require.EqualValues(t, 1, b.runs.Load(), "the wake-up ran the task concurrently")
			b.release <- struct{}{}
			select {
			case <-b.entered:
			case <-time.After(waitFor):
				t.Fatal("wake-up during a run was lost")
			}
			close(b.release)
			require.Eventually(t, func() bool { return b.done.Load() == 2 }, waitFor, time.Millisecond)
			require.EqualValues(t, 2, b.runs.Load(), "one extra run, no more")
		})
	}
}

func TestPoolNeverConcurrentNoLostWakeups(t *testing.T) {
	p := task.NewPool(8)
	defer p.Close()
	const nTasks, goroutines, rounds = 4, 16, 2000
	type state struct {
		running  atomic.Int32
		produced atomic.Int64
		consumed atomic.Int64
		overlap  atomic.Bool
	}
	states := make([]*state, nTasks)
	tasks := make([]*task.Task, nTasks)
	for i := range tasks {
		s := &state{}
		states[i] = s
		batches := 0 // only touched by fn: a data race here means fn ran concurrently
		tasks[i] = task.New(p, fmt.Sprint(i), func() bool {
			if s.running.Add(1) != 1 {
				s.overlap.Store(true)
			}
			batches++
			s.consumed.Store(s.produced.Load())
			s.running.Add(-1)
			return batches%7 == 0 // sometimes ask for another turn
		})
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				s := states[(g+r)%nTasks]
				s.produced.Add(1)
				if r%2 == 0 {
					tasks[(g+r)%nTasks].Schedule()
				} else {
					tasks[(g+r)%nTasks].RunHere()
				}
			}
		})
	}
	wg.Wait()
	for i, s := range states {
		require.Eventually(t, func() bool { return s.consumed.Load() == s.produced.Load() },
			waitFor, time.Millisecond, "task %d lost a wake-up", i)
		require.False(t, s.overlap.Load(), "task %d ran concurrently with itself", i)
	}
}

func TestPoolRunHereRunsOnCaller(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	var onCaller atomic.Bool
	inCall := false // set only by this goroutine around RunHere
	fn, runs := counted(func() bool {
		onCaller.Store(inCall)
		return false
	})
	tk := task.New(p, "t", fn)
	inCall = true
	tk.RunHere()
	inCall = false
	require.EqualValues(t, 1, runs.Load(), "RunHere on an idle task returns after the run")
	require.True(t, onCaller.Load())
}

func TestPoolRunHereMoreGoesToPool(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	var (
		n        atomic.Int32
		onCaller [3]atomic.Bool // whether run i+1 ran inside RunHere
	)
	returned := make(chan struct{}) // closed when RunHere has returned
	fn, runs := counted(func() bool {
		i := n.Add(1)
		if i == 1 {
			return true // the caller's run (TestPoolRunHereRunsOnCaller)
		}
		// A later run on a worker sees RunHere return; one inside RunHere
		// would wait for itself, so give up after a while and say so.
		select {
		case <-returned:
		case <-time.After(2 * time.Second):
			onCaller[i-1].Store(true)
		}
		return i < 3
	})
	tk := task.New(p, "t", fn)
	tk.RunHere()
	close(returned)
	require.Eventually(t, func() bool { return runs.Load() == 3 }, waitFor, time.Millisecond)
	require.EqualValues(t, 3, n.Load())
	require.False(t, onCaller[1].Load(), "more work went to the pool, not the caller")
	require.False(t, onCaller[2].Load(), "more work went to the pool, not the caller")
}

func TestInlineRunHereIsSchedule(t *testing.T) {
	ex := task.NewInline()
	var order []string
	var a, b *task.Task
	a = task.New(ex, "a", func() bool {
		order = append(order, "a")
		b.RunHere() // queued behind a, not run inside it
		order = append(order, "a-end")
		return false
	})
	b = task.New(ex, "b", func() bool { order = append(order, "b"); return false })
	a.RunHere()
	require.Equal(t, []string{"a", "a-end", "b"}, order)
}

func TestPoolClose(t *testing.T) {
	p := task.NewPool(1)
	b := newBlocker()
	running := task.New(p, "running", b.fn)
	waitFn, waitRuns := counted(func() bool { return false })
	waiting := task.New(p, "waiting", waitFn)
	running.Schedule()
	<-b.entered
	waiting.Schedule() // queued behind the only worker

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a task was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(b.release)
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("Close did not return")
	}
	p.Close() // idempotent

	// Nothing runs after Close; Stop on a task stranded in the queue is immediate.
	require.Zero(t, waitRuns.Load())
	running.Schedule()
	waiting.Schedule()
	running.Stop()
	waiting.Stop()
	require.EqualValues(t, 1, b.done.Load())
	require.Zero(t, waitRuns.Load())
}

func TestPoolDefaultWorkers(t *testing.T) {
	p := task.NewPool(0)
	defer p.Close()
	done := make(chan struct{})
	task.New(p, "t", func() bool { close(done); return false }).Schedule()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("task did not run")
	}
}

func BenchmarkScheduleQueued(b *testing.B) {
	ex := task.NewInline()
	var tk *task.Task
	first := true
	tk = task.New(ex, "t", func() bool {
		if first {
			first = false
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				tk.Schedule() // armed after the first call: the atomic fast path
			}
			b.StopTimer()
		}
		return false
	})
	tk.Schedule()
}

func BenchmarkInlineRun(b *testing.B) {
	ex := task.NewInline()
	tk := task.New(ex, "t", func() bool { return false })
	b.ReportAllocs()
	for b.Loop() {
		tk.Schedule()
	}
}

func ExampleInline() {
	ex := task.NewInline()
	pending := []string{"p1", "p2", "p3", "p4", "p5"}
	var rx *task.Task
	runs := 0
	rx = task.New(ex, "qp1.recv", func() (more bool) {
		runs++
		// Handle at most two packets per batch, then yield.
		n := min(2, len(pending))
		fmt.Println(rx.Name(), "handles", pending[:n])
		pending = pending[n:]
		return len(pending) > 0
	})
	rx.Schedule()
	fmt.Println("runs:", runs)
	// Output:
	// qp1.recv handles [p1 p2]
	// qp1.recv handles [p3 p4]
	// qp1.recv handles [p5]
	// runs: 3
}

func TestInlineChainKeepsCallOrder(t *testing.T) {
	ex := task.NewInline()
	var order []byte
	mk := func(name byte) *task.Task {
		return task.New(ex, string(name), func() bool { order = append(order, name); return false })
	}
	a, b, c, d := mk('A'), mk('B'), mk('C'), mk('D')
	s := task.New(ex, "S", func() bool {
		order = append(order, 'S')
		a.Chain()
		b.Schedule()
		c.Chain()
		a.Chain() // already queued: no-op
		d.Schedule()
		require.Equal(t, "S", string(order), "nothing runs inside a task")
		return false
	})
	s.Schedule()
	require.Equal(t, "SABCD", string(order))
	require.True(t, ex.Idle())
}

func TestInlineChainArmsARunningTask(t *testing.T) {
	ex := task.NewInline()
	runs := 0
	var self *task.Task
	self = task.New(ex, "self", func() bool {
		runs++
		if runs == 1 {
			self.Chain() // busy: armed, runs once more
		}
		return false
	})
	self.Schedule()
	require.Equal(t, 2, runs)
}

func TestPoolChainIsSchedule(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	done := make(chan struct{})
	tk := task.New(p, "t", func() bool { close(done); return false })
	tk.Chain()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a chained task never ran on the pool")
	}
}

// TestInlineRunHereWhenIdle: on an idle Inline executor RunHere runs the
// task before it returns, then what the task scheduled; a stopped task
// does not run.
func TestInlineRunHereWhenIdle(t *testing.T) {
	ex := task.NewInline()
	var order []string
	b := task.New(ex, "b", func() bool { order = append(order, "b"); return false })
	a := task.New(ex, "a", func() bool {
		order = append(order, "a")
		b.Chain()
		return false
	})
	a.RunHere()
	require.Equal(t, []string{"a", "b"}, order)
	require.True(t, ex.Idle())
	a.Stop()
	a.RunHere()
	require.Equal(t, []string{"a", "b"}, order, "a stopped task ran")
	require.True(t, ex.Idle())
}

// TestInlineClaim: on an idle Inline executor Claim makes the caller the
// drainer doing the task's batch; what the batch chains, or what asks the
// task to run again meanwhile, runs at Release, in call order.
func TestInlineClaim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during func(self, other *task.Task) // inside the claimed batch
		more   bool
		want   string // the fns run after Release, in order
	}{
		{name: "alone", during: func(_, _ *task.Task) {}, want: ""},
		{name: "chains another", during: func(_, o *task.Task) { o.Chain() }, want: "o"},
		{name: "scheduled meanwhile", during: func(s, _ *task.Task) { s.Schedule() }, want: "s"},
		{name: "more", during: func(_, _ *task.Task) {}, more: true, want: "s"},
		{name: "chains, then more", during: func(_, o *task.Task) { o.Chain() }, more: true, want: "os"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := task.NewInline()
			var order string
			self := task.New(ex, "s", func() bool { order += "s"; return false })
			other := task.New(ex, "o", func() bool { order += "o"; return false })
			c := self.Claim()
			require.Equal(t, task.ClaimRun, c)
			require.False(t, ex.Idle(), "the claimer is the drainer")
			tc.during(self, other)
			require.Empty(t, order, "nothing runs inside the claimed batch")
			self.Release(c, tc.more)
			require.Equal(t, tc.want, order)
			require.True(t, ex.Idle())
		})
	}
}

// TestInlineClaimBusy: while another goroutine drains, Claim takes
// nothing and Release schedules the task, which that drainer runs.
func TestInlineClaimBusy(t *testing.T) {
	ex := task.NewInline()
	inside, release := make(chan struct{}), make(chan struct{})
	blocker := task.New(ex, "b", func() bool { close(inside); <-release; return false })
	fn, runs := counted(func() bool { return false })
	tk := task.New(ex, "t", fn)
	go blocker.Schedule()
	<-inside
	c := tk.Claim()
	require.Equal(t, task.ClaimNone, c)
	tk.Release(c, false)
	require.Zero(t, runs.Load(), "scheduled behind the running drainer")
	close(release)
	require.Eventually(t, func() bool { return runs.Load() == 1 && ex.Idle() }, waitFor, time.Millisecond)
}

// TestInlineClaimStopped: a stopped task is not claimed and does not run.
// (A claim that finds its task queued by another goroutine drains it:
// TestInlineConcurrentSchedulers, through RunHere.)
func TestInlineClaimStopped(t *testing.T) {
	ex := task.NewInline()
	fn, runs := counted(func() bool { return false })
	tk := task.New(ex, "t", fn)
	tk.Stop()
	c := tk.Claim()
	require.NotEqual(t, task.ClaimRun, c)
	tk.Release(c, false)
	require.Zero(t, runs.Load())
	require.True(t, ex.Idle())
}

// TestPoolClaim: an idle task is claimed by the caller; a claimed task is
// not claimed twice, and a Release of the failed claim arms it, so it runs
// once more on the pool after the first Release.
func TestPoolClaim(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	fn, runs := counted(func() bool { return false })
	tk := task.New(p, "t", fn)
	c := tk.Claim()
	require.Equal(t, task.ClaimRun, c)
	c2 := tk.Claim()
	require.Equal(t, task.ClaimNone, c2, "claimed twice")
	tk.Release(c2, false) // busy: armed
	require.Zero(t, runs.Load(), "ran while claimed")
	tk.Release(c, false)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, waitFor, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	require.EqualValues(t, 1, runs.Load(), "one extra run, no more")
}

// TestInlineClaimStopWaits: a Stop from another goroutine while the
// caller does a claimed batch waits for the batch to end, and the task
// never runs after it, even when the batch reports more.
func TestInlineClaimStopWaits(t *testing.T) {
	ex := task.NewInline()
	fn, runs := counted(func() bool { return false })
	tk := task.New(ex, "t", fn)
	c := tk.Claim()
	require.Equal(t, task.ClaimRun, c)
	stopped := make(chan struct{})
	go func() { tk.Stop(); close(stopped) }()
	require.Never(t, func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	}, 50*time.Millisecond, time.Millisecond, "Stop returned inside the claimed batch")
	tk.Release(c, true)
	<-stopped
	require.Zero(t, runs.Load(), "ran after Stop")
	require.True(t, ex.Idle())
}

// TestInlineClaimScheduledElsewhere: a Schedule from another goroutine
// during a claimed batch runs the task once more after it, on the
// claimer, as for an armed task.
func TestInlineClaimScheduledElsewhere(t *testing.T) {
	ex := task.NewInline()
	fn, runs := counted(func() bool { return false })
	tk := task.New(ex, "t", fn)
	c := tk.Claim()
	require.Equal(t, task.ClaimRun, c)
	done := make(chan struct{})
	go func() { tk.Schedule(); close(done) }()
	<-done
	require.Zero(t, runs.Load(), "ran inside the claimed batch")
	tk.Release(c, false)
	require.EqualValues(t, 1, runs.Load())
	require.True(t, ex.Idle())
}

// TestPoolReleaseAgain: a claimed task scheduled again during the
// caller's batch runs its next batch on the caller, inside ReleaseAgain;
// one not scheduled again does not run; and a batch reporting more goes
// to the pool as with Release.
func TestPoolReleaseAgain(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	var onCaller atomic.Int32
	inCall := false // set only by this goroutine around ReleaseAgain
	fn, runs := counted(func() bool {
		if inCall {
			onCaller.Add(1)
		}
		return false
	})
	tk := task.New(p, "t", fn)

	c := tk.Claim()
	require.Equal(t, task.ClaimRun, c)
	inCall = true
	tk.ReleaseAgain(c, false) // not scheduled again: nothing runs
	inCall = false
	require.Zero(t, runs.Load())

	c = tk.Claim()
	tk.Schedule() // work came during the caller's batch: armed
	inCall = true
	tk.ReleaseAgain(c, false)
	inCall = false
	require.EqualValues(t, 1, runs.Load(), "the armed batch ran before ReleaseAgain returned")
	require.EqualValues(t, 1, onCaller.Load())
	time.Sleep(10 * time.Millisecond)
	require.EqualValues(t, 1, runs.Load(), "one extra run, no more")

	c = tk.Claim()
	tk.ReleaseAgain(c, true) // more: to the pool
	require.Eventually(t, func() bool { return runs.Load() == 2 }, waitFor, time.Millisecond)
	require.EqualValues(t, 1, onCaller.Load())
}

func TestInlineReleaseAgainIsRelease(t *testing.T) {
	ex := task.NewInline()
	fn, runs := counted(func() bool { return false })
	tk := task.New(ex, "t", fn)
	c := tk.Claim()
	require.Equal(t, task.ClaimRun, c)
	tk.Schedule() // armed: the drain runs it at Release
	tk.ReleaseAgain(c, false)
	require.EqualValues(t, 1, runs.Load())
}

// TestInlineEnter: Enter makes an idle executor's caller its drainer,
// inside which Chain only queues, and Leave runs what was chained, in
// order; with a task queued, or a drainer at work on another goroutine,
// Enter takes nothing.
func TestInlineEnter(t *testing.T) {
	ex := task.NewInline()
	var order string
	a := task.New(ex, "a", func() bool { order += "a"; return false })
	b := task.New(ex, "b", func() bool { order += "b"; return false })
	require.True(t, ex.Enter())
	require.False(t, ex.Idle())
	require.False(t, ex.Enter(), "one drainer")
	b.Chain()
	a.Chain()
	b.Chain() // already queued: once
	require.Empty(t, order, "nothing runs before Leave")
	ex.Leave()
	require.Equal(t, "ba", order)
	require.True(t, ex.Idle())

	// A drainer at work elsewhere: Enter takes nothing; the drainer runs
	// what Schedule queues meanwhile.
	inside, release := make(chan struct{}), make(chan struct{})
	blocker := task.New(ex, "x", func() bool { close(inside); <-release; return false })
	go blocker.Schedule()
	<-inside
	require.False(t, ex.Enter())
	a.Schedule()
	close(release)
	require.Eventually(t, func() bool { return ex.Idle() }, waitFor, time.Millisecond)
	require.Equal(t, "baa", order)
}

package task_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
)

// TestPoolCarryRunsAfterSrcOnCaller: tasks carried by a batch run on the
// goroutine that ran it, after it, in the order carried, and so do the
// tasks those carry (after the ones carried before them); none goes to a
// worker, so all have run when RunHere returns.
func TestPoolCarryRunsAfterSrcOnCaller(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	var order []string // appended on the caller only; the race detector checks it
	var src, a, b, c *task.Task
	src = task.New(p, "src", func() bool {
		a.Carry(src)
		b.Carry(src)
		a.Carry(src) // already carried: once
		order = append(order, "src")
		return false
	})
	a = task.New(p, "a", func() bool {
		c.Carry(a)
		order = append(order, "a")
		return false
	})
	b = task.New(p, "b", func() bool { order = append(order, "b"); return false })
	c = task.New(p, "c", func() bool { order = append(order, "c"); return false })
	src.RunHere()
	require.Equal(t, []string{"src", "a", "b", "c"}, order)
}

// TestPoolCarryAtRelease: a batch done between Claim and Release carries
// its tasks to the Release.
func TestPoolCarryAtRelease(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	fn, runs := counted(func() bool { return false })
	tk := task.New(p, "t", fn)
	src := task.New(p, "src", func() bool { panic("src's batch is the caller's") })
	cl := src.Claim()
	require.Equal(t, task.ClaimRun, cl)
	tk.Carry(src)
	require.Zero(t, runs.Load(), "ran inside the batch")
	src.Release(cl, false)
	require.EqualValues(t, 1, runs.Load(), "not run at the Release")
}

// TestPoolCarryFromWorker: a batch run by a worker carries to that worker,
// which runs the carried task after the batch; with the pool's queue, the
// other worker would have run it during the batch.
func TestPoolCarryFromWorker(t *testing.T) {
	p := task.NewPool(2)
	defer p.Close()
	fn, runs := counted(func() bool { return false })
	tk := task.New(p, "t", fn)
	ranEarly := make(chan bool, 1)
	var src *task.Task
	src = task.New(p, "src", func() bool {
		tk.Carry(src)
		time.Sleep(20 * time.Millisecond) // time for the other worker
		ranEarly <- runs.Load() != 0
		return false
	})
	src.Schedule()
	require.False(t, <-ranEarly, "the carried task ran during the batch")
	require.Eventually(t, func() bool { return runs.Load() == 1 }, waitFor, time.Millisecond)
}

// TestPoolCarryBusyArms: a task busy on another goroutine is armed, not
// carried: it runs again there, and the carrying caller does not run it.
func TestPoolCarryBusyArms(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	started, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	tk := task.New(p, "t", func() bool {
		if n.Add(1) == 1 {
			close(started)
			<-release
		}
		return false
	})
	tk.Schedule()
	<-started
	var took bool
	var src *task.Task
	src = task.New(p, "src", func() bool {
		took = tk.TryCarry(src)
		tk.Carry(src)
		return false
	})
	src.RunHere() // returns: t is not run here
	require.False(t, took, "took a busy task")
	require.EqualValues(t, 1, n.Load(), "the carrier ran a busy task")
	close(release)
	require.Eventually(t, func() bool { return n.Load() == 2 }, waitFor, time.Millisecond, "armed task did not run again")
}

// TestPoolTryCarry: TryCarry takes an idle task, says yes again for one the
// same batch carries, and no for one queued on the pool.
func TestPoolTryCarry(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	// Keep the only worker busy so that a scheduled task stays queued.
	started, release := make(chan struct{}), make(chan struct{})
	blocker := task.New(p, "blocker", func() bool { close(started); <-release; return false })
	blocker.Schedule()
	<-started
	aFn, aRuns := counted(func() bool { return false })
	bFn, bRuns := counted(func() bool { return false })
	a, b := task.New(p, "a", aFn), task.New(p, "b", bFn)
	b.Schedule() // queued behind the blocker
	var got []bool
	var src *task.Task
	src = task.New(p, "src", func() bool {
		got = append(got, a.TryCarry(src), a.TryCarry(src), b.TryCarry(src))
		return false
	})
	src.RunHere()
	require.Equal(t, []bool{true, true, false}, got)
	require.EqualValues(t, 1, aRuns.Load(), "a carried once, run once")
	require.Zero(t, bRuns.Load(), "b is the pool's to run")
	close(release)
	require.Eventually(t, func() bool { return bRuns.Load() == 1 }, waitFor, time.Millisecond)
}

// TestPoolCarriedThenStopped: a task stopped while carried does not run.
func TestPoolCarriedThenStopped(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	fn, runs := counted(func() bool { return false })
	tk := task.New(p, "t", fn)
	var src *task.Task
	src = task.New(p, "src", func() bool {
		tk.Carry(src)
		tk.Stop() // queued: stops at once
		return false
	})
	src.RunHere()
	require.Zero(t, runs.Load())
}

// TestInlineCarryIsChain: on an Inline executor a carried task runs after
// the batch, in call order with what else was chained.
func TestInlineCarryIsChain(t *testing.T) {
	ex := task.NewInline()
	var order []string
	var src, a, b *task.Task
	src = task.New(ex, "src", func() bool {
		a.Carry(src)
		b.Chain()
		order = append(order, "src")
		return false
	})
	a = task.New(ex, "a", func() bool { order = append(order, "a"); return false })
	b = task.New(ex, "b", func() bool { order = append(order, "b"); return false })
	src.Schedule()
	require.Equal(t, []string{"src", "a", "b"}, order)
}

// ranAfter returns a Func that records whether it ran after returned was
// closed (on a worker) rather than before (on the carrier, inside the
// call that closes it afterwards).
func ranAfter(returned <-chan struct{}, after *atomic.Bool, done chan<- struct{}) task.Func {
	return func() bool {
		select {
		case <-returned:
			after.Store(true)
		case <-time.After(2 * time.Second):
		}
		close(done)
		return false
	}
}

// waitDone waits for done, failing if a task that should run never does.
func waitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the spilled task never ran")
	}
}

// TestPoolSpill: Spill in a batch hands what the batch carries, and what
// its carrier was to run after it, to the pool's workers.
func TestPoolSpill(t *testing.T) {
	p := task.NewPool(2)
	defer p.Close()
	t.Run("own", func(t *testing.T) {
		returned, done := make(chan struct{}), make(chan struct{})
		var after atomic.Bool
		b := task.New(p, "b", ranAfter(returned, &after, done))
		var src *task.Task
		src = task.New(p, "src", func() bool {
			b.Carry(src)
			src.Spill()
			return false
		})
		src.RunHere()
		close(returned)
		waitDone(t, done)
		require.True(t, after.Load(), "the carrier ran what its batch spilled")
	})
	t.Run("remainder", func(t *testing.T) {
		returned, done := make(chan struct{}), make(chan struct{})
		var after atomic.Bool
		c := task.New(p, "c", ranAfter(returned, &after, done))
		var src, a *task.Task
		a = task.New(p, "a", func() bool {
			a.Spill() // c, carried by src after a, is still to run here
			return false
		})
		src = task.New(p, "src", func() bool {
			a.Carry(src)
			c.Carry(src)
			return false
		})
		src.RunHere()
		close(returned)
		waitDone(t, done)
		require.True(t, after.Load(), "the carrier ran what a's batch spilled")
	})
}

// TestPoolCarryBudget: a chain that keeps carrying returns to its caller
// after the claimed batch and CarryBudget carried ones; the rest goes to
// the pool's queue, and the pool runs it.
func TestPoolCarryBudget(t *testing.T) {
	for _, open := range []bool{false, true} {
		p := task.NewPool(2)
		if !open {
			p.Close() // nothing runs but what the caller runs
		}
		const rounds = 1000
		var n atomic.Int32
		var x, y *task.Task
		x = task.New(p, "x", func() bool {
			if n.Add(1) < rounds {
				y.Carry(x)
			}
			return false
		})
		y = task.New(p, "y", func() bool {
			if n.Add(1) < rounds {
				x.Carry(y)
			}
			return false
		})
		x.RunHere()
		if !open {
			require.EqualValues(t, 1+task.CarryBudget, n.Load(), "batches run on the caller")
			continue
		}
		require.Eventually(t, func() bool { return n.Load() == rounds }, waitFor, time.Millisecond,
			"the pool did not run what the budget left")
		p.Close()
	}
}

// TestPoolStoppedCarriedHandsOn: a carried task stopped before its turn
// is skipped, and what the carrier was to run after it still runs.
func TestPoolStoppedCarriedHandsOn(t *testing.T) {
	p := task.NewPool(1)
	p.Close() // only the caller runs tasks
	aFn, aRuns := counted(func() bool { return false })
	bFn, bRuns := counted(func() bool { return false })
	a, b := task.New(p, "a", aFn), task.New(p, "b", bFn)
	var src *task.Task
	src = task.New(p, "src", func() bool {
		a.Carry(src)
		b.Carry(src)
		a.Stop() // queued: stops at once
		return false
	})
	src.RunHere()
	require.Zero(t, aRuns.Load(), "a stopped task ran")
	require.EqualValues(t, 1, bRuns.Load(), "the task carried after a stopped one was lost")
}

// TestCarryAcrossExecutorsPanics: a batch cannot carry a task of another
// executor, which it would never run.
func TestCarryAcrossExecutorsPanics(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	other := task.New(task.NewInline(), "other", func() bool { return false })
	var src *task.Task
	var got any
	src = task.New(p, "src", func() bool {
		defer func() { got = recover() }()
		other.Carry(src)
		return false
	})
	src.RunHere()
	require.Equal(t, "task: src carries other, which is on another executor", got)
}

// TestPoolLocal: a worker's batch and a caller's (RunHere) get a Local, and
// the task gives it up with its batch; on Inline there is none.
func TestPoolLocal(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	seen := make(chan *task.Local, 2)
	var tk *task.Task
	tk = task.New(p, "t", func() bool { seen <- tk.Local(); return false })
	tk.RunHere()
	require.NotNil(t, <-seen, "RunHere's batch got no Local")
	require.Nil(t, tk.Local(), "an idle task still holds the Local RunHere lent")
	tk.Schedule()
	select {
	case l := <-seen:
		require.NotNil(t, l, "a worker's batch got no Local")
	case <-time.After(waitFor):
		t.Fatal("the scheduled task never ran")
	}
	var it *task.Task
	ran := false
	it = task.New(task.NewInline(), "i", func() bool { ran = true; require.Nil(t, it.Local()); return false })
	it.Schedule()
	require.True(t, ran)
}

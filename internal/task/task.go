package task

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Func does one bounded batch of work. It returns more=true if work is left,
// which puts the task back at the end of its executor's run queue.
type Func func() (more bool)

// Executor runs scheduled tasks. The implementations are Inline and Pool.
type Executor interface {
	// enqueue adds t, whose state is already queued, to the run queue. It is
	// called at most once per transition into the queued state.
	enqueue(t *Task)
	// requeue is enqueue called only on a goroutine that is running the
	// executor's tasks: for t itself when its run ends, or from a Func (Chain).
	requeue(t *Task)
}

// Task states. Transitions are made with compare-and-swap on Task.state.
const (
	stateIdle     int32 = iota // not queued, not running
	stateQueued                // in the executor's run queue
	stateBusy                  // fn is running
	stateArmed                 // fn is running and Schedule was called meanwhile
	stateStopping              // fn is running and Stop is waiting for it
	stateStopped               // never runs again
)

// Task is a unit of work that an Executor runs one batch at a time. It is
// safe for concurrent use.
type Task struct {
	state atomic.Int32
	ex    Executor
	fn    Func
	name  string
	next  *Task // in an Inline run queue, or in a carry list

	// carry holds the tasks handed to the goroutine running this one's
	// batch (Carry); only that goroutine touches it.
	carry list
	// local is what the goroutine running the batch lends it (Local).
	local *Local

	// stopMu and stopped let Stop wait for a running fn; only used by Stop.
	stopMu  sync.Mutex
	stopped *sync.Cond
}

// New returns an idle task that runs fn on ex.
func New(ex Executor, name string, fn Func) *Task {
	t := new(Task)
	t.Init(ex, name, fn)
	return t
}

// Init makes t, a zero Task, what New returns: for a task that lives
// inside the object it works for, next to the fields its batches touch.
func (t *Task) Init(ex Executor, name string, fn Func) {
	*t = Task{ex: ex, fn: fn, name: name}
	t.stopped = sync.NewCond(&t.stopMu)
}

// Name returns the name given to New.
func (t *Task) Name() string { return t.name }

// String returns the task's name.
func (t *Task) String() string { return t.name }

// Schedule asks for fn to run. An idle task is queued on its executor; a
// running task is armed so that it runs once more after the current batch; a
// task that is already queued or armed, or has been stopped, is left as it
// is. With the Inline executor, Schedule may run tasks before it returns.
func (t *Task) Schedule() {
	if t.markQueued() {
		t.ex.enqueue(t)
	}
}

// Chain is Schedule called from inside a task's Func for a task on the
// same executor: a packet handed from one QP's task to another's, for
// example. On the Inline executor the task joins the queue that only the
// draining goroutine uses (the one running the calling Func), which costs
// no locked instruction; Schedule's queue costs a compare-and-swap to push
// and a swap to take. On a Pool, Chain is Schedule. Calling Chain from
// anywhere else is a data race on an Inline executor.
func (t *Task) Chain() {
	if t.markQueued() {
		t.ex.requeue(t)
	}
}

// Carry is Chain for a task handed work by src's batch, which is running
// on the calling goroutine (inside src's Func, or between Claim and
// Release): the goroutine runs t when src's batch is over, as rxe runs
// its responder in the sender's context when the responder has no
// backlog. On a Pool that saves a worker's wake-up and keeps the work
// where its data is warm. A task that is busy (on another goroutine) is
// armed instead, and one already queued is left in its queue: the backlog
// cases. On an Inline executor Carry is Chain. t and src must share an
// executor.
func (t *Task) Carry(src *Task) {
	if t.markQueued() {
		t.carried(src)
	}
}

// TryCarry is Carry for an idle task, or one src's batch already carries:
// it reports whether the calling goroutine runs t's next batch, so that
// whatever it hands t until then needs no synchronisation. A task in any
// other state is left as it is.
func (t *Task) TryCarry(src *Task) bool {
	switch t.state.Load() {
	case stateIdle:
		// A failed compare-and-swap costs as much as one that succeeds:
		// hence the load first.
		if t.state.CompareAndSwap(stateIdle, stateQueued) {
			t.carried(src)
			return true
		}
	case stateQueued:
		// Queued by us, for example for the packet before this one? Only
		// our goroutine touches src's carry list, and nobody else runs
		// a task on it.
		return src.carry.has(t)
	}
	return false
}

// carried puts t, just moved to queued, where src's goroutine runs it.
func (t *Task) carried(src *Task) {
	if t.ex != src.ex {
		// src's executor would never run t (an Inline drainer ignores
		// carry lists), or t would join another drainer's list.
		panic("task: " + src.name + " carries " + t.name + ", which is on another executor")
	}
	if _, ok := t.ex.(*Pool); ok {
		src.carry.add(t)
	} else {
		t.ex.requeue(t) // Chain: we are the drainer
	}
}

// takeCarry empties t's carry list and returns it; t's batch is over but
// the task has not been finished yet, so nothing else can be adding to it.
func (t *Task) takeCarry() list {
	c := t.carry
	t.carry = list{}
	return c
}

// carryBudget bounds the carried batches one runCarried call (a worker's
// turn, a Release) runs, so that a chain that keeps waking tasks (a
// ping-pong driven from CQ handlers, say) returns to its caller; the rest
// go to the pool's queue. A Release nested in a batch starts afresh: the
// transport spills what a post from a callback carries (Conn.PostSend).
const carryBudget = 64

// runCarried runs a carry list taken with takeCarry, then the tasks those
// carry in turn, in order, up to carryBudget batches, lending them local.
func runCarried(l list, local *Local) {
	for range carryBudget {
		h := l.pop()
		if h == nil {
			return
		}
		// What is still to run here goes on h's carry list, ahead of
		// what h carries: a Spill in h's batch hands it on too.
		h.carry = l
		l = h.run(local)
	}
	if l.head != nil {
		l.head.ex.(*Pool).enqueueList(l)
	}
}

// Spill hands the tasks that t's running batch carries, and those the
// goroutine running it is to run after it, to t's executor's queue, for
// its workers to run. Call it from t's batch before anything that may
// wait for one of them: a carried task runs only when the batch is over,
// so a CQ handler that drained or destroyed its QP, say, would wait for
// itself. On an Inline executor, which carries nothing, it does nothing.
func (t *Task) Spill() {
	if l := t.takeCarry(); l.head != nil {
		t.ex.(*Pool).enqueueList(l)
	}
}

// Local is what a goroutine that runs a Pool's tasks lends the batches it
// runs, one after another: a place for caches that belong with the
// goroutine (with the CPU it runs on) rather than with a task, so that an
// idle task holds nothing. Each worker has its own; a caller that runs a
// batch itself (Claim, RunHere) borrows one for the batch and what it
// carries. The executor never looks at V.
type Local struct{ V any }

// Local returns what the goroutine running t's batch lends it; call it only
// from the batch. It is nil on an Inline executor, whose tasks run one at
// a time and can share what they need.
func (t *Task) Local() *Local { return t.local }

// markQueued moves an idle task to queued and reports true, which obliges
// the caller to put it on its executor's queue; it arms a busy task, and
// leaves a task in any other state as it is.
func (t *Task) markQueued() bool {
	for {
		switch s := t.state.Load(); s {
		case stateIdle:
			if t.state.CompareAndSwap(stateIdle, stateQueued) {
				return true
			}
		case stateBusy:
			if t.state.CompareAndSwap(stateBusy, stateArmed) {
				return false
			}
		default: // queued, armed, stopping, stopped
			return false
		}
	}
}

// RunHere runs one batch of fn on the calling goroutine if the task is idle
// and its executor is a Pool, the way rxe runs a task in the caller's
// context when it is not already running: it saves handing the work to a
// worker (a wake-up of a parked goroutine, microseconds in a VM). If fn
// has more work, or was scheduled again meanwhile, the task then goes to
// the pool as Schedule would put it. Otherwise RunHere is Schedule; on the
// Inline executor, whose order must stay that of the calls, it is Schedule
// in every case (which runs a task at once when the executor is idle).
// It is Claim, fn, Release. Do not call RunHere from the task's own fn,
// or while holding a lock that fn takes.
func (t *Task) RunHere() {
	c := t.Claim()
	more := false
	if c == ClaimRun {
		more = t.fn()
	}
	t.Release(c, more)
}

// A Claim is what Claim took: see Claim and Release.
type Claim uint8

const (
	// ClaimNone: nothing was taken; Release schedules the task.
	ClaimNone Claim = iota
	// ClaimRun: the caller does one batch of the task's work itself.
	ClaimRun
	// claimDrain (Inline): the caller became the drainer but the task was
	// not idle (queued by another goroutine, or stopped); Release drains.
	claimDrain
)

// Claim is RunHere for a caller that already holds the lock fn would take
// and does fn's batch of work itself, under that lock, instead of
// calling fn: it saves unlocking and locking again (two locked
// instructions) and a compare-and-swap. With ClaimRun the caller does
// the batch, releases its lock, then calls Release with fn's result.
// Otherwise it only releases its lock and calls Release, which schedules
// the task.
//
// On a Pool, ClaimRun means the task was idle and is now running on the
// caller, as with RunHere. On an Inline executor it means, in addition,
// that nothing was queued and the caller is now the drainer, so that the
// batch runs where Schedule would have run it (the order stays that of
// the calls) and may Chain other tasks.
func (t *Task) Claim() Claim {
	switch e := t.ex.(type) {
	case *Pool:
		if t.state.CompareAndSwap(stateIdle, stateBusy) {
			t.local = e.borrow()
			return ClaimRun
		}
	case *Inline:
		if e.becomeIdleDrainer() {
			// Only a drainer runs tasks, so t is not busy: it is idle,
			// queued on the stack by another goroutine, or stopped.
			if t.state.CompareAndSwap(stateIdle, stateBusy) {
				return ClaimRun
			}
			return claimDrain
		}
	}
	return ClaimNone
}

// Release ends what Claim began; the caller has released its lock. With
// ClaimRun, more is the batch's result, as fn's would be: the task goes
// back to idle, or to its executor's queue if more is true or it was
// scheduled meanwhile, and on an Inline executor the caller then runs
// what was queued, as Schedule does. Otherwise Release finishes what
// Schedule would have done: it schedules the task, or (when Claim made
// the caller the drainer of an Inline executor on which the task was not
// idle) runs what is queued.
func (t *Task) Release(c Claim, more bool) {
	switch c {
	case ClaimRun:
		c, local := t.takeCarry(), t.local
		t.local = nil // an idle task holds nothing
		t.finish(more)
		if e, ok := t.ex.(*Inline); ok {
			e.drain()
		} else {
			runCarried(c, local)
			t.ex.(*Pool).giveBack(local)
		}
	case claimDrain:
		// t is queued on the stack (drain runs it) or stopped.
		t.ex.(*Inline).drain()
	default:
		t.Schedule()
	}
}

// ReleaseAgain is Release for a Claim on a Pool that runs one more batch
// on the calling goroutine if the task was scheduled again during the
// caller's (work came for it meanwhile, such as an answer delivered at
// the caller's own flush), instead of handing that batch to a worker.
// Like RunHere, the caller must hold no lock fn takes.
func (t *Task) ReleaseAgain(c Claim, more bool) {
	if c == ClaimRun && !more {
		if _, ok := t.ex.(*Pool); ok && t.state.CompareAndSwap(stateArmed, stateBusy) {
			more = t.fn()
		}
	}
	t.Release(c, more)
}

// Stop waits until fn is not running and makes sure it never runs again;
// later calls to Schedule do nothing. Stop may be called more than once and
// from several goroutines. It must not be called from the task's own fn,
// which would wait for itself forever.
func (t *Task) Stop() {
	for {
		switch s := t.state.Load(); s {
		case stateIdle, stateQueued:
			// A queued task stays in its executor's queue; the executor skips
			// it because it cannot move it from queued to busy.
			if t.state.CompareAndSwap(s, stateStopped) {
				return
			}
		case stateBusy, stateArmed:
			if t.state.CompareAndSwap(s, stateStopping) {
				t.waitStopped()
				return
			}
		case stateStopping:
			t.waitStopped()
			return
		case stateStopped:
			return
		}
	}
}

func (t *Task) waitStopped() {
	t.stopMu.Lock()
	for t.state.Load() != stateStopped {
		t.stopped.Wait()
	}
	t.stopMu.Unlock()
}

// run is called by an executor for a task it took off its run queue. It runs
// fn once, lending it local (nil on Inline), then leaves the task idle,
// requeues it, or completes a Stop. It returns the tasks the batch carried
// (Carry), for the caller to run.
func (t *Task) run(local *Local) (carried list) {
	if !t.state.CompareAndSwap(stateQueued, stateBusy) {
		// Stopped while queued. Its carry list holds what a carrier
		// attached to it (runCarried): hand that back.
		return t.takeCarry()
	}
	t.local = local
	more := t.fn()
	// Before finish: once finished, t may run on another goroutine.
	carried = t.takeCarry()
	t.local = nil // an idle task holds nothing
	t.finish(more)
	return carried
}

// finish leaves a task whose fn has just returned idle, requeues it, or
// completes a Stop.
func (t *Task) finish(more bool) {
	for {
		switch t.state.Load() {
		case stateBusy:
			if more {
				if t.state.CompareAndSwap(stateBusy, stateQueued) {
					t.ex.requeue(t)
					return
				}
			} else if t.state.CompareAndSwap(stateBusy, stateIdle) {
				return
			}
		case stateArmed:
			if t.state.CompareAndSwap(stateArmed, stateQueued) {
				t.ex.requeue(t)
				return
			}
		case stateStopping:
			t.stopMu.Lock()
			t.state.Store(stateStopped)
			t.stopped.Broadcast()
			t.stopMu.Unlock()
			return
		default:
			panic(fmt.Sprintf("task %s: state %d after its batch", t.name, t.state.Load()))
		}
	}
}

// list is a FIFO of tasks linked by Task.next, for one goroutine.
type list struct{ head, tail *Task }

// add appends t.
func (l *list) add(t *Task) {
	t.next = nil
	if l.tail == nil {
		l.head = t
	} else {
		l.tail.next = t
	}
	l.tail = t
}

// has reports whether t is on l.
func (l *list) has(t *Task) bool {
	for h := l.head; h != nil; h = h.next {
		if h == t {
			return true
		}
	}
	return false
}

// pop removes and returns the oldest task, or nil.
func (l *list) pop() *Task {
	t := l.head
	if t == nil {
		return nil
	}
	l.head = t.next
	if l.head == nil {
		l.tail = nil
	}
	t.next = nil
	return t
}

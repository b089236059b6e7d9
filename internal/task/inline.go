package task

import "sync/atomic"

// Inline is an executor that runs tasks on the goroutine that schedules them.
//
// Schedule appends the task to a FIFO run queue. If no goroutine is draining
// the queue, the caller becomes the drainer and runs tasks until the queue is
// empty, including tasks that are scheduled or requeued meanwhile; a Schedule
// from inside a running task, or from another goroutine while one is
// draining, only enqueues. With a single goroutine the order in which tasks
// run is fully determined by the order of the calls, which is what a
// reproducible simulation needs.
//
// The run queue has two parts. Any goroutine pushes on a lock-free stack,
// which the drainer empties with one swap, oldest first, onto its own
// list; tasks that the running tasks requeue or Chain go onto that list,
// which only the drainer touches, so a hop from one task to the next costs
// no locked instruction for the queue. Before each run, and before each
// append to its list, the drainer looks at the stack (a load) and moves
// what it finds first: the order stays that of the calls.
// A task scheduled when the executor is idle is not queued at all: its
// caller runs it at once.
// transport's pktQueue and pktList are the same stack and list, kept apart:
// a generic costs an indirect call.
//
// An Inline is safe for concurrent use; the zero value is ready to use.
type Inline struct {
	top      atomic.Pointer[Task] // newest task pushed by Schedule, linked by Task.next
	draining atomic.Bool          // a goroutine is running queued tasks

	// The drainer's list, oldest first; only the goroutine that set
	// draining touches it.
	list list
}

// NewInline returns an inline executor with an empty run queue.
func NewInline() *Inline { return &Inline{} }

// Idle reports whether no task is queued and none is being run.
func (e *Inline) Idle() bool { return e.top.Load() == nil && !e.draining.Load() }

// becomeIdleDrainer makes the caller the drainer if nothing is queued and
// nobody drains: a task it then runs at once (instead of queueing it) runs
// where the queue would have run it, and a push and a swap are saved,
// each a locked instruction. The loads first: a failed compare-and-swap
// costs as much as one that succeeds.
func (e *Inline) becomeIdleDrainer() bool {
	return !e.draining.Load() && e.top.Load() == nil && e.draining.CompareAndSwap(false, true)
}

// Enter makes the caller the drainer if nothing is queued and nobody
// drains, and reports whether it did. The caller may then do what a
// task's Func may on this executor (Chain, the lists that only tasks
// touch), as the one goroutine running its tasks, until it calls Leave,
// which runs what it queued meanwhile and gives the role up. Outside a
// task it is Claim without a task: a frame's work taken on by the
// goroutine that delivers it.
func (e *Inline) Enter() bool { return e.becomeIdleDrainer() }

// Leave ends what Enter began: it runs the tasks queued meanwhile, then
// stops draining.
func (e *Inline) Leave() { e.drain() }

func (e *Inline) enqueue(t *Task) {
	// With nothing queued and nobody draining, t would be the whole queue.
	if e.becomeIdleDrainer() {
		t.run(nil)
		e.drain()
		return
	}
	for {
		old := e.top.Load()
		t.next = old
		if e.top.CompareAndSwap(old, t) {
			break
		}
	}
	// A load first: inside a running task the drainer is us, and a failed
	// compare-and-swap costs as much as one that succeeds.
	if e.draining.Load() || !e.draining.CompareAndSwap(false, true) {
		return // the drainer will take t
	}
	e.drain()
}

// requeue appends t, already in the queued state, to the drainer's list;
// only the drainer calls it (a task's Func runs on the drainer). Tasks
// pushed on the stack before it go first, so that with one goroutine the
// order stays that of the calls.
func (e *Inline) requeue(t *Task) {
	if e.top.Load() != nil {
		e.takeTop()
	}
	e.list.add(t)
}

// takeTop moves the tasks pushed on the stack to the end of the drainer's
// list, oldest first.
func (e *Inline) takeTop() {
	batch := e.top.Swap(nil)
	var fifo *Task
	for batch != nil { // reverse: oldest first
		n := batch.next
		batch.next = fifo
		fifo, batch = batch, n
	}
	for fifo != nil {
		n := fifo.next
		e.list.add(fifo)
		fifo = n
	}
}

// drain runs queued tasks until both queues are empty; the caller has set
// draining, and drain clears it.
func (e *Inline) drain() {
	for {
		for {
			// A load before the swap: the stack is usually empty.
			if e.top.Load() != nil {
				e.takeTop()
			}
			t := e.list.pop() // clears t.next: run may queue t again
			if t == nil {
				break
			}
			t.run(nil)
		}
		e.draining.Store(false)
		// Queued after our last look by a goroutine that saw us draining?
		if e.top.Load() == nil || !e.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

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
// The queue is a lock-free stack that the drainer empties with one swap and
// runs oldest first: a packet's hop costs a task run, and a mutex around the
// queue cost four atomic operations per run where this costs two. A task
// scheduled when the executor is idle is not queued at all: its caller
// runs it at once.
// transport's pktQueue is the same queue, kept apart: a generic costs an indirect call.
//
// An Inline is safe for concurrent use; the zero value is ready to use.
type Inline struct {
	top      atomic.Pointer[Task] // newest queued task, linked by Task.next
	draining atomic.Bool          // a goroutine is running queued tasks
}

// NewInline returns an inline executor with an empty run queue.
func NewInline() *Inline { return &Inline{} }

// Idle reports whether no task is queued and none is being run.
func (e *Inline) Idle() bool { return e.top.Load() == nil && !e.draining.Load() }

func (e *Inline) enqueue(t *Task) {
	// With nothing queued and nobody draining, t would be the whole queue:
	// become the drainer and run it without queueing it (a push and a
	// swap saved, each a locked instruction).
	if !e.draining.Load() && e.top.Load() == nil && e.draining.CompareAndSwap(false, true) {
		t.run()
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

// drain runs queued tasks until the queue is empty; the caller has set
// draining, and drain clears it.
func (e *Inline) drain() {
	for {
		// Loads before swaps: the queue is often empty.
		for e.top.Load() != nil {
			batch := e.top.Swap(nil)
			var fifo *Task
			for batch != nil { // reverse: oldest first
				n := batch.next
				batch.next = fifo
				fifo, batch = batch, n
			}
			for fifo != nil {
				n := fifo.next
				fifo.next = nil // run may queue the task again
				fifo.run()
				fifo = n
			}
		}
		e.draining.Store(false)
		// Queued after our last look by a goroutine that saw us draining?
		if e.top.Load() == nil || !e.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

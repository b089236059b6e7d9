package task

import "sync"

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
// An Inline is safe for concurrent use; the zero value is ready to use.
type Inline struct {
	mu       sync.Mutex // guards the fields below
	q        queue
	draining bool
}

// NewInline returns an inline executor with an empty run queue.
func NewInline() *Inline { return &Inline{} }

// Len returns the number of tasks waiting in the run queue.
func (e *Inline) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.q.len()
}

func (e *Inline) enqueue(t *Task) {
	e.mu.Lock()
	e.q.push(t)
	if e.draining {
		e.mu.Unlock()
		return
	}
	e.draining = true
	for {
		next := e.q.pop()
		if next == nil {
			e.draining = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		next.run()
		e.mu.Lock()
	}
}

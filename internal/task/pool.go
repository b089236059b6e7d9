package task

import (
	"runtime"
	"sync"
)

// Pool is an executor with a fixed set of worker goroutines that take tasks
// from one shared FIFO run queue.
//
// Close stops the workers. Tasks that are still queued when the pool closes,
// or that are scheduled afterwards, stay queued and never run; Stop on such a
// task returns at once. A task carried by a goroutine (Carry) is run by that
// goroutine, whether the pool is closed or not, unless it is handed to the
// queue (Spill, or past the carry budget).
type Pool struct {
	mu       sync.Mutex // guards the fields below
	work     sync.Cond  // signalled when q gains a task or the pool closes
	q        queue
	closed   bool
	sleepers int // workers parked in work.Wait: enqueue signals only then

	wg     sync.WaitGroup // running workers
	locals sync.Pool      // *Local lent to callers that run a batch (Claim)
}

// NewPool starts a pool with the given number of workers; workers <= 0 means
// runtime.GOMAXPROCS(0).
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &Pool{}
	p.work.L = &p.mu
	p.wg.Add(workers)
	for range workers {
		go p.worker()
	}
	return p
}

// Close stops the workers and waits for them to finish the tasks they are
// running. It is safe to call more than once, but not from a task running on
// this pool.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.work.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Pool) enqueue(t *Task) {
	p.mu.Lock()
	p.q.push(t)
	wake := p.sleepers > 0
	p.mu.Unlock()
	if wake {
		p.work.Signal()
	}
}

func (p *Pool) requeue(t *Task) { p.enqueue(t) }

// enqueueList is enqueue for each task of l, in order, under one lock.
func (p *Pool) enqueueList(l list) {
	p.mu.Lock()
	n := 0
	for t := l.pop(); t != nil; t = l.pop() {
		p.q.push(t)
		n++
	}
	wake := min(n, p.sleepers)
	p.mu.Unlock()
	for range wake {
		p.work.Signal()
	}
}

// borrow returns a Local for a caller that runs a batch itself.
func (p *Pool) borrow() *Local {
	if l, _ := p.locals.Get().(*Local); l != nil {
		return l
	}
	return new(Local)
}

// giveBack returns what borrow lent; the garbage collector may take it.
func (p *Pool) giveBack(l *Local) { p.locals.Put(l) }

func (p *Pool) worker() {
	defer p.wg.Done()
	local := new(Local)
	p.mu.Lock()
	for {
		// No spinning while idle: a worker that yields in a loop keeps the
		// scheduler from polling the network, which delayed every packet
		// on real links by ~100 us (measured with rvt perf).
		for p.q.len() == 0 && !p.closed {
			p.sleepers++
			p.work.Wait()
			p.sleepers--
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		t := p.q.pop()
		p.mu.Unlock()
		runCarried(t.run(local), local)
		p.mu.Lock()
	}
}

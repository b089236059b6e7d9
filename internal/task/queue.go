package task

// queue is a FIFO of tasks in a growable ring buffer. It is not safe for
// concurrent use; Pool, its only user, guards it with Pool.mu.
type queue struct {
	buf  []*Task // len(buf) is zero or a power of two
	head int     // index of the oldest task
	n    int     // number of tasks
}

func (q *queue) len() int { return q.n }

func (q *queue) push(t *Task) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = t
	q.n++
}

// pop removes and returns the oldest task, or nil if the queue is empty.
func (q *queue) pop() *Task {
	if q.n == 0 {
		return nil
	}
	t := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return t
}

func (q *queue) grow() {
	size := 2 * len(q.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]*Task, size)
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf = buf
	q.head = 0
}

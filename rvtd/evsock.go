package rvtd

import (
	"errors"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// eventSock is the daemon's end of a socket of event records: a device
// context's async events, a completion channel's comp events, an rdma_cm
// event channel's events. A record is written without blocking; one the
// full socket does not take waits, in order with those after it, and a
// goroutine sends them as the client reads, as the kernel keeps a file's
// events queued until they are read. What may wait is bounded by the
// caller (send's limit).
type eventSock struct {
	mu       sync.Mutex    // guards the fields below; a leaf
	fd       int           // our end; -1 once closed
	pending  [][]byte      // records the socket has not taken yet, oldest first
	flushing chan struct{} // closed when the flusher ends; nil: none runs
	accepted uint64        // records sent or queued so far (read: see read)
}

// errEventsFull: a record was dropped, limit records already waiting.
var errEventsFull = errors.New("event records pending at their limit")

func newEventSock(fd int) *eventSock { return &eventSock{fd: fd} }

// send writes rec to the socket, or queues a copy behind the records
// waiting if the socket is full and fewer than limit wait. queued says it
// waits (and whether it is the first that does, so callers can log a
// socket's filling once); err is errEventsFull if it was dropped for the
// limit, or the socket's error if it was lost. A closed socket takes
// records silently.
func (e *eventSock) send(rec []byte, limit int) (first bool, err error) {
	_, first, err = e.sendSeq(rec, limit)
	return first, err
}

// sendSeq is send, and returns the record's place in the socket's stream
// (0 for the first record accepted), for read.
func (e *eventSock) sendSeq(rec []byte, limit int) (seq uint64, first bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		return 0, false, nil
	}
	seq = e.accepted
	if len(e.pending) == 0 {
		err := unix.Send(e.fd, rec, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err == nil {
			e.accepted++
		}
		if err != unix.EAGAIN {
			return seq, false, err
		}
	}
	if len(e.pending) >= limit {
		return 0, false, errEventsFull
	}
	e.accepted++
	e.pending = append(e.pending, slices.Clone(rec))
	if e.flushing == nil {
		e.flushing = make(chan struct{})
		go e.flush(e.fd, e.flushing)
		return seq, true, nil
	}
	return seq, false, nil
}

// read returns how many of the records accepted so far (sendSeq's) the
// client has read: those neither pending here nor unread in the socket.
// The socket's unread bytes are its send queue (SIOCOUTQ: a Unix
// socket's sender is charged each record's buffer until the reader takes
// it), in units of charge, one record's (recordCharge). Without that
// measure (charge 0), a record counts as read once the socket took it.
func (e *eventSock) read(charge int) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	unread := uint64(len(e.pending))
	if c := charge; e.fd >= 0 && c > 0 {
		if q, err := unix.IoctlGetInt(e.fd, unix.SIOCOUTQ); err == nil && q > 0 {
			unread += uint64((q + c - 1) / c)
		}
	}
	return e.accepted - min(unread, e.accepted)
}

// recordCharge is what one record of size bytes adds to the send queue
// of a SOCK_SEQPACKET Unix socket until it is read (its buffer's true
// size), measured on a socket pair of our own; 0 if that fails.
func recordCharge(size int) int {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if unix.Send(fds[0], make([]byte, size), unix.MSG_DONTWAIT) != nil {
		return 0
	}
	q, err := unix.IoctlGetInt(fds[0], unix.SIOCOUTQ)
	if err != nil || q <= 0 {
		return 0
	}
	return q
}

// flush sends the pending records as the socket makes room, and ends when
// none is left or the socket closes.
func (e *eventSock) flush(fd int, done chan struct{}) {
	defer close(done)
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		_, _ = unix.Poll(pfd, 10) // bounded, to notice close
		e.mu.Lock()
		if e.fd < 0 {
			e.flushing = nil
			e.mu.Unlock()
			return
		}
		for len(e.pending) > 0 && unix.Send(fd, e.pending[0], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL) == nil {
			e.pending[0] = nil
			e.pending = e.pending[1:]
		}
		if len(e.pending) == 0 {
			e.pending = nil
			e.flushing = nil
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
	}
}

// forget drops the pending records drop picks (those of a destroyed CQ,
// which the kernel takes off a channel's queue too).
func (e *eventSock) forget(drop func(rec []byte) bool) {
	e.mu.Lock()
	e.pending = slices.DeleteFunc(e.pending, drop)
	e.mu.Unlock()
}

// waiting is the number of records pending.
func (e *eventSock) waiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// close stops the flusher and closes the socket. With last, what is still
// pending goes first as far as the socket takes it now (DEVICE_FATAL at
// shutdown); else it is dropped.
func (e *eventSock) close(last bool) {
	e.mu.Lock()
	if e.fd < 0 {
		e.mu.Unlock()
		return
	}
	fd := e.fd
	e.fd = -1 // the flusher, if any, stops
	fl := e.flushing
	e.mu.Unlock()
	if fl != nil {
		<-fl
	}
	e.mu.Lock()
	for _, rec := range e.pending {
		if !last || unix.Send(fd, rec, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL) != nil {
			break
		}
	}
	e.pending = nil
	e.mu.Unlock()
	unix.Close(fd)
}

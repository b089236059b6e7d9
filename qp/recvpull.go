package qp

import "fmt"

// Receive pull: a QP or SRQ whose receive WQEs are kept elsewhere (rvtd
// keeps them in a ring a client process fills) can give the engine a
// function to call when it finds its receive queue empty. The function
// moves the next WQEs in, synchronously, so a receive the client posted
// just before a message arrived is used for it (no RNR NAK, no dropped
// datagram). An embedded QP has none: PopRecvLocked then costs one nil
// check more, on the empty-queue path only.

// SetRecvPull installs pull, which PopRecvLocked calls when the QP's
// receive queue is empty, with the QP's lock held. pull may post with
// PostRecvLocked and must take no lock that is held while this QP's lock
// is taken. nil removes it.
func (q *QP) SetRecvPull(pull func()) {
	q.mu.Lock()
	q.pull = pull
	q.mu.Unlock()
}

// SetPull installs pull, which the SRQ calls when QP q finds it empty,
// with the SRQ's lock (and q's) held. pull may post with PostLocked and
// must take no lock that is held while this SRQ's or a QP's lock is
// taken. nil removes it.
func (s *SRQ) SetPull(pull func(q *QP)) {
	s.mu.Lock()
	s.pull = pull
	s.mu.Unlock()
}

// PostLocked is Post for the SRQ's pull function, which runs with the
// SRQ's lock held.
func (s *SRQ) PostLocked(wrs []RecvWR) error {
	if s.destroyed {
		return fmt.Errorf("post recv on SRQ: %w: destroyed", ErrInvalidState)
	}
	if err := postRecv(&s.q, s.kt, s.pd, s.maxSGE, wrs); err != nil {
		return fmt.Errorf("post recv on SRQ: %w", err)
	}
	return nil
}

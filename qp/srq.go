package qp

import (
	"fmt"
	"sync"

	"github.com/softverbs/softverbs/keys"
)

// SRQ is a shared receive queue.
type SRQ struct {
	pd     *keys.PD
	kt     *keys.Table
	maxSGE uint32

	mu        sync.Mutex
	q         RecvQueue
	limit     uint32 // armed limit; 0 = not armed
	refs      int32  // QPs using the SRQ
	destroyed bool
	pull      func(*QP) // see SetPull
}

// NewSRQ creates a shared receive queue of maxWR entries.
func NewSRQ(pd *keys.PD, kt *keys.Table, maxWR, maxSGE uint32) (*SRQ, error) {
	if pd == nil || kt == nil || maxWR == 0 {
		return nil, fmt.Errorf("create SRQ: %w: PD, key table and max_wr > 0 required", ErrInvalidArgument)
	}
	if maxSGE == 0 {
		maxSGE = 1
	}
	if err := pd.TryRef(); err != nil {
		return nil, fmt.Errorf("create SRQ: %w", err)
	}
	return &SRQ{pd: pd, kt: kt, maxSGE: maxSGE, q: newRecvQueue(maxWR, maxSGE)}, nil
}

// ref records a QP using s; ErrInvalidState once s is destroyed.
func (s *SRQ) ref() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("ref SRQ: %w: destroyed", ErrInvalidState)
	}
	s.refs++
	return nil
}

// unref drops a reference taken by ref; it panics if none is held.
func (s *SRQ) unref() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		panic("qp: SRQ unref without ref")
	}
	s.refs--
}

// Destroy releases the SRQ and its PD reference. Errors: ErrBusy while QPs
// use it, ErrInvalidState if it is already destroyed.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("destroy SRQ: %w: already destroyed", ErrInvalidState)
	}
	if s.refs > 0 {
		return fmt.Errorf("destroy SRQ: %w: %d QPs use it", ErrBusy, s.refs)
	}
	s.destroyed = true
	s.pd.Unref()
	return nil
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() *keys.PD { return s.pd }

// Post queues receive WRs, all or none. ErrInvalidState once s is
// destroyed.
func (s *SRQ) Post(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("post recv on SRQ: %w: destroyed", ErrInvalidState)
	}
	if err := postRecv(&s.q, s.kt, s.pd, s.maxSGE, wrs); err != nil {
		return fmt.Errorf("post recv on SRQ: %w", err)
	}
	return nil
}

// Len returns the number of queued WQEs.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.Len()
}

// Cap returns (max_wr, max_sge).
func (s *SRQ) Cap() (maxWR, maxSGE uint32) { return uint32(s.q.Cap()), s.maxSGE }

// Arm sets the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): when the
// number of queued WQEs drops below limit, the SRQ-limit-reached event is
// raised once and the SRQ disarms. 0 disarms. ErrInvalidState once s is
// destroyed.
func (s *SRQ) Arm(limit uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("arm SRQ: %w: destroyed", ErrInvalidState)
	}
	if limit > uint32(s.q.Cap()) {
		return fmt.Errorf("arm SRQ: %w: limit %d above max_wr %d", ErrInvalidArgument, limit, s.q.Cap())
	}
	s.limit = limit
	return nil
}

// Limit returns the armed limit (0 when not armed).
func (s *SRQ) Limit() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

func (s *SRQ) pop(dst *RecvWQE, q *QP) (ok, limit bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !popInto(&s.q, dst) && (s.pull == nil || s.destroyed || !s.pullLocked(dst, q)) {
		return false, false
	}
	if s.limit != 0 && uint32(s.q.Len()) < s.limit {
		s.limit = 0
		return true, true
	}
	return true, false
}

// pullLocked asks the pull function for WQEs and pops one.
func (s *SRQ) pullLocked(dst *RecvWQE, q *QP) bool {
	s.pull(q)
	return popInto(&s.q, dst)
}

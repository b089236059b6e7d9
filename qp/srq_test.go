package qp

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
)

func (f *fixture) newSRQ(t *testing.T, maxWR, maxSGE uint32) *SRQ {
	t.Helper()
	s, err := NewSRQ(f.pd, f.kt, maxWR, maxSGE)
	require.NoError(t, err)
	return s
}

// qpOnSRQ creates an RC QP in RTR that receives through s.
func (f *fixture) qpOnSRQ(t *testing.T, s *SRQ) *QP {
	t.Helper()
	cfg := f.cfg(RC, Cap{MaxSendWR: 2})
	cfg.SRQ = s
	q, err := New(0x40, cfg)
	require.NoError(t, err)
	moveTo(t, q, RTR)
	return q
}

func pop(q *QP) (RecvWQE, bool, bool) {
	var dst RecvWQE
	q.Lock()
	defer q.Unlock()
	ok, limit := q.PopRecvLocked(&dst)
	return dst, ok, limit
}

func TestNewSRQ(t *testing.T) {
	f := newFixture(t)
	_, err := NewSRQ(nil, f.kt, 4, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewSRQ(f.pd, nil, 4, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewSRQ(f.pd, f.kt, 0, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)

	refs := f.pd.Refs()
	s := f.newSRQ(t, 5, 0)
	require.Equal(t, refs+1, f.pd.Refs())
	require.Same(t, f.pd, s.PD())
	wr, sge := s.Cap()
	require.Equal(t, uint32(5), wr)
	require.Equal(t, uint32(1), sge, "max_sge defaults to 1")
	require.Equal(t, uint32(0), s.Limit())
	require.NoError(t, s.Destroy())
	require.Equal(t, refs, f.pd.Refs())
}

func TestSRQPost(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 3, 2)
	require.NoError(t, s.Post([]RecvWR{{WRID: 1, SGL: []SGE{f.sge(0, 8), f.sge(8, 8)}}}))
	err := s.Post([]RecvWR{{WRID: 2}, {WRID: 0x33, SGL: []SGE{f.sge(0, 1), f.sge(1, 1), f.sge(2, 1)}}})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "WR 1 (wr_id 0x33)")
	err = s.Post([]RecvWR{{WRID: 0x44, SGL: []SGE{{Addr: 0, Length: 4, Lkey: 0xbad00}}}})
	require.ErrorIs(t, err, keys.ErrInvalidKey)
	require.Contains(t, err.Error(), "WR 0 (wr_id 0x44)")
	require.Equal(t, 1, s.Len())
	require.ErrorIs(t, s.Post(make([]RecvWR, 3)), ErrQueueFull)
	require.NoError(t, s.Post(make([]RecvWR, 2)))
	require.ErrorIs(t, s.Post(make([]RecvWR, 1)), ErrQueueFull)
	require.Equal(t, 3, s.Len())

	// Receive SGEs are checked against the SRQ's PD.
	other := keys.NewPD(9)
	s2, err := NewSRQ(other, f.kt, 2, 1)
	require.NoError(t, err)
	require.ErrorIs(t, s2.Post([]RecvWR{{SGL: []SGE{f.sge(0, 4)}}}), keys.ErrPDMismatch)
	require.NoError(t, s2.Destroy())
}

func TestQPWithSRQ(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 4, 1)
	q := f.qpOnSRQ(t, s)
	require.Same(t, s, q.SRQ())

	err := recvList(q, RecvWR{WRID: 1})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "SRQ")

	for id := uint64(1); id <= 3; id++ {
		require.NoError(t, s.Post([]RecvWR{{WRID: id, SGL: []SGE{f.sge(id, uint32(id))}}}))
	}
	require.Equal(t, 3, q.RecvLenLocked())
	for id := uint64(1); id <= 3; id++ {
		w, ok, limit := pop(q)
		require.True(t, ok)
		require.False(t, limit)
		require.Equal(t, id, w.WRID)
		require.Equal(t, []SGE{f.sge(id, uint32(id))}, w.SGL)
		require.Equal(t, uint32(id), w.Length)
	}
	_, ok, _ := pop(q)
	require.False(t, ok)

	// A flush leaves the SRQ's WQEs: they belong to every QP on it.
	require.NoError(t, s.Post([]RecvWR{{WRID: 7}}))
	require.NoError(t, modify(q, &Attr{State: Err}, AttrState))
	q.Lock()
	q.FlushRecvLocked(func(*cq.WC) { t.Fatal("an SRQ is not flushed by one QP") })
	q.Unlock()
	require.Equal(t, 1, s.Len())

	// Modify to RESET does not touch the SRQ either.
	require.NoError(t, modify(q, &Attr{State: Reset}, AttrState))
	require.Equal(t, 1, s.Len())

	q.Release()
	require.NoError(t, s.Destroy())
}

func TestSRQLimit(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 8, 1)
	q := f.qpOnSRQ(t, s)
	defer q.Release()

	require.ErrorIs(t, s.Arm(9), ErrInvalidArgument, "limit above max_wr")
	require.Equal(t, uint32(0), s.Limit())
	require.NoError(t, s.Arm(8))
	require.NoError(t, s.Arm(3))
	require.Equal(t, uint32(3), s.Limit())

	require.NoError(t, s.Post(make([]RecvWR, 5)))
	var events []int
	for s.Len() > 0 {
		_, ok, limit := pop(q)
		require.True(t, ok)
		if limit {
			events = append(events, s.Len())
		}
	}
	require.Equal(t, []int{2}, events, "one event, when the count fell below 3")
	require.Equal(t, uint32(0), s.Limit(), "the event disarms the SRQ")

	// Disarmed: no event however low it goes, until armed again.
	require.NoError(t, s.Post(make([]RecvWR, 2)))
	_, _, limit := pop(q)
	require.False(t, limit)
	require.NoError(t, s.Arm(2))
	_, _, limit = pop(q)
	require.True(t, limit, "1 queued < 2")
	require.NoError(t, s.Arm(0))
	require.NoError(t, s.Post(make([]RecvWR, 1)))
	_, _, limit = pop(q)
	require.False(t, limit, "0 disarms")
}

func TestSRQDestroyBusy(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 4, 1)
	a := f.qpOnSRQ(t, s)
	b := f.qpOnSRQ(t, s)
	require.ErrorIs(t, s.Destroy(), ErrBusy)
	a.Release()
	require.ErrorIs(t, s.Destroy(), ErrBusy)
	b.Release()
	require.NoError(t, s.Destroy())
}

// TestSRQUnrefUnderflow: dropping a reference no QP holds is a bug in the
// caller and panics, as cq.Unref and PD.Unref do, rather than letting a
// negative count pass Destroy's busy check.
func TestSRQUnrefUnderflow(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 4, 1)
	require.Panics(t, s.unref)
	q := f.qpOnSRQ(t, s)
	q.Release()
	require.Panics(t, s.unref, "the QP's reference is gone already")
	require.NoError(t, s.Destroy())
}

func TestSRQSharedConcurrently(t *testing.T) {
	f := newFixture(t)
	const n = 512
	s := f.newSRQ(t, n, 1)
	qs := []*QP{f.qpOnSRQ(t, s), f.qpOnSRQ(t, s), f.qpOnSRQ(t, s)}
	for i := 0; i < n; i += 64 {
		wrs := make([]RecvWR, 64)
		for j := range wrs {
			wrs[j] = RecvWR{WRID: uint64(i + j), SGL: []SGE{f.sge(0, 4)}}
		}
		require.NoError(t, s.Post(wrs))
	}
	require.NoError(t, s.Arm(n/2))

	var mu sync.Mutex
	seen := map[uint64]bool{}
	events, dups := 0, 0
	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Add(1)
		go func(q *QP) {
			defer wg.Done()
			for {
				w, ok, limit := pop(q)
				if !ok {
					return
				}
				mu.Lock()
				if seen[w.WRID] {
					dups++
				}
				seen[w.WRID] = true
				if limit {
					events++
				}
				mu.Unlock()
			}
		}(q)
	}
	wg.Wait()
	require.Zero(t, dups, "no WQE is delivered twice")
	require.Len(t, seen, n)
	require.Equal(t, 1, events)
	for _, q := range qs {
		q.Release()
	}
	require.NoError(t, s.Destroy())
}

func TestSRQDestroyTwice(t *testing.T) {
	f := newFixture(t)
	refs := f.pd.Refs()
	s := f.newSRQ(t, 4, 1)
	require.NoError(t, s.Destroy())
	require.Equal(t, refs, f.pd.Refs())
	err := s.Destroy()
	require.ErrorIs(t, err, ErrInvalidState)
	require.Contains(t, err.Error(), "already destroyed")
	require.Equal(t, refs, f.pd.Refs(), "a second destroy drops no PD reference")

	// A destroyed SRQ takes no QP, and the failed creation holds nothing.
	cfg := f.cfg(RC, Cap{MaxSendWR: 2})
	cfg.SRQ = s
	q, err := New(0x40, cfg)
	require.ErrorIs(t, err, ErrInvalidState)
	require.Nil(t, q)
	require.Equal(t, refs, f.pd.Refs())
	require.Zero(t, f.scq.Refs())
	require.Zero(t, f.rcq.Refs())
}

// TestSRQPostArmAfterDestroy: a destroyed SRQ takes no more receive WRs
// and cannot be armed; its queue is left as it was.
func TestSRQPostArmAfterDestroy(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 4, 1)
	require.NoError(t, s.Post([]RecvWR{{WRID: 1, SGL: []SGE{f.sge(0, 8)}}}))
	require.NoError(t, s.Destroy())
	require.Equal(t, 1, s.Len())

	err := s.Post([]RecvWR{{WRID: 2, SGL: []SGE{f.sge(0, 8)}}})
	require.ErrorIs(t, err, ErrInvalidState)
	require.Contains(t, err.Error(), "destroyed")
	require.Equal(t, 1, s.Len(), "a post on a destroyed SRQ queues nothing")

	err = s.Arm(1)
	require.ErrorIs(t, err, ErrInvalidState)
	require.Contains(t, err.Error(), "destroyed")
	require.Equal(t, uint32(0), s.Limit(), "a destroyed SRQ is not armed")
	require.Equal(t, 1, s.Len())
}

// TestSRQDestroyRacesNew runs Destroy against a QP creation on the same
// SRQ: exactly one of them wins, never both.
func TestSRQDestroyRacesNew(t *testing.T) {
	f := newFixture(t)
	refs := f.pd.Refs()
	for i := 0; i < 200; i++ {
		s := f.newSRQ(t, 4, 1)
		cfg := f.cfg(RC, Cap{MaxSendWR: 2})
		cfg.SRQ = s
		var (
			wg         sync.WaitGroup
			q          *QP
			newErr     error
			destroyErr error
		)
		wg.Add(2)
		go func() { defer wg.Done(); q, newErr = New(0x40, cfg) }()
		go func() { defer wg.Done(); destroyErr = s.Destroy() }()
		wg.Wait()
		if newErr == nil {
			require.ErrorIs(t, destroyErr, ErrBusy, "iteration %d: QP created and SRQ destroyed", i)
			q.Release()
			require.NoError(t, s.Destroy())
		} else {
			require.ErrorIs(t, newErr, ErrInvalidState, "iteration %d", i)
			require.NoError(t, destroyErr, "iteration %d", i)
		}
		require.Equal(t, refs, f.pd.Refs(), "iteration %d", i)
	}
}

package qp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecvPull: a QP with a pull function asks it for WQEs when its
// receive queue is empty, with its lock held, and pops what it posted.
func TestRecvPull(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	next := uint64(1)
	calls := 0
	q.SetRecvPull(func() {
		calls++
		require.False(t, q.mu.TryLock(), "pull runs with the QP's lock held")
		if next > 3 {
			return // nothing more to give
		}
		require.NoError(t, q.PostRecvLocked([]RecvWR{{WRID: next, SGL: []SGE{f.sge(0, 8)}}, {WRID: next + 1}}))
		next += 2
	})
	require.NoError(t, modify(q, &Attr{State: Init, PkeyIndex: 0, Port: 1, AccessFlags: 0}, AttrState|AttrPkeyIndex|AttrPort|AttrAccessFlags))
	// A WQE posted the ordinary way is used first: no pull.
	require.NoError(t, recvList(q, RecvWR{WRID: 100}))
	w, ok, _ := pop(q)
	require.True(t, ok)
	require.Equal(t, uint64(100), w.WRID)
	require.Equal(t, 0, calls)
	for id := uint64(1); id <= 4; id++ {
		w, ok, _ := pop(q)
		require.True(t, ok)
		require.Equal(t, id, w.WRID)
	}
	require.Equal(t, 2, calls)
	_, ok, _ = pop(q)
	require.False(t, ok, "an empty pull leaves the queue empty")
	require.Equal(t, 3, calls)

	q.SetRecvPull(nil)
	_, ok, _ = pop(q)
	require.False(t, ok)
	require.Equal(t, 3, calls)
}

// TestSRQPull: an SRQ's pull function is told which QP found it empty;
// what it posts with PostLocked is popped; the SRQ limit still works on
// what it holds.
func TestSRQPull(t *testing.T) {
	f := newFixture(t)
	s := f.newSRQ(t, 4, 1)
	q := f.qpOnSRQ(t, s)
	var from []*QP
	give := 2
	s.SetPull(func(p *QP) {
		from = append(from, p)
		require.False(t, s.mu.TryLock(), "pull runs with the SRQ's lock held")
		if give == 0 {
			return
		}
		give--
		require.NoError(t, s.PostLocked([]RecvWR{{WRID: uint64(10 + give)}}))
	})
	w, ok, _ := pop(q)
	require.True(t, ok)
	require.Equal(t, uint64(11), w.WRID)
	w, ok, _ = pop(q)
	require.True(t, ok)
	require.Equal(t, uint64(10), w.WRID)
	_, ok, _ = pop(q)
	require.False(t, ok)
	require.Equal(t, []*QP{q, q, q}, from)

	// A destroyed SRQ pulls nothing.
	q.Release()
	require.NoError(t, s.Destroy())
	require.Error(t, s.PostLocked([]RecvWR{{WRID: 1}}))
}

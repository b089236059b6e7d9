package qp

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestSendQueueAHsOnFirstUse checks the send queue's AH copies: a QP that
// posts no WR with an address handle (RC) never makes the array, however
// many WRs it posts; a UD QP makes it at its first post, and each WQE's
// WR.AH points at its own slot's copy, which outlives the caller's AH.
func TestSendQueueAHsOnFirstUse(t *testing.T) {
	f := newFixture(t)
	rc := f.newQP(t, RC, defaultCap())
	moveTo(t, rc, RTS)
	for i := range 100 {
		require.NoError(t, sendList(rc, f.sendWR(RC, uint64(i))))
		rc.SQ.Retire()
	}
	require.Nil(t, rc.SQ.copies, "RC: no AH copies")

	ud := f.newQP(t, UD, defaultCap())
	moveTo(t, ud, RTS)
	require.Nil(t, ud.SQ.copies, "none before the first post")
	for i := range 3 * defaultCap().MaxSendWR { // round the ring a few times
		wr := f.sendWR(UD, uint64(i))
		wr.AH.AV.HopLimit = uint8(i + 1)
		require.NoError(t, sendList(ud, wr))
		wr.AH.AV.HopLimit = 0 // the caller's AH changes: the copy does not
		w := ud.SQ.At(ud.SQ.Head() - 1)
		require.Len(t, ud.SQ.copies.ahs, len(ud.SQ.e))
		require.Same(t, &ud.SQ.copies.ahs[(ud.SQ.Head()-1)&ud.SQ.mask], w.WR.AH)
		require.Equal(t, uint8(i+1), w.WR.AH.AV.HopLimit)
		require.Equal(t, f.pd, w.WR.AH.PD)
		ud.SQ.Retire()
	}
	// Sizes the allocator's classes fit (see SendWQE): with many QPs
	// every byte is many.
	require.LessOrEqual(t, 16*unsafe.Sizeof(SendWQE{})+8, uintptr(4096), "16 WQEs and a malloc header in 4 KiB")
	require.LessOrEqual(t, unsafe.Sizeof(QP{}), uintptr(288), "the allocator's 288-byte class")
}

// TestRecvWQEReusesItsArrays checks a receive entry keeps its SGE array in
// SGL's capacity: posts and pops round the ring copy SGEs without
// allocating, each WQE popped carries its own WR's SGEs, and 16 entries
// with the allocator's header fit its 1280-byte class.
func TestRecvWQEReusesItsArrays(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	moveTo(t, q, RTR)
	var dst RecvWQE
	cycle := func(i int) {
		sgl := []SGE{f.sge(uint64(i%8), 8), f.sge(64, uint32(i%5+1))}[:1+i%2]
		require.NoError(t, recvList(q, RecvWR{WRID: uint64(i), SGL: sgl}))
		q.Lock()
		ok, _ := q.PopRecvLocked(&dst)
		q.Unlock()
		require.True(t, ok)
		require.Equal(t, uint64(i), dst.WRID)
		require.Equal(t, sgl, dst.SGL)
		require.Len(t, dst.MRs, len(sgl))
	}
	for i := range 3 * int(defaultCap().MaxRecvWR) {
		cycle(i)
	}
	wr := []RecvWR{{WRID: 1, SGL: []SGE{f.sge(0, 8), f.sge(8, 8)}}}
	allocs := testing.AllocsPerRun(100, func() {
		q.Lock()
		_ = q.PostRecvLocked(wr)
		q.PopRecvLocked(&dst)
		q.Unlock()
	})
	require.Zero(t, allocs)
	require.LessOrEqual(t, 16*unsafe.Sizeof(RecvWQE{})+8, uintptr(1280))
}

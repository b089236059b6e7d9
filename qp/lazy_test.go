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
	require.Nil(t, rc.SQ.ahs, "RC: no AH copies")

	ud := f.newQP(t, UD, defaultCap())
	moveTo(t, ud, RTS)
	require.Nil(t, ud.SQ.ahs, "none before the first post")
	for i := range 3 * defaultCap().MaxSendWR { // round the ring a few times
		wr := f.sendWR(UD, uint64(i))
		wr.AH.AV.HopLimit = uint8(i + 1)
		require.NoError(t, sendList(ud, wr))
		wr.AH.AV.HopLimit = 0 // the caller's AH changes: the copy does not
		w := ud.SQ.At(ud.SQ.Head() - 1)
		require.Len(t, *ud.SQ.ahs, len(ud.SQ.e))
		require.Same(t, &(*ud.SQ.ahs)[(ud.SQ.Head()-1)&ud.SQ.mask], w.WR.AH)
		require.Equal(t, uint8(i+1), w.WR.AH.AV.HopLimit)
		require.Equal(t, f.pd, w.WR.AH.PD)
		ud.SQ.Retire()
	}
	// The WQE is four cache lines: the requester reads it for every
	// packet, and with many QPs each line is a miss.
	require.LessOrEqual(t, unsafe.Sizeof(SendWQE{}), uintptr(256))
	require.LessOrEqual(t, unsafe.Sizeof(QP{}), uintptr(288), "the allocator's 288-byte class")
}

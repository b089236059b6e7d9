package rvt

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// A destroyed QP refuses posts and modifies (as a destroyed handle over
// the kernel: EINVAL) instead of taking work that never completes.
func TestDestroyedQPRefusesWork(t *testing.T) {
	na, nb := fabricNodes(t, clock.Real())
	a, b := na.qp(t, qp.RC), nb.qp(t, qp.RC)
	connect(t, a, na.d, b, nb.d, defaultAttrs())
	src := na.mr(t, 4096)
	require.NoError(t, a.Destroy())
	err := a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "destroyed")
	require.ErrorIs(t, a.PostRecv(RecvWR{WRID: 2, SGL: sge(src, 0, 8)}), ErrInvalidArgument)
	require.ErrorIs(t, a.Modify(&QPAttr{State: qp.Reset}, qp.AttrState), ErrInvalidArgument)
	require.ErrorIs(t, a.Destroy(), ErrInvalidArgument)
}

// Closing a device with live objects is a device taken away: its QPs go
// to ERR and what was posted completes flushed (mlx5_ib's reset flow,
// the drop-in library's fatal state); then posts, modifies and creates
// fail with ErrClosed, and destroys still release.
func TestClosedDeviceFlushesAndRefuses(t *testing.T) {
	na, nb := fabricNodes(t, clock.Real())
	a, b := na.qp(t, qp.RC), nb.qp(t, qp.RC)
	connect(t, a, na.d, b, nb.d, defaultAttrs())
	dst := nb.mr(t, 4096)
	for i := range 3 {
		require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(10 + i), SGL: sge(dst, 0, 64)}))
	}
	require.NoError(t, nb.d.Close())
	wcs := poll(t, nb.cq, 3, nil)
	for i, w := range wcs {
		require.Equal(t, cq.WRFlushErr, w.Status, "%+v", w)
		require.Equal(t, uint64(10+i), w.WRID)
		require.Equal(t, b.Num(), w.QPNum)
	}
	require.Equal(t, qp.Err, b.State())
	require.NoError(t, nb.d.Close(), "closing again does nothing")

	require.ErrorIs(t, b.PostRecv(RecvWR{WRID: 20, SGL: sge(dst, 0, 64)}), ErrClosed)
	require.ErrorIs(t, b.PostSend(SendWR{WRID: 21, Opcode: qp.OpSend, SGL: sge(dst, 0, 8)}), ErrClosed)
	require.ErrorIs(t, b.Modify(&QPAttr{State: qp.Reset}, qp.AttrState), ErrClosed)
	require.Zero(t, nb.cq.Poll(make([]WC, 4)), "a refused post completes nothing")

	pd := nb.pd
	_, err := nb.d.AllocPD()
	require.ErrorIs(t, err, ErrClosed)
	_, err = nb.d.CreateCQ(4, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.Reg(make([]byte, 64), keys.LocalWrite)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.AllocMR(4)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.AllocMW(keys.MWType2)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.CreateSRQ(4, 1)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.CreateAH(AddressVector{Port: 1})
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: nb.cq, RecvCQ: nb.cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.ErrorIs(t, err, ErrClosed)

	require.NoError(t, b.Destroy())
	require.NoError(t, nb.d.DeregMR(dst))
	require.NoError(t, nb.d.DestroyCQ(nb.cq))
	require.NoError(t, pd.Dealloc(), "the destroys released what the PD held")
}

// A QP may only use the CQs and SRQ of its own device (the kernel looks
// them up among the caller's objects of that device: EINVAL), and a
// device attaches only its own QPs to a group.
func TestObjectsOfAnotherDevice(t *testing.T) {
	na, nb := fabricNodes(t, clock.Real())
	ia := QPInitAttr{Type: qp.RC, SendCQ: nb.cq, RecvCQ: na.cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	_, err := na.pd.CreateQP(ia)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "CQ of another device")
	ia.SendCQ, ia.RecvCQ = na.cq, nb.cq
	_, err = na.pd.CreateQP(ia)
	require.ErrorIs(t, err, ErrInvalidArgument)

	srq, err := nb.pd.CreateSRQ(4, 1)
	require.NoError(t, err)
	ia.RecvCQ, ia.SRQ = na.cq, srq
	_, err = na.pd.CreateQP(ia)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "SRQ of another device")
	require.NoError(t, srq.Destroy(), "the refused QP took no reference")

	ud := na.qp(t, qp.UD)
	gid := GID{0xff, 0x0e, 15: 1}
	require.ErrorIs(t, nb.d.AttachMcast(ud, gid, 0), ErrInvalidArgument)
	require.ErrorIs(t, nb.d.DetachMcast(ud, gid, 0), ErrInvalidArgument)
	require.NoError(t, na.d.AttachMcast(ud, gid, 0))
	require.NoError(t, na.d.DetachMcast(ud, gid, 0))
}

// A CQ's depth error names the verb once.
func TestCreateCQDepthError(t *testing.T) {
	n := newNode(t, Options{})
	_, err := n.d.CreateCQ(0, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, 1, strings.Count(err.Error(), "create"), err.Error())
}

// A completion that finds its CQ full puts the QP that made it in ERR
// (IBTA class G; rxe's responder and rdmavt do so), besides the CQ's own
// error and CQ_ERR event: the QP does not go on doing work whose
// completions no one will see.
func TestCQOverflowErrorsQP(t *testing.T) {
	na, nb := fabricNodes(t, clock.Real())
	small, err := na.d.CreateCQ(2, nil)
	require.NoError(t, err)
	a, err := na.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: small, RecvCQ: small,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	b := nb.qp(t, qp.RC)
	connect(t, a, na.d, b, nb.d, defaultAttrs())
	src, dst := na.mr(t, 64), nb.mr(t, 64)
	for i := range 3 {
		require.NoError(t, a.PostSend(SendWR{WRID: uint64(i), Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
			SGL: sge(src, 0, 8), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
		require.Eventually(t, func() bool { return a.Conn().Counters().Snapshot()["rcvd_pkts"] > uint64(i) },
			5*time.Second, time.Millisecond, "WRITE %d's ACK", i)
	}
	require.Eventually(t, func() bool { return a.State() == qp.Err }, 5*time.Second, time.Millisecond,
		"QP in %v after its CQ overflowed", a.State())
	require.ErrorIs(t, small.Err(), cq.ErrOverflow)
	wcs := make([]WC, 4)
	require.Equal(t, 2, small.Poll(wcs), "the two completions the CQ held")
	require.Equal(t, b.State(), qp.RTS, "the peer is not touched")
}

package rvt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
)

// writeOnce runs one signaled RDMA WRITE from a to b and waits for it.
func writeOnce(t *testing.T, n *node, a *QP) {
	t.Helper()
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	wcs := poll(t, n.cq, 1, nil)
	require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
}

// A destroyed QP's counts stay in the device totals once: destroying it
// again fails and adds nothing, and neither does destroying a QP after
// the device closed.
func TestDestroyQPCountsOnce(t *testing.T) {
	n := newNode(t, Options{})
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	writeOnce(t, n, a)
	before := n.d.Counters()
	require.NotZero(t, before["sent_pkts"])
	refs := n.pd.Refs()

	require.NoError(t, a.Destroy())
	require.Equal(t, before, n.d.Counters(), "destroying moves the QP's counts, adds none")
	require.Equal(t, refs-1, n.pd.Refs())
	require.ErrorIs(t, a.Destroy(), ErrInvalidArgument)
	require.Equal(t, before, n.d.Counters(), "a second destroy adds nothing")
	require.Equal(t, refs-1, n.pd.Refs(), "a second destroy releases nothing")

	require.NoError(t, n.d.Close())
	require.Equal(t, before, n.d.Counters())
	require.Empty(t, n.d.QPs())
	require.NoError(t, b.Destroy(), "destroy after close releases the QP")
	require.Equal(t, before, n.d.Counters(), "destroy after close adds nothing")
	require.Equal(t, refs-2, n.pd.Refs())
	require.ErrorIs(t, b.Destroy(), ErrInvalidArgument)
}

// Deallocating a PD twice fails and frees one PD's worth of the device's
// PD limit, not two.
func TestDeallocPDTwice(t *testing.T) {
	n := newNode(t, Options{})
	var pds []*PD
	for {
		pd, err := n.d.AllocPD()
		if err != nil {
			require.ErrorIs(t, err, ErrNoResources)
			break
		}
		pds = append(pds, pd)
	}
	require.Len(t, pds, maxPD-1, "newNode allocated one")
	require.NoError(t, pds[0].Dealloc())
	require.ErrorIs(t, pds[0].Dealloc(), ErrInvalidArgument)
	_, err := n.d.AllocPD()
	require.NoError(t, err)
	_, err = n.d.AllocPD()
	require.ErrorIs(t, err, ErrNoResources, "the second dealloc freed nothing")
}

package rvtd_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestCMListenBacklog: cm_listen's backlog bounds the CONNECT_REQUEST
// records the client has not read, as ucma's backlog does on Linux
// (measured against Linux 6.1 rxe with rdma_listen(id, 2) and no
// rdma_get_cm_event for 10 s: of four REQs two were queued, two got no
// answer, and their retries 6.15 s later were new requests, taken once
// the program had read the first two events). Here: three requests to a
// listener with backlog 2 whose client reads nothing for a second: two
// records come, the third request is dropped unanswered (its peer sees
// nothing), and its REQ resent a CM period (6144 ms) later is taken,
// the client having read the two. The backlog used to be ignored.
func TestCMListenBacklog(t *testing.T) {
	_, sock := startDaemon(t)
	s, err := newCMNode(sock, "rvt0", 2)
	require.NoError(t, err)
	c, err := newCMNode(sock, "rvt1", 2)
	require.NoError(t, err)
	lid, err := s.ch.CreateID(1, proto.PSTCP, 2)
	require.NoError(t, err)
	require.NoError(t, lid.BindAddr(netip.AddrPortFrom(ip0, 0)))
	require.NoError(t, lid.Listen(2))
	q, err := lid.Query()
	require.NoError(t, err)
	dst := netip.AddrPortFrom(ip0, q.Src.Port)

	start := time.Now()
	for i := range 3 {
		qp := c.qp
		if i > 0 {
			qp, err = c.dev.CreateQP(c.pd, 2, c.cq, c.cq, proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
			require.NoError(t, err)
		}
		id, err := c.ch.CreateID(uint64(10+i), proto.PSTCP, 2)
		require.NoError(t, err)
		require.NoError(t, id.ResolveAddr(ip1, dst, 2000))
		_, err = waitEvent(c.ch, evAddrResolved)
		require.NoError(t, err)
		require.NoError(t, id.Connect(proto.CMConnParam{QP: qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))
	}
	time.Sleep(time.Second) // the client reads nothing meanwhile
	for range 2 {
		ev, err := waitEvent(s.ch, evConnectRequest)
		require.NoError(t, err)
		require.NoError(t, s.c.EventID(ev).Reject(nil))
	}
	_, err = s.ch.GetEvent(3 * time.Second)
	require.Error(t, err, "a third request within the backlog of 2")
	ev, err := waitEvent(s.ch, evConnectRequest)
	require.NoError(t, err)
	took := time.Since(start)
	require.Greater(t, took, 5500*time.Millisecond, "the third came with its REQ's retry")
	require.Less(t, took, 9*time.Second)
	require.NoError(t, s.c.EventID(ev).Reject(nil))
	for range 3 {
		ev, err := waitEvent(c.ch, evRejected)
		require.NoError(t, err)
		require.Equal(t, int32(28), ev.Status, "rejected by the listener's client, not by the backlog")
	}
}

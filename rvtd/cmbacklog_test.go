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
	s, c, dst := listenPair(t, sock, 2)
	start := time.Now()
	for i := range 3 {
		c.connect(t, uint64(10+i), dst)
	}
	time.Sleep(time.Second) // the client reads nothing meanwhile
	for range 2 {
		ev, err := waitEvent(s.ch, evConnectRequest)
		require.NoError(t, err)
		require.NoError(t, s.c.EventID(ev).Reject(nil))
	}
	_, err := s.ch.GetEvent(3 * time.Second)
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

// TestCMDiscard: cm_discard (protocol 1.2) ends a connection request the
// client will not take without answering it, as Linux leaves a request
// its listener's full backlog refused: the active side hears nothing, and
// its REQ resent a CM period (6144 ms) later is a new request. The same
// request destroyed instead (cm_destroy_id) gets REJ 28 at once. A
// session of minor version 1 has no cm_discard.
func TestCMDiscard(t *testing.T) {
	srv, sock := startDaemon(t)
	s, c, dst := listenPair(t, sock, 0)
	require.Equal(t, uint16(proto.Minor), s.c.Hello.Minor)

	// Destroyed: REJ 28.
	c.connect(t, 10, dst)
	ev, err := waitEvent(s.ch, evConnectRequest)
	require.NoError(t, err)
	_, err = s.c.EventID(ev).Destroy()
	require.NoError(t, err)
	ev, err = waitEvent(c.ch, evRejected)
	require.NoError(t, err)
	require.Equal(t, uint64(10), ev.Context)
	require.Equal(t, int32(28), ev.Status)

	// Discarded: nothing, then the resent REQ as a new request.
	c.connect(t, 11, dst)
	ev, err = waitEvent(s.ch, evConnectRequest)
	require.NoError(t, err)
	first := ev.ID
	start := time.Now()
	_, err = s.c.EventID(ev).Discard()
	require.NoError(t, err)
	_, err = c.ch.GetEvent(time.Second)
	require.Error(t, err, "an event for a discarded request")
	ev, err = waitEvent(s.ch, evConnectRequest)
	require.NoError(t, err)
	took := time.Since(start)
	require.Greater(t, took, 5*time.Second, "the request came again with its REQ's retry")
	require.Less(t, took, 9*time.Second)
	require.NotEqual(t, first, ev.ID, "the resent REQ is a new request")
	require.NoError(t, s.c.EventID(ev).Reject(nil))
	ev, err = waitEvent(c.ch, evRejected)
	require.NoError(t, err)
	require.Equal(t, uint64(11), ev.Context)

	// Minor version 1: EOPNOTSUPP before the handle is looked at (a 1.2
	// session gets EINVAL for handle 0).
	old, err := proto.Dial(sock)
	require.NoError(t, err)
	defer old.Close()
	require.NoError(t, old.Send(proto.Header{Op: proto.OpHello, ReqID: 1},
		&proto.Hello{Magic: proto.Magic, Major: proto.Major, Minor: 1}))
	m, err := old.Recv()
	require.NoError(t, err)
	require.Equal(t, uint16(1), m.Body.(*proto.HelloReply).Minor)
	require.NoError(t, old.Send(proto.Header{Op: proto.OpCMDiscard, ReqID: 2}, nil))
	m, err = old.Recv()
	require.NoError(t, err)
	require.Equal(t, proto.EOPNOTSUPP, m.Status)
	_, err = s.c.Call(proto.OpCMDiscard, 0, nil)
	require.ErrorIs(t, err, proto.EINVAL)

	old.Close()
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// listenPair is a listening ID on rvt0 (its client s) with backlog
// (cm_listen's value), a client c on rvt1, and the listener's address.
func listenPair(t *testing.T, sock string, backlog uint32) (s, c *cmNode, dst netip.AddrPort) {
	t.Helper()
	s, err := newCMNode(sock, "rvt0", 2)
	require.NoError(t, err)
	c, err = newCMNode(sock, "rvt1", 2)
	require.NoError(t, err)
	lid, err := s.ch.CreateID(1, proto.PSTCP, 2)
	require.NoError(t, err)
	require.NoError(t, lid.BindAddr(netip.AddrPortFrom(ip0, 0)))
	require.NoError(t, lid.Listen(backlog))
	q, err := lid.Query()
	require.NoError(t, err)
	return s, c, netip.AddrPortFrom(ip0, q.Src.Port)
}

// connect sends a connection request to dst from a new ID (context ctx)
// and a new RC QP of n.
func (n *cmNode) connect(t *testing.T, ctx uint64, dst netip.AddrPort) {
	t.Helper()
	qp, err := n.dev.CreateQP(n.pd, 2, n.cq, n.cq, proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)
	id, err := n.ch.CreateID(ctx, proto.PSTCP, 2)
	require.NoError(t, err)
	require.NoError(t, resolve(n.ch, id, ip1, dst))
	require.NoError(t, id.Connect(proto.CMConnParam{QP: qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))
}

package cm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestListenerBacklogDrops: requests beyond a Listener's Backlog get no
// answer, as Linux's rdma_cm drops them (measured against Linux 6.1 rxe
// with rdma_listen(id, 2) and no rdma_get_cm_event for 10 s: of four
// REQs two were queued, two got nothing; at their retry 6.15 s later the
// two queued got an MRA, the two others were new requests again, dropped
// again while the two events waited; once the program had read them
// the next retries were taken). The active side stays in REQ_SENT and
// its resent REQ is taken once Accept has made room. It used to get a
// REJ 28.
func TestListenerBacklogDrops(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 61})
	a, b := w.nodes[0], w.nodes[1]
	ln, err := b.agent.Listen(netip.AddrPortFrom(b.ip, 61), &ListenOptions{Backlog: 2})
	require.NoError(t, err)
	defer ln.Close()
	ch := NewEventChannel()
	var ids []*ID
	for range 3 {
		id := a.agent.NewID(ch, PSTCP, nil)
		require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 61)))
		w.expect(t, ch, EventAddrResolved)
		ids = append(ids, id)
	}
	for _, id := range ids {
		require.NoError(t, id.Connect(a.newQP(t, qp.RC), nil))
	}
	w.noEvent(t, ch, 5*time.Millisecond) // less than the REQ period (6 ms)
	require.Equal(t, uint64(1), b.agent.Counters()["req_discarded"])
	require.Zero(t, b.agent.Counters()["tx_REJ"], "no REJ for the request beyond the backlog")
	for _, id := range ids {
		require.Equal(t, StateREQSent, id.State())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := ln.Accept(ctx) // makes room for one
	require.NoError(t, err)
	require.NoError(t, r.Reject(nil))
	w.expect(t, ch, EventRejected) // that one's REJ
	// The resent REQ of the dropped one is a new request, and is queued.
	for i := 0; i < 20 && b.agent.Counters()["rx_REQ"] < 6; i++ {
		w.step(time.Millisecond)
	}
	r2, err := ln.Accept(ctx)
	require.NoError(t, err)
	r3, err := ln.Accept(ctx)
	require.NoError(t, err)
	require.NotEqual(t, r2.id, r3.id)
	require.Equal(t, uint64(1), b.agent.Counters()["req_discarded"], "none dropped once there was room")
	for _, id := range ids {
		id.Destroy()
	}
	_ = r2.Reject(nil)
	_ = r3.Reject(nil)
}

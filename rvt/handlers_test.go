package rvt

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
)

// On a worker pool a message posted on an idle loopback pair runs through
// the peer's responder and this QP's completer on the posting goroutine
// (task.Carry), CQ handlers included. These tests are handlers that wait
// for, or keep feeding, that same chain.

// handlerPair is two connected RC QPs on a worker-pool device, each with a
// receive CQ of its own (for handlers) and the node's CQ for sends.
func handlerPair(t *testing.T) (n *node, a, b *QP, arc, brc *CQ, recv RecvWR, send SendWR) {
	n = newNode(t, Options{Workers: 2})
	mk := func() (*QP, *CQ) {
		rc, err := n.d.CreateCQ(4096, nil)
		require.NoError(t, err)
		q, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: rc,
			Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		return q, rc
	}
	a, arc = mk()
	b, brc = mk()
	connect(t, a, n.d, b, n.d, defaultAttrs())
	mr := n.mr(t, 64)
	recv = RecvWR{SGL: []SGE{{Addr: mr.IOVA, Length: 64, Lkey: mr.Lkey}}}
	send = SendWR{Opcode: qp.OpSend, SGL: []SGE{{Addr: mr.IOVA, Length: 8, Lkey: mr.Lkey}}}
	return
}

// TestHandlerDrainsSender: the receiver's handler drains the sender (whose
// completer the chain has yet to run).
func TestHandlerDrainsSender(t *testing.T) {
	_, a, b, _, brc, recv, send := handlerPair(t)
	require.NoError(t, b.PostRecv(recv))
	res := make(chan error, 1)
	brc.SetHandlers(func(*CQ) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res <- a.Drain(ctx)
	}, nil)
	require.NoError(t, brc.Arm(false))
	send.Flags = qp.Signaled
	require.NoError(t, a.PostSend(send))
	select {
	case err := <-res:
		require.NoError(t, err, "the drain waited for its own goroutine")
	case <-time.After(10 * time.Second):
		t.Fatal("the receive handler never ran")
	}
}

// TestHandlerDestroysPeer: B's handler replies; A's handler, run by the
// reply, destroys B, whose receive batch is still running B's handler.
func TestHandlerDestroysPeer(t *testing.T) {
	_, a, b, arc, brc, recv, send := handlerPair(t)
	require.NoError(t, a.PostRecv(recv))
	require.NoError(t, b.PostRecv(recv))
	destroyed := make(chan error, 1)
	brc.SetHandlers(func(c *CQ) {
		var w [4]WC
		c.Poll(w[:])
		if err := b.PostSend(send); err != nil {
			t.Errorf("B's reply: %v", err) // not require: this may run on a worker
		}
	}, nil)
	arc.SetHandlers(func(c *CQ) {
		var w [4]WC
		c.Poll(w[:])
		destroyed <- b.Destroy()
	}, nil)
	require.NoError(t, arc.Arm(false))
	require.NoError(t, brc.Arm(false))
	require.NoError(t, a.PostSend(send))
	select {
	case err := <-destroyed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy from A's handler waited for a batch further up its own stack")
	}
}

// TestHandlerPingPongLeavesPost: with each side's handler posting the
// reply, the first PostSend returns after a bounded amount of the
// exchange, not all of it (or, endless, never), and the rest runs on the
// pool.
func TestHandlerPingPongLeavesPost(t *testing.T) {
	_, a, b, arc, brc, recv, send := handlerPair(t)
	const rounds = 20000 // the pool takes ~50 ms: the first PostSend's return is long before
	var done atomic.Int64
	for range 64 {
		require.NoError(t, a.PostRecv(recv))
		require.NoError(t, b.PostRecv(recv))
	}
	handler := func(self *QP) func(*CQ) {
		wcs := make([]WC, 16)
		// Errors are reported with t.Errorf, not require: handlers may
		// run on pool workers.
		return func(c *CQ) {
			k := c.Poll(wcs)
			if err := c.Arm(false); err != nil {
				t.Errorf("arm: %v", err)
				return
			}
			for _, w := range wcs[:k] {
				if w.Status != cq.Success {
					continue // flushed by the device's Close at the test's end
				}
				if err := self.PostRecv(recv); err != nil {
					t.Errorf("post recv: %v", err)
					return
				}
				if done.Add(1) < rounds {
					if err := self.PostSend(send); err != nil {
						t.Errorf("post send: %v", err)
						return
					}
				}
			}
		}
	}
	arc.SetHandlers(handler(a), nil)
	brc.SetHandlers(handler(b), nil)
	require.NoError(t, arc.Arm(false))
	require.NoError(t, brc.Arm(false))
	require.NoError(t, a.PostSend(send))
	require.Less(t, done.Load(), int64(rounds), "the first PostSend ran the whole exchange")
	require.Eventually(t, func() bool { return done.Load() >= rounds }, 20*time.Second, time.Millisecond)
}

// TestHandlerDestroysResponder: the sender's send-completion handler
// destroys the receiver. On loopback the receiver's batch may complete the
// sender's message itself (no ACK packet): the sender's handler must still
// run in a batch of the sender's, not inside the receiver's, which the
// destroy waits for. Both executors, signalled and not, many rounds.
func TestHandlerDestroysResponder(t *testing.T) {
	for _, inline := range []bool{false, true} {
		for round := 0; round < 50; round++ {
			o := Options{Workers: 2}
			if inline {
				o = Options{Inline: true}
			}
			n := newNode(t, o)
			scq, err := n.d.CreateCQ(64, nil)
			require.NoError(t, err)
			mk := func(send *CQ) *QP {
				q, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: send, RecvCQ: n.cq,
					Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
				require.NoError(t, err)
				return q
			}
			a, b := mk(scq), mk(n.cq)
			connect(t, a, n.d, b, n.d, defaultAttrs())
			mr := n.mr(t, 64)
			require.NoError(t, b.PostRecv(RecvWR{SGL: []SGE{{Addr: mr.IOVA, Length: 64, Lkey: mr.Lkey}}}))
			destroyed := make(chan error, 1)
			var once atomic.Bool
			scq.SetHandlers(func(c *CQ) {
				var w [4]WC
				c.Poll(w[:])
				if once.CompareAndSwap(false, true) {
					destroyed <- b.Destroy()
				}
			}, nil)
			require.NoError(t, scq.Arm(false))
			require.NoError(t, a.PostSend(SendWR{Opcode: qp.OpSend, Flags: qp.Signaled,
				SGL: []SGE{{Addr: mr.IOVA, Length: 8, Lkey: mr.Lkey}}}))
			select {
			case err := <-destroyed:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("inline=%v round %d: Destroy from the sender's handler waited for a batch further up its own stack", inline, round)
			}
		}
	}
}

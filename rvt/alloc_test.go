package rvt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestPostSendAllocatesNothing: a SEND posted with an SGL literal made for
// the call, its receive, and both completions allocate nothing on
// loopback. The WQE copies what the WR points to, so the caller's SGL
// stays on its stack; it used to be a heap allocation per post (escape
// analysis saw the WR, SGL and all, stored in the WQE), a message's
// garbage, and with 10,000 QPs' queues on the heap each GC cycle it
// brought on scanned them all.
func TestPostSendAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random (the packet buffers' pool)")
	}
	for _, inline := range []bool{true, false} {
		o := Options{Inline: inline}
		if !inline {
			o.Workers = 1
		}
		n := newNode(t, o)
		a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
		connect(t, a, n.d, b, n.d, defaultAttrs())
		src, dst := n.mr(t, 64), n.mr(t, 64)
		wcs := make([]WC, 4)
		round := func() {
			if err := b.PostRecv(RecvWR{WRID: 1, SGL: []SGE{{Addr: dst.IOVA, Length: 64, Lkey: dst.Lkey}}}); err != nil {
				t.Fatal(err)
			}
			if err := a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled,
				SGL: []SGE{{Addr: src.IOVA, Length: 8, Lkey: src.Lkey}}}); err != nil {
				t.Fatal(err)
			}
			for got := 0; got < 2; {
				k := n.cq.Poll(wcs)
				for _, w := range wcs[:k] {
					if w.Status != 0 {
						t.Fatalf("completion %+v", w)
					}
				}
				got += k
			}
		}
		for range 100 { // warm the pools and lazily made state
			round()
		}
		require.Zero(t, testing.AllocsPerRun(200, round), "inline=%v", inline)
	}
}

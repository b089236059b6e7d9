package rvt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestLoopbackPacketCounts checks the device totals of a loopback RC SEND:
// the request and its ACK are each sent once and received once, and each
// QP counts what it took.
func TestLoopbackPacketCounts(t *testing.T) {
	n, clk := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	src, dst := n.mr(t, 64), n.mr(t, 64)
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 64)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	c := n.d.Counters()
	require.Equal(t, uint64(2), c["sent_pkts"], "the SEND and its ACK: %v", c)
	require.Equal(t, uint64(2), c["rcvd_pkts"], "the SEND and its ACK: %v", c)
	require.Equal(t, uint64(1), a.Counters()["rcvd_pkts"], "the ACK")
	require.Equal(t, uint64(1), b.Counters()["rcvd_pkts"], "the SEND")
}

package rvt

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// TestLoopbackPacketCounts checks the device totals of a loopback RC SEND:
// the request and its ACK are each sent once and received once, and each
// QP counts what it took.
func TestLoopbackPacketCounts(t *testing.T) {
	n, clk, a, b := rcPair(t)
	src, dst := n.mr(t, 64), n.mr(t, 64)
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 64)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	c := n.d.Counters()
	require.Equal(t, uint64(2), c["sent_pkts"], "the SEND and its ACK: %v", c)
	require.Equal(t, uint64(2), c["rcvd_pkts"], "the SEND and its ACK: %v", c)
	require.Equal(t, uint64(1), a.Counters()["rcvd_pkts"], "the ACK")
	require.Equal(t, uint64(1), b.Counters()["rcvd_pkts"], "the SEND")

	// Loopback moves a message of several MTUs as one burst; it counts
	// as the packets it stands for, as on a wire (rxe counts 4 for a
	// WRITE of 4 MTUs, and 4 READ responses).
	big, bigDst := n.mr(t, 4096), n.mr(t, 4096) // MTU 1024: 4 packets
	require.NoError(t, a.PostSend(
		SendWR{WRID: 3, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(big, 0, 4096),
			RemoteAddr: bigDst.IOVA, Rkey: bigDst.Rkey},
		SendWR{WRID: 4, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge(big, 0, 4096),
			RemoteAddr: bigDst.IOVA, Rkey: bigDst.Rkey}))
	poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	c = n.d.Counters()
	// a sent the SEND, 4 WRITE packets and a READ request; b its ACKs (at
	// least one) and 4 READ responses.
	require.Equal(t, uint64(1+4+1), a.Counters()["sent_pkts"], "%v", a.Counters())
	require.Equal(t, uint64(1+4+1), b.Counters()["rcvd_pkts"], "%v", b.Counters())
	require.Equal(t, b.Counters()["sent_pkts"], a.Counters()["rcvd_pkts"], "every response b sent reached a")
	require.GreaterOrEqual(t, a.Counters()["rcvd_pkts"], uint64(1+1+4), "ACKs of the SEND and WRITE, 4 READ responses")
	require.Equal(t, c["sent_pkts"], c["rcvd_pkts"], "loopback: the device received all it sent: %v", c)
}

// TestMessageCounts checks rdma_sends and rdma_recvs as rxe keeps them:
// the requester counts each SEND work request as it is retired, whatever
// its status (rxe's completer), but not one that is flushed (rxe's flush
// path does not count); the responder counts each SEND it delivered. RDMA
// WRITEs are neither.
func TestMessageCounts(t *testing.T) {
	n, clk, a, b := rcPair(t)
	src, dst := n.mr(t, 64), n.mr(t, 64)

	// A SEND is counted when it is retired, not when it is posted: while b
	// answers RNR (rnr_retry 7 retries forever) it is not counted yet.
	require.NoError(t, a.PostSend(SendWR{WRID: 0, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	for range 5 {
		clk.AdvanceToNext()
	}
	require.Zero(t, n.cq.Len(), "no receive posted: the SEND is still in flight")
	require.NotZero(t, a.Counters()["rcvd_rnr_err"], "b answered RNR")
	require.Zero(t, a.Counters()["rdma_sends"], "a posted SEND that is not retired is not counted")
	require.NoError(t, b.PostRecv(RecvWR{WRID: 100, SGL: sge(dst, 0, 64)}))
	for _, wc := range poll(t, n.cq, 2, func() { clk.AdvanceToNext() }) {
		require.Equal(t, cq.Success, wc.Status, "%+v", wc)
	}
	require.Equal(t, uint64(1), a.Counters()["rdma_sends"])
	require.Equal(t, uint64(1), b.Counters()["rdma_recvs"])

	for i := range 3 {
		require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(i), SGL: sge(dst, 0, 64)}))
	}
	require.NoError(t, a.PostSend(
		SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)},
		SendWR{WRID: 2, Opcode: qp.OpSendWithImm, SGL: sge(src, 0, 8)},
		SendWR{WRID: 3, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(src, 0, 8),
			RemoteAddr: dst.IOVA, Rkey: dst.Rkey},
		SendWR{WRID: 4, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	// 3 signalled WRs (2 SENDs and the WRITE), 3 receives.
	poll(t, n.cq, 6, func() { clk.AdvanceToNext() })
	require.Equal(t, uint64(4), a.Counters()["rdma_sends"])
	require.Equal(t, uint64(4), b.Counters()["rdma_recvs"])
	require.Zero(t, b.Counters()["rdma_sends"])

	// A SEND larger than the receive buffer fails on both sides: the
	// requester still counts it, the responder does not.
	require.NoError(t, b.PostRecv(RecvWR{WRID: 9, SGL: sge(dst, 0, 4)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	wcs := poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	for _, wc := range wcs {
		require.NotEqual(t, cq.Success, wc.Status, "%+v", wc)
	}
	require.Equal(t, uint64(5), a.Counters()["rdma_sends"])
	require.Equal(t, uint64(4), b.Counters()["rdma_recvs"])
	require.Equal(t, uint64(5), n.d.Counters()["rdma_sends"])

	// a is in ERR after the failed SEND: one more SEND is flushed, and a
	// flushed SEND is not counted.
	require.Equal(t, qp.Err, a.State())
	require.NoError(t, a.PostSend(SendWR{WRID: 6, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	wcs = poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, uint64(6), wcs[0].WRID)
	require.Equal(t, cq.WRFlushErr, wcs[0].Status, "%+v", wcs[0])
	require.Equal(t, uint64(5), a.Counters()["rdma_sends"], "a flushed SEND is not counted")
	require.Equal(t, uint64(5), n.d.Counters()["rdma_sends"])
}

// TestCNPDroppedAsNotSupported hands the device a RoCEv2 CNP addressed to
// one of its QPs: with no congestion control, it is dropped as not
// supported before any QP sees it.
func TestCNPDroppedAsNotSupported(t *testing.T) {
	ipA, ipB := netip.AddrFrom4([4]byte{198, 18, 0, 1}), netip.AddrFrom4([4]byte{198, 18, 0, 2})
	n := newNode(t, Options{Addrs: []netip.Addr{netip.MustParseAddr("fe80::1"), ipA}})
	q := n.qp(t, qp.RC)
	ib := make([]byte, transport.CNP.Info().HdrLen)
	transport.BTH(ib).Init(transport.CNP, transport.DefaultPKey, q.Num(), 0)
	udpLen := len(ib) + transport.ICRCLen
	frame := make([]byte, netdev.HeaderLen(false)+udpLen)
	copy(frame[netdev.HeaderLen(false):], ib)
	require.NotZero(t, netdev.EncodeRoCEv2(frame,
		netdev.Endpoint{MAC: netdev.MAC{2, 0, 0, 0, 0, 2}, IP: ipB, Port: 0xC001},
		netdev.Endpoint{IP: ipA, Port: transport.RoCEv2Port}, 64, 0, udpLen))
	require.NoError(t, transport.PutICRC(frame[netdev.EthernetHeaderLen:]))
	n.d.Engine().ReceiveFrame(frame)
	c := n.d.Counters()
	require.Equal(t, uint64(1), c["drop_"+transport.DropNotSupported.Name()], "%v", c)
	require.Zero(t, c["drop_"+transport.DropQPType.Name()], "%v", c)
}

// TestErrorsAcrossLayers checks that an error a lower package returns
// through rvt matches rvt's sentinel for it: the key table, the CQ and the
// multicast table report the same invalid-argument and busy values.
func TestErrorsAcrossLayers(t *testing.T) {
	n := newNode(t, Options{})
	_, err := n.pd.Reg(make([]byte, 8), keys.RemoteWrite) // remote write needs local write
	require.ErrorIs(t, err, ErrInvalidArgument, "from keys")
	_, err = n.d.CreateCQ(0, nil)
	require.ErrorIs(t, err, ErrInvalidArgument, "from cq")
	q := n.qp(t, qp.UD)
	err = n.d.AttachMcast(q, GID{}, 0xC000) // not a multicast GID
	require.ErrorIs(t, err, ErrInvalidArgument, "from mcast")
	require.ErrorIs(t, n.d.DestroyCQ(n.cq), ErrBusy, "from cq: a QP uses it")
}

// TestLoopbackUDNoAlloc checks that a UD SEND between two QPs of one device
// (which takes the receive path, in a pooled copy of the frame) and its
// completions allocate nothing once warm.
func TestLoopbackUDNoAlloc(t *testing.T) {
	n, _ := manualNode(t)
	a, b := n.qp(t, qp.UD), n.qp(t, qp.UD)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	gid, err := n.d.QueryGID(1, 1)
	require.NoError(t, err)
	ah, err := n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1})
	require.NoError(t, err)
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	recv := []RecvWR{{WRID: 1, SGL: sge(dst, 0, 40+1024)}}
	send := []SendWR{{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 1024),
		AH: ah, RemoteQPN: b.Num(), RemoteQKey: 0x1111}}
	wcs := make([]WC, 4)
	round := func() {
		require.NoError(t, b.PostRecv(recv...))
		require.NoError(t, a.PostSend(send...))
		got := 0
		for got < 2 {
			k := n.cq.Poll(wcs)
			for i := range wcs[:k] {
				if wcs[i].Status != cq.Success { // not require: its arguments allocate
					t.Fatalf("completion %+v", wcs[i])
				}
			}
			if k == 0 {
				t.Fatal("the inline device completes before PostSend returns")
			}
			got += k
		}
	}
	for range 10 {
		round()
	}
	allocs := testing.AllocsPerRun(100, round)
	if raceEnabled {
		t.Skipf("%v allocations per round, not checked: under the race detector sync.Pool drops items", allocs)
	}
	require.Zero(t, allocs)
}

package rvt

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// events records asynchronous events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func record(d *Device) *events {
	e := &events{}
	d.Subscribe(func(ev Event) {
		e.mu.Lock()
		e.evs = append(e.evs, ev)
		e.mu.Unlock()
	})
	return e
}

// requireHas fails t unless an event of type typ arrived for QP qpn (0:
// any QP); the failure lists the events that did arrive.
func (e *events) requireHas(t testing.TB, typ transport.EventType, qpn uint32, msgAndArgs ...any) {
	t.Helper()
	e.mu.Lock()
	var got []string
	for _, ev := range e.evs {
		if ev.Type == typ && (qpn == 0 || ev.QPN == qpn) {
			e.mu.Unlock()
			return
		}
		got = append(got, fmt.Sprintf("%v QP %#x", ev.Type, ev.QPN))
	}
	e.mu.Unlock()
	require.Fail(t, fmt.Sprintf("no %v event for QP %#x; received %q", typ, qpn, got), msgAndArgs...)
}

// manualNode is a loopback device on a manual clock.
func manualNode(t *testing.T) (*node, *clock.Manual) {
	clk := clock.NewManual()
	return newNode(t, Options{Inline: true, Clock: clk}), clk
}

// rcPair is a manual-clock node with two RC QPs connected to each other
// with defaultAttrs.
func rcPair(t *testing.T) (*node, *clock.Manual, *QP, *QP) {
	t.Helper()
	n, clk := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	return n, clk, a, b
}

// windowed registers an 8 KiB region windows may bind to and allocates a
// type-1 window.
func windowed(t *testing.T, n *node) (*MR, *MW) {
	t.Helper()
	mem, err := n.pd.Reg(make([]byte, 8192), keys.LocalWrite|keys.MWBind)
	require.NoError(t, err)
	mw, err := n.pd.AllocMW(keys.MWType1)
	require.NoError(t, err)
	return mem, mw
}

// srqQP is an RC QP of n's PD that receives through srq.
func srqQP(t *testing.T, n *node, srq *SRQ) *QP {
	t.Helper()
	q, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	return q
}

func sge(mr *MR, off uint64, n uint32) []SGE {
	return []SGE{{Addr: mr.IOVA + off, Length: n, Lkey: mr.Lkey}}
}

func TestRNRRetryExceeded(t *testing.T) {
	n, clk := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	at.rnr = 2
	at.minRNR = 1 // 0.01 ms
	connect(t, a, n.d, b, n.d, at)
	src := n.mr(t, 4096)
	require.NoError(t, a.PostSend(SendWR{WRID: 9, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 100)}))
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.RNRRetryExcErr, wcs[0].Status)
	require.Equal(t, qp.Err, a.State())
	require.Equal(t, uint64(3), a.Counters()["rcvd_rnr_err"], "initial try + 2 retries")
	require.Equal(t, qp.RTS, b.State(), "the responder stays up")
}

func TestRNRThenReceivePosted(t *testing.T) {
	n, clk, a, b := rcPair(t) // rnr_retry 7: infinite
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	src.WriteAt([]byte("hello"), src.IOVA)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 5)}))
	for i := 0; i < 20; i++ {
		clk.AdvanceToNext()
	}
	require.Zero(t, n.cq.Len())
	require.GreaterOrEqual(t, a.Counters()["rcvd_rnr_err"], uint64(20))
	require.NoError(t, b.PostRecv(RecvWR{WRID: 2, SGL: sge(dst, 0, 100)}))
	wcs := poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	for _, w := range wcs {
		require.Equal(t, cq.Success, w.Status)
	}
	got := make([]byte, 5)
	dst.ReadAt(got, dst.IOVA)
	require.Equal(t, "hello", string(got))
}

// An RNR retry resends the NAKed packet alone, asking for an ACK, until
// the responder accepts it; the window reopens after. Simulation seeds
// found two storms: 8270, a 188 KB SEND at path MTU 256 (738 packets)
// whose receive came late, cost 738 packets per RNR NAK on the loopback
// path, where a whole message travelled as one burst past the window;
// 56429, with min_rnr_timer 0.01 ms and receives 29 ms late, cost a
// window (128 packets) per RNR NAK, 2157 times.
func TestRNRRetryResendsOnePacket(t *testing.T) {
	const window = 128 // transport.Config's default
	n, clk := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	at.mtu = qp.MTU256
	connect(t, a, n.d, b, n.d, at)
	const size = 188764
	src, dst := n.mr(t, size), n.mr(t, size)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i * 7)
	}
	src.WriteAt(want, src.IOVA)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, size)}))
	for range 20 {
		clk.AdvanceToNext()
	}
	c := a.Counters()
	naks := c["rcvd_rnr_err"]
	require.GreaterOrEqual(t, naks, uint64(20), "the responder has no receive: RNR NAKs")
	require.LessOrEqual(t, c["sent_pkts"], window+naks-1,
		"%d packets for %d RNR NAKs: a window (%d) at first, then only the NAKed packet", c["sent_pkts"], naks, window)

	require.NoError(t, b.PostRecv(RecvWR{WRID: 2, SGL: sge(dst, 0, size)}))
	wcs := poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	for _, w := range wcs {
		require.Equal(t, cq.Success, w.Status, "%+v", w)
	}
	got := make([]byte, size)
	dst.ReadAt(got, dst.IOVA)
	require.Equal(t, want, got)
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		wr     func(src, dst *MR) SendWR
		access keys.Access // the responder QP's access flags
		status cq.Status
		event  transport.EventType
	}{
		{"bad rkey", func(src, dst *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA, Rkey: dst.Rkey + 1}
		}, keys.RemoteAccess, cq.RemAccessErr, transport.EventQPAccessErr},
		{"out of bounds", func(src, dst *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA + dst.Length - 10, Rkey: dst.Rkey}
		}, keys.RemoteAccess, cq.RemAccessErr, transport.EventQPAccessErr},
		{"read of write-only MR", func(src, dst *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMARead, SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}
		}, keys.RemoteAccess, cq.RemAccessErr, transport.EventQPAccessErr},
		{"QP without remote write", func(src, dst *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}
		}, keys.RemoteRead, cq.RemInvReqErr, transport.EventQPReqErr},
		{"misaligned atomic", func(src, dst *MR) SendWR {
			return SendWR{Opcode: qp.OpAtomicFetchAdd, SGL: sge(src, 0, 8), RemoteAddr: dst.IOVA + 4, Rkey: dst.Rkey}
		}, keys.RemoteAccess, cq.RemInvReqErr, transport.EventQPReqErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, clk := manualNode(t)
			ev := record(n.d)
			a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
			at := defaultAttrs()
			at.access = tc.access
			connect(t, a, n.d, b, n.d, at)
			src := n.mr(t, 4096)
			dst, err := n.pd.Reg(make([]byte, 4096), keys.LocalWrite|keys.RemoteWrite|keys.RemoteAtomic)
			require.NoError(t, err)
			wr := tc.wr(src, dst)
			wr.WRID, wr.Flags = 7, qp.Signaled
			second := SendWR{WRID: 8, Opcode: qp.OpSend, SGL: sge(src, 0, 1)}
			require.NoError(t, a.PostSend(wr, second))
			wcs := poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
			require.Equal(t, uint64(7), wcs[0].WRID)
			require.Equal(t, tc.status, wcs[0].Status)
			require.Equal(t, uint64(8), wcs[1].WRID)
			require.Equal(t, cq.WRFlushErr, wcs[1].Status, "the rest is flushed")
			require.Equal(t, qp.Err, a.State())
			require.Equal(t, qp.Err, b.State())
			ev.requireHas(t, tc.event, b.Num(), "responder raises %v", tc.event)
		})
	}
}

func TestLocalLengthError(t *testing.T) {
	n, clk, a, b := rcPair(t)
	src, dst := n.mr(t, 8192), n.mr(t, 8192)
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 100)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 3000)}))
	wcs := poll(t, n.cq, 2, func() { clk.AdvanceToNext() })
	by := map[uint64]WC{}
	for _, w := range wcs {
		by[w.WRID] = w
	}
	require.Equal(t, cq.LocLenErr, by[1].Status)
	require.Equal(t, cq.RemInvReqErr, by[2].Status)
}

func TestRetryExceededWhenPeerGone(t *testing.T) {
	n, clk := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	at.retry = 3
	connect(t, a, n.d, b, n.d, at)
	require.NoError(t, b.Destroy()) // packets to it are dropped: unknown QP
	src := n.mr(t, 4096)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 64), RemoteAddr: 0x1000, Rkey: 1}))
	start := clk.Now()
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.RetryExcErr, wcs[0].Status)
	require.Equal(t, uint64(4), a.Counters()["timeouts"], "first try + 3 retries")
	// timeout 14 = 4.096us * 2^14 = 67.1 ms per try.
	require.InDelta(t, 4*67.108864, float64(clk.Now().Sub(start))/float64(time.Millisecond), 1)
}

func TestFlushOnErrorAndDrain(t *testing.T) {
	n, _, _, b := rcPair(t)
	dst := n.mr(t, 4096)
	for i := 0; i < 5; i++ {
		require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(i), SGL: sge(dst, 0, 64)}))
	}
	require.NoError(t, b.Drain(context.Background()))
	wcs := poll(t, n.cq, 5, nil)
	for i, w := range wcs {
		require.Equal(t, uint64(i), w.WRID)
		require.Equal(t, cq.WRFlushErr, w.Status)
		require.Equal(t, cq.Recv, w.Opcode)
	}
	// Posting in ERR is allowed and flushes at once.
	require.NoError(t, b.PostRecv(RecvWR{WRID: 99, SGL: sge(dst, 0, 64)}))
	wcs = poll(t, n.cq, 1, nil)
	require.Equal(t, cq.WRFlushErr, wcs[0].Status)
}

func TestSQDDrainedEvent(t *testing.T) {
	n, clk := manualNode(t)
	ev := record(n.d)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	require.NoError(t, a.Modify(&QPAttr{State: qp.SQD, EnSQDAsyncNotify: true}, qp.AttrState|qp.AttrEnSQDAsync))
	for i := 0; i < 3; i++ {
		clk.AdvanceToNext()
	}
	ev.requireHas(t, transport.EventSQDrained, a.Num())
	// Posting in SQD queues but starts nothing; back to RTS it runs.
	src, dst := n.mr(t, 64), n.mr(t, 64)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 8), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	require.Zero(t, n.cq.Len())
	require.NoError(t, a.Modify(&QPAttr{State: qp.RTS}, qp.AttrState))
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.Success, wcs[0].Status)
}

func TestSRQLimitAndLastWQE(t *testing.T) {
	n, clk := manualNode(t)
	ev := record(n.d)
	srq, err := n.pd.CreateSRQ(16, 1)
	require.NoError(t, err)
	b := srqQP(t, n, srq)
	a := n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	dst, src := n.mr(t, 4096), n.mr(t, 64)
	for i := 0; i < 4; i++ {
		require.NoError(t, srq.Post([]RecvWR{{WRID: uint64(100 + i), SGL: sge(dst, uint64(i)*64, 64)}}))
	}
	require.NoError(t, srq.Arm(3))
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, SGL: sge(src, 0, 8)},
		SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	poll(t, n.cq, 3, func() { clk.AdvanceToNext() })
	ev.requireHas(t, transport.EventSRQLimitReached, 0)
	require.ErrorIs(t, srq.Destroy(), ErrBusy, "a QP uses it")
	require.NoError(t, b.Modify(&QPAttr{State: qp.Err}, qp.AttrState))
	ev.requireHas(t, transport.EventQPLastWQEReached, b.Num())
	require.Equal(t, 2, srq.Len(), "an SRQ's WQEs are not flushed by one QP")
	require.NoError(t, b.Destroy())
	require.NoError(t, srq.Destroy())
}

func TestUCAndUDLoopback(t *testing.T) {
	n, clk := manualNode(t)
	step := func() { clk.AdvanceToNext() }
	a, b := n.qp(t, qp.UC), n.qp(t, qp.UC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	src, dst := n.mr(t, 1<<16), n.mr(t, 1<<16)
	data := bytes.Repeat([]byte("uc-data!"), 512)
	src.WriteAt(data, src.IOVA)
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 8192)}, RecvWR{WRID: 4}))
	require.NoError(t, a.PostSend(
		SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 4096)},
		SendWR{WRID: 3, Opcode: qp.OpRDMAWriteWithImm, ImmData: 42, Flags: qp.Signaled,
			SGL: sge(src, 0, 4096), RemoteAddr: dst.IOVA + 10000, Rkey: dst.Rkey}))
	wcs := poll(t, n.cq, 4, step)
	by := map[uint64]WC{}
	for _, w := range wcs {
		require.Equal(t, cq.Success, w.Status, "%+v", w)
		by[w.WRID] = w
	}
	require.Equal(t, cq.RecvRDMAWithImm, by[4].Opcode)
	require.Equal(t, uint32(42), by[4].ImmData)
	got := make([]byte, 4096)
	dst.ReadAt(got, dst.IOVA+10000)
	require.Equal(t, data, got)

	// UD: GRH area plus payload; Q_Key checked; larger than MTU refused.
	u1, u2 := n.qp(t, qp.UD), n.qp(t, qp.UD)
	connect(t, u1, n.d, u2, n.d, defaultAttrs())
	gid, _ := n.d.QueryGID(1, 1)
	ah, err := n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1})
	require.NoError(t, err)
	require.NoError(t, u2.PostRecv(RecvWR{WRID: 10, SGL: sge(dst, 0, 40+100)}))
	require.NoError(t, u1.PostSend(SendWR{WRID: 11, Opcode: qp.OpSendWithImm, ImmData: 7, Flags: qp.Signaled,
		SGL: sge(src, 0, 100), AH: ah, RemoteQPN: u2.Num(), RemoteQKey: 0x1111}))
	wcs = poll(t, n.cq, 2, step)
	by = map[uint64]WC{}
	for _, w := range wcs {
		by[w.WRID] = w
	}
	require.Equal(t, cq.Success, by[10].Status)
	require.Equal(t, uint32(140), by[10].ByteLen)
	require.Equal(t, u1.Num(), by[10].SrcQP)
	require.Equal(t, cq.GRH|cq.WithImm, by[10].Flags)
	grh := make([]byte, 40)
	dst.ReadAt(grh, dst.IOVA)
	require.Equal(t, byte(0x45), grh[20], "IPv4 header in the last 20 bytes of the GRH area")
	dst.ReadAt(got[:100], dst.IOVA+40)
	require.Equal(t, data[:100], got[:100])

	// Wrong Q_Key: dropped and counted, no completion.
	require.NoError(t, u1.PostSend(SendWR{WRID: 12, Opcode: qp.OpSend, SGL: sge(src, 0, 10), AH: ah,
		RemoteQPN: u2.Num(), RemoteQKey: 0x2222}))
	require.Equal(t, uint64(1), n.d.Counters()["drop_bad_q_key"])

	err = u1.PostSend(SendWR{WRID: 13, Opcode: qp.OpSend, SGL: sge(src, 0, 5000), AH: ah, RemoteQPN: u2.Num()})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestMulticastLoopback(t *testing.T) {
	n, clk := manualNode(t)
	var qs []*QP
	for i := 0; i < 3; i++ {
		q := n.qp(t, qp.UD)
		bringUp(t, q, q, n.d, defaultAttrs())
		qs = append(qs, q)
	}
	var mgid GID
	copy(mgid[:], []byte{0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42})
	for _, q := range qs[1:] {
		require.NoError(t, n.d.AttachMcast(q, mgid, 0))
	}
	require.ErrorIs(t, n.d.AttachMcast(qs[1], mgid, 0), mcast.ErrExists, "attached twice")
	rc := n.qp(t, qp.RC)
	require.ErrorIs(t, n.d.AttachMcast(rc, mgid, 0), ErrInvalidArgument)
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	for i, q := range qs[1:] {
		require.NoError(t, q.PostRecv(RecvWR{WRID: uint64(i), SGL: sge(dst, uint64(i)*1024, 1024)}))
	}
	ah, err := n.pd.CreateAH(AddressVector{DGID: mgid, SGIDIndex: 0})
	require.NoError(t, err)
	require.NoError(t, qs[0].PostSend(SendWR{WRID: 50, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: sge(src, 0, 64), AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x1111}))
	wcs := poll(t, n.cq, 3, func() { clk.AdvanceToNext() })
	recv := 0
	for _, w := range wcs {
		require.Equal(t, cq.Success, w.Status)
		if w.Opcode == cq.Recv {
			recv++
		}
	}
	require.Equal(t, 2, recv)
	require.NoError(t, n.d.DetachMcast(qs[1], mgid, 0))
	require.ErrorIs(t, n.d.DetachMcast(qs[1], mgid, 0), mcast.ErrNotAttached)
}

func TestFenceSolicitedUnsignaled(t *testing.T) {
	n, clk, a, b := rcPair(t)
	src, dst := n.mr(t, 8192), n.mr(t, 8192)
	dst.WriteAt([]byte("remote!!"), dst.IOVA)
	var solicited int
	n.cq.SetHandlers(func(*CQ) { solicited++ }, nil)
	require.NoError(t, n.cq.Arm(true))
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 100, 64)}, RecvWR{WRID: 2, SGL: sge(dst, 200, 64)}))
	// READ, then a fenced unsignalled SEND that must wait for it, then a
	// solicited SEND.
	require.NoError(t, a.PostSend(
		SendWR{WRID: 10, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge(src, 0, 8), RemoteAddr: dst.IOVA, Rkey: dst.Rkey},
		SendWR{WRID: 11, Opcode: qp.OpSend, Flags: qp.Fence, SGL: sge(src, 0, 8)},
		SendWR{WRID: 12, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Solicited, SGL: sge(src, 0, 8)}))
	wcs := poll(t, n.cq, 4, func() { clk.AdvanceToNext() })
	var ids []uint64
	for _, w := range wcs {
		require.Equal(t, cq.Success, w.Status)
		ids = append(ids, w.WRID)
	}
	require.NotContains(t, ids, uint64(11), "unsignalled")
	got := make([]byte, 8)
	dst.ReadAt(got, dst.IOVA+100)
	require.Equal(t, "remote!!", string(got), "the fenced SEND carried what the READ fetched")
	require.Equal(t, 1, solicited, "the solicited receive fired the solicited-only arm")
}

func TestSendWithInvalidateAndFastReg(t *testing.T) {
	n, clk := manualNode(t)
	step := func() { clk.AdvanceToNext() }
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	// Fast-register an MR on b's side through a REG_MR WR.
	fr, err := n.pd.AllocMR(2)
	require.NoError(t, err)
	pages := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	require.NoError(t, fr.MapPages(pages, 4096, 0x7000000, 8192))
	require.NoError(t, b.PostSend(SendWR{WRID: 1, Opcode: qp.OpRegMR, Flags: qp.Signaled,
		Reg: &qp.RegWR{MR: fr, Key: 0x42, Access: keys.LocalWrite | keys.RemoteWrite}}))
	wcs := poll(t, n.cq, 1, step)
	require.Equal(t, cq.Success, wcs[0].Status)
	require.Equal(t, cq.RegMR, wcs[0].Opcode)
	rkey := fr.Rkey
	require.Equal(t, uint32(0x42), rkey&0xFF)
	// a writes across the page boundary through the new key.
	src.WriteAt(bytes.Repeat([]byte{0xAB}, 200), src.IOVA)
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 200), RemoteAddr: 0x7000000 + 4000, Rkey: rkey}))
	wcs = poll(t, n.cq, 1, step)
	require.Equal(t, cq.Success, wcs[0].Status)
	require.Equal(t, byte(0xAB), pages[0][4095])
	require.Equal(t, byte(0xAB), pages[1][103])
	// SEND_WITH_INV invalidates it at the responder.
	require.NoError(t, b.PostRecv(RecvWR{WRID: 3, SGL: sge(dst, 0, 64)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 4, Opcode: qp.OpSendWithInv, InvalidateRkey: rkey,
		Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	wcs = poll(t, n.cq, 2, step)
	by := map[uint64]WC{}
	for _, w := range wcs {
		by[w.WRID] = w
	}
	require.Equal(t, cq.Success, by[3].Status)
	require.Equal(t, cq.WithInv, by[3].Flags&cq.WithInv)
	require.Equal(t, rkey, by[3].InvalidatedRkey)
	require.False(t, fr.Valid())
	// The old key no longer works.
	require.NoError(t, a.PostSend(SendWR{WRID: 5, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 8), RemoteAddr: 0x7000000, Rkey: rkey}))
	wcs = poll(t, n.cq, 1, step)
	require.Equal(t, cq.RemAccessErr, wcs[0].Status)
}

func TestMemoryWindows(t *testing.T) {
	n, clk, a, b := rcPair(t)
	src := n.mr(t, 4096)
	mem, mw1 := windowed(t, n)
	rkey, err := n.d.BindMW(mw1, mem, mem.IOVA+1024, 1024, keys.RemoteWrite)
	require.NoError(t, err)
	require.ErrorIs(t, n.d.DeregMR(mem), keys.ErrBusy, "windows are bound")
	mw2, err := n.pd.AllocMW(keys.MWType2)
	require.NoError(t, err)
	require.NoError(t, b.PostSend(SendWR{WRID: 1, Opcode: qp.OpBindMW, Flags: qp.Signaled,
		Bind: &qp.BindWR{MW: mw2, MR: mem, Addr: mem.IOVA + 4096, Length: 512, Access: keys.RemoteRead, Key: 9}}))
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.Success, wcs[0].Status)
	require.Equal(t, cq.BindMW, wcs[0].Opcode)
	// Inside window 1: ok; beyond it: remote access error.
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 100), RemoteAddr: mem.IOVA + 1024, Rkey: rkey}))
	wcs = poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.Success, wcs[0].Status)
	require.NoError(t, a.PostSend(SendWR{WRID: 3, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL: sge(src, 0, 100), RemoteAddr: mem.IOVA + 4096, Rkey: mw2.Rkey}))
	wcs = poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.Success, wcs[0].Status)
	require.NoError(t, a.PostSend(SendWR{WRID: 4, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 100), RemoteAddr: mem.IOVA + 2000, Rkey: rkey}))
	wcs = poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.RemAccessErr, wcs[0].Status)
}

func TestPostErrorsNameTheWR(t *testing.T) {
	n, _ := manualNode(t)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	src := n.mr(t, 64)
	err := a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, SGL: sge(src, 0, 8)})
	require.ErrorIs(t, err, ErrInvalidState, "RESET does not take sends")
	connect(t, a, n.d, b, n.d, defaultAttrs())
	err = a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, SGL: sge(src, 0, 8)},
		SendWR{WRID: 0xbad, Opcode: qp.OpSend, SGL: []SGE{{Addr: src.IOVA, Length: 8, Lkey: 12345}}})
	require.ErrorIs(t, err, keys.ErrInvalidKey)
	require.Contains(t, err.Error(), "WR 1 (wr_id 0xbad)")
	require.Equal(t, 0, a.QP.SQ.Len(), "nothing of the list was posted")
}

func TestSetAddrsGIDChange(t *testing.T) {
	n, clk := manualNode(t)
	ev := record(n.d)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs()) // GID index 1: 127.0.0.1
	src, dst := n.mr(t, 64), n.mr(t, 64)
	newIP := netip.MustParseAddr("127.0.0.9")
	require.NoError(t, n.d.SetAddrs([]netip.Addr{netip.MustParseAddr("fe80::1"), newIP}))
	ev.requireHas(t, transport.EventGIDChange, 0)
	g, err := n.d.QueryGID(1, 1)
	require.NoError(t, err)
	require.Equal(t, netdev.GIDFromIP(newIP), g)
	// The QPs were addressed to the old GID: their packets no longer
	// reach this device (dropped, then RETRY_EXC_ERR) ...
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 8), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.RetryExcErr, wcs[0].Status)
	require.ErrorIs(t, n.d.SetAddrs(nil), ErrInvalidArgument)
}

// SetAddrs reaches the host answering for the addresses through the link
// wrappers (here a fault injector), as multicast joins do.
func TestSetAddrsThroughWrappers(t *testing.T) {
	fab := fabric.New(nil, 1)
	mac := netdev.MAC{0x02, 0, 0, 0, 0, 0x61}
	port := fab.NewPort(mac, 4096)
	t.Cleanup(func() { port.Close() })
	old := []netip.Addr{netip.MustParseAddr("fe80::61"), netip.MustParseAddr("198.18.0.61")}
	h := host.New(port, mac, old, nil)
	fl, err := faults.New(h, nil, 1, faults.Profile{})
	require.NoError(t, err)
	n := newNode(t, Options{Link: fl, MAC: mac, Addrs: old, Resolve: h.Resolve})
	next := []netip.Addr{old[0], netip.MustParseAddr("198.18.0.62")}
	require.NoError(t, n.d.SetAddrs(next))
	require.Equal(t, next, h.Addrs(), "the wrapped host answers for the new addresses")
}

// A receive WQE posted to an SRQ is checked against the SRQ's PD, which may
// differ from the QP's; a key change between post and use (which makes the
// responder check again) must check against that same PD.
func TestSRQInOtherPDAfterKeyChange(t *testing.T) {
	n, clk := manualNode(t)
	pd2, err := n.d.AllocPD()
	require.NoError(t, err)
	srq, err := pd2.CreateSRQ(4, 1)
	require.NoError(t, err)
	b := srqQP(t, n, srq)
	a := n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	dst, err := pd2.Reg(make([]byte, 64), keys.LocalWrite)
	require.NoError(t, err)
	src := n.mr(t, 64)
	require.NoError(t, srq.Post([]RecvWR{{WRID: 7, SGL: sge(dst, 0, 64)}}))
	other := n.mr(t, 64)
	require.NoError(t, n.d.DeregMR(other)) // the key table changes after the post
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	by := map[uint64]WC{}
	for _, w := range poll(t, n.cq, 2, func() { clk.AdvanceToNext() }) {
		by[w.WRID] = w
	}
	require.Equal(t, cq.Success, by[7].Status, "receive into the SRQ's PD: %+v", by[7])
	require.Equal(t, cq.Success, by[1].Status, "send: %+v", by[1])
}

// Each bind of a type-1 window gives it a new rkey (ibv_bind_mw bumps the
// key byte, as ibv_inc_rkey does), so a key handed out for the old binding
// no longer grants access.
func TestBindMWType1NewRkey(t *testing.T) {
	n, clk, a, _ := rcPair(t)
	src := n.mr(t, 64)
	mem, mw := windowed(t, n)
	old, err := n.d.BindMW(mw, mem, mem.IOVA, 1024, keys.RemoteWrite)
	require.NoError(t, err)
	fresh, err := n.d.BindMW(mw, mem, mem.IOVA+4096, 1024, keys.RemoteWrite)
	require.NoError(t, err)
	require.NotEqual(t, old, fresh, "a rebind keeps its rkey")
	require.Equal(t, old&^0xff, fresh&^0xff, "only the key byte changes")
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 8), RemoteAddr: mem.IOVA + 4096, Rkey: old}))
	wcs := poll(t, n.cq, 1, func() { clk.AdvanceToNext() })
	require.Equal(t, cq.RemAccessErr, wcs[0].Status, "the old rkey still works")
}

// A packet from an address other than the QP's peer is dropped (rxe's
// check_addr) before it can do anything, including raise COMM_EST in RTR.
func TestBadSourceDroppedBeforeCommEst(t *testing.T) {
	n, _ := manualNode(t)
	ev := record(n.d)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	bringUp(t, a, b, n.d, at) // a sends from GID 1 to GID 1
	gid0, err := n.d.QueryGID(1, 0)
	require.NoError(t, err)
	gid1, err := n.d.QueryGID(1, 1)
	require.NoError(t, err)
	require.NotEqual(t, gid0, gid1)
	require.NoError(t, b.Modify(&QPAttr{State: qp.Init, Port: 1, AccessFlags: at.access},
		qp.RequiredAttrs(qp.RC, qp.Reset, qp.Init)))
	// b expects its peer at GID 0, so a's packets come from a stranger.
	require.NoError(t, b.Modify(&QPAttr{State: qp.RTR, PathMTU: at.mtu, DestQPN: a.Num(), RQPSN: 0x123456,
		MaxDestRdAtomic: 16, MinRNRTimer: at.minRNR, AV: AddressVector{DGID: gid0, SGIDIndex: 0, HopLimit: 64, Port: 1}},
		qp.RequiredAttrs(qp.RC, qp.Init, qp.RTR)))
	dst, src := n.mr(t, 64), n.mr(t, 64)
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 64)}))
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, SGL: sge(src, 0, 8)}))
	require.Equal(t, uint64(1), b.Counters()["drop_"+transport.DropBadSource.Name()])
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.evs {
		require.NotEqual(t, transport.EventCommEst, e.Type, "COMM_EST from a stranger's packet")
	}
}

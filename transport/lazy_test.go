package transport

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// loopPair returns two RC QPs (0x21 sending, 0x22 responding) connected to
// each other on one engine (loopback, the inline executor, a manual
// clock), with the READ/atomic depth the responder allows, and their CQ.
func loopPair(t *testing.T) (e *Engine, a, b *Conn, c *cq.CQ) {
	t.Helper()
	e, err := NewEngine(Config{Clock: clock.NewManual(), Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	self := netip.MustParseAddr("198.18.0.1")
	require.NoError(t, e.SetPort(PortConfig{Addrs: []netip.Addr{self}}))
	c, err = cq.New(256)
	require.NoError(t, err)
	pd := keys.NewPD(1)
	// One PD for both (the requester's MRs are the responder's targets)
	// and one CQ; sixteen READs and atomics in flight.
	mk := func(num uint32) *Conn {
		return newTestConnWith(t, e, num, func(cfg *qp.Config) {
			cfg.PD, cfg.SendCQ, cfg.RecvCQ = pd, c, c
			cfg.Cap = qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
			cfg.Limits.MaxRdAtomic, cfg.Limits.MaxDestRdAtomic = 16, 16
		})
	}
	a, b = mk(0x21), mk(0x22)
	for _, p := range [][2]*Conn{{a, b}, {b, a}} {
		for _, at := range []qp.Attr{
			{State: qp.Init, Port: 1, AccessFlags: keys.RemoteRead | keys.RemoteWrite | keys.RemoteAtomic},
			{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: p[1].qp.Num(), MaxDestRdAtomic: 16, MinRNRTimer: 1,
				AV: qp.AddressVector{DGID: netdev.GIDFromIP(self), HopLimit: 64, Port: 1}},
			{State: qp.RTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		} {
			require.NoError(t, p[0].Modify(&at, qp.RequiredAttrs(qp.RC, p[0].qp.State(), at.State)), "to %v", at.State)
		}
	}
	return e, a, b, c
}

// TestReadAtomicTableOnFirstUse checks the responder's table of READ and
// atomic results (replayed for duplicates) is made at the first READ or
// atomic, not with the QP: many SENDs and WRITEs leave it unmade, and the
// READ and atomics that come after them make it and work.
func TestReadAtomicTableOnFirstUse(t *testing.T) {
	e, a, b, c := loopPair(t)
	pd := a.qp.PD()
	src := make([]byte, 64)
	dst := make([]byte, 4096)
	smr, err := e.keys.RegMR(pd, src, 0x1000, keys.LocalWrite)
	require.NoError(t, err)
	dmr, err := e.keys.RegMR(pd, dst, 0x10000, keys.LocalWrite|keys.RemoteRead|keys.RemoteWrite|keys.RemoteAtomic)
	require.NoError(t, err)
	wcs := make([]cq.WC, 64)
	reap := func(n int) []cq.WC {
		t.Helper()
		var got []cq.WC
		for range 100 {
			k := c.Poll(wcs)
			got = append(got, wcs[:k]...)
			if len(got) >= n {
				break
			}
		}
		require.Len(t, got, n)
		for _, w := range got {
			require.Equal(t, cq.Success, w.Status, "%+v", w)
		}
		return got
	}
	copy(src, "eight by")
	for i := range 200 {
		op := qp.OpSend
		if i%2 == 1 {
			op = qp.OpRDMAWrite
		} else {
			require.NoError(t, b.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGL: []qp.SGE{{Addr: 0x10000, Length: 64, Lkey: dmr.Lkey}}}}))
		}
		require.NoError(t, a.PostSend([]qp.SendWR{{WRID: uint64(i), Opcode: op, Flags: qp.Signaled,
			SGL: []qp.SGE{{Addr: 0x1000, Length: 8, Lkey: smr.Lkey}}, RemoteAddr: 0x10100, Rkey: dmr.Rkey}}))
		n := 1
		if op == qp.OpSend {
			n = 2 // and the receive
		}
		reap(n)
	}
	b.qp.Lock()
	require.Nil(t, b.resp.res, "no table after 100 SENDs and 100 WRITEs")
	b.qp.Unlock()

	// A READ of what the WRITEs placed, then a fetch-and-add and a
	// compare-and-swap on a counter.
	binary.LittleEndian.PutUint64(dst[0x200:], 40)
	require.NoError(t, a.PostSend([]qp.SendWR{
		{WRID: 1000, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
			SGL: []qp.SGE{{Addr: 0x1000 + 16, Length: 8, Lkey: smr.Lkey}}, RemoteAddr: 0x10100, Rkey: dmr.Rkey},
		{WRID: 1001, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled,
			SGL: []qp.SGE{{Addr: 0x1000 + 32, Length: 8, Lkey: smr.Lkey}}, RemoteAddr: 0x10200, Rkey: dmr.Rkey, CompareAdd: 2},
		{WRID: 1002, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled,
			SGL: []qp.SGE{{Addr: 0x1000 + 40, Length: 8, Lkey: smr.Lkey}}, RemoteAddr: 0x10200, Rkey: dmr.Rkey, CompareAdd: 42, Swap: 7},
	}))
	reap(3)
	require.Equal(t, "eight by", string(src[16:24]), "READ")
	require.EqualValues(t, 40, binary.LittleEndian.Uint64(src[32:]), "fetch-and-add: the old value")
	require.EqualValues(t, 42, binary.LittleEndian.Uint64(src[40:]), "compare-and-swap: the old value")
	require.EqualValues(t, 7, binary.LittleEndian.Uint64(dst[0x200:]), "swapped")
	b.qp.Lock()
	require.NotNil(t, b.resp.res, "made by the READ")
	require.Equal(t, 3, b.resp.resNext, "one entry each")
	b.qp.Unlock()
}

// TestCountersAndDrainOnFirstUse checks a QP's counters are made when it
// first has a count to keep, not with the QP: reading an idle QP's counters
// gives zeros and makes nothing; after traffic they hold its counts. The
// drain's channel is made at the first WaitFlushed, which still works.
func TestCountersAndDrainOnFirstUse(t *testing.T) {
	e, a, b, c := loopPair(t)
	for _, q := range []*Conn{a, b} {
		require.Nil(t, q.counters.Load())
		require.Zero(t, q.Counters().Get(SentPkts))
		require.Empty(t, q.Snapshot().Counters)
		require.Nil(t, q.counters.Load(), "reading zeros makes nothing")
		require.Nil(t, q.ran.Load())
	}
	total := e.Snapshot()
	require.Nil(t, a.counters.Load(), "nor does the device's total")

	mr, err := e.keys.RegMR(a.qp.PD(), make([]byte, 64), 0x1000, keys.LocalWrite)
	require.NoError(t, err)
	sge := []qp.SGE{{Addr: 0x1000, Length: 8, Lkey: mr.Lkey}}
	require.NoError(t, b.PostRecv([]qp.RecvWR{{WRID: 1, SGL: sge}}))
	require.NoError(t, a.PostSend([]qp.SendWR{{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge}}))
	require.Equal(t, 2, c.Poll(make([]cq.WC, 4)))
	require.EqualValues(t, 1, a.Counters().Get(SentPkts), "the SEND")
	require.EqualValues(t, 1, b.Counters().Get(SentPkts), "its ACK")
	require.EqualValues(t, 1, b.Snapshot().Counters["rdma_recvs"])
	require.NotNil(t, a.counters.Load())
	require.Equal(t, total["sent_pkts"]+2, e.Snapshot()["sent_pkts"])

	// A packet dropped for a QP that has no counters yet makes them.
	idle := newTestConnNum(t, e, 0x23)
	e.drop(idle, DropUnknownQP)
	require.EqualValues(t, 1, idle.Counters().Drops(DropUnknownQP))

	// The drain: to ERR, then WaitFlushed returns once all is flushed.
	require.NoError(t, b.PostRecv([]qp.RecvWR{{WRID: 3, SGL: sge}}))
	require.NoError(t, b.Modify(&qp.Attr{State: qp.Err}, qp.AttrState))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.WaitFlushed(ctx))
	require.NotNil(t, b.ran.Load())
	require.Equal(t, 1, c.Poll(make([]cq.WC, 4)), "the receive, flushed")
}

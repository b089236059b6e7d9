package transport

import (
	"encoding/binary"
	"net/netip"
	"testing"

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
	mk := func(num uint32) *Conn {
		q, err := qp.New(num, qp.Config{
			Type: qp.RC, PD: pd, SendCQ: c, RecvCQ: c, Keys: e.keys,
			Cap:    qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
			Limits: &qp.Limits{MaxMTU: qp.MTU4096, MaxRdAtomic: 16, MaxDestRdAtomic: 16, PkeyTableLen: 1, GIDTableLen: 1, Ports: 1},
		})
		require.NoError(t, err)
		conn, err := e.NewConn(q)
		require.NoError(t, err)
		return conn
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

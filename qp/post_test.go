package qp

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
)

func sendList(q *QP, wrs ...SendWR) error {
	q.Lock()
	defer q.Unlock()
	return q.PostSendLocked(wrs)
}

func recvList(q *QP, wrs ...RecvWR) error {
	q.Lock()
	defer q.Unlock()
	return q.PostRecvLocked(wrs)
}

// sendWR returns a WR for typ that is valid in every respect.
func (f *fixture) sendWR(typ Type, id uint64) SendWR {
	wr := SendWR{WRID: id, Opcode: OpSend, SGL: []SGE{f.sge(0, 64)}}
	if typ.Datagram() {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = f.ah(), 0x33, 0x1234
	}
	return wr
}

func TestNew(t *testing.T) {
	f := newFixture(t)
	srq, err := NewSRQ(f.pd, f.kt, 4, 1)
	require.NoError(t, err)
	bad := []struct {
		name string
		mod  func(c *Config)
		err  error
	}{
		{"no PD", func(c *Config) { c.PD = nil }, ErrInvalidArgument},
		{"no send CQ", func(c *Config) { c.SendCQ = nil }, ErrInvalidArgument},
		{"no recv CQ", func(c *Config) { c.RecvCQ = nil }, ErrInvalidArgument},
		{"no keys", func(c *Config) { c.Keys = nil }, ErrInvalidArgument},
		{"no limits", func(c *Config) { c.Limits = nil }, ErrInvalidArgument},
		{"type 0", func(c *Config) { c.Type = 0 }, ErrNotSupported},
		{"type 5", func(c *Config) { c.Type = 5 }, ErrNotSupported},
		{"no queues", func(c *Config) { c.Cap = Cap{} }, ErrInvalidArgument},
		{"SRQ and max_recv_wr", func(c *Config) { c.SRQ = srq }, ErrInvalidArgument},
		{"SRQ and max_recv_sge", func(c *Config) { c.SRQ, c.Cap.MaxRecvWR = srq, 0 }, ErrInvalidArgument},
	}
	pdRefs := f.pd.Refs()
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			cfg := f.cfg(RC, defaultCap())
			c.mod(&cfg)
			_, err := New(2, cfg)
			require.ErrorIs(t, err, c.err)
		})
	}
	_, err = New(MaxQPN+1, f.cfg(RC, defaultCap()))
	require.ErrorIs(t, err, ErrInvalidArgument, "a number past a BTH's 24 bits")
	require.Equal(t, pdRefs, f.pd.Refs(), "failed creations take no references")
	require.NoError(t, srq.Destroy(), "failed creations do not hold the SRQ")
	pdRefs = f.pd.Refs()

	q, err := New(7, f.cfg(UC, Cap{MaxSendWR: 2, MaxRecvWR: 3}))
	require.NoError(t, err)
	require.Equal(t, uint32(7), q.Num())
	require.Equal(t, uint32(7), q.QPN())
	require.Equal(t, UC, q.Type())
	require.Same(t, f.pd, q.PD())
	require.Same(t, f.scq, q.SendCQ())
	require.Same(t, f.rcq, q.RecvCQ())
	require.Same(t, f.kt, q.Keys())
	require.Nil(t, q.SRQ())
	require.False(t, q.SigAll())
	require.Equal(t, Reset, q.State())
	a := q.Query()
	require.Equal(t, Cap{MaxSendWR: 2, MaxRecvWR: 3, MaxSendSGE: 1, MaxRecvSGE: 1}, a.Cap, "SGE counts default to 1")
	require.Equal(t, uint8(1), a.Port)
	require.Equal(t, MTU1024, a.PathMTU)
	require.Equal(t, 2, q.SQ.Cap())
	require.Equal(t, 3, q.RQ.Cap())
	require.Equal(t, pdRefs+1, f.pd.Refs())
	require.Equal(t, 1, f.scq.Refs())
	require.Equal(t, 1, f.rcq.Refs())
	q.Release()
	require.Equal(t, pdRefs, f.pd.Refs())
	require.Equal(t, 0, f.scq.Refs())
	require.Equal(t, 0, f.rcq.Refs())

	// An inline-only send queue needs no SGE.
	q, err = New(8, f.cfg(RC, Cap{MaxSendWR: 2, MaxInlineData: 32}))
	require.NoError(t, err)
	require.Equal(t, uint32(0), q.Query().Cap.MaxSendSGE)
	q.Release()
}

func TestNewOnDestroyedCQ(t *testing.T) {
	for _, c := range []struct {
		name, which string
		cq          func(f *fixture) *cq.CQ
	}{
		{"send", "send CQ", func(f *fixture) *cq.CQ { return f.scq }},
		{"recv", "receive CQ", func(f *fixture) *cq.CQ { return f.rcq }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			require.NoError(t, c.cq(f).Destroy())
			pdRefs := f.pd.Refs()
			q, err := New(2, f.cfg(RC, defaultCap()))
			require.ErrorIs(t, err, cq.ErrDestroyed)
			require.Contains(t, err.Error(), c.which)
			require.Nil(t, q)
			require.Equal(t, pdRefs, f.pd.Refs(), "no PD reference left behind")
			require.Zero(t, f.scq.Refs(), "no send CQ reference left behind")
			require.Zero(t, f.rcq.Refs(), "no receive CQ reference left behind")
		})
	}
}

func TestPostByState(t *testing.T) {
	sendOK := map[State]bool{RTS: true, SQD: true, SQE: true, Err: true}
	for _, typ := range allTypes {
		for s := Reset; s <= Err; s++ {
			t.Run(fmt.Sprintf("%v/%v", typ, s), func(t *testing.T) {
				f := newFixture(t)
				q := f.newQP(t, typ, defaultCap())
				moveTo(t, q, s)
				require.Equal(t, s, q.State())
				err := sendList(q, f.sendWR(typ, 1))
				if sendOK[s] {
					require.NoError(t, err)
					require.Equal(t, 1, q.SQ.Len())
				} else {
					require.ErrorIs(t, err, ErrInvalidState)
					require.Contains(t, err.Error(), s.String())
					require.Equal(t, 0, q.SQ.Len())
				}
				err = recvList(q, RecvWR{WRID: 2, SGL: []SGE{f.sge(0, 64)}})
				if s != Reset {
					require.NoError(t, err)
					require.Equal(t, 1, q.RecvLenLocked())
				} else {
					require.ErrorIs(t, err, ErrInvalidState)
					require.Equal(t, 0, q.RQ.Len())
				}
			})
		}
	}
}

func TestPostSendOpcodes(t *testing.T) {
	f := newFixture(t)
	mw, err := f.kt.AllocMW(f.pd, keys.MWType2)
	require.NoError(t, err)
	fmr, err := f.kt.AllocMR(f.pd, 4)
	require.NoError(t, err)

	wrFor := func(typ Type, op Opcode) SendWR {
		wr := f.sendWR(typ, 9)
		wr.Opcode = op
		wr.RemoteAddr, wr.Rkey = 0x1000, 0x4242
		switch op {
		case OpAtomicCmpSwp, OpAtomicFetchAdd:
			wr.SGL = []SGE{f.sge(8, 8)}
		case OpLocalInv:
			wr.SGL, wr.InvalidateRkey = nil, 0x4242
		case OpSendWithInv:
			wr.InvalidateRkey = 0x4242
		case OpBindMW:
			wr.SGL, wr.Bind = nil, &BindWR{MW: mw, MR: f.mr, Addr: mrBase, Length: 16, Key: 1}
		case OpRegMR:
			wr.SGL, wr.Reg = nil, &RegWR{MR: fmr, Key: 2}
		}
		return wr
	}
	rcOnly := map[Type]bool{RC: true}
	connected := map[Type]bool{RC: true, UC: true}
	everyone := map[Type]bool{RC: true, UC: true, UD: true, GSI: true}
	allowed := map[Opcode]map[Type]bool{
		OpSend:             everyone,
		OpSendWithImm:      everyone,
		OpRDMAWrite:        connected,
		OpRDMAWriteWithImm: connected,
		OpLocalInv:         connected,
		OpBindMW:           connected,
		OpRegMR:            connected,
		OpRDMARead:         rcOnly,
		OpAtomicCmpSwp:     rcOnly,
		OpAtomicFetchAdd:   rcOnly,
		OpSendWithInv:      rcOnly,
		10:                 nil,
		11:                 nil,
		13:                 nil,
		255:                nil,
	}
	for _, typ := range allTypes {
		q := f.newQP(t, typ, Cap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 2})
		moveTo(t, q, RTS)
		for op, types := range allowed {
			t.Run(fmt.Sprintf("%v/%v", typ, op), func(t *testing.T) {
				n := q.SQ.Len()
				err := sendList(q, wrFor(typ, op))
				if types[typ] {
					require.NoError(t, err)
					require.Equal(t, n+1, q.SQ.Len())
					return
				}
				require.ErrorIs(t, err, ErrInvalidArgument)
				require.Contains(t, err.Error(), "opcode "+op.String())
				require.Equal(t, n, q.SQ.Len())
			})
		}
	}
}

func TestPostSendChecks(t *testing.T) {
	f := newFixture(t)

	cases := []struct {
		name string
		typ  Type
		mod  func(wr *SendWR)
		err  error  // nil: accepted
		msg  string // in the error
	}{
		{"ok", RC, func(*SendWR) {}, nil, ""},
		{"no SGE", RC, func(wr *SendWR) { wr.SGL = nil }, nil, ""},
		{"max SGEs", RC, func(wr *SendWR) { wr.SGL = []SGE{f.sge(0, 1), f.sge(1, 1), f.sge(2, 1)} }, nil, ""},
		{"too many SGEs", RC, func(wr *SendWR) { wr.SGL = []SGE{f.sge(0, 1), f.sge(1, 1), f.sge(2, 1), f.sge(3, 1)} },
			ErrInvalidArgument, "4 SGEs"},
		{"unknown flag", RC, func(wr *SendWR) { wr.Flags = 1 << 4 }, ErrInvalidArgument, "flags"},
		{"inline", RC, func(wr *SendWR) { wr.SGL, wr.Flags, wr.InlineData = nil, Inline, make([]byte, 64) }, nil, ""},
		{"inline too large", RC, func(wr *SendWR) { wr.SGL, wr.Flags, wr.InlineData = nil, Inline, make([]byte, 65) },
			ErrInvalidArgument, "65 bytes inline"},
		{"inline with READ", RC, func(wr *SendWR) {
			wr.Opcode, wr.SGL, wr.Flags, wr.InlineData = OpRDMARead, nil, Inline, []byte{1}
		}, ErrInvalidArgument, "inline"},
		{"inline with atomic", RC, func(wr *SendWR) {
			wr.Opcode, wr.SGL, wr.Flags, wr.InlineData = OpAtomicFetchAdd, nil, Inline, make([]byte, 8)
		}, ErrInvalidArgument, "inline"},
		{"inline with LOCAL_INV", UC, func(wr *SendWR) {
			wr.Opcode, wr.SGL, wr.Flags, wr.InvalidateRkey = OpLocalInv, nil, Inline, 5
		}, ErrInvalidArgument, "inline"},
		{"inline with SGEs", RC, func(wr *SendWR) { wr.Flags, wr.InlineData = Inline, []byte{1} }, ErrInvalidArgument, "SGE"},
		{"InlineData without flag", RC, func(wr *SendWR) { wr.SGL, wr.InlineData = nil, []byte{1} },
			ErrInvalidArgument, "without the Inline flag"},
		{"atomic no SGE", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicCmpSwp, nil }, ErrInvalidArgument, "8-byte"},
		{"atomic 2 SGEs", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicCmpSwp, []SGE{f.sge(0, 4), f.sge(4, 4)} },
			ErrInvalidArgument, "8-byte"},
		{"atomic 4 bytes", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicFetchAdd, []SGE{f.sge(0, 4)} },
			ErrInvalidArgument, "8-byte"},
		{"atomic 16 bytes", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicFetchAdd, []SGE{f.sge(0, 16)} },
			ErrInvalidArgument, "8-byte"},
		{"atomic 8 bytes", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicFetchAdd, []SGE{f.sge(0, 8)} }, nil, ""},
		{"bad lkey", RC, func(wr *SendWR) { wr.SGL = []SGE{f.sge(0, 8), {Addr: mrBase, Length: 8, Lkey: 0xdead00}} },
			keys.ErrInvalidKey, "SGE 1 (lkey 0xdead00"},
		{"lkey 0", UC, func(wr *SendWR) { wr.SGL = []SGE{{Addr: 0, Length: 8, Lkey: 0}} }, keys.ErrInvalidKey, "lkey 0x0"},
		{"PD mismatch", RC, func(wr *SendWR) { wr.SGL = []SGE{{Addr: 0, Length: 8, Lkey: f.otherMR.Lkey}} },
			keys.ErrPDMismatch, fmt.Sprintf("lkey %#x", f.otherMR.Lkey)},
		{"out of bounds", RC, func(wr *SendWR) { wr.SGL = []SGE{f.sge(mrLen-4, 8)} }, keys.ErrBounds, "SGE 0"},
		{"below the MR", RC, func(wr *SendWR) { wr.SGL = []SGE{{Addr: mrBase - 1, Length: 2, Lkey: f.mr.Lkey}} },
			keys.ErrBounds, "SGE 0"},
		{"READ into read-only MR", RC, func(wr *SendWR) {
			wr.Opcode, wr.SGL = OpRDMARead, []SGE{{Addr: roBase, Length: 8, Lkey: f.roMR.Lkey}}
		}, keys.ErrAccess, "SGE 0"},
		{"SEND from read-only MR", RC, func(wr *SendWR) { wr.SGL = []SGE{{Addr: roBase, Length: 8, Lkey: f.roMR.Lkey}} }, nil, ""},
		{"zero-length SGE checks no key", RC, func(wr *SendWR) { wr.SGL = []SGE{{Lkey: 0xdead00}} }, nil, ""},
		{"LOCAL_INV without key", UC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpLocalInv, nil }, ErrInvalidArgument, "LOCAL_INV"},
		{"BIND_MW without window", RC, func(wr *SendWR) { wr.Opcode, wr.SGL, wr.Bind = OpBindMW, nil, &BindWR{MR: f.mr} },
			ErrInvalidArgument, "BIND_MW"},
		{"BIND_MW nil", RC, func(wr *SendWR) { wr.Opcode, wr.SGL = OpBindMW, nil }, ErrInvalidArgument, "BIND_MW"},
		{"REG_MR without region", RC, func(wr *SendWR) { wr.Opcode, wr.SGL, wr.Reg = OpRegMR, nil, &RegWR{} },
			ErrInvalidArgument, "REG_MR"},
		{"UD ok", UD, func(*SendWR) {}, nil, ""},
		{"UD no AH", UD, func(wr *SendWR) { wr.AH = nil }, ErrInvalidArgument, "address handle"},
		{"GSI no AH", GSI, func(wr *SendWR) { wr.AH = nil }, ErrInvalidArgument, "address handle"},
		{"UD AH in other PD", UD, func(wr *SendWR) { wr.AH = &AH{PD: f.other} }, ErrInvalidArgument, "another PD"},
		{"UD message at MTU", UD, func(wr *SendWR) { wr.SGL = []SGE{f.sge(0, 1000), f.sge(1000, 24)} }, nil, ""},
		{"UD message above MTU", UD, func(wr *SendWR) { wr.SGL = []SGE{f.sge(0, 1000), f.sge(1000, 25)} },
			ErrInvalidArgument, "exceeds the MTU 1024"},
		{"UD inline above MTU", UD, func(wr *SendWR) {
			wr.SGL, wr.Flags, wr.InlineData = nil, Inline, make([]byte, 64)
		}, nil, ""},
		{"UD remote QPN 24 bits", UD, func(wr *SendWR) { wr.RemoteQPN = 1 << 24 }, ErrInvalidArgument, "remote QPN"},
		{"UD WRITE", UD, func(wr *SendWR) { wr.Opcode = OpRDMAWrite }, ErrInvalidArgument, "RDMA_WRITE"},
		{"UC READ", UC, func(wr *SendWR) { wr.Opcode = OpRDMARead }, ErrInvalidArgument, "RDMA_READ"},
		{"UC SEND_WITH_INV", UC, func(wr *SendWR) { wr.Opcode, wr.InvalidateRkey = OpSendWithInv, 1 },
			ErrInvalidArgument, "SEND_WITH_INV"},
		{"UD atomic", UD, func(wr *SendWR) { wr.Opcode, wr.SGL = OpAtomicCmpSwp, []SGE{f.sge(0, 8)} },
			ErrInvalidArgument, "ATOMIC_CMP_AND_SWP"},
	}
	for _, c := range cases {
		t.Run(c.typ.String()+"/"+c.name, func(t *testing.T) {
			q := f.newQP(t, c.typ, defaultCap())
			moveTo(t, q, RTS)
			// The WR under test is the second of a list of three: a bad one
			// posts nothing, and the error names index 1 and its wr_id.
			wrs := []SendWR{f.sendWR(c.typ, 0xa0), f.sendWR(c.typ, 0xb1), f.sendWR(c.typ, 0xc2)}
			c.mod(&wrs[1])
			err := sendList(q, wrs...)
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, 3, q.SQ.Len())
				return
			}
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), "WR 1 (wr_id 0xb1)")
			require.Contains(t, err.Error(), c.msg)
			require.Equal(t, 0, q.SQ.Len(), "nothing of the list was posted")
			require.Equal(t, uint32(0), q.SQ.Head())
		})
	}
}

func TestPostSendQueueFull(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, Cap{MaxSendWR: 4, MaxRecvWR: 1})
	moveTo(t, q, RTS)
	five := make([]SendWR, 5)
	for i := range five {
		five[i] = f.sendWR(RC, uint64(i))
		five[i].SGL = nil
	}
	require.ErrorIs(t, sendList(q, five...), ErrQueueFull)
	require.Equal(t, 0, q.SQ.Len())
	require.NoError(t, sendList(q, five[:3]...))
	require.ErrorIs(t, sendList(q, five[:2]...), ErrQueueFull, "two WRs, one free")
	require.Equal(t, 3, q.SQ.Len())
	require.NoError(t, sendList(q, five[3]))
	require.Equal(t, 0, q.SQ.Free())
	require.ErrorIs(t, sendList(q, five[4]), ErrQueueFull)
	require.NoError(t, sendList(q), "an empty list always fits")
	q.SQ.Retire()
	require.NoError(t, sendList(q, five[4]))
}

func TestPostSendSignaled(t *testing.T) {
	f := newFixture(t)
	for _, sigAll := range []bool{false, true} {
		t.Run(fmt.Sprintf("sig_all=%v", sigAll), func(t *testing.T) {
			cfg := f.cfg(RC, defaultCap())
			cfg.SigAll = sigAll
			q, err := New(3, cfg)
			require.NoError(t, err)
			defer q.Release()
			require.Equal(t, sigAll, q.SigAll())
			moveTo(t, q, RTS)
			a, b := f.sendWR(RC, 1), f.sendWR(RC, 2)
			b.Flags = Signaled | Solicited | Fence
			require.NoError(t, sendList(q, a, b))
			require.Equal(t, sigAll, q.SQ.At(0).Signaled)
			require.True(t, q.SQ.At(1).Signaled)
			require.Equal(t, b.Flags, q.SQ.At(1).WR.Flags)
		})
	}
}

func TestSendWQEIsACopy(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, UD, defaultCap())
	moveTo(t, q, RTS)
	wr := f.sendWR(UD, 77)
	wr.Opcode, wr.ImmData = OpSendWithImm, 0xfeed
	wr.SGL = []SGE{f.sge(0, 10), f.sge(100, 20)}
	inl := f.sendWR(UD, 78)
	inl.SGL, inl.Flags, inl.InlineData = nil, Inline|Signaled, []byte("hello, inline")
	require.NoError(t, sendList(q, wr, inl))

	w := q.SQ.At(q.SQ.Tail())
	require.Equal(t, WQEPosted, w.State)
	require.Equal(t, uint64(77), w.WR.WRID)
	require.Equal(t, uint32(0xfeed), w.WR.ImmData)
	require.Equal(t, uint32(30), w.Length)
	require.Equal(t, []SGE{f.sge(0, 10), f.sge(100, 20)}, w.WR.SGL)
	require.Equal(t, uint32(0x33), w.WR.RemoteQPN)

	// The caller reuses everything it passed.
	wr.SGL[0].Length, wr.SGL[1].Lkey = 9999, 1
	wr.AH.AV.HopLimit, wr.AH.AV.DGID[0] = 1, 0xee
	inl.InlineData[0] = 'J'
	require.Equal(t, []SGE{f.sge(0, 10), f.sge(100, 20)}, w.WR.SGL)
	require.Equal(t, uint8(64), w.WR.AH.AV.HopLimit)
	require.Equal(t, uint8(64), q.SQ.copies.ahs[q.SQ.Tail()&q.SQ.mask].AV.HopLimit)
	require.Zero(t, w.WR.AH.AV.DGID[0])

	w2 := q.SQ.At(q.SQ.Tail() + 1)
	require.Equal(t, []byte("hello, inline"), w2.WR.InlineData)
	require.Equal(t, uint32(13), w2.Length)
	require.True(t, w2.Signaled)
	require.Empty(t, w2.WR.SGL)

	// A slot reused by a later WR keeps no trace of the earlier one.
	for i := 0; i < q.SQ.Cap(); i++ {
		q.SQ.Retire()
		n := f.sendWR(UD, uint64(100+i))
		n.SGL = nil
		require.NoError(t, sendList(q, n))
	}
	for i := q.SQ.Tail(); i != q.SQ.Head(); i++ {
		w := q.SQ.At(i)
		require.Empty(t, w.WR.SGL)
		require.Nil(t, w.WR.InlineData)
		require.Zero(t, w.Length)
		require.False(t, w.Signaled)
		require.Equal(t, WQEPosted, w.State)
	}
}

func TestSendRingWrap(t *testing.T) {
	for _, depth := range []uint32{1, 3, 4, 5, 7} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			f := newFixture(t)
			q := f.newQP(t, RC, Cap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1})
			moveTo(t, q, RTS)
			check := func(start uint32, cycles int) {
				q.SQ.head, q.SQ.tail, q.SQ.Next = start, start, start
				id := uint64(0)
				for c := 0; c < cycles; c++ {
					n := 1 + c%int(depth)
					for i := 0; i < n; i++ {
						wr := f.sendWR(RC, id+uint64(i))
						wr.SGL[0].Length = uint32(id) + uint32(i)
						require.NoError(t, sendList(q, wr))
					}
					require.Equal(t, n, q.SQ.Len())
					for i := 0; i < n; i++ {
						w := q.SQ.At(q.SQ.Tail())
						require.Equal(t, id, w.WR.WRID, "cycle %d", c)
						require.Equal(t, uint32(id), w.WR.SGL[0].Length)
						q.SQ.Retire()
						id++
					}
					require.Equal(t, 0, q.SQ.Len())
				}
			}
			check(0, 500)
			// Across the wrap of the free-running counters at 2^32.
			check(math.MaxUint32-2*depth, 50)
		})
	}
}

func TestRecvRingWrap(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, Cap{MaxSendWR: 1, MaxRecvWR: 3, MaxRecvSGE: 2})
	moveTo(t, q, Init)
	q.RQ.head, q.RQ.tail = math.MaxUint32-4, math.MaxUint32-4
	var dst RecvWQE
	for id := uint64(0); id < 30; id += 3 {
		require.NoError(t, recvList(q,
			RecvWR{WRID: id, SGL: []SGE{f.sge(0, 1)}},
			RecvWR{WRID: id + 1, SGL: []SGE{f.sge(0, 2), f.sge(8, 2)}},
			RecvWR{WRID: id + 2}))
		for i := uint64(0); i < 3; i++ {
			q.Lock()
			ok, limit := q.PopRecvLocked(&dst)
			q.Unlock()
			require.True(t, ok)
			require.False(t, limit)
			require.Equal(t, id+i, dst.WRID)
			require.Len(t, dst.SGL, []int{1, 2, 0}[i])
			require.Equal(t, []uint32{1, 4, 0}[i], dst.Length)
		}
	}
}

func TestPostRecvChecks(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		sgl  []SGE
		err  error
		msg  string
	}{
		{"ok", []SGE{f.sge(0, 8)}, nil, ""},
		{"no SGE", nil, nil, ""},
		{"max SGEs", []SGE{f.sge(0, 1), f.sge(1, 1), f.sge(2, 1)}, nil, ""},
		{"too many SGEs", []SGE{f.sge(0, 1), f.sge(1, 1), f.sge(2, 1), f.sge(3, 1)}, ErrInvalidArgument, "4 SGEs"},
		{"bad lkey", []SGE{f.sge(0, 1), {Addr: mrBase, Length: 1, Lkey: 0xbad00}}, keys.ErrInvalidKey, "SGE 1 (lkey 0xbad00"},
		{"PD mismatch", []SGE{{Length: 1, Lkey: f.otherMR.Lkey}}, keys.ErrPDMismatch, "SGE 0"},
		{"out of bounds", []SGE{f.sge(mrLen, 1)}, keys.ErrBounds, "SGE 0"},
		{"no local write", []SGE{{Addr: roBase, Length: 1, Lkey: f.roMR.Lkey}}, keys.ErrAccess, "SGE 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := f.newQP(t, UC, defaultCap())
			moveTo(t, q, Init)
			err := recvList(q, RecvWR{WRID: 0x10, SGL: []SGE{f.sge(0, 1)}}, RecvWR{WRID: 0x21, SGL: c.sgl})
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, 2, q.RQ.Len())
				return
			}
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), "WR 1 (wr_id 0x21)")
			require.Contains(t, err.Error(), c.msg)
			require.Equal(t, 0, q.RQ.Len())
		})
	}
}

func TestPostRecvQueueFullAndCopy(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, Cap{MaxSendWR: 1, MaxRecvWR: 2, MaxRecvSGE: 1})
	moveTo(t, q, RTR)
	sgl := []SGE{f.sge(0, 16)}
	require.ErrorIs(t, recvList(q, RecvWR{WRID: 1}, RecvWR{WRID: 2}, RecvWR{WRID: 3}), ErrQueueFull)
	require.NoError(t, recvList(q, RecvWR{WRID: 1, SGL: sgl}, RecvWR{WRID: 2}))
	require.ErrorIs(t, recvList(q, RecvWR{WRID: 3}), ErrQueueFull)
	sgl[0].Length = 1 // the caller reuses its slice
	var dst RecvWQE
	q.Lock()
	ok, _ := q.PopRecvLocked(&dst)
	q.Unlock()
	require.True(t, ok)
	require.Equal(t, uint64(1), dst.WRID)
	require.Equal(t, []SGE{f.sge(0, 16)}, dst.SGL)
	require.Equal(t, uint32(16), dst.Length)
	require.Equal(t, 1, q.RecvLenLocked())
}

// TestPostRecvErrorText pins the full error text of a failed receive post
// on a QP and on an SRQ: postRecv's errors are prefixed by its callers.
func TestPostRecvErrorText(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, Cap{MaxSendWR: 1, MaxRecvWR: 2, MaxRecvSGE: 1})
	moveTo(t, q, RTR)
	s := f.newSRQ(t, 2, 1)
	t.Cleanup(func() { require.NoError(t, s.Destroy()) })
	post := map[string]func([]RecvWR) error{
		"post recv on QP 0x11": func(wrs []RecvWR) error { return recvList(q, wrs...) },
		"post recv on SRQ":     s.Post,
	}
	for prefix, post := range post {
		t.Run(prefix, func(t *testing.T) {
			require.EqualError(t, post(make([]RecvWR, 3)), prefix+": queue full: 3 WRs, 2 free of 2")
			require.EqualError(t, post([]RecvWR{{}, {WRID: 0x21, SGL: []SGE{f.sge(0, 1), f.sge(1, 1)}}}),
				prefix+": WR 1 (wr_id 0x21): invalid argument: 2 SGEs, max_recv_sge is 1")
			err := post([]RecvWR{{WRID: 0x44, SGL: []SGE{{Addr: 0, Length: 4, Lkey: 0xbad00}}}})
			require.ErrorIs(t, err, keys.ErrInvalidKey)
			require.True(t, strings.HasPrefix(err.Error(), prefix+": WR 0 (wr_id 0x44): SGE 0 (lkey 0xbad00 addr 0x0 len 4): "), err.Error())
		})
	}
}

// TestPostRecvAllocs: a successful receive post allocates nothing.
func TestPostRecvAllocs(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	moveTo(t, q, RTR)
	wrs := []RecvWR{{WRID: 1, SGL: []SGE{f.sge(0, 64), f.sge(64, 64)}}, {WRID: 2, SGL: []SGE{f.sge(128, 8)}}}
	q.Lock()
	defer q.Unlock()
	var err error
	allocs := testing.AllocsPerRun(100, func() {
		err = q.PostRecvLocked(wrs)
		q.RQ.tail = q.RQ.head // consume them, so the queue never fills
	})
	require.NoError(t, err)
	require.Zero(t, allocs)
}

func TestPopRecvEmpty(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	var dst RecvWQE
	ok, limit := q.PopRecvLocked(&dst)
	require.False(t, ok)
	require.False(t, limit)
}

func TestFlushRecv(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	moveTo(t, q, RTR)
	for id := uint64(1); id <= 5; id++ {
		require.NoError(t, recvList(q, RecvWR{WRID: id, SGL: []SGE{f.sge(0, 4)}}))
	}
	var dst RecvWQE
	q.Lock()
	ok, _ := q.PopRecvLocked(&dst) // the responder holds WR 1
	q.Unlock()
	require.True(t, ok)
	require.NoError(t, modify(q, &Attr{State: Err}, AttrState))

	var got []cq.WC
	q.Lock()
	q.FlushRecvLocked(func(wc *cq.WC) { got = append(got, *wc) })
	q.Unlock()
	require.Len(t, got, 4)
	for i, wc := range got {
		require.Equal(t, cq.WC{WRID: uint64(i + 2), Status: cq.WRFlushErr, Opcode: cq.Recv, QPNum: q.Num()}, wc)
	}
	require.Equal(t, 0, q.RecvLenLocked())

	// Flushing again emits nothing; WRs posted in ERR are flushed next time.
	q.Lock()
	q.FlushRecvLocked(func(*cq.WC) { t.Fatal("nothing to flush") })
	q.Unlock()
	require.NoError(t, recvList(q, RecvWR{WRID: 9}))
	got = got[:0]
	q.Lock()
	q.FlushRecvLocked(func(wc *cq.WC) { got = append(got, *wc) })
	q.Unlock()
	require.Len(t, got, 1)
	require.Equal(t, uint64(9), got[0].WRID)
}

func TestErrorsWrapSentinels(t *testing.T) {
	// Every error the package returns wraps one of its sentinels or a keys
	// sentinel; spot-check that the chain is intact through the prefixes.
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	err := modify(q, &Attr{State: RTS}, AttrState)
	require.ErrorIs(t, err, ErrInvalidState)
	require.Contains(t, err.Error(), "QP 0x11")
}

// junk sets every exported field reachable from v to a non-zero value.
func junk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(0x5A)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(0x5A)
	case reflect.Array:
		for i := range v.Len() {
			junk(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				junk(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	}
}

// TestEnqueueSendLeavesNoStaleState posts into a send queue slot whose
// every field holds junk from an earlier use, and checks the WQE comes out
// as it does from a clean slot: enqueueSend resets the slot field by field,
// and a field added to SendWQE without a reset there fails this test.
func TestEnqueueSendLeavesNoStaleState(t *testing.T) {
	f := newFixture(t)
	for _, typ := range []Type{RC, UD} {
		inline := f.sendWR(typ, 8)
		inline.SGL, inline.Flags, inline.InlineData = nil, Inline|Signaled, []byte("inline")
		for _, wr := range []SendWR{f.sendWR(typ, 7), inline} {
			dirty, clean := f.newQP(t, typ, defaultCap()), f.newQP(t, typ, defaultCap())
			junk(reflect.ValueOf(dirty.SQ.At(dirty.SQ.head)).Elem())
			w := wr
			for _, q := range []*QP{dirty, clean} {
				require.NoError(t, q.checkSendWR(&w, q.SQ.At(q.SQ.head)))
				q.enqueueSend(&w, 5)
			}
			got, want := *dirty.SQ.At(dirty.SQ.head - 1), *clean.SQ.At(clean.SQ.head - 1)
			// MRs and Length are filled by the checks before enqueueSend
			// (MRs compared below only as far as the SGL goes); the rest
			// must match, with pointers into each slot's own arrays.
			require.Equal(t, want.MRs[:len(w.SGL)], got.MRs[:len(w.SGL)])
			got.MRs, want.MRs = nil, nil
			got.sges, want.sges, got.inline, want.inline = nil, nil, nil, nil
			if got.WR.AH != nil {
				require.Same(t, dirty.SQ.ahSlot(dirty.SQ.head-1), got.WR.AH)
				got.WR.AH, want.WR.AH = nil, nil
			}
			require.Equal(t, want, got, "%v WR %d", typ, wr.WRID)
		}
	}
}

// TestEnqueueSendCopiesEveryField posts a WR whose every field, and every
// field of what it points to, holds junk, and checks the WQE's WR equals
// it with nothing pointing into the caller's memory: enqueueSend copies
// field by field (so that the caller's SGL does not escape), and a field
// added to SendWR without a copy there fails this test.
func TestEnqueueSendCopiesEveryField(t *testing.T) {
	f := newFixture(t)
	for _, typ := range []Type{RC, UD} {
		q := f.newQP(t, typ, defaultCap())
		var wr SendWR
		junk(reflect.ValueOf(&wr).Elem())
		junk(reflect.ValueOf(wr.AH).Elem())
		junk(reflect.ValueOf(wr.Bind).Elem())
		junk(reflect.ValueOf(wr.Reg).Elem())
		wr.Flags |= Inline
		q.enqueueSend(&wr, 9)
		w := q.SQ.At(q.SQ.Head() - 1)
		require.Equal(t, wr, w.WR, "%v", typ)
		require.NotSame(t, &wr.SGL[0], &w.WR.SGL[0], "the SGL is the slot's")
		require.NotSame(t, &wr.InlineData[0], &w.WR.InlineData[0], "the inline data is the slot's")
		require.NotSame(t, wr.AH, w.WR.AH)
		require.NotSame(t, wr.Bind, w.WR.Bind)
		require.NotSame(t, wr.Reg, w.WR.Reg)
		require.Same(t, q.SQ.bindSlot(q.SQ.Head()-1), w.WR.Bind)
		require.Same(t, q.SQ.regSlot(q.SQ.Head()-1), w.WR.Reg)
	}
}

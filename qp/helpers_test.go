package qp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
)

// allTypes are the QP types the package supports.
var allTypes = []Type{RC, UC, UD, GSI}

// testLimits are the device limits every fixture QP validates against.
func testLimits() *Limits {
	return &Limits{
		MaxMTU:          MTU1024,
		MaxRdAtomic:     16,
		MaxDestRdAtomic: 8,
		PkeyTableLen:    2,
		GIDTableLen:     4,
		Ports:           1,
	}
}

// fixture is a key table, a PD with a registered buffer, two CQs and limits,
// and for the failing checks a read-only MR and an MR in another PD.
type fixture struct {
	kt       *keys.Table
	pd       *keys.PD
	buf      []byte
	mr       *keys.MR // buf at iova mrBase, LocalWrite
	roMR     *keys.MR // 64 bytes of pd at iova roBase, no access flags
	other    *keys.PD
	otherMR  *keys.MR // 64 bytes of other at iova 0, LocalWrite
	scq, rcq *cq.CQ
	lim      *Limits
}

const (
	mrBase = 0x10000
	mrLen  = 8192
	roBase = 0x900000
)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{kt: keys.NewTable(10), pd: keys.NewPD(1), buf: make([]byte, mrLen), lim: testLimits()}
	var err error
	f.mr, err = f.kt.RegMR(f.pd, f.buf, mrBase, keys.LocalWrite)
	require.NoError(t, err)
	f.roMR, err = f.kt.RegMR(f.pd, make([]byte, 64), roBase, 0)
	require.NoError(t, err)
	f.other = keys.NewPD(2)
	f.otherMR, err = f.kt.RegMR(f.other, make([]byte, 64), 0, keys.LocalWrite)
	require.NoError(t, err)
	f.scq, err = cq.New(64)
	require.NoError(t, err)
	f.rcq, err = cq.New(64)
	require.NoError(t, err)
	return f
}

// cfg returns a valid creation config for typ with the given capacities.
func (f *fixture) cfg(typ Type, c Cap) Config {
	return Config{Type: typ, PD: f.pd, SendCQ: f.scq, RecvCQ: f.rcq, Cap: c, Keys: f.kt, Limits: f.lim}
}

func defaultCap() Cap {
	return Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 3, MaxRecvSGE: 3, MaxInlineData: 64}
}

func (f *fixture) newQP(t *testing.T, typ Type, c Cap) *QP {
	t.Helper()
	q, err := New(0x11, f.cfg(typ, c))
	require.NoError(t, err)
	t.Cleanup(q.Release)
	return q
}

// sge returns an SGE of n bytes at offset off into the fixture's MR.
func (f *fixture) sge(off uint64, n uint32) SGE {
	return SGE{Addr: mrBase + off, Length: n, Lkey: f.mr.Lkey}
}

// ah returns an address handle in the fixture's PD.
func (f *fixture) ah() *AH {
	return &AH{PD: f.pd, AV: AddressVector{DGID: [16]byte{15: 1}, HopLimit: 64, Port: 1}}
}

// modify runs ModifyLocked under the QP lock.
func modify(q *QP, a *Attr, mask AttrMask) error {
	q.Lock()
	defer q.Unlock()
	_, _, err := q.ModifyLocked(a, mask)
	return err
}

// stepAttrs returns attributes and the required mask (with STATE) for the
// forward transitions RESET->INIT->RTR->RTS of typ.
func stepAttrs(typ Type, next State) (*Attr, AttrMask) {
	a := &Attr{State: next}
	m := AttrState
	switch next {
	case Init:
		a.PkeyIndex, a.Port = 0, 1
		switch typ {
		case RC, UC:
			a.AccessFlags = keys.RemoteWrite | keys.LocalWrite
			m |= AttrPkeyIndex | AttrPort | AttrAccessFlags
		case UD:
			a.QKey = 0x1234
			m |= AttrPkeyIndex | AttrPort | AttrQKey
		case GSI:
			a.QKey = GSIQKey
			m |= AttrPkeyIndex | AttrQKey
		}
	case RTR:
		a.AV = AddressVector{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}, SGIDIndex: 1, HopLimit: 64, Port: 1}
		a.PathMTU, a.DestQPN, a.RQPSN = MTU1024, 0x22, 0x100
		a.MaxDestRdAtomic, a.MinRNRTimer = 4, 12
		switch typ {
		case RC:
			m |= AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
		case UC:
			m |= AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		}
	case RTS:
		a.Timeout, a.RetryCnt, a.RNRRetry, a.SQPSN, a.MaxRdAtomic = 14, 7, 7, 0x200, 4
		m |= AttrSQPSN
		if typ == RC {
			m |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
		}
	}
	return a, m
}

// moveTo brings a fresh QP from RESET to s: by modify where the verbs allow
// it, and with SetStateLocked for SQE (which only the engines enter).
func moveTo(t *testing.T, q *QP, s State) {
	t.Helper()
	if s == Reset {
		return
	}
	if s == Err {
		walk(t, q, Init)
		require.NoError(t, modify(q, &Attr{State: Err}, AttrState))
		return
	}
	walk(t, q, s)
}

func walk(t *testing.T, q *QP, s State) {
	t.Helper()
	for _, next := range []State{Init, RTR, RTS} {
		a, m := stepAttrs(q.Type(), next)
		require.NoError(t, modify(q, a, m), "to %v", next)
		if next == s {
			return
		}
	}
	switch s {
	case SQD:
		require.NoError(t, modify(q, &Attr{State: SQD}, AttrState))
	case SQE:
		q.Lock()
		q.SetStateLocked(SQE)
		q.Unlock()
	}
}

package qp

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/keys"
)

// masks are the required and optional attributes of one transition for
// one QP type.
type masks struct{ req, opt AttrMask }

// kernelTable is the modify-transition table written out independently
// from IBTA vol. 1 ch. 10-11 and the Linux kernel's qp_state_table
// (drivers/infiniband/core/verbs.c) for RC, UC, UD and GSI. A missing
// (cur, next) key, or a missing type under a key, is no transition.
func kernelTable() map[[2]State]map[Type]masks {
	all := func(m masks) map[Type]masks { return map[Type]masks{RC: m, UC: m, UD: m, GSI: m} }
	tab := map[[2]State]map[Type]masks{}
	for s := Reset; s <= Err; s++ {
		tab[[2]State{s, Reset}] = all(masks{})
		if s != Reset { // the kernel has no RESET->ERR
			tab[[2]State{s, Err}] = all(masks{})
		}
	}
	const (
		pkey   = AttrPkeyIndex
		port   = AttrPort
		qkey   = AttrQKey
		access = AttrAccessFlags
		cur    = AttrCurState
		alt    = AttrAltPath
		mig    = AttrPathMigState
		minRNR = AttrMinRNRTimer
	)
	tab[[2]State{Reset, Init}] = map[Type]masks{
		RC:  {req: pkey | port | access},
		UC:  {req: pkey | port | access},
		UD:  {req: pkey | port | qkey},
		GSI: {req: pkey | qkey},
	}
	tab[[2]State{Init, Init}] = map[Type]masks{
		RC:  {opt: pkey | port | access},
		UC:  {opt: pkey | port | access},
		UD:  {opt: pkey | port | qkey},
		GSI: {opt: pkey | qkey},
	}
	tab[[2]State{Init, RTR}] = map[Type]masks{
		RC: {
			req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | minRNR,
			opt: alt | access | pkey,
		},
		UC: {
			req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			opt: alt | access | pkey,
		},
		UD:  {opt: pkey | qkey},
		GSI: {opt: pkey | qkey},
	}
	tab[[2]State{RTR, RTS}] = map[Type]masks{
		RC: {
			req: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
			opt: cur | alt | access | minRNR | mig,
		},
		UC:  {req: AttrSQPSN, opt: cur | alt | access | mig},
		UD:  {req: AttrSQPSN, opt: cur | qkey},
		GSI: {req: AttrSQPSN, opt: cur | qkey},
	}
	toRTS := map[Type]masks{
		RC:  {opt: cur | access | alt | mig | minRNR},
		UC:  {opt: cur | access | alt | mig},
		UD:  {opt: cur | qkey},
		GSI: {opt: cur | qkey},
	}
	tab[[2]State{RTS, RTS}] = toRTS
	tab[[2]State{SQD, RTS}] = toRTS
	tab[[2]State{RTS, SQD}] = all(masks{opt: AttrEnSQDAsync})
	tab[[2]State{SQD, SQD}] = map[Type]masks{
		RC: {opt: port | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
			AttrMaxDestRdAtomic | alt | access | pkey | minRNR | mig},
		UC:  {opt: AttrAV | alt | access | pkey | mig},
		UD:  {opt: pkey | qkey},
		GSI: {opt: pkey | qkey},
	}
	// The kernel marks SQE->RTS valid for every type and lists masks only
	// for the unreliable ones; an RC QP never enters SQE (its send errors
	// take it to ERR), and softverbs refuses RC SQE->RTS on purpose.
	tab[[2]State{SQE, RTS}] = map[Type]masks{
		UC:  {opt: cur | access},
		UD:  {opt: cur | qkey},
		GSI: {opt: cur | qkey},
	}
	return tab
}

// bits splits m into its single-bit masks.
func bits(m AttrMask) []AttrMask {
	var out []AttrMask
	for i := 0; i < 32; i++ {
		if b := AttrMask(1) << i; m&b != 0 {
			out = append(out, b)
		}
	}
	return out
}

func TestCheckTransitionTable(t *testing.T) {
	tab := kernelTable()
	for cur := Reset; cur <= Err; cur++ {
		for next := Reset; next <= Err; next++ {
			for _, typ := range allTypes {
				want, ok := tab[[2]State{cur, next}][typ]
				t.Run(fmt.Sprintf("%v/%v->%v", typ, cur, next), func(t *testing.T) {
					if !ok {
						for _, m := range []AttrMask{AttrState, 0} {
							err := CheckTransition(cur, next, typ, m)
							require.ErrorIs(t, err, ErrInvalidState, "mask %v", m)
						}
						require.Zero(t, RequiredAttrs(typ, cur, next), "no such transition")
						return
					}
					require.Equal(t, AttrState|want.req, RequiredAttrs(typ, cur, next))
					// Required attributes alone, with and without STATE.
					require.NoError(t, CheckTransition(cur, next, typ, AttrState|want.req))
					require.NoError(t, CheckTransition(cur, next, typ, want.req))
					// Each optional one on top, then all of them.
					for _, b := range bits(want.opt) {
						require.NoError(t, CheckTransition(cur, next, typ, AttrState|want.req|b), "optional %v", b)
					}
					require.NoError(t, CheckTransition(cur, next, typ, AttrState|want.req|want.opt))
					// Every required attribute is required.
					for _, b := range bits(want.req) {
						err := CheckTransition(cur, next, typ, AttrState|want.req&^b)
						require.ErrorIs(t, err, ErrInvalidArgument, "without %v", b)
						require.Contains(t, err.Error(), b.String())
					}
					// Nothing outside req|opt is accepted.
					for _, b := range bits(attrAll &^ (want.req | want.opt | AttrState)) {
						err := CheckTransition(cur, next, typ, AttrState|want.req|b)
						require.ErrorIs(t, err, ErrInvalidArgument, "extra %v", b)
					}
				})
			}
		}
	}
}

func TestCheckTransitionNoAttributeTransitions(t *testing.T) {
	for _, typ := range allTypes {
		for s := Reset; s <= Err; s++ {
			t.Run(fmt.Sprintf("%v/%v", typ, s), func(t *testing.T) {
				require.NoError(t, CheckTransition(s, Reset, typ, AttrState))
				if s == Reset {
					require.ErrorIs(t, CheckTransition(s, Err, typ, AttrState), ErrInvalidState)
				} else {
					require.NoError(t, CheckTransition(s, Err, typ, AttrState))
				}
				// CUR_STATE is not among the attributes of ->RESET/->ERR.
				require.ErrorIs(t, CheckTransition(s, Reset, typ, AttrState|AttrCurState), ErrInvalidArgument)
				require.ErrorIs(t, CheckTransition(s, Err, typ, AttrState|AttrCurState), ErrInvalidArgument)
			})
		}
	}
}

func TestCheckTransitionRefused(t *testing.T) {
	cases := []struct{ cur, next State }{
		{Reset, RTR}, {Reset, RTS}, {Reset, SQD}, {Reset, SQE}, {Reset, Err},
		{Init, RTS}, {Init, SQD}, {Init, SQE},
		{RTR, Init}, {RTR, RTR}, {RTR, SQD}, {RTR, SQE},
		{RTS, Init}, {RTS, RTR}, {RTS, SQE},
		{SQD, Init}, {SQD, RTR}, {SQD, SQE},
		{SQE, Init}, {SQE, RTR}, {SQE, SQD}, {SQE, SQE},
		{Err, Init}, {Err, RTR}, {Err, RTS}, {Err, SQD}, {Err, SQE},
	}
	for _, c := range cases {
		for _, typ := range allTypes {
			t.Run(fmt.Sprintf("%v/%v->%v", typ, c.cur, c.next), func(t *testing.T) {
				err := CheckTransition(c.cur, c.next, typ, AttrState)
				require.ErrorIs(t, err, ErrInvalidState)
				require.Contains(t, err.Error(), "not allowed")
			})
		}
	}
	t.Run("RC/SQE->RTS", func(t *testing.T) {
		require.ErrorIs(t, CheckTransition(SQE, RTS, RC, AttrState), ErrInvalidState)
	})
}

func TestCheckTransitionBadInput(t *testing.T) {
	require.ErrorIs(t, CheckTransition(State(7), Init, RC, AttrState), ErrInvalidArgument)
	require.ErrorIs(t, CheckTransition(Reset, State(200), RC, AttrState), ErrInvalidArgument)
	for _, typ := range []Type{0, 5, 255} {
		require.ErrorIs(t, CheckTransition(Reset, Reset, typ, AttrState), ErrNotSupported, "type %v", typ)
	}
}

func TestCheckTransitionCurState(t *testing.T) {
	// CUR_STATE is optional exactly in the ->RTS transitions.
	for _, typ := range allTypes {
		_, m := stepAttrs(typ, RTS)
		require.NoError(t, CheckTransition(RTR, RTS, typ, m|AttrCurState), "%v RTR->RTS", typ)
		require.NoError(t, CheckTransition(RTS, RTS, typ, AttrCurState), "%v RTS->RTS", typ)
		require.NoError(t, CheckTransition(SQD, RTS, typ, AttrState|AttrCurState), "%v SQD->RTS", typ)
		for _, cur := range []State{Reset, Init, Err} {
			require.ErrorIs(t, CheckTransition(cur, cur, typ, AttrCurState), ErrInvalidArgument, "%v %v", typ, cur)
		}
		require.ErrorIs(t, CheckTransition(SQD, SQD, typ, AttrCurState), ErrInvalidArgument)
		require.ErrorIs(t, CheckTransition(RTS, SQD, typ, AttrState|AttrCurState), ErrInvalidArgument)
	}
	require.NoError(t, CheckTransition(SQE, RTS, UD, AttrState|AttrCurState))
}

func TestModifyCurState(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	moveTo(t, q, RTR)
	a, m := stepAttrs(RC, RTS)
	a.CurState = Init // wrong
	require.ErrorIs(t, modify(q, a, m|AttrCurState), ErrInvalidState)
	require.Equal(t, RTR, q.State())
	a.CurState = RTR
	require.NoError(t, modify(q, a, m|AttrCurState))
	require.Equal(t, RTS, q.State())
}

func TestModifyUnknownMaskBits(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	require.ErrorIs(t, modify(q, &Attr{}, 1<<26), ErrInvalidArgument)
	require.ErrorIs(t, modify(q, &Attr{}, 1<<31), ErrInvalidArgument)
}

func TestModifyValues(t *testing.T) {
	type tc struct {
		name string
		typ  Type
		from State
		next State
		set  func(a *Attr)
		add  AttrMask // attributes added to the required mask
		err  error
	}
	cases := []tc{
		{"RQ PSN 24 bits", RC, Init, RTR, func(a *Attr) { a.RQPSN = 1 << 24 }, 0, ErrInvalidArgument},
		{"RQ PSN max", RC, Init, RTR, func(a *Attr) { a.RQPSN = 0xFFFFFF }, 0, nil},
		{"SQ PSN 24 bits", RC, RTR, RTS, func(a *Attr) { a.SQPSN = 0x1000000 }, 0, ErrInvalidArgument},
		{"SQ PSN 24 bits UD", UD, RTR, RTS, func(a *Attr) { a.SQPSN = 0xFFFFFFFF }, 0, ErrInvalidArgument},
		{"SQ PSN max", UC, RTR, RTS, func(a *Attr) { a.SQPSN = 0xFFFFFF }, 0, nil},
		{"dest QPN 24 bits", UC, Init, RTR, func(a *Attr) { a.DestQPN = 1 << 24 }, 0, ErrInvalidArgument},
		{"MTU 0", RC, Init, RTR, func(a *Attr) { a.PathMTU = 0 }, 0, ErrInvalidArgument},
		{"MTU 6", RC, Init, RTR, func(a *Attr) { a.PathMTU = 6 }, 0, ErrInvalidArgument},
		{"MTU above limit", UC, Init, RTR, func(a *Attr) { a.PathMTU = MTU2048 }, 0, ErrInvalidArgument},
		{"MTU at limit", UC, Init, RTR, func(a *Attr) { a.PathMTU = MTU1024 }, 0, nil},
		{"MTU below limit", RC, Init, RTR, func(a *Attr) { a.PathMTU = MTU256 }, 0, nil},
		{"timeout 32", RC, RTR, RTS, func(a *Attr) { a.Timeout = 32 }, 0, ErrInvalidArgument},
		{"timeout 31", RC, RTR, RTS, func(a *Attr) { a.Timeout = 31 }, 0, nil},
		{"retry 8", RC, RTR, RTS, func(a *Attr) { a.RetryCnt = 8 }, 0, ErrInvalidArgument},
		{"rnr retry 8", RC, RTR, RTS, func(a *Attr) { a.RNRRetry = 8 }, 0, ErrInvalidArgument},
		{"min rnr timer 32", RC, Init, RTR, func(a *Attr) { a.MinRNRTimer = 32 }, 0, ErrInvalidArgument},
		{"min rnr timer 31", RC, Init, RTR, func(a *Attr) { a.MinRNRTimer = 31 }, 0, nil},
		{"min rnr timer 32 at RTS", RC, RTR, RTS, func(a *Attr) { a.MinRNRTimer = 32 }, AttrMinRNRTimer, ErrInvalidArgument},
		{"max_rd_atomic above limit", RC, RTR, RTS, func(a *Attr) { a.MaxRdAtomic = 17 }, 0, ErrInvalidArgument},
		{"max_rd_atomic at limit", RC, RTR, RTS, func(a *Attr) { a.MaxRdAtomic = 16 }, 0, nil},
		{"max_dest_rd_atomic above limit", RC, Init, RTR, func(a *Attr) { a.MaxDestRdAtomic = 9 }, 0, ErrInvalidArgument},
		{"max_dest_rd_atomic at limit", RC, Init, RTR, func(a *Attr) { a.MaxDestRdAtomic = 8 }, 0, nil},
		{"port 0", RC, Reset, Init, func(a *Attr) { a.Port = 0 }, 0, ErrInvalidArgument},
		{"port 2", UD, Reset, Init, func(a *Attr) { a.Port = 2 }, 0, ErrInvalidArgument},
		{"P_Key index out of range", RC, Reset, Init, func(a *Attr) { a.PkeyIndex = 2 }, 0, ErrInvalidArgument},
		{"P_Key index last", GSI, Reset, Init, func(a *Attr) { a.PkeyIndex = 1 }, 0, nil},
		{"P_Key index at RTR", UD, Init, RTR, func(a *Attr) { a.PkeyIndex = 100 }, AttrPkeyIndex, ErrInvalidArgument},
		{"SGID index out of range", RC, Init, RTR, func(a *Attr) { a.AV.SGIDIndex = 4 }, 0, ErrInvalidArgument},
		{"SGID index last", RC, Init, RTR, func(a *Attr) { a.AV.SGIDIndex = 3 }, 0, nil},
		{"AV port 2", UC, Init, RTR, func(a *Attr) { a.AV.Port = 2 }, 0, ErrInvalidArgument},
		{"AV port 0 means the QP's", UC, Init, RTR, func(a *Attr) { a.AV.Port = 0 }, 0, nil},
		{"access flags MW bind", RC, Reset, Init, func(a *Attr) { a.AccessFlags = keys.MWBind }, 0, ErrInvalidArgument},
		{"access flags remote", UC, Reset, Init, func(a *Attr) { a.AccessFlags = keys.RemoteAccess | keys.LocalWrite }, 0, nil},
		{"GSI Q_Key", GSI, Reset, Init, func(a *Attr) { a.QKey = 0x1234 }, 0, ErrInvalidArgument},
		{"UD any Q_Key", UD, Reset, Init, func(a *Attr) { a.QKey = 0x80000001 }, 0, nil},
		{"alt path", RC, Init, RTR, func(*Attr) {}, AttrAltPath, ErrNotSupported},
		{"path mig state", UC, RTR, RTS, func(*Attr) {}, AttrPathMigState, ErrNotSupported},
		// The table has no transition that takes RATE_LIMIT for these types,
		// so the mask check refuses it first (the kernel's -EINVAL).
		{"rate limit", UD, RTR, RTS, func(*Attr) {}, AttrRateLimit, ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.typ.String()+"/"+c.name, func(t *testing.T) {
			f := newFixture(t)
			q := f.newQP(t, c.typ, defaultCap())
			moveTo(t, q, c.from)
			before := q.Query()
			a, m := stepAttrs(c.typ, c.next)
			c.set(a)
			err := modify(q, a, m|c.add)
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, c.next, q.State())
				return
			}
			require.ErrorIs(t, err, c.err)
			require.Equal(t, before, q.Query(), "a refused modify changes nothing")
		})
	}
}

func TestCheckValuesDirect(t *testing.T) {
	lim := testLimits()
	require.ErrorIs(t, checkValues(&Attr{}, AttrAltPath, UC, lim), ErrNotSupported)
	require.ErrorIs(t, checkValues(&Attr{}, AttrPathMigState, RC, lim), ErrNotSupported)
	require.NoError(t, checkValues(&Attr{PathMTU: 99, Timeout: 99}, 0, RC, lim), "unselected values are not checked")
}

func TestModifyCapRefused(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	a := q.Query()
	a.Cap.MaxSendWR++
	before := q.Query()
	err := modify(q, &a, AttrCap)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "attributes CAP not allowed")
	require.Equal(t, before, q.Query())
}

// TestNoTransitionTakesCapOrRateLimit: no transition lists CAP or
// RATE_LIMIT as required or optional, so CheckTransition refuses them
// (TestCheckTransitionTable checks that it refuses anything unlisted) and
// ModifyLocked and checkValues need no check of their own for them.
func TestNoTransitionTakesCapOrRateLimit(t *testing.T) {
	for cur := Reset; cur <= Err; cur++ {
		for next := Reset; next <= Err; next++ {
			tr := transitions[cur][next]
			if tr == nil {
				continue
			}
			for _, typ := range allTypes {
				if tr.opt[typ] == notAllowed {
					continue
				}
				require.Zero(t, (tr.req[typ]|tr.opt[typ])&(AttrCap|AttrRateLimit), "%v %v->%v", typ, cur, next)
				err := CheckTransition(cur, next, typ, AttrState|tr.req[typ]|AttrCap|AttrRateLimit)
				require.ErrorIs(t, err, ErrInvalidArgument, "%v %v->%v", typ, cur, next)
			}
		}
	}
}

func TestQueryReturnsEverything(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, Cap{MaxSendWR: 4, MaxRecvWR: 5})

	init := &Attr{State: Init, PkeyIndex: 1, Port: 1, AccessFlags: keys.RemoteRead | keys.RemoteAtomic | keys.LocalWrite}
	require.NoError(t, modify(q, init, AttrState|AttrPkeyIndex|AttrPort|AttrAccessFlags))
	av := AddressVector{DGID: [16]byte{0: 0xfe, 1: 0x80, 15: 9}, SGIDIndex: 2, HopLimit: 7, TrafficClass: 3,
		FlowLabel: 0xABCDE, SL: 5, DLID: 0x17, StaticRate: 2, Port: 1}
	rtr := &Attr{State: RTR, AV: av, PathMTU: MTU512, DestQPN: 0xABCDEF, RQPSN: 0x123456,
		MaxDestRdAtomic: 3, MinRNRTimer: 18}
	require.NoError(t, modify(q, rtr, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
	rts := &Attr{State: RTS, Timeout: 17, RetryCnt: 6, RNRRetry: 5, SQPSN: 0x654321, MaxRdAtomic: 2}
	require.NoError(t, modify(q, rts, AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic))
	require.NoError(t, modify(q, &Attr{State: SQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsync))

	want := Attr{
		State: SQD, CurState: SQD, EnSQDAsyncNotify: true,
		AccessFlags: init.AccessFlags, PkeyIndex: 1, Port: 1,
		AV: av, PathMTU: MTU512, Timeout: 17, RetryCnt: 6, RNRRetry: 5,
		RQPSN: 0x123456, SQPSN: 0x654321, MaxRdAtomic: 2, MaxDestRdAtomic: 3,
		MinRNRTimer: 18, DestQPN: 0xABCDEF,
		Cap: Cap{MaxSendWR: 4, MaxRecvWR: 5, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	require.Equal(t, want, q.Query())

	// SQD->SQD changes the path and the retry parameters.
	av2 := av
	av2.HopLimit, av2.SGIDIndex = 9, 3
	sqd := &Attr{State: SQD, AV: av2, Timeout: 3, RetryCnt: 1, RNRRetry: 0, MaxRdAtomic: 1, MaxDestRdAtomic: 1,
		AccessFlags: keys.LocalWrite, PkeyIndex: 0, MinRNRTimer: 1, Port: 1}
	require.NoError(t, modify(q, sqd, AttrState|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
		AttrMaxDestRdAtomic|AttrAccessFlags|AttrPkeyIndex|AttrMinRNRTimer|AttrPort))
	want.AV, want.Timeout, want.RetryCnt, want.RNRRetry = av2, 3, 1, 0
	want.MaxRdAtomic, want.MaxDestRdAtomic, want.AccessFlags, want.PkeyIndex, want.MinRNRTimer = 1, 1, keys.LocalWrite, 0, 1
	require.Equal(t, want, q.Query())

	// A modify without STATE stays in the state (SQD->SQD) and unselected
	// values are left alone.
	require.NoError(t, modify(q, &Attr{Timeout: 30, RetryCnt: 0}, AttrTimeout))
	want.Timeout = 30
	require.Equal(t, want, q.Query())

	require.NoError(t, modify(q, &Attr{State: RTS, MinRNRTimer: 2}, AttrState|AttrMinRNRTimer))
	want.State, want.CurState, want.MinRNRTimer = RTS, RTS, 2
	require.Equal(t, want, q.Query())
}

func TestQueryQKey(t *testing.T) {
	f := newFixture(t)
	ud := f.newQP(t, UD, defaultCap())
	require.NoError(t, modify(ud, &Attr{State: Init, Port: 1, QKey: 0x11223344},
		AttrState|AttrPkeyIndex|AttrPort|AttrQKey))
	require.Equal(t, uint32(0x11223344), ud.Query().QKey)
	moveTo(t, ud, RTS)
	require.NoError(t, modify(ud, &Attr{QKey: 0x55}, AttrQKey))
	require.Equal(t, uint32(0x55), ud.Query().QKey)

	gsi := f.newQP(t, GSI, defaultCap())
	require.Equal(t, uint32(GSIQKey), gsi.Query().QKey, "QP1's Q_Key is preset")
}

func TestModifyToResetEmptiesQueues(t *testing.T) {
	f := newFixture(t)
	q := f.newQP(t, RC, defaultCap())
	moveTo(t, q, RTS)
	q.Lock()
	require.NoError(t, q.PostSendLocked([]SendWR{{WRID: 1, Opcode: OpSend, SGL: []SGE{f.sge(0, 8)}}}))
	require.NoError(t, q.PostRecvLocked([]RecvWR{{WRID: 2, SGL: []SGE{f.sge(0, 8)}}}))
	q.SQ.Next++
	from, to, err := q.ModifyLocked(&Attr{State: Reset}, AttrState)
	q.Unlock()
	require.NoError(t, err)
	require.Equal(t, RTS, from)
	require.Equal(t, Reset, to)
	require.Equal(t, 0, q.SQ.Len())
	require.Equal(t, 0, q.RQ.Len())
	require.Equal(t, q.SQ.Head(), q.SQ.Next)
}

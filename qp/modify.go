package qp

import (
	"fmt"

	"github.com/softverbs/softverbs/keys"
)

// transition lists the attributes a modify must carry (req) and may carry
// (opt) for one QP type; STATE is implied by every transition to another
// state. A nil entry in the table means the transition is not allowed.
type transition struct {
	req, opt [numTypes]AttrMask
}

const numTypes = 5 // indexed by Type (GSI=1 ... UD=4)

// per builds a per-type mask array: gsi, rc, uc, ud.
func per(gsi, rc, uc, ud AttrMask) [numTypes]AttrMask {
	var m [numTypes]AttrMask
	m[GSI], m[RC], m[UC], m[UD] = gsi, rc, uc, ud
	return m
}

func same(m AttrMask) [numTypes]AttrMask { return per(m, m, m, m) }

// transitions is the IBTA QP state transition table (IBTA vol. 1, 10.3 and
// 11.2.4.2), as the kernel's ib_modify_qp_is_ok has it for the QP types we
// support. Transitions to RESET (from any state) and to ERR (from any state
// but RESET) carry no attributes.
var transitions = func() (t [numStates][numStates]*transition) {
	any := &transition{}
	for s := State(0); s < numStates; s++ {
		t[s][Reset] = any
		if s != Reset {
			t[s][Err] = any // RESET->ERR is not a transition (IBTA, ib_modify_qp_is_ok)
		}
	}
	t[Reset][Init] = &transition{
		req: per(AttrPkeyIndex|AttrQKey,
			AttrPkeyIndex|AttrPort|AttrAccessFlags,
			AttrPkeyIndex|AttrPort|AttrAccessFlags,
			AttrPkeyIndex|AttrPort|AttrQKey),
	}
	t[Init][Init] = &transition{
		opt: per(AttrPkeyIndex|AttrQKey,
			AttrPkeyIndex|AttrPort|AttrAccessFlags,
			AttrPkeyIndex|AttrPort|AttrAccessFlags,
			AttrPkeyIndex|AttrPort|AttrQKey),
	}
	t[Init][RTR] = &transition{
		req: per(0,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
			0),
		opt: per(AttrPkeyIndex|AttrQKey,
			AttrAltPath|AttrAccessFlags|AttrPkeyIndex,
			AttrAltPath|AttrAccessFlags|AttrPkeyIndex,
			AttrPkeyIndex|AttrQKey),
	}
	t[RTR][RTS] = &transition{
		req: per(AttrSQPSN,
			AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic,
			AttrSQPSN,
			AttrSQPSN),
		opt: per(AttrCurState|AttrQKey,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState,
			AttrCurState|AttrQKey),
	}
	toRTS := &transition{
		opt: per(AttrCurState|AttrQKey,
			AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState|AttrMinRNRTimer,
			AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState,
			AttrCurState|AttrQKey),
	}
	t[RTS][RTS] = toRTS
	t[SQD][RTS] = toRTS
	t[RTS][SQD] = &transition{opt: same(AttrEnSQDAsync)}
	t[SQD][SQD] = &transition{
		opt: per(AttrPkeyIndex|AttrQKey,
			AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
				AttrMaxDestRdAtomic|AttrAltPath|AttrAccessFlags|AttrPkeyIndex|
				AttrMinRNRTimer|AttrPathMigState,
			AttrAV|AttrAltPath|AttrAccessFlags|AttrPkeyIndex|AttrPathMigState,
			AttrPkeyIndex|AttrQKey),
	}
	// SQE exists only for unreliable types; RC has no SQE -> RTS.
	t[SQE][RTS] = &transition{
		opt: per(AttrCurState|AttrQKey, notAllowed,
			AttrCurState|AttrAccessFlags,
			AttrCurState|AttrQKey),
	}
	return t
}()

// notAllowed marks a (transition, type) pair the table forbids.
const notAllowed AttrMask = 1 << 31

// RequiredAttrs returns the mask a modify from cur to next must carry for
// QP type t: AttrState and the attributes the transition table requires
// (what a program passes to ibv_modify_qp for a plain transition). It
// returns 0 if the transition does not exist for t.
func RequiredAttrs(t Type, cur, next State) AttrMask {
	if cur >= numStates || next >= numStates || t < GSI || t > UD {
		return 0
	}
	tr := transitions[cur][next]
	if tr == nil || tr.opt[t] == notAllowed {
		return 0
	}
	return AttrState | tr.req[t]
}

// CheckTransition reports whether a modify from cur to next with mask is
// legal for QP type t (the kernel's ib_modify_qp_is_ok): the transition must
// exist, every required attribute must be present and no attribute may be
// outside required|optional. The error names what was wrong.
func CheckTransition(cur, next State, t Type, mask AttrMask) error {
	if cur >= numStates || next >= numStates {
		return fmt.Errorf("modify %v->%v: %w: unknown state", cur, next, ErrInvalidArgument)
	}
	if t < GSI || t > UD {
		return fmt.Errorf("modify: %w: QP type %v", ErrNotSupported, t)
	}
	if mask&AttrCurState != 0 && cur != RTR && cur != RTS && cur != SQD && cur != SQE {
		// CUR_STATE is meaningful only in the ->RTS transitions, which
		// leave RTR, RTS, SQD or SQE; the table says which take it.
		return fmt.Errorf("modify %v->%v: %w: CUR_STATE not allowed", cur, next, ErrInvalidArgument)
	}
	tr := transitions[cur][next]
	if tr == nil || tr.opt[t] == notAllowed {
		return fmt.Errorf("modify %v->%v on %v QP: %w: transition not allowed", cur, next, t, ErrInvalidState)
	}
	req, opt := tr.req[t], tr.opt[t]
	m := mask &^ AttrState
	if miss := req &^ m; miss != 0 {
		return fmt.Errorf("modify %v->%v on %v QP: %w: missing required attributes %v", cur, next, t, ErrInvalidArgument, miss)
	}
	if extra := m &^ (req | opt); extra != 0 {
		return fmt.Errorf("modify %v->%v on %v QP: %w: attributes %v not allowed", cur, next, t, ErrInvalidArgument, extra)
	}
	return nil
}

// Limits are the device limits a modify validates values against.
type Limits struct {
	MaxMTU          MTU
	MaxRdAtomic     uint8 // max_qp_init_rd_atom
	MaxDestRdAtomic uint8 // max_qp_rd_atom
	PkeyTableLen    int
	GIDTableLen     int
	// GIDs, if set, counts the GID entries that hold a GID now (at most
	// GIDTableLen): a source GID index beyond them is refused.
	GIDs  func() int
	Ports uint8
}

// CheckSGID refuses a source GID index with no GID behind it, as the
// kernel's GID attribute lookup does for ibv_create_ah and ibv_modify_qp.
// A GID removed later does not fail the AH or QP: the transport drops its
// packets (counted) until the GID comes back.
func (l *Limits) CheckSGID(index uint8) error {
	n := l.GIDTableLen
	if l.GIDs != nil {
		n = min(n, l.GIDs())
	}
	if int(index) >= n {
		return fmt.Errorf("%w: source GID index %d: the GID table holds %d GIDs", ErrInvalidArgument, index, n)
	}
	return nil
}

// checkValues validates the values of the attributes selected by mask. It
// runs after CheckTransition, which refuses CAP and RATE_LIMIT (no
// transition takes them), so it does not look at those.
func checkValues(a *Attr, mask AttrMask, t Type, lim *Limits) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("modify: %w: %s %v out of range", ErrInvalidArgument, what, v)
	}
	if mask&AttrAltPath != 0 || mask&AttrPathMigState != 0 {
		return fmt.Errorf("modify: %w: alternate paths (APM)", ErrNotSupported)
	}
	if mask&AttrPathMTU != 0 && (!a.PathMTU.Valid() || a.PathMTU > lim.MaxMTU) {
		return bad("path MTU", a.PathMTU)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout", a.Timeout)
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad("retry count", a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("RNR retry", a.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min RNR timer", a.MinRNRTimer)
	}
	if mask&AttrSQPSN != 0 && a.SQPSN > 0xFFFFFF {
		return bad("SQ PSN", a.SQPSN)
	}
	if mask&AttrRQPSN != 0 && a.RQPSN > 0xFFFFFF {
		return bad("RQ PSN", a.RQPSN)
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > 0xFFFFFF {
		return bad("dest QPN", a.DestQPN)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > lim.MaxRdAtomic {
		return bad("max_rd_atomic", a.MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > lim.MaxDestRdAtomic {
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	}
	if mask&AttrPort != 0 && (a.Port < 1 || a.Port > lim.Ports) {
		return bad("port", a.Port)
	}
	if mask&AttrPkeyIndex != 0 && int(a.PkeyIndex) >= lim.PkeyTableLen {
		return bad("P_Key index", a.PkeyIndex)
	}
	if mask&AttrAV != 0 {
		if err := lim.CheckSGID(a.AV.SGIDIndex); err != nil {
			return fmt.Errorf("modify: %w", err)
		}
		if a.AV.Port != 0 && (a.AV.Port < 1 || a.AV.Port > lim.Ports) {
			return bad("AV port", a.AV.Port)
		}
	}
	if mask&AttrAccessFlags != 0 {
		allowed := keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic | keys.LocalWrite
		if a.AccessFlags&^allowed != 0 {
			return bad("access flags", a.AccessFlags)
		}
	}
	if mask&AttrQKey != 0 && t == GSI && a.QKey != GSIQKey {
		return bad("GSI Q_Key", fmt.Sprintf("%#x", a.QKey))
	}
	return nil
}

// GSIQKey is the well-known Q_Key of QP 1.
const GSIQKey = 0x80010000

package qp

import (
	"fmt"
	"slices"
	"sync"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
)

// Config describes a QP at creation (ibv_qp_init_attr).
type Config struct {
	Type   Type
	PD     *keys.PD
	SendCQ *cq.CQ
	RecvCQ *cq.CQ
	SRQ    *SRQ // optional; the QP then has no receive queue of its own
	Cap    Cap
	SigAll bool // every send WR generates a completion
	Keys   *keys.Table
	Limits *Limits
}

// MaxMessage is the largest message a WR may carry (2 GiB).
const MaxMessage = 1 << 31

// QP is a queue pair. Its lock guards the attributes and the queues; the
// transport engines take it for short critical sections and never call out
// (to CQ handlers or event subscribers) while holding it.
type QP struct {
	num uint32
	// gone, once set (Retire), is why every post and modify now fails.
	// Guarded by mu; beside num, in what was padding.
	gone Gone
	cfg  Config
	mu   sync.Mutex
	attr Attr // guarded by mu
	SQ   SendQueue
	RQ   RecvQueue // unused when the QP has an SRQ
	pull func()    // guarded by mu; see SetRecvPull
}

// MaxQPN is the largest QP number: a BTH carries 24 bits of it.
const MaxQPN = 1<<24 - 1

// New creates a QP in the RESET state. The caller (the device) owns the QP
// number space. Errors: ErrInvalidArgument (also for a freed PD),
// ErrNotSupported, cq.ErrDestroyed (naming which CQ) when either CQ has been
// destroyed, and ErrInvalidState when the SRQ has been destroyed.
func New(num uint32, cfg Config) (*QP, error) {
	if cfg.PD == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.Keys == nil || cfg.Limits == nil {
		return nil, fmt.Errorf("create QP: %w: PD, CQs, key table and limits are required", ErrInvalidArgument)
	}
	switch cfg.Type {
	case RC, UC, UD, GSI:
	default:
		return nil, fmt.Errorf("create QP: %w: type %v", ErrNotSupported, cfg.Type)
	}
	if num > MaxQPN {
		return nil, fmt.Errorf("create QP %#x: %w: QP numbers have 24 bits", num, ErrInvalidArgument)
	}
	c := cfg.Cap
	if c.MaxSendWR == 0 && c.MaxRecvWR == 0 && cfg.SRQ == nil {
		return nil, fmt.Errorf("create QP: %w: both queues empty", ErrInvalidArgument)
	}
	if cfg.SRQ != nil && (c.MaxRecvWR != 0 || c.MaxRecvSGE != 0) {
		return nil, fmt.Errorf("create QP: %w: a QP with an SRQ has no receive queue (max_recv_wr and max_recv_sge must be 0)", ErrInvalidArgument)
	}
	if c.MaxSendWR > 0 && c.MaxSendSGE == 0 && c.MaxInlineData == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvWR > 0 && c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	cfg.Cap = c
	q := &QP{num: num, cfg: cfg, SQ: newSendQueue(c)}
	if cfg.SRQ == nil {
		q.RQ = newRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	q.attr = Attr{State: Reset, Cap: c, Port: 1, PathMTU: MTU1024}
	if cfg.Type == GSI {
		q.attr.QKey = GSIQKey
	}
	if err := q.ref(); err != nil {
		return nil, fmt.Errorf("create QP %#x: %w", num, err)
	}
	return q, nil
}

// ref takes the references the QP holds (PD, CQs, SRQ): all of them, or
// none and an error naming the object that refused.
func (q *QP) ref() (err error) {
	cfg := q.cfg
	var taken []func() // Unref of each reference taken, in order
	defer func() {
		if err != nil {
			for _, unref := range slices.Backward(taken) {
				unref()
			}
		}
	}()
	if err := cfg.PD.TryRef(); err != nil {
		return err
	}
	taken = append(taken, cfg.PD.Unref)
	if err := cfg.SendCQ.TryRef(); err != nil {
		return fmt.Errorf("send CQ: %w", err)
	}
	taken = append(taken, cfg.SendCQ.Unref)
	if err := cfg.RecvCQ.TryRef(); err != nil {
		return fmt.Errorf("receive CQ: %w", err)
	}
	if cfg.SRQ != nil {
		taken = append(taken, cfg.RecvCQ.Unref)
		return cfg.SRQ.ref()
	}
	return nil
}

// Release drops the references the QP holds; call it when destroying.
func (q *QP) Release() {
	q.cfg.PD.Unref()
	q.cfg.SendCQ.Unref()
	q.cfg.RecvCQ.Unref()
	if q.cfg.SRQ != nil {
		q.cfg.SRQ.unref()
	}
}

// Gone says why a QP takes no more posts or modifies (Retire).
type Gone uint8

const (
	// GoneDestroyed: the QP was destroyed; over the kernel its handle
	// would no longer name a QP (EINVAL).
	GoneDestroyed Gone = 1 + iota
	// GoneClosed: its device closed (a removed device's EIO).
	GoneClosed
)

func (g Gone) err() error {
	if g == GoneDestroyed {
		return fmt.Errorf("%w: the QP is destroyed", ErrInvalidArgument)
	}
	return verr.ErrClosed
}

// Retire makes every later post and modify of q fail, for why. The first
// reason stays.
func (q *QP) Retire(why Gone) {
	q.mu.Lock()
	if q.gone == 0 {
		q.gone = why
	}
	q.mu.Unlock()
}

// postErr is the error of a post refused in state st, or after Retire.
func (q *QP) postErr(verb string, st State) error {
	if q.gone != 0 {
		return fmt.Errorf("%s on QP %#x: %w", verb, q.num, q.gone.err())
	}
	return fmt.Errorf("%s on QP %#x: %w: QP is in %v", verb, q.num, ErrInvalidState, st)
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// QPN returns the QP number (the multicast member interface).
func (q *QP) QPN() uint32 { return q.num }

// Type returns the QP type.
func (q *QP) Type() Type { return q.cfg.Type }

// PD returns the protection domain.
func (q *QP) PD() *keys.PD { return q.cfg.PD }

// RecvPD returns the protection domain receive WQEs are posted under:
// the SRQ's if the QP has one (it may differ from the QP's), else the QP's.
func (q *QP) RecvPD() *keys.PD {
	if q.cfg.SRQ != nil {
		return q.cfg.SRQ.PD()
	}
	return q.cfg.PD
}

// SendCQ returns the send completion queue.
func (q *QP) SendCQ() *cq.CQ { return q.cfg.SendCQ }

// RecvCQ returns the receive completion queue.
func (q *QP) RecvCQ() *cq.CQ { return q.cfg.RecvCQ }

// SRQ returns the shared receive queue, or nil.
func (q *QP) SRQ() *SRQ { return q.cfg.SRQ }

// SigAll reports whether every send WR completes.
func (q *QP) SigAll() bool { return q.cfg.SigAll }

// Keys returns the key table the QP checks against.
func (q *QP) Keys() *keys.Table { return q.cfg.Keys }

// Lock takes the QP lock.
func (q *QP) Lock() { q.mu.Lock() }

// Unlock releases the QP lock.
func (q *QP) Unlock() { q.mu.Unlock() }

// TryLock takes the QP lock if it is free and reports whether it did: for
// code that holds another QP's lock, which must not wait for this one.
func (q *QP) TryLock() bool { return q.mu.TryLock() }

// AttrLocked returns the live attributes; the caller holds the lock.
func (q *QP) AttrLocked() *Attr { return &q.attr }

// State returns the current state.
func (q *QP) State() State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.attr.State
}

// Query returns a copy of the attributes (ibv_query_qp); CurState, like
// ibv_query_qp's cur_qp_state, is the current state.
func (q *QP) Query() Attr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.CurState = a.State
	return a
}

// SetStateLocked moves the QP to s without the modify checks: the engines
// use it for the transitions the spec makes on its own (to SQE, ERR, SQD
// drained). The caller holds the lock.
func (q *QP) SetStateLocked(s State) { q.attr.State = s }

// ModifyLocked validates and applies a modify (ibv_modify_qp) and returns
// the state before and after. The caller holds the lock and reacts to the
// transition (flush on ERR, engine reset on RESET).
func (q *QP) ModifyLocked(a *Attr, mask AttrMask) (from, to State, err error) {
	if q.gone != 0 {
		return 0, 0, fmt.Errorf("modify QP %#x: %w", q.num, q.gone.err())
	}
	if mask&^attrAll != 0 {
		return 0, 0, fmt.Errorf("modify QP %#x: %w: unknown mask bits %#x", q.num, ErrInvalidArgument, uint32(mask&^attrAll))
	}
	cur := q.attr.State
	if mask&AttrCurState != 0 && a.CurState != cur {
		return 0, 0, fmt.Errorf("modify QP %#x: %w: CUR_STATE %v but the QP is in %v", q.num, ErrInvalidState, a.CurState, cur)
	}
	next := cur
	if mask&AttrState != 0 {
		next = a.State
	}
	if err := CheckTransition(cur, next, q.cfg.Type, mask); err != nil {
		return 0, 0, fmt.Errorf("modify QP %#x: %w", q.num, err)
	}
	if err := checkValues(a, mask, q.cfg.Type, q.cfg.Limits); err != nil {
		return 0, 0, fmt.Errorf("QP %#x: %w", q.num, err)
	}
	q.apply(a, mask)
	q.attr.State = next
	if next == Reset {
		q.SQ.head, q.SQ.tail, q.SQ.Next = 0, 0, 0
		q.RQ.head, q.RQ.tail = 0, 0
	}
	return cur, next, nil
}

func (q *QP) apply(a *Attr, m AttrMask) {
	t := &q.attr
	set := func(bit AttrMask) bool { return m&bit != 0 }
	if set(AttrEnSQDAsync) {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if set(AttrAccessFlags) {
		t.AccessFlags = a.AccessFlags
	}
	if set(AttrPkeyIndex) {
		t.PkeyIndex = a.PkeyIndex
	}
	if set(AttrPort) {
		t.Port = a.Port
	}
	if set(AttrQKey) {
		t.QKey = a.QKey
	}
	if set(AttrAV) {
		t.AV = a.AV
	}
	if set(AttrPathMTU) {
		t.PathMTU = a.PathMTU
	}
	if set(AttrTimeout) {
		t.Timeout = a.Timeout
	}
	if set(AttrRetryCnt) {
		t.RetryCnt = a.RetryCnt
	}
	if set(AttrRNRRetry) {
		t.RNRRetry = a.RNRRetry
	}
	if set(AttrRQPSN) {
		t.RQPSN = a.RQPSN
	}
	if set(AttrSQPSN) {
		t.SQPSN = a.SQPSN
	}
	if set(AttrMaxQPRdAtomic) {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if set(AttrMaxDestRdAtomic) {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if set(AttrMinRNRTimer) {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if set(AttrDestQPN) {
		t.DestQPN = a.DestQPN
	}
}

// opAllowed says which send opcodes each QP type takes.
func opAllowed(t Type, o Opcode) bool {
	switch o {
	case OpSend, OpSendWithImm:
		return true
	case OpRDMAWrite, OpRDMAWriteWithImm, OpLocalInv, OpBindMW, OpRegMR:
		return t == RC || t == UC
	case OpRDMARead, OpAtomicCmpSwp, OpAtomicFetchAdd, OpSendWithInv:
		return t == RC
	}
	return false
}

// PostSendLocked validates every WR of the list and, only if all are good,
// queues them all (a bad WR never half-posts a list). The error names the
// index and WR ID of the first bad WR. The caller holds the lock.
func (q *QP) PostSendLocked(wrs []SendWR) error {
	st := q.attr.State
	if !st.Allows(PostSendOK) || q.gone != 0 {
		return q.postErr("post send", st)
	}
	if q.SQ.Free() < len(wrs) {
		return fmt.Errorf("post send on QP %#x: %w: %d WRs, %d free of %d", q.num, ErrQueueFull, len(wrs), q.SQ.Free(), q.SQ.Cap())
	}
	// The MRs found while checking, and the message length, go straight
	// into the free slots the WRs will take, with the key table's epoch:
	// the requester checks again at execution only if keys changed
	// meanwhile.
	epoch := q.cfg.Keys.Epoch()
	for i := range wrs {
		if err := q.checkSendWR(&wrs[i], q.SQ.At(q.SQ.head+uint32(i))); err != nil {
			return fmt.Errorf("post send on QP %#x: WR %d (wr_id %#x): %w", q.num, i, wrs[i].WRID, err)
		}
	}
	for i := range wrs {
		q.enqueueSend(&wrs[i], epoch)
	}
	return nil
}

// checkSendWR validates wr and records in slot, the free WQE it will take,
// the MRs of its SGEs and its length.
func (q *QP) checkSendWR(wr *SendWR, slot *SendWQE) error {
	c := &q.cfg.Cap
	if !opAllowed(q.cfg.Type, wr.Opcode) {
		return fmt.Errorf("%w: opcode %v on a %v QP", ErrInvalidArgument, wr.Opcode, q.cfg.Type)
	}
	if wr.Flags&^(Fence|Signaled|Solicited|Inline) != 0 {
		return fmt.Errorf("%w: unknown send flags %#x", ErrInvalidArgument, uint32(wr.Flags))
	}
	if uint32(len(wr.SGL)) > c.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, max_send_sge is %d", ErrInvalidArgument, len(wr.SGL), c.MaxSendSGE)
	}
	var total uint64
	if wr.Flags&Inline != 0 {
		if wr.Opcode.ReadOrAtomic() || wr.Opcode.Local() {
			return fmt.Errorf("%w: inline data with %v", ErrInvalidArgument, wr.Opcode)
		}
		if uint32(len(wr.InlineData)) > c.MaxInlineData {
			return fmt.Errorf("%w: %d bytes inline, max_inline_data is %d", ErrInvalidArgument, len(wr.InlineData), c.MaxInlineData)
		}
		if len(wr.SGL) != 0 {
			return fmt.Errorf("%w: inline WR carries its data in InlineData, not SGEs", ErrInvalidArgument)
		}
		total = uint64(len(wr.InlineData))
	} else {
		if len(wr.InlineData) != 0 {
			return fmt.Errorf("%w: InlineData without the Inline flag", ErrInvalidArgument)
		}
		var err error
		if total, err = CheckSGL(q.cfg.Keys, q.cfg.PD, wr.SGL, wr.Opcode.SGLAccess(), slot.MRs); err != nil {
			return err
		}
	}
	if total > MaxMessage {
		return fmt.Errorf("%w: message of %d bytes exceeds %d", ErrInvalidArgument, total, uint64(MaxMessage))
	}
	switch {
	case wr.Opcode.Atomic():
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return fmt.Errorf("%w: an atomic takes one 8-byte SGE", ErrInvalidArgument)
		}
	case wr.Opcode == OpLocalInv && wr.InvalidateRkey == 0:
		return fmt.Errorf("%w: LOCAL_INV without a key", ErrInvalidArgument)
	case wr.Opcode == OpBindMW && (wr.Bind == nil || wr.Bind.MW == nil || wr.Bind.MR == nil):
		return fmt.Errorf("%w: BIND_MW without a window and region", ErrInvalidArgument)
	case wr.Opcode == OpRegMR && (wr.Reg == nil || wr.Reg.MR == nil):
		return fmt.Errorf("%w: REG_MR without a region", ErrInvalidArgument)
	}
	if q.cfg.Type.Datagram() {
		if wr.AH == nil {
			return fmt.Errorf("%w: UD send without an address handle", ErrInvalidArgument)
		}
		if wr.AH.PD != q.cfg.PD {
			return fmt.Errorf("%w: address handle in another PD", ErrInvalidArgument)
		}
		if mtu := q.cfg.Limits.MaxMTU.Bytes(); total > uint64(mtu) {
			return fmt.Errorf("%w: UD message of %d bytes exceeds the MTU %d", ErrInvalidArgument, total, mtu)
		}
		if wr.RemoteQPN > 0xFFFFFF {
			return fmt.Errorf("%w: remote QPN %#x", ErrInvalidArgument, wr.RemoteQPN)
		}
	}
	slot.Length = uint32(total)
	return nil
}

// enqueueSend queues a WR that checkSendWR passed (leaving its MRs and
// length in the slot) at key table epoch.
func (q *QP) enqueueSend(wr *SendWR, epoch uint64) {
	w := q.SQ.At(q.SQ.head)
	// Field by field, keeping the slot's backing arrays: a composite
	// literal zeroed and rewrote all 248 bytes of it, 5% of a small SEND.
	// And no pointer into the caller's memory is stored (SGL, inline
	// data, AH, bind and reg WRs are copied into the slot's own storage),
	// so the escape analysis keeps what a caller passes to PostSend on its
	// stack: `w.WR = *wr` made every caller's SGL a heap allocation, a
	// message's garbage. TestEnqueueSendLeavesNoStaleState and
	// TestEnqueueSendCopiesEveryField fail if a field is missed here;
	// TestPostSendAllocatesNothing if the caller's memory escapes again.
	d := &w.WR
	d.WRID, d.Opcode, d.Flags = wr.WRID, wr.Opcode, wr.Flags
	d.ImmData, d.InvalidateRkey = wr.ImmData, wr.InvalidateRkey
	d.RemoteAddr, d.Rkey = wr.RemoteAddr, wr.Rkey
	d.CompareAdd, d.Swap = wr.CompareAdd, wr.Swap
	d.RemoteQPN, d.RemoteQKey = wr.RemoteQPN, wr.RemoteQKey
	w.State, w.Status = WQEPosted, 0
	w.FirstPSN, w.LastPSN, w.Sent, w.Done, w.SSN = 0, 0, 0, 0, 0
	w.Epoch, w.Assigned = epoch, false
	if len(wr.SGL) == 1 {
		d.SGL = append(w.sges[:0], wr.SGL[0])
	} else {
		d.SGL = append(w.sges[:0], wr.SGL...)
	}
	d.InlineData = nil
	if wr.Flags&Inline != 0 {
		// w.inline is MaxInlineData long, which checkSendWR enforced.
		d.InlineData = w.inline[:copy(w.inline, wr.InlineData)]
	}
	d.AH, d.Bind, d.Reg = nil, nil, nil
	if wr.AH != nil {
		ah := q.SQ.ahSlot(q.SQ.head)
		*ah = *wr.AH
		d.AH = ah
	}
	if wr.Bind != nil {
		b := q.SQ.bindSlot(q.SQ.head)
		*b = *wr.Bind
		d.Bind = b
	}
	if wr.Reg != nil {
		r := q.SQ.regSlot(q.SQ.head)
		*r = *wr.Reg
		d.Reg = r
	}
	w.Signaled = q.cfg.SigAll || wr.Flags&Signaled != 0
	q.SQ.head++
}

// CheckSGL checks every SGE of sgl as a local key of pd with the given
// access and stores its MR in mrs (which has room for len(sgl)). It returns
// the SGL's total length, or an error naming the first bad SGE (formatted
// only then: a passing check does not allocate). Posting checks with it,
// and the engines check again with it when keys changed since
// (keys.Table.Epoch).
func CheckSGL(kt *keys.Table, pd *keys.PD, sgl []SGE, access keys.Access, mrs []*keys.MR) (total uint64, err error) {
	for i, s := range sgl {
		mr, err := kt.CheckLocal(pd, s.Lkey, s.Addr, s.Length, access)
		if err != nil {
			return 0, fmt.Errorf("SGE %d (lkey %#x addr %#x len %d): %w", i, s.Lkey, s.Addr, s.Length, err)
		}
		mrs[i] = mr
		total += uint64(s.Length)
	}
	return total, nil
}

// SGLAccess is the local access a WR of this opcode needs on its SGEs:
// READ and atomic responses are written into them, the others only read.
func (o Opcode) SGLAccess() keys.Access {
	if o.ReadOrAtomic() {
		return keys.LocalWrite
	}
	return 0
}

// PostRecvLocked validates and queues receive WRs, all or none. The caller
// holds the lock.
func (q *QP) PostRecvLocked(wrs []RecvWR) error {
	if q.cfg.SRQ != nil {
		return fmt.Errorf("post recv on QP %#x: %w: the QP uses an SRQ", q.num, ErrInvalidArgument)
	}
	st := q.attr.State
	if !st.Allows(PostRecvOK) || q.gone != 0 {
		return q.postErr("post recv", st)
	}
	if err := postRecv(&q.RQ, q.cfg.Keys, q.cfg.PD, q.cfg.Cap.MaxRecvSGE, wrs); err != nil {
		return fmt.Errorf("post recv on QP %#x: %w", q.num, err)
	}
	return nil
}

// postRecv validates and queues wrs on rq, all or none. Its errors carry no
// "post recv on ..." prefix: the caller adds it, only on failure, so a
// successful post does not format anything.
func postRecv(rq *RecvQueue, kt *keys.Table, pd *keys.PD, maxSGE uint32, wrs []RecvWR) error {
	epoch := kt.Epoch()
	if rq.Free() < len(wrs) {
		return fmt.Errorf("%w: %d WRs, %d free of %d", ErrQueueFull, len(wrs), rq.Free(), rq.Cap())
	}
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGL)) > maxSGE {
			return fmt.Errorf("WR %d (wr_id %#x): %w: %d SGEs, max_recv_sge is %d", i, wr.WRID, ErrInvalidArgument, len(wr.SGL), maxSGE)
		}
		slot := rq.At(rq.head + uint32(i))
		total, err := CheckSGL(kt, pd, wr.SGL, keys.LocalWrite, slot.MRs)
		if err != nil {
			return fmt.Errorf("WR %d (wr_id %#x): %w", i, wr.WRID, err)
		}
		if total > MaxMessage {
			return fmt.Errorf("WR %d (wr_id %#x): %w: %d bytes", i, wr.WRID, ErrInvalidArgument, total)
		}
		slot.Length = uint32(total)
	}
	for i := range wrs {
		w := rq.At(rq.head)
		w.WRID = wrs[i].WRID
		w.SGL = append(w.SGL[:0], wrs[i].SGL...)
		w.Epoch = epoch // MRs and Length are in place from the checks
		rq.head++
	}
	return nil
}

// PopRecvLocked takes the oldest WQE of the QP's receive queue (or of its
// SRQ) into dst, copying its SGEs into dst's own storage so the slot can be
// reused at once. limit reports that an armed SRQ fell below its limit (the
// caller raises the event, outside all locks).
func (q *QP) PopRecvLocked(dst *RecvWQE) (ok, limit bool) {
	if q.cfg.SRQ != nil {
		return q.cfg.SRQ.pop(dst, q)
	}
	if popInto(&q.RQ, dst) {
		return true, false
	}
	if q.pull == nil {
		return false, false
	}
	q.pull()
	return popInto(&q.RQ, dst), false
}

func popInto(rq *RecvQueue, dst *RecvWQE) bool {
	if rq.head == rq.tail {
		return false
	}
	w := rq.At(rq.tail)
	dst.WRID, dst.Length, dst.Epoch = w.WRID, w.Length, w.Epoch
	if len(w.SGL) == 1 {
		// The common case, by element: a slice append of pointers is a
		// call to typedslicecopy.
		dst.SGL = append(dst.SGL[:0], w.SGL[0])
		dst.MRs = append(dst.MRs[:0], w.MRs[0])
	} else {
		dst.SGL = append(dst.SGL[:0], w.SGL...)
		dst.MRs = append(dst.MRs[:0], w.MRs[:len(w.SGL)]...)
	}
	rq.tail++
	return true
}

// RecvLenLocked returns the number of posted receive WQEs (of the SRQ if
// the QP has one).
func (q *QP) RecvLenLocked() int {
	if q.cfg.SRQ != nil {
		return q.cfg.SRQ.Len()
	}
	return q.RQ.Len()
}

// FlushRecvLocked hands emit a WR_FLUSH_ERR completion for every queued
// receive WQE and empties the queue (an SRQ's WQEs stay: they belong to
// other QPs too). The caller delivers the completions after unlocking.
func (q *QP) FlushRecvLocked(emit func(*cq.WC)) {
	if q.cfg.SRQ != nil {
		return
	}
	var wc cq.WC
	for q.RQ.tail != q.RQ.head {
		w := q.RQ.At(q.RQ.tail)
		wc = cq.WC{WRID: w.WRID, Status: cq.WRFlushErr, Opcode: cq.Recv, QPNum: q.num}
		emit(&wc)
		q.RQ.tail++
	}
}

// WCOpcode maps a send WR opcode to its work completion opcode.
func (o Opcode) WCOpcode() cq.Opcode {
	switch o {
	case OpRDMAWrite, OpRDMAWriteWithImm:
		return cq.RDMAWrite
	case OpRDMARead:
		return cq.RDMARead
	case OpAtomicCmpSwp:
		return cq.CompSwap
	case OpAtomicFetchAdd:
		return cq.FetchAdd
	case OpLocalInv:
		return cq.LocalInv
	case OpBindMW:
		return cq.BindMW
	case OpRegMR:
		return cq.RegMR
	}
	return cq.Send
}

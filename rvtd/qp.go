package rvtd

import (
	"context"
	"errors"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/qpconv"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// Limits of a QP's rings.
const (
	maxWR  = 1 << 14
	maxSGE = 32
)

func (ss *session) createQP(h uint32, m *proto.CreateQP) (proto.Body, []int, error) {
	switch qp.Type(m.Type) {
	case qp.RC, qp.UC, qp.UD:
	default:
		return nil, nil, proto.EINVAL
	}
	c := m.Cap
	if c.MaxSendWR > maxWR || c.MaxRecvWR > maxWR || c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE || c.MaxInlineData > 1024 {
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	p := lookupLocked[pdObj](ss, h)
	scq := lookupLocked[cqObj](ss, m.SendCQ)
	rcq := lookupLocked[cqObj](ss, m.RecvCQ)
	var srq *srqObj
	if m.SRQ != 0 {
		srq = lookupLocked[srqObj](ss, m.SRQ)
	}
	switch {
	case p == nil || scq == nil || rcq == nil || scq.ctx != p.ctx || rcq.ctx != p.ctx:
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	case m.SRQ != 0 && (srq == nil || srq.pd.ctx != p.ctx):
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	case ss.nqp >= ss.srv.cfg.Limits.QPs:
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	// The doorbell for the QP's life, the memfd until the reply.
	if err := ss.takeFDsLocked(2, proto.ENOMEM); err != nil {
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.nqp++
	ss.mu.Unlock()
	q := &qpObj{sess: ss, ctx: p.ctx, pd: p, scq: scq, rcq: rcq, srq: srq, cookie: m.Cookie, typ: m.Type, sigAll: m.SigAll,
		sqBad: map[uint32]cq.Status{}}
	var err error
	fail := func(e error) (proto.Body, []int, error) {
		if q.qp != nil {
			_ = q.qp.Destroy()
		}
		if q.reg != nil {
			q.reg.Close()
		}
		if q.bell != nil {
			q.bell.Close()
		}
		ss.mu.Lock()
		ss.nqp--
		ss.putFDsLocked(2)
		ss.mu.Unlock()
		return nil, nil, e
	}
	sqN := pow2(max(c.MaxSendWR, 1))
	// Inline room is at least the send SGEs' bytes, as rxe gives it
	// (rdma_xclient posts 16 bytes inline on a QP asked for no inline
	// data and one SGE); the ring's stride has that room either way.
	inline := max(c.MaxInlineData, ring.SGESize*max(c.MaxSendSGE, 1))
	sqL := ring.Layout{Offset: 0, Entries: sqN, Stride: ring.SendStride(max(c.MaxSendSGE, 1), inline)}
	var rqL ring.Layout // none with an SRQ
	size := sqL.Size()
	if srq == nil {
		rqN := pow2(max(c.MaxRecvWR, 1))
		rqL = ring.Layout{Offset: pageUp(sqL.Size()), Entries: rqN, Stride: ring.RecvStride(max(c.MaxRecvSGE, 1))}
		size = rqL.Offset + rqL.Size()
	}
	if q.reg, err = ring.Create("rvtd-qp", int(size)); err != nil {
		return fail(proto.ENOMEM)
	}
	mem := q.reg.Bytes()
	if err := ring.Init(mem, ring.KindSend, sqL); err != nil {
		return fail(err)
	}
	if q.sq, err = ring.NewConsumer(mem, ring.KindSend, sqL, nil, false); err != nil {
		return fail(err)
	}
	q.cap = proto.Cap{MaxSendWR: sqN, MaxSendSGE: max(c.MaxSendSGE, 1), MaxInlineData: inline}
	ecap := qp.Cap{MaxSendWR: sqN, MaxSendSGE: q.cap.MaxSendSGE, MaxInlineData: inline}
	if srq == nil {
		if err := ring.Init(mem, ring.KindRecv, rqL); err != nil {
			return fail(err)
		}
		rc, err := ring.NewConsumer(mem, ring.KindRecv, rqL, nil, false)
		if err != nil {
			return fail(err)
		}
		q.cap.MaxRecvWR, q.cap.MaxRecvSGE = rqL.Entries, max(c.MaxRecvSGE, 1)
		ecap.MaxRecvWR, ecap.MaxRecvSGE = q.cap.MaxRecvWR, q.cap.MaxRecvSGE
		q.rr = newRecvRing(q, rc, rqL.Entries, rqL.Stride, q.cap.MaxRecvSGE)
	}
	q.sqMask = sqN - 1
	q.sqWRID = make([]uint64, sqN)
	q.buf = make([]byte, sqL.Stride)
	q.sges = make([]qp.SGE, 0, postBatch*int(q.cap.MaxSendSGE))
	q.inl = make([]byte, 0, postBatch*int(inline))
	if q.bell, err = ring.NewDoorbell(); err != nil {
		return fail(proto.ENOMEM)
	}
	ia := rvt.QPInitAttr{Type: qp.Type(m.Type), SendCQ: scq.cq, RecvCQ: rcq.cq, SigAll: m.SigAll, Cap: ecap}
	if srq != nil {
		ia.SRQ = srq.srq
	}
	q.qp, err = p.pd.CreateQP(ia)
	if err != nil {
		return fail(err)
	}
	q.qpn = q.qp.Num()
	ss.mu.Lock()
	q.handle = ss.addLocked(q)
	q.loop = scq.loop // its send completions are drained where it posts: no hand-over between loops
	p.refs++
	scq.refs++
	rcq.refs++
	if srq != nil {
		srq.refs++
	}
	ss.mu.Unlock()
	q.ctx.d.qps.Store(q.qpn, q)
	if q.rr != nil {
		q.qp.SetRecvPull(q.pullRecv)
	}
	if err := q.loop.addQP(q); err != nil {
		q.destroy(false) // gives back the doorbell's descriptor
		ss.putFDs(1)     // and the memfd, closed with the ring
		return nil, nil, err
	}
	// The daemon sleeps on the send ring from the start: the client rings.
	_, _ = q.sq.SleepBeyond(0)
	// The memfd goes with the reply and is closed after it (the daemon
	// keeps its mapping); the doorbell stays: the loop sleeps on it.
	memfd := q.reg.TakeFD()
	r := &proto.QPReply{QP: q.handle, QPN: q.qpn, Cap: q.cap, MapSize: uint64(len(mem)),
		SQ:    proto.RingLayout{Offset: sqL.Offset, Entries: sqL.Entries, Stride: sqL.Stride},
		MemFD: memfd, Doorbell: q.bell.FD()}
	if srq == nil {
		r.RQ = proto.RingLayout{Offset: rqL.Offset, Entries: rqL.Entries, Stride: rqL.Stride}
	}
	return r, []int{memfd}, nil
}

func (ss *session) modifyQP(h uint32, m *proto.ModifyQP) error {
	q := lookup[qpObj](ss, h)
	if q == nil {
		return proto.EINVAL
	}
	a := qpconv.ToQPAttr(&m.Attr)
	if m.Mask&uint32(qp.AttrAV) != 0 && !m.Attr.AV.IsGlobal {
		return proto.EINVAL
	}
	// The rings' capacities are fixed at creation.
	a.Cap = qp.Cap{}
	q.service(false) // what was posted before the modify (below)
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return proto.EINVAL
	}
	if err := q.qp.Modify(&a, qp.AttrMask(m.Mask)&^qp.AttrCap); err != nil {
		q.mu.Unlock()
		return err
	}
	if m.Mask&uint32(qp.AttrState) != 0 && a.State == qp.Reset {
		q.resetLocked()
	} else if q.qp.State() == qp.Err {
		q.inErr = true
	}
	q.mu.Unlock()
	q.loop.kickQP(q)
	return nil
}

// resetLocked restarts the rings with the QP (modify_qp to RESET; q.mu
// held): the engine has discarded the WQEs it held, without completions,
// so the daemon releases every slot, and both rings' indices go back to 0
// (docs/rvtd-protocol.md, section 7). Completions of the old WQEs still on
// the way carry the old epoch and are dropped.
func (q *qpObj) resetLocked() {
	q.sq.Reset()
	q.sqCons, q.sqTaken = 0, 0
	q.sqEpoch = (q.sqEpoch + 1) & epochMask
	clear(q.sqBad)
	q.sqFailed, q.inErr = false, false
	q.errPending.Store(false)
	if q.rr != nil {
		q.rr.reset()
	}
	_, _ = q.sq.SleepBeyond(0)
}

func (ss *session) destroyQP(h uint32) (proto.Body, []int, error) {
	q := lookup[qpObj](ss, h)
	if q == nil {
		return nil, nil, proto.EINVAL
	}
	q.sendPosted()
	q.destroy(false)
	return &proto.EventsReply{AsyncEvents: q.asyncEvents.Load()}, nil, nil
}

// Requests that follow posts. The client rings a QP's doorbell on its
// eventfd and sends modify_qp, destroy_qp, destroy_ah or cm_disconnect on
// the session's socket: the loop may not have served the doorbell when
// the request comes. A device reads its doorbells in order, and rxe's
// post_send has even sent the packets (what the send window allows) by
// the time it returns. mckey's sender posts its datagrams unsignaled and
// destroys their AH and QP at once; a client may post a last SEND and
// disconnect. So these requests first take what the client posted (the
// engine sends it at once when it can, as at a doorbell), then do their
// part.

// sendPostedWait bounds sendPosted's wait for datagrams to go out.
const sendPostedWait = time.Second

// sendPosted, before the client's destroy_qp, takes what it posted; and
// for a UD QP it waits until those datagrams are on the link (RC and UC
// WRs not sent yet go with the QP, as on a device).
func (q *qpObj) sendPosted() {
	q.service(false)
	if qp.Type(q.typ) != qp.UD {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendPostedWait)
	defer cancel()
	if err := q.qp.Conn().WaitSent(ctx); err != nil {
		q.sess.log.Warn("destroy QP: datagrams posted before it not sent", "qpn", q.qpn, "err", err)
	}
}

// destroy takes the QP down: out of the loop, the engine QP (to ERR first
// when the client is gone, so that its peers see what a crashed host gives
// them), then the rings.
func (q *qpObj) destroy(toErr bool) {
	ss := q.sess
	q.loop.removeQP(q)
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return
	}
	q.dead = true
	q.mu.Unlock()
	if toErr {
		_ = q.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState)
	}
	q.ctx.d.qps.Delete(q.qpn)
	if err := q.qp.Destroy(); err != nil {
		ss.log.Warn("destroy QP", "qpn", q.qpn, "err", err)
	}
	if q.rr != nil {
		// A late pull finds the ring gone, and so does a CQ's drain
		// that found the QP before it left d.qps: its completion is
		// dropped, not released into the ring unmapped below.
		q.rr.mu.Lock()
		q.rr.failed, q.rr.gone = true, true
		q.rr.mu.Unlock()
	}
	q.mu.Lock()
	_ = q.reg.Close()
	q.reg, q.sq = nil, nil
	q.mu.Unlock()
	q.bell.Close()
	ss.mu.Lock()
	delete(ss.objs, q.handle)
	ss.nqp--
	ss.putFDsLocked(1) // its doorbell, closed above
	q.pd.refs--
	q.scq.refs--
	q.rcq.refs--
	if q.srq != nil {
		q.srq.refs--
	}
	ss.mu.Unlock()
}

// ringFault: the client's index of a ring is out of range. That ring is no
// longer served; the QP goes to ERR and the client gets IBV_EVENT_QP_FATAL.
// c is the send ring, or nil for the receive ring (which has failed
// itself).
func (q *qpObj) ringFaultLocked(c *ring.Consumer, err error) {
	if c != nil {
		c.Fail(uint32(proto.EPROTO))
		q.sqFailed = true
	}
	q.sess.log.Warn("ring corrupt", "qpn", q.qpn, "err", err)
	q.toErrLocked()
	q.asyncEvents.Add(1)
	q.sess.asyncEvent(q.ctx, q.cookie, q.handle, uint32(rvt.EventType(1))) // IBV_EVENT_QP_FATAL
}

func (q *qpObj) toErrLocked() {
	if q.inErr {
		return
	}
	q.inErr = true
	if err := q.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState); err != nil {
		q.sess.log.Warn("QP to error", "qpn", q.qpn, "err", err)
	}
}

func (q *qpObj) serviceSendLocked(spin bool) (did bool) {
	for {
		avail, err := q.sq.Available()
		if err != nil {
			q.ringFaultLocked(q.sq, err)
			return did
		}
		if q.sqTaken >= uint32(avail) {
			if spin {
				q.sq.Wake() // the loop polls: no doorbell needed
				return did
			}
			ready, err := q.sq.SleepBeyond(int(q.sqTaken))
			if err != nil {
				q.ringFaultLocked(q.sq, err)
				return did
			}
			if !ready {
				return did
			}
			continue
		}
		did = true
		q.wrs, q.sges, q.inl = q.wrs[:0], q.sges[:0], q.inl[:0]
		first := q.sqTaken
		for q.sqTaken < uint32(avail) && len(q.wrs) < postBatch {
			idx := q.sqCons + q.sqTaken
			wr, wrid, bad := q.sendWR(int(q.sqTaken), idx)
			q.sqWRID[idx&q.sqMask] = wrid
			if bad != 0 {
				q.postSendLocked(first)
				q.badSendLocked(idx, bad)
				first = q.sqTaken + 1
				q.sqTaken++
				continue
			}
			q.wrs = append(q.wrs, wr)
			q.sqTaken++
		}
		q.postSendLocked(first)
	}
}

// postSendLocked posts the WRs gathered in q.wrs, which took the ring
// slots from first on. A list the engine refuses is posted one by one; a
// WR it refuses is a bad WQE.
func (q *qpObj) postSendLocked(first uint32) {
	if len(q.wrs) == 0 {
		return
	}
	wrs := q.wrs
	q.wrs = q.wrs[:0]
	if err := q.qp.PostSend(wrs...); err == nil {
		return
	}
	for i := range wrs {
		if err := q.qp.PostSend(wrs[i]); err != nil {
			q.badSendLocked(q.sqCons+first+uint32(i), statusOf(err))
		}
	}
}

// badSendLocked completes the send WQE at ring index idx with status st:
// the QP goes to ERR and a stand-in WQE is posted there, which the engine
// flushes in order after the WQEs before it; complete gives it st.
func (q *qpObj) badSendLocked(idx uint32, st cq.Status) {
	q.sqBad[idx] = st
	q.toErrLocked()
	wr := qp.SendWR{WRID: q.sendWRID(idx), Opcode: qp.OpSend, Flags: qp.Signaled}
	if qp.Type(q.typ) == qp.UD {
		wr.AH = &qp.AH{PD: q.pd.pd.PD} // never sent: the QP is in ERR
	}
	if err := q.qp.PostSend(wr); err != nil {
		q.sess.log.Warn("flush stand-in", "qpn", q.qpn, "err", err)
	}
}

// sendWR copies the k-th unread send record (ring index idx) and checks
// the copy. It returns the engine WR, the client's wr_id, and a status
// other than 0 for a bad WQE.
func (q *qpObj) sendWR(k int, idx uint32) (qp.SendWR, uint64, cq.Status) {
	slot := q.sq.Slot(k)
	rec := q.buf[:len(slot)]
	copy(rec, slot)
	w := ring.SendWQE(rec)
	wr := qp.SendWR{
		WRID: q.sendWRID(idx), Opcode: qp.Opcode(w.Opcode()), Flags: qp.SendFlags(w.SendFlags()),
		RemoteAddr: w.RemoteAddr(), Rkey: w.RKey(), CompareAdd: w.CompareAdd(), Swap: w.Swap(),
		RemoteQPN: w.RemoteQPN(), RemoteQKey: w.RemoteQKey(),
	}
	switch wr.Opcode {
	case qp.OpRDMAWriteWithImm, qp.OpSendWithImm:
		wr.ImmData = w.ImmData()
	case qp.OpSendWithInv, qp.OpLocalInv:
		wr.InvalidateRkey = w.InvalidateRKey()
	case qp.OpRDMAWrite, qp.OpSend, qp.OpRDMARead, qp.OpAtomicCmpSwp, qp.OpAtomicFetchAdd:
	case qp.OpBindMW:
		// The window and region by handle (ah, remote_qpn); the new rkey's
		// key byte, the address, length and access as ibv_mw_bind_info.
		q.sess.mu.Lock()
		mw := lookupLocked[mwObj](q.sess, w.AH())
		mr := lookupLocked[mrObj](q.sess, w.RemoteQPN())
		q.sess.mu.Unlock()
		if mw == nil || mr == nil || mw.pd != q.pd || mr.pd != q.pd {
			return wr, w.WRID(), cq.LocQPOpErr
		}
		wr.Bind = &qp.BindWR{MW: mw.mw, MR: mr.mr, Addr: w.RemoteAddr(), Length: w.CompareAdd(),
			Access: keys.Access(uint32(w.Swap())), Key: uint8(w.RKey())}
		return wr, w.WRID(), 0
	case qp.OpRegMR:
		return q.regMRWR(w, wr)
	default:
		return wr, w.WRID(), cq.LocQPOpErr // unknown opcodes
	}
	if qp.Type(q.typ) == qp.UD {
		ah := lookup[ahObj](q.sess, w.AH())
		if ah == nil || ah.pd != q.pd {
			return wr, w.WRID(), cq.LocQPOpErr
		}
		wr.AH = ah.ah
	}
	if wr.Flags&qp.Inline != 0 {
		n := int(w.InlineLen())
		if w.NumSGE() != 0 || n > len(w.Inline()) || uint32(n) > q.cap.MaxInlineData {
			return wr, w.WRID(), cq.LocLenErr
		}
		start := len(q.inl) // the batch's inline data share q.inl, as SGLs
		q.inl = append(q.inl, w.Inline()[:n]...)
		wr.InlineData = q.inl[start:len(q.inl):len(q.inl)]
		return wr, w.WRID(), 0
	}
	n := int(w.NumSGE())
	if n > w.MaxSGEs() || uint32(n) > q.cap.MaxSendSGE {
		return wr, w.WRID(), cq.LocLenErr
	}
	// The SGLs of a batch share q.sges (the engine copies them when
	// posted); the batch's capacity was set aside at creation.
	start := len(q.sges)
	for i := 0; i < n; i++ {
		s := w.SGE(i)
		if !q.sess.sgeOK(q.pd, s.LKey(), s.Addr(), s.Length()) {
			q.sges = q.sges[:start]
			return wr, w.WRID(), cq.LocProtErr
		}
		q.sges = append(q.sges, qp.SGE{Addr: s.Addr(), Length: s.Length(), Lkey: s.LKey()})
	}
	if n > 0 {
		wr.SGL = q.sges[start:len(q.sges):len(q.sges)]
	}
	return wr, w.WRID(), 0
}

// statusOf is the completion status of a WR the engine refused.
func statusOf(err error) cq.Status {
	switch {
	case errors.Is(err, rvt.ErrInvalidArgument):
		return cq.LocQPOpErr
	default:
		return cq.LocProtErr
	}
}

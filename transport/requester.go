package transport

import (
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// reqState is the requester's state (rxe's qp->req).
type reqState struct {
	psn         PSN // next PSN to send (moves back on a retry)
	maxPSN      PSN // one past the highest PSN ever assigned: the ghost limit
	rdAtomic    int // READ/atomic WQEs awaiting their response
	noAck       int // packets sent since the last AckReq
	retryLeft   uint8
	rnrLeft     uint8
	needRetry   bool
	retryPSN    PSN
	rnrWait     bool
	timerOn     bool
	probeShift  uint8         // probes since progress: the next waits Probe<<probeShift
	probesSpent bool          // a timeout's worth of probes went by, or a timeout: no more
	stalled     time.Duration // probe intervals waited since progress
	progressed  bool          // ACKs or responses arrived since the timer was armed
	timerSeq    uint64        // the running timer's entry on the engine's heap (sweeper.go)
	drainedSent bool
	// retried is the PSN the last retry restarted from; until progress is
	// made, gaps and NAKs for that same PSN do not restart again (the old
	// packets still in flight would trigger a storm).
	retried      PSN
	retriedValid bool

	// End-to-end credits (IBTA 9.7.7.2), as rdmavt: each message WQE gets
	// a send sequence number; ACKs set the limit sequence number to their
	// MSN plus the credits they carry. A SEND or WRITE_WITH_IMM beyond the
	// limit waits for an ACK, unless nothing is outstanding (a probe).
	ssn       uint32 // last SSN assigned (24 bits)
	lsn       uint32 // limit: SSNs up to here have a receive WQE waiting
	unlimited bool   // the peer advertises no credits (code 31, as rxe)

	// After an RNR NAK only the NAKed packet (limitPSN) is sent again,
	// asking for an ACK, until the responder accepts it: the window behind
	// it would only be dropped, and a responder without receive WQEs for
	// a long while would see a window's worth at every RNR retry.
	limitOn    bool
	limitPSN   PSN
	creditWait bool // stopped for credits (counted once per wait)

	// The send window after a loss, 0 while it is Config.Window, and the
	// PSNs acknowledged towards its next step (window.go).
	cwnd, cwndAcked int32

	rtt rttState // the round-trip estimate (rtt.go)
}

// sendBatch bounds the packets one run of the send task emits.
const sendBatch = 64

// runSend is the send task: completer first, then requester.
func (c *Conn) runSend() bool {
	c.qp.Lock()
	return c.sendBatchUnlock()
}

// sendBatchUnlock is the send task's batch for a caller holding the QP
// lock, which it releases; it reports whether work is left.
func (c *Conn) sendBatchUnlock() bool {
	c.sendBufs = stockFor(c.sendTask)
	h := c.e.hold()
	defer flush(h, false)
	if c.nakQueued.Load() {
		c.nakQueued.Store(false) // the completer takes it now
	}
	more := c.completeLocked()
	if c.requestLocked() {
		more = true
	}
	if p := c.joinedResp; p != nil {
		// The loopback peer's responder, which the requester joined.
		c.joinedResp = nil
		if c.respondJoinedLocked(p) {
			more = true
		}
		c.qp.Unlock()
		c.endRespJoin(p)
	} else {
		c.qp.Unlock()
		c.deliver(&c.sout, c.sendTask)
	}
	c.sendBufs = nil // the goroutine's, not the QP's
	c.signalRan()
	return more
}

// pmtu returns the path MTU in bytes for the QP's packets.
func (c *Conn) pmtu(a *qp.Attr) uint32 { return c.pathLocked(a).mtu }

// requestLocked turns WQEs into packets. It reports whether it stopped for
// its batch limit (more work remains).
func (c *Conn) requestLocked() bool {
	a := c.qp.AttrLocked()
	st := a.State
	if st == qp.Err || st == qp.SQE {
		c.flushSendLocked()
		return false
	}
	if !st.Allows(qp.ProcessSendOK) {
		return false
	}
	// Loads first: a swap is a locked instruction, and the flags are
	// almost always clear.
	if c.timerFired.Load() && c.timerFired.Swap(false) {
		c.onTimeoutLocked()
	}
	rnr := false // the retry below ends an RNR wait
	if c.rnrFired.Load() && c.rnrFired.Swap(false) && c.req.rnrWait {
		c.req.rnrWait = false
		c.req.needRetry = true
		rnr = true
	}
	if a.State == qp.Err { // a timeout may have moved it
		c.flushSendLocked()
		return false
	}
	if c.req.needRetry && !c.req.rnrWait {
		c.retryLocked(rnr)
	}
	sq := &c.qp.SQ
	rc := c.qp.Type() == qp.RC
	pa := c.pathLocked(a) // once per batch: a failed route is not cached
	budget := sendBatch
	stopped := false
	for budget > 0 && !c.req.rnrWait && sq.Next != sq.Head() {
		w := sq.At(sq.Next)
		fresh := w.State == qp.WQEPosted && w.Sent == 0
		if st == qp.SQD && fresh {
			break // SQD: finish what started, start nothing new
		}
		if fresh && w.WR.Flags&qp.Fence != 0 && c.req.rdAtomic > 0 {
			break // fence: wait for prior READs and atomics
		}
		op := w.WR.Opcode
		if op.Local() {
			c.execLocalLocked(w)
			sq.Next++
			continue
		}
		if rc {
			if c.req.limitOn && c.req.limitPSN.Less(c.req.psn) {
				break // only the RNR-NAKed packet until it is accepted
			}
			if fresh && op.ReadOrAtomic() && c.req.rdAtomic >= int(max(a.MaxRdAtomic, 1)) {
				break
			}
			if w.SSN == 0 {
				c.req.ssn = (c.req.ssn + 1) & 0xFFFFFF
				if c.req.ssn == 0 {
					c.req.ssn = 1
				}
				w.SSN = c.req.ssn
			}
			if !c.creditOKLocked(w) {
				break
			}
			if c.req.psn.Diff(c.comp.psn) >= c.windowLocked() {
				break
			}
		}
		if !w.Assigned {
			// Fix the WQE's PSN range at its first transmission.
			k := uint32(1)
			if !op.Atomic() {
				k = npkts(w.Length, pa.mtu)
			}
			first := c.req.maxPSN // never reuse a PSN, wherever a retry left req.psn
			w.FirstPSN, w.LastPSN, w.Assigned = uint32(first), uint32(first.Add(k-1)), true
			c.req.maxPSN = first.Add(k)
		}
		if fresh && w.Epoch != c.qp.Keys().Epoch() {
			// Keys changed since the WR was posted: check its SGEs again.
			if err := c.resolveSendLocked(w); err != nil {
				w.State, w.Status = qp.WQEError, cq.LocProtErr
				sq.Next++
				break
			}
		}
		c.sendPacketLocked(w, a, pa)
		budget--
		if rc && budget&7 == 0 && budget > 0 && c.nakQueued.Load() {
			// A NAK came in: stop here and run again, completer first,
			// rather than send the rest of the batch to be dropped.
			stopped = true
			break
		}
	}
	c.retireLocked()
	c.checkDrainedLocked()
	if rc && c.e.rttOn() {
		c.rttSentLocked()
	}
	if rc && c.comp.psn != c.req.maxPSN {
		// Invariant: while anything is unacknowledged the retransmit
		// timer runs, whatever stopped the requester.
		c.armTimerLocked()
		if c.e.probing() {
			c.probeSentLocked()
		}
	}
	return budget == 0 || stopped
}

// resolveSendLocked looks up the MRs of a WQE's SGEs.
func (c *Conn) resolveSendLocked(w *qp.SendWQE) error {
	if w.WR.Flags&qp.Inline != 0 {
		return nil
	}
	// The epoch before the checks: a change during them moves it again
	// and the next use checks again.
	epoch := c.qp.Keys().Epoch()
	if _, err := qp.CheckSGL(c.qp.Keys(), c.qp.PD(), w.WR.SGL, w.WR.Opcode.SGLAccess(), w.MRs); err != nil {
		return err
	}
	w.Epoch = epoch
	return nil
}

// seekSGE finds message offset off in an SGE list: the index of the SGE
// that holds it and the offset within that SGE (len(sgl) if off is at or
// past the end).
func seekSGE(sgl []qp.SGE, off uint32) (int, uint32) {
	for i, s := range sgl {
		if off < s.Length {
			return i, off
		}
		off -= s.Length
	}
	return len(sgl), 0
}

// gather copies len(dst) payload bytes of w, starting at message offset off.
// It reports false if an MR gave fewer bytes than asked: its memory is no
// longer reachable (an accessor MR whose process is gone or unmapped the
// range), a local protection error.
func gather(w *qp.SendWQE, off uint32, dst []byte) bool {
	if w.WR.Flags&qp.Inline != 0 {
		copy(dst, w.WR.InlineData[off:])
		return true
	}
	ok := true
	i, at := seekSGE(w.WR.SGL, off)
	for ; i < len(w.WR.SGL) && len(dst) > 0; i, at = i+1, 0 {
		s := w.WR.SGL[i]
		n := min(uint32(len(dst)), s.Length-at)
		if w.MRs[i] != nil && w.MRs[i].ReadAt(dst[:n], s.Addr+uint64(at)) != int(n) {
			ok = false
		}
		dst = dst[n:]
	}
	return ok
}

// view returns the n payload bytes of w at message offset off in place, if
// they lie in one SGE of contiguous memory; nil otherwise.
func view(w *qp.SendWQE, off, n uint32) []byte {
	if w.WR.Flags&qp.Inline != 0 {
		return nil
	}
	i, at := seekSGE(w.WR.SGL, off)
	if i == len(w.WR.SGL) || n > w.WR.SGL[i].Length-at || w.MRs[i] == nil {
		return nil
	}
	b, ok := w.MRs[i].View(w.WR.SGL[i].Addr+uint64(at), uint64(n))
	if !ok {
		return nil
	}
	return b
}

// scatter copies src into the SGE list at message offset off. It reports
// false if an MR took fewer bytes than given (see gather).
func scatter(sgl []qp.SGE, mrs []*keys.MR, off uint32, src []byte) bool {
	ok := true
	i, at := seekSGE(sgl, off)
	for ; i < len(sgl) && len(src) > 0; i, at = i+1, 0 {
		s := sgl[i]
		n := min(uint32(len(src)), s.Length-at)
		if mrs[i] != nil && mrs[i].WriteAt(src[:n], s.Addr+uint64(at)) != int(n) {
			ok = false
		}
		src = src[n:]
	}
	return ok
}

// rcOpcode picks the RC opcode of a send or write packet by its position.
func rcOpcode(op qp.Opcode, first, last bool) Opcode {
	if op.Send() {
		switch {
		case first && last:
			switch op {
			case qp.OpSendWithImm:
				return RCSendOnlyImm
			case qp.OpSendWithInv:
				return RCSendOnlyInv
			}
			return RCSendOnly
		case first:
			return RCSendFirst
		case last:
			switch op {
			case qp.OpSendWithImm:
				return RCSendLastImm
			case qp.OpSendWithInv:
				return RCSendLastInv
			}
			return RCSendLast
		}
		return RCSendMiddle
	}
	imm := op == qp.OpRDMAWriteWithImm
	switch {
	case first && last:
		if imm {
			return RCWriteOnlyImm
		}
		return RCWriteOnly
	case first:
		return RCWriteFirst
	case last:
		if imm {
			return RCWriteLastImm
		}
		return RCWriteLast
	}
	return RCWriteMiddle
}

// npkts is the number of packets (and PSNs) a message of n bytes takes.
func npkts(n, mtu uint32) uint32 {
	if n <= mtu {
		return 1 // most messages; and a division is ~10 cycles
	}
	return (n + mtu - 1) / mtu
}

// sendPacketLocked builds and sends the next packet of w on path pa (the
// QP's, from pathLocked) and advances it.
func (c *Conn) sendPacketLocked(w *qp.SendWQE, a *qp.Attr, pa *path) {
	mtu := pa.mtu
	op := w.WR.Opcode
	typ := c.qp.Type()
	first := w.Sent == 0
	rem := w.Length - w.Sent
	n := min(rem, mtu)
	last := n == rem
	var r *route
	if typ.Datagram() {
		ud := c.e.port.Load().routeTo(&w.WR.AH.AV, c.srcPort, true)
		r = &ud
	} else {
		r = &pa.r
	}
	// The PSN follows from the WQE: its first PSN plus the packets before
	// this one (for a READ, the responses already received).
	psn := PSN(w.FirstPSN)
	if !first {
		psn = psn.Add(w.Sent / mtu)
	}
	// Loopback hands the receiver the payload in place (ext), and a SEND
	// or WRITE whose source is contiguous travels as one burst covering
	// several PSNs (nothing on a wire to segment). A burst stands for at
	// most as many packets as the window has room for, as those packets
	// would on a wire: a retry (after an RNR NAK, say) then costs at most a
	// window, as rxe's does, not the whole message. Only for RC: its WQE
	// completes when the ACK comes back, after the receiver has copied; a
	// UC WQE completes as it leaves, and the application may then reuse the
	// memory before the receiver has read it.
	inPlace := r.fast && typ == qp.RC
	span := uint32(1)
	var ext []byte
	if inPlace && rem > mtu && (op.Send() || op == qp.OpRDMAWrite || op == qp.OpRDMAWriteWithImm) {
		room := uint32(c.windowLocked() - psn.Diff(c.comp.psn)) // >= 1: requestLocked checked
		if c.req.limitOn {
			room = min(room, uint32(c.req.limitPSN.Diff(psn))+1)
		}
		if k := min(npkts(rem, mtu), room); k > 1 {
			m := min(rem, k*mtu)
			if v := view(w, w.Sent, m); v != nil {
				n, last, span, ext = m, m == rem, k, v
			}
		}
	}
	var o Opcode
	var payload uint32
	switch {
	case typ.Datagram():
		o, payload = UDSendOnly, n
		if op == qp.OpSendWithImm {
			o = UDSendOnlyImm
		}
	case op == qp.OpRDMARead:
		o, last = RCReadRequest, true
	case op == qp.OpAtomicCmpSwp:
		o, last = RCCompareSwap, true
	case op == qp.OpAtomicFetchAdd:
		o, last = RCFetchAdd, true
	default:
		o, payload = rcOpcode(op, first, last), n
		if typ == qp.UC {
			o |= Opcode(ClassUC)
		}
	}
	info := o.Info()
	hl := info.HdrLen
	var t txPkt
	var b []byte
	if r.fast {
		// startTx's fast path, here: its results come back through
		// memory (they do not fit the registers), and the copy out
		// reads with wide loads what it wrote with narrow stores, a
		// stall per packet.
		t.pb = c.sendBufs.get(c.e)
		b = t.pb.room()
		b = b[:cap(b)]
	} else {
		t, b = c.e.startTx(r, &c.reqTx, c.sendBufs, hl+int(payload)+3)
	}
	// On the loopback fast path the BTH stays unwritten (bare.go).
	bare := t.pb != nil && !c.e.reqHeaders.Load()
	destQP := a.DestQPN
	if typ.Datagram() {
		destQP = w.WR.RemoteQPN
	}
	bth := BTH(b)
	if bare {
		clear(b[BTHLen:hl])
	} else {
		clear(b[:hl])
		bth.Init(o, DefaultPKey, destQP, psn)
	}
	if off := info.Offset(HdrRETH); off != 0 {
		reth := RETH(b[off:])
		if op == qp.OpRDMARead {
			reth.SetVA(w.WR.RemoteAddr + uint64(w.Sent))
			reth.SetDMALen(w.Length - w.Sent)
		} else {
			reth.SetVA(w.WR.RemoteAddr)
			reth.SetDMALen(w.Length)
		}
		reth.SetRKey(w.WR.Rkey)
	}
	if off := info.Offset(HdrAtomicETH); off != 0 {
		ae := AtomicETH(b[off:])
		ae.SetVA(w.WR.RemoteAddr)
		ae.SetRKey(w.WR.Rkey)
		if op == qp.OpAtomicCmpSwp {
			ae.SetSwapAdd(w.WR.Swap)
			ae.SetCompare(w.WR.CompareAdd)
		} else {
			ae.SetSwapAdd(w.WR.CompareAdd)
		}
	}
	if off := info.Offset(HdrImmDt); off != 0 {
		ImmDt(b[off:]).SetImm(w.WR.ImmData)
	}
	if off := info.Offset(HdrIETH); off != 0 {
		IETH(b[off:]).SetRKey(w.WR.InvalidateRkey)
	}
	if off := info.Offset(HdrDETH); off != 0 {
		d := DETH(b[off:])
		qkey := w.WR.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = a.QKey
		}
		d.SetQKey(qkey)
		d.SetSrcQP(c.qp.Num())
	}
	if payload > 0 && ext == nil {
		if inPlace || !r.fast {
			// In place for loopback; on a frame, xmitSpan copies it
			// in as it makes the ICRC.
			ext = view(w, w.Sent, payload)
		}
		if ext == nil && !gather(w, w.Sent, b[hl:hl+int(payload)]) {
			// The source memory is gone (an accessor MR): nothing of
			// this packet leaves; the WQE fails with a local
			// protection error and the QP goes to ERR, flushing the
			// rest, as an HCA's DMA fault does.
			c.e.abortTx(t, c.sendBufs)
			w.State, w.Status = qp.WQEError, cq.LocProtErr
			c.enterErrLocked()
			return
		}
	}
	pad := (4 - payload%4) % 4
	se := last && w.WR.Flags&qp.Solicited != 0
	ackReq := false
	if typ == qp.RC {
		c.req.noAck += int(span)
		if last || c.req.noAck >= c.e.cfg.AckInterval || c.req.limitOn || c.windowEdgeLocked(psn.Add(span)) {
			ackReq = true
			c.req.noAck = 0
		}
	}
	switch {
	case bare:
		// Field by field: a composite literal is built apart and
		// copied in wide moves that stall on its narrow stores.
		var h bareBTH
		h.info, h.psn, h.destQP = info, psn, destQP
		h.ackReq, h.se, h.pad = ackReq, se, uint8(pad)
		ib := hl
		if ext == nil {
			clear(b[hl+int(payload) : hl+int(payload+pad)])
			ib += int(payload + pad)
		}
		c.e.xmitBare(c, r, t.pb, ib, ext, span, &h)
	case ext != nil:
		bth.SetPadCount(uint8(pad))
		bth.SetSE(se)
		bth.SetAckReq(ackReq)
		c.e.xmitSpan(c, r, t, hl, ext, span)
	default:
		bth.SetPadCount(uint8(pad))
		bth.SetSE(se)
		bth.SetAckReq(ackReq)
		clear(b[hl+int(payload) : hl+int(payload+pad)])
		c.e.xmit(c, r, t, hl+int(payload+pad), nil)
	}

	// Advance the WQE and the PSN.
	switch {
	case op == qp.OpRDMARead:
		k := npkts(w.Length-w.Sent, mtu)
		c.req.psn = psn.Add(k)
		w.Sent = w.Length
	case op.Atomic():
		c.req.psn = psn.Add(1)
		w.Sent = w.Length
	default:
		c.req.psn = psn.Add(span)
		w.Sent += n
	}
	if !last {
		return // requestLocked arms the retransmit timer after the batch
	}
	c.qp.SQ.Next++
	if typ != qp.RC {
		w.State, w.Status = qp.WQEDone, cq.Success
		// UC and UD have no responses: the next PSN is "acknowledged".
		c.comp.psn = c.req.psn
		return
	}
	w.State = qp.WQEPending
	if op.ReadOrAtomic() {
		c.req.rdAtomic++
	}
}

// execLocalLocked runs LOCAL_INV, REG_MR and BIND_MW.
func (c *Conn) execLocalLocked(w *qp.SendWQE) {
	kt, pd := c.qp.Keys(), c.qp.PD()
	var err error
	status := cq.LocQPOpErr
	switch w.WR.Opcode {
	case qp.OpLocalInv:
		err = kt.Invalidate(pd, w.WR.InvalidateRkey)
	case qp.OpRegMR:
		r := w.WR.Reg
		switch m := r.Map; {
		case m == nil:
		case r.MR.PD != pd:
			err = keys.ErrPDMismatch
		case m.Acc != nil:
			err = r.MR.MapAccessorPages(m.Acc, m.Addrs, m.PageSize, m.IOVA, m.Length)
		default:
			err = r.MR.MapPages(m.Pages, m.PageSize, m.IOVA, m.Length)
		}
		if err == nil {
			err = kt.FastReg(pd, r.MR, r.Key, r.Access)
		}
	case qp.OpBindMW:
		b := w.WR.Bind
		if b.MW.PD != pd {
			err = keys.ErrPDMismatch
		} else {
			_, err = kt.BindMW(b.MW, b.MR, b.Addr, b.Length, b.Access, b.Key)
		}
		status = cq.MWBindErr
	}
	if err != nil {
		w.State, w.Status = qp.WQEError, status
		return
	}
	w.State, w.Status = qp.WQEDone, cq.Success
}

// onTimeoutLocked handles the retransmit timer.
func (c *Conn) onTimeoutLocked() {
	c.req.timerOn = false
	if c.comp.psn == c.req.maxPSN {
		return // nothing outstanding
	}
	if c.req.rnrWait || c.req.progressed {
		// Waiting out an RNR NAK, or progress since the timer was set.
		c.armTimerLocked()
		return
	}
	c.req.probesSpent = true // a timeout counts: no early probes until progress
	c.req.rtt.one = false    // and its retry is go-back-N, as without probes
	c.count(Timeouts)
	if c.req.retryLeft == 0 {
		c.count(RetryExceededErr)
		c.failOldestLocked(cq.RetryExcErr)
		return
	}
	c.req.retryLeft--
	c.req.needRetry = true
	c.req.retryPSN = c.comp.psn
}

// failOldestLocked completes the oldest outstanding WQE with status; the
// QP moves to ERR when it retires.
func (c *Conn) failOldestLocked(status cq.Status) {
	sq := &c.qp.SQ
	for i := sq.Tail(); i != sq.Head(); i++ {
		w := sq.At(i)
		if w.State == qp.WQEDone || w.State == qp.WQEError {
			continue
		}
		w.State, w.Status = qp.WQEError, status
		if i == sq.Next {
			sq.Next++
		}
		break
	}
	c.retireLocked()
}

// retryLocked restarts sending from the oldest unfinished WQE at the PSN
// the retry asks for (go-back-N), mid-message where needed. rnr says the
// retry follows an RNR NAK: then only the NAKed packet goes until it is
// acknowledged.
func (c *Conn) retryLocked(rnr bool) {
	c.req.needRetry = false
	c.rttRetryLocked()
	probe := c.req.rtt.one
	c.req.rtt.one = false
	sq := &c.qp.SQ
	a := c.qp.AttrLocked()
	mtu := c.pmtu(a)
	start := sq.Next
	for i := sq.Tail(); i != sq.Next; i++ {
		if sq.At(i).State == qp.WQEPending {
			start = i
			break
		}
	}
	if start == sq.Next && (sq.Next == sq.Head() || sq.At(sq.Next).Sent == 0) {
		return // nothing was sent that needs sending again
	}
	c.count(Retransmits)
	if !rnr && !probe {
		c.shrinkWindowLocked()
	}
	w := sq.At(start)
	first := PSN(w.FirstPSN)
	var psn PSN
	switch {
	case w.WR.Opcode == qp.OpRDMARead:
		w.Sent = w.Done
		psn = first.Add(w.Done / mtu)
	case w.WR.Opcode.Atomic():
		w.Sent, psn = 0, first
	default:
		k := resumePacket(c.req.retryPSN, first, w.Length, mtu)
		w.Sent, psn = k*mtu, first.Add(k)
	}
	if (rnr || probe) && !psn.Less(c.comp.psn) {
		// Only the NAKed packet until it is acknowledged. The limit is
		// never behind the acknowledged point: progress clears it, and
		// nothing else would.
		c.req.limitOn, c.req.limitPSN = true, psn
	}
	w.State = qp.WQEPosted
	for i := start + 1; i != sq.Next+1 && i != sq.Head(); i++ {
		x := sq.At(i)
		if x.WR.Opcode.Local() && (x.State == qp.WQEDone || x.State == qp.WQEError) {
			continue
		}
		if x.State == qp.WQEPending || x.Sent > 0 {
			x.State, x.Sent, x.Done = qp.WQEPosted, 0, 0
		}
	}
	c.req.rdAtomic = 0
	sq.Next = start
	c.req.psn = psn
	c.req.retried, c.req.retriedValid = psn, true
	c.req.noAck = 0
	c.req.rnrWait = false
}

// resumePacket is the packet of a SEND or WRITE of length bytes, first
// sent at PSN first, that a retry from PSN retry resumes at: the retry PSN's
// packet, within the message (rvt_restart_sge's position).
func resumePacket(retry, first PSN, length, mtu uint32) uint32 {
	return uint32(min(max(retry.Diff(first), 0), int32(npkts(length, mtu))-1))
}

// checkDrainedLocked raises SQ_DRAINED once the SQD state has no WQE in
// flight.
func (c *Conn) checkDrainedLocked() {
	a := c.qp.AttrLocked()
	if a.State != qp.SQD || c.req.drainedSent {
		return
	}
	sq := &c.qp.SQ
	if sq.Tail() != sq.Next || (sq.Next != sq.Head() && sq.At(sq.Next).Sent != 0) {
		return
	}
	c.req.drainedSent = true
	if a.EnSQDAsyncNotify {
		c.sout.event(Event{Type: EventSQDrained, QPN: c.qp.Num()})
	}
}

// retireLocked completes finished WQEs in order and moves the QP to ERR
// after a failed one.
func (c *Conn) retireLocked() {
	sq := &c.qp.SQ
	for sq.Tail() != sq.Next {
		w := sq.At(sq.Tail())
		if w.State != qp.WQEDone && w.State != qp.WQEError {
			break
		}
		failed := w.State == qp.WQEError
		if w.WR.Opcode.Send() {
			// As rxe's completer: each SEND WQE retired here, whatever
			// its status. Flushed WQEs (flushSendLocked) are not
			// counted, as rxe's flush path does not count them.
			c.count(RDMASends)
		}
		if w.Signaled || failed {
			wc := c.sout.wc(c.qp.SendCQ())
			wc.WRID, wc.Status, wc.Opcode = w.WR.WRID, w.Status, w.WR.Opcode.WCOpcode()
			wc.ByteLen, wc.QPNum = w.Length, c.qp.Num()
		}
		sq.Retire()
		if failed {
			c.enterErrLocked()
			return
		}
	}
}

// enterErrLocked moves the QP to ERR (from the engine, not a modify) and
// flushes.
func (c *Conn) enterErrLocked() {
	a := c.qp.AttrLocked()
	if a.State == qp.Err {
		return
	}
	c.qp.SetStateLocked(qp.Err)
	c.flushSendLocked()
	c.recvTask.Schedule()
}

// flushSendLocked completes every queued send WQE with WR_FLUSH_ERR.
func (c *Conn) flushSendLocked() {
	sq := &c.qp.SQ
	for sq.Tail() != sq.Head() {
		w := sq.At(sq.Tail())
		status := cq.WRFlushErr
		if w.State == qp.WQEError {
			status = w.Status
		}
		*c.sout.wc(c.qp.SendCQ()) = cq.WC{
			WRID: w.WR.WRID, Status: status, Opcode: w.WR.Opcode.WCOpcode(), QPNum: c.qp.Num(),
		}
		sq.Retire()
	}
	sq.Next = sq.Head()
	c.req.rdAtomic = 0
	c.req.needRetry = false
	c.req.rnrWait = false
	c.req.psn = c.req.maxPSN
	c.comp.psn = c.req.maxPSN
}

// requestRetryLocked asks for a go-back-N retry from psn after a NAK or a
// gap in responses, unless a retry from that PSN is already under way.
func (c *Conn) requestRetryLocked(psn PSN) {
	if c.req.retriedValid && c.req.retried == psn {
		return
	}
	c.req.needRetry = true
	c.req.retryPSN = psn
}

// seqNAKRetryLocked retries from psn after a PSN sequence error NAK. A
// NAK for the PSN the last retry restarted from is taken too, once the
// requester has resent that PSN and the one after it: the responder
// repeats its NAK when a go-back-N round still misses the PSN (or the NAK
// was lost), and that round's packets are all dropped without it. A NAK
// before then answers packets sent before the retry: ignored, as before.
func (c *Conn) seqNAKRetryLocked(psn PSN) {
	if c.req.retriedValid && c.req.retried == psn && psn.Add(1).Less(c.req.psn) {
		c.req.retriedValid = false
	}
	c.requestRetryLocked(psn)
}

// creditOKLocked reports whether w may start under end-to-end credits.
func (c *Conn) creditOKLocked(w *qp.SendWQE) bool {
	op := w.WR.Opcode
	if c.req.unlimited || w.Assigned || !(op.Send() || op == qp.OpRDMAWriteWithImm) {
		return true // credits gate first transmissions only
	}
	if PSN(w.SSN).LessEq(PSN(c.req.lsn)) || c.comp.psn == c.req.psn {
		// Within the limit, or a probe: with nothing outstanding no ACK
		// would ever come to raise the limit.
		c.req.creditWait = false
		return true
	}
	if !c.req.creditWait {
		c.req.creditWait = true
		c.count(CreditWaits)
	}
	return false
}

// creditsLocked takes the credit count of an ACK-type AETH: its syndrome
// and MSN.
func (c *Conn) creditsLocked(syn Syndrome, msn uint32) {
	if syn.Type() != AckTypeACK {
		return
	}
	n, ok := syn.Credits().Credits()
	if !ok {
		c.req.unlimited = true
		return
	}
	c.req.unlimited = false
	lsn := (msn + n) & 0xFFFFFF
	if PSN(c.req.lsn).Less(PSN(lsn)) || n == 0 {
		c.req.lsn = lsn
	}
}

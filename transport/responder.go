package transport

import (
	"encoding/binary"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// respState is the responder's state (rxe's qp->resp).
type respState struct {
	epsn    PSN    // expected PSN
	msn     uint32 // message sequence number (24 bits)
	inSend  bool   // between the FIRST and LAST packets of a SEND
	inWrite bool   // between the FIRST and LAST packets of a WRITE
	dropMsg bool   // UC: dropping the rest of a broken message

	wqe     qp.RecvWQE // the receive WQE of the message in progress, with its MRs
	haveWQE bool
	off     uint32 // bytes placed in it

	wmr    *keys.MR // RDMA WRITE in progress
	wva    uint64
	wresid uint32
	wlen   uint32

	faultPSN   PSN  // respReadFault: the READ response PSN that could not be read
	nakSent    bool // a sequence or RNR NAK is out; wait for the expected PSN
	seqNAK     bool // ...and it was a sequence NAK
	oosLast    PSN  // the last out-of-sequence PSN seen since that NAK
	oosCount   int  // out-of-sequence packets since that NAK (or its repeat)
	ackPending bool // coalesced ACK to send at the end of the batch
	ackPSN     PSN
	urgent     bool // this run sent more than ACKs: kick the link at its end

	// READ and atomic results for duplicates, made at the first READ
	// or atomic: a QP that only takes SENDs and WRITEs saves 640 bytes.
	res     *[maxResources]resource
	resNext int

	commEst bool
	lastWQE bool

	directACKs uint64 // ACKs handed over without a packet (ackdirect.go)
}

// maxResources bounds the saved READ/atomic responder resources (the
// device's max_qp_rd_atom).
const maxResources = 16

type resource struct {
	valid       bool
	atomic      bool
	first, last PSN
	va          uint64
	length      uint32
	orig        uint64
}

// respResult is the outcome of a responder step that failed.
type respResult uint8

const (
	respOK        respResult = iota
	respRNR                  // no receive WQE
	respInvalid              // invalid request: opcode sequence, length, alignment, unsupported
	respAccess               // rkey, access or bounds
	respLocalLen             // the receive WQE is too small
	respLocalProt            // the receive WQE's memory is gone
	respInvRkey              // SEND_WITH_INV named a key that cannot be invalidated
	respReadFault            // a READ's memory failed mid-response: NAK at resp.faultPSN
)

// respError says what an RC responder does on each failure (IBTA 9.7.5.2):
// the NAK it sends, the status of the receive WQE in progress (if any), and
// the affiliated event. The responder's QP then goes to ERR.
//
// respLocalProt has no status: no WQE is in progress after it, as
// takeWQELocked completes the WQE whose memory is gone itself (LOC_PROT_ERR),
// for every QP type.
var respError = [...]struct {
	nak    NAKCode
	status cq.Status
	event  EventType
}{
	respInvalid:   {NAKInvalidRequest, cq.RemInvReqErr, EventQPReqErr},
	respAccess:    {NAKRemoteAccessError, cq.RemAccessErr, EventQPAccessErr},
	respLocalLen:  {NAKInvalidRequest, cq.LocLenErr, EventQPReqErr},
	respLocalProt: {nak: NAKRemoteOperationalError, event: EventQPFatal},
	respInvRkey:   {NAKInvalidRequest, cq.RemInvReqErr, EventQPReqErr},
	respReadFault: {NAKRemoteAccessError, cq.RemAccessErr, EventQPAccessErr},
}

// recvBatch bounds the requests one run of the receive task handles.
const recvBatch = 64

// runRecv is the receive task: the responder.
func (c *Conn) runRecv() bool {
	c.recvBufs = stockFor(c.recvTask)
	h := c.e.hold()
	q := c.qp
	q.Lock()
	c.resp.urgent = false
	more := c.respondLocked()
	urgent := c.resp.urgent
	q.Unlock()
	// A run that sent only ACKs lets them wait briefly for the next
	// transmit (the reply the receive completion is about to prompt,
	// typically): that saves a system call on the critical path of a
	// request-response exchange. READ responses, atomic responses and
	// NAKs go at once.
	defer flush(h, !urgent)
	if j := c.joined; j != nil {
		c.endJoin(j)
	} else {
		c.deliver(&c.rout, c.recvTask)
	}
	c.recvBufs = nil // the goroutine's, not the QP's
	c.signalRan()
	return more
}

func (c *Conn) respondLocked() bool {
	a := c.qp.AttrLocked()
	if a.State == qp.Err {
		c.flushRecvLocked()
		return false
	}
	for i := 0; i < recvBatch; i++ {
		pb := c.popReq()
		if pb == nil {
			c.endAckLocked()
			return false
		}
		if !a.State.Allows(qp.ProcessRecvOK) {
			c.e.drop(c, pb.dropReason(DropQPState))
			c.recvBufs.put(c.e, pb)
			continue
		}
		if !c.qp.Type().Datagram() && pb.src != c.pathLocked(a).r.dst.IP {
			c.e.drop(c, pb.dropReason(DropBadSource)) // rxe's check_addr
			c.recvBufs.put(c.e, pb)
			continue
		}
		if pb.leftToResponder() && !c.placeFused(pb, a) {
			c.pend[RcvdPkts]--
			c.e.drop(nil, DropBadICRC)
			c.recvBufs.put(c.e, pb)
			continue
		}
		if a.State == qp.RTR && !c.resp.commEst {
			// Only a packet from the peer establishes communication.
			c.resp.commEst = true
			c.rout.event(Event{Type: EventCommEst, QPN: c.qp.Num()})
		}
		switch c.qp.Type() {
		case qp.RC:
			c.rcRequestLocked(&pb.pkt, a)
		case qp.UC:
			c.ucRequestLocked(&pb.pkt, a)
		default:
			c.udRequestLocked(pb, a)
		}
		c.recvBufs.put(c.e, pb)
		if a.State == qp.Err {
			c.flushAckLocked()
			c.flushRecvLocked()
			return false
		}
	}
	c.endAckLocked()
	return true
}

// flushRecvLocked completes the receive WQE in progress and the queued ones
// with WR_FLUSH_ERR, drops queued requests, and raises LAST_WQE_REACHED
// once for a QP on an SRQ.
func (c *Conn) flushRecvLocked() {
	if c.resp.haveWQE {
		c.recvWC(c.resp.wqe.WRID, cq.WRFlushErr, cq.Recv)
		c.resp.haveWQE = false
	}
	c.qp.FlushRecvLocked(func(wc *cq.WC) { *c.rout.wc(c.qp.RecvCQ()) = *wc })
	c.reqIn.drain(c.e)
	c.reqLocal.drain(c.e)
	c.reqQ.drain(c.e)
	if c.qp.SRQ() != nil && !c.resp.lastWQE {
		c.resp.lastWQE = true
		c.rout.event(Event{Type: EventQPLastWQEReached, QPN: c.qp.Num()})
	}
}

// recvWC queues a receive completion of this QP and returns it for the
// caller to fill in the rest.
func (c *Conn) recvWC(wrid uint64, st cq.Status, op cq.Opcode) *cq.WC {
	wc := c.rout.wc(c.qp.RecvCQ())
	wc.WRID, wc.Status, wc.Opcode, wc.QPNum = wrid, st, op, c.qp.Num()
	return wc
}

// takeWQELocked makes sure a receive WQE is in hand, with its MRs. A WQE
// whose memory is gone (an MR deregistered or invalidated since it was
// posted) is completed here with LocProtErr and not kept, whatever the QP
// type then does with the request.
func (c *Conn) takeWQELocked() respResult {
	if c.resp.haveWQE {
		return respOK
	}
	ok, limit := c.qp.PopRecvLocked(&c.resp.wqe)
	if limit {
		c.rout.event(Event{Type: EventSRQLimitReached, SRQ: c.qp.SRQ(), QPN: c.qp.Num()})
	}
	if !ok {
		return respRNR
	}
	c.resp.haveWQE = true
	c.resp.off = 0
	w := &c.resp.wqe
	if w.Epoch == c.qp.Keys().Epoch() {
		return respOK // checked at post time and no key changed since
	}
	if _, err := qp.CheckSGL(c.qp.Keys(), c.qp.RecvPD(), w.SGL, keys.LocalWrite, w.MRs); err != nil {
		c.recvWC(w.WRID, cq.LocProtErr, cq.Recv)
		c.resp.haveWQE = false
		return respLocalProt
	}
	return respOK
}

// place copies payload into the receive WQE at its current offset, unless
// placed (it is there: placeFused). If the WQE's memory fails (an accessor
// MR) it returns respLocalProt and leaves the WQE in hand for the caller
// to complete.
func (c *Conn) placeLocked(data []byte, placed bool) respResult {
	if uint64(c.resp.off)+uint64(len(data)) > uint64(c.resp.wqe.Length) {
		return respLocalLen
	}
	if !placed && !scatter(c.resp.wqe.SGL, c.resp.wqe.MRs, c.resp.off, data) {
		return respLocalProt
	}
	c.resp.off += uint32(len(data))
	return respOK
}

func (c *Conn) rcRequestLocked(p *Packet, a *qp.Attr) {
	if p.Opcode.Class() != ClassRC || !p.Info.Has(FlagRequest) {
		c.e.drop(c, DropQPType)
		return
	}
	switch d := p.PSN.Diff(c.resp.epsn); {
	case d > 0:
		c.count(OutOfSeqRequest)
		c.seqErrorLocked(p.PSN)
		return
	case d < 0:
		c.count(DuplicateRequest)
		c.duplicateLocked(p, a)
		return
	}
	c.resp.nakSent, c.resp.seqNAK = false, false
	r := c.rcExecuteLocked(p, a)
	switch r {
	case respOK:
		if p.AckReq {
			if c.resp.ackPending {
				c.count(AckDeferred)
			}
			c.resp.ackPending, c.resp.ackPSN = true, p.LastPSN()
		}
	case respRNR:
		c.count(SendRNRErr)
		c.resp.nakSent, c.resp.seqNAK = true, false
		c.sendAckLocked(RNRNAKSyndrome(RNRTimerCode(a.MinRNRTimer)), p.PSN)
	default:
		e := respError[r]
		psn := p.PSN
		if r == respReadFault {
			psn = c.resp.faultPSN
		}
		c.sendAckLocked(NAKSyndrome(e.nak), psn)
		if c.resp.haveWQE {
			c.recvWC(c.resp.wqe.WRID, e.status, cq.Recv)
			c.resp.haveWQE = false
		}
		c.rout.event(Event{Type: e.event, QPN: c.qp.Num()})
		c.qp.SetStateLocked(qp.Err)
		c.sendTask.Schedule() // the requester side flushes too
	}
}

// placeFused checks the ICRC of a packet that receiveFrame left to the
// responder (pktBuf.leftToResponder: an RC SEND's or WRITE's middle or
// last packet), and reports whether it is good; respondLocked calls it
// before the packet can do anything (COMM_EST included). If the packet is
// the next one of the message in progress, it is certain to be placed
// where that message stands (rcExecuteLocked takes it), so its payload is
// copied there as the ICRC is checked, in one pass, and marked placed. A
// bad ICRC then leaves nothing done but those bytes, in the message's own
// range of the WRITE's memory or the receive WQE's buffers, whose contents
// are undefined until the message completes, and which the good packet
// overwrites when it is sent again: the requester resends from this PSN,
// as for any lost packet. Anything else is checked whole first, as on
// every other path.
func (c *Conn) placeFused(pb *pktBuf, a *qp.Attr) bool {
	p, icrc := &pb.pkt, pb.icrc
	pb.icrc = nil
	if dst := c.fusedDest(p, a); dst != nil {
		p.placed = CheckICRCCopy(icrc, len(icrc)-ICRCLen-len(dst), dst)
		return p.placed
	}
	return CheckICRC(icrc)
}

// fusedDest returns where rcExecuteLocked would place p's payload, if p is
// a middle or last packet of the RC SEND or WRITE in progress, next in
// sequence, of a length it accepts and with no pad (which the ICRC covers
// and the payload's place has no room for), whose place is one piece of
// memory; else nil.
func (c *Conn) fusedDest(p *Packet, a *qp.Attr) []byte {
	n, mtu := p.PayloadLen, c.pmtu(a)
	last := p.Opcode == RCWriteLast || p.Opcode == RCSendLast
	if c.qp.Type() != qp.RC || p.PSN != c.resp.epsn || p.PSNs() != 1 || p.PadCount != 0 ||
		n == 0 || n > mtu || !last && n != mtu {
		return nil
	}
	switch p.Opcode {
	case RCWriteMiddle, RCWriteLast:
		if !c.resp.inWrite || c.resp.wmr == nil || a.AccessFlags&keys.RemoteWrite == 0 ||
			n > c.resp.wresid || last && n != c.resp.wresid {
			return nil
		}
		if b, ok := c.resp.wmr.View(c.resp.wva, uint64(n)); ok {
			return b
		}
	case RCSendMiddle, RCSendLast:
		if !c.resp.inSend || !c.resp.haveWQE || uint64(c.resp.off)+uint64(n) > uint64(c.resp.wqe.Length) {
			return nil
		}
		sgl := c.resp.wqe.SGL
		i, at := seekSGE(sgl, c.resp.off)
		if i < len(sgl) && n <= sgl[i].Length-at && c.resp.wqe.MRs[i] != nil {
			if b, ok := c.resp.wqe.MRs[i].View(sgl[i].Addr+uint64(at), uint64(n)); ok {
				return b
			}
		}
	}
	return nil
}

// checkSequence checks the opcode against the message in progress.
func (c *Conn) checkSequence(info *OpInfo) bool {
	switch {
	case c.resp.inSend:
		return info.Has(FlagSend) && info.HasAny(FlagMiddle|FlagLast)
	case c.resp.inWrite:
		return info.Has(FlagWrite) && info.HasAny(FlagMiddle|FlagLast)
	}
	return !info.HasAny(FlagMiddle | FlagLast)
}

// rcExecuteLocked runs one in-sequence RC request.
func (c *Conn) rcExecuteLocked(p *Packet, a *qp.Attr) respResult {
	info := p.Info
	if !c.checkSequence(info) {
		return respInvalid
	}
	switch {
	case info.Has(FlagWrite) && a.AccessFlags&keys.RemoteWrite == 0,
		info.Has(FlagRead) && a.AccessFlags&keys.RemoteRead == 0,
		info.Has(FlagAtomic) && a.AccessFlags&keys.RemoteAtomic == 0:
		return respInvalid
	}
	mtu := c.pmtu(a)
	if p.PayloadLen > mtu*p.PSNs() || info.HasAny(FlagFirst|FlagMiddle) && p.PayloadLen != mtu*p.PSNs() {
		return respInvalid
	}
	switch {
	case info.Has(FlagSend):
		return c.sendLocked(p)
	case info.Has(FlagWrite):
		return c.writeLocked(p)
	case info.Has(FlagRead):
		return c.readLocked(p, a)
	default:
		return c.atomicLocked(p)
	}
}

func (c *Conn) sendLocked(p *Packet) respResult {
	info := p.Info
	if r := c.takeWQELocked(); r != respOK {
		return r
	}
	if r := c.placeLocked(p.Payload(), p.placed); r != respOK {
		if r == respLocalProt {
			// As takeWQELocked for memory gone: the WQE completes
			// here (respLocalProt carries no status).
			c.recvWC(c.resp.wqe.WRID, cq.LocProtErr, cq.Recv)
			c.resp.haveWQE = false
		}
		return r
	}
	c.resp.epsn = p.PSN.Add(p.PSNs())
	if !info.Has(FlagEnd) {
		c.resp.inSend = true
		return respOK
	}
	c.resp.inSend = false
	var rkey uint32
	if info.Has(FlagInv) {
		rkey = p.IETH().RKey()
		if err := c.qp.Keys().Invalidate(c.qp.PD(), rkey); err != nil {
			return respInvRkey
		}
	}
	c.resp.haveWQE = false
	c.resp.msn = (c.resp.msn + 1) & 0xFFFFFF
	c.count(RDMARecvs)
	wc := c.recvWC(c.resp.wqe.WRID, cq.Success, cq.Recv)
	wc.ByteLen, wc.SrcQP, wc.Solicited = c.resp.off, c.qp.AttrLocked().DestQPN, p.SE
	if info.Has(FlagImm) {
		wc.Flags |= cq.WithImm
		wc.ImmData = p.ImmDt().Imm()
	}
	if info.Has(FlagInv) {
		wc.Flags |= cq.WithInv
		wc.InvalidatedRkey = rkey
	}
	return respOK
}

func (c *Conn) writeLocked(p *Packet) respResult {
	info := p.Info
	if info.Has(FlagStart) {
		mr, va, n, ok := c.rethMRLocked(p, keys.RemoteWrite)
		if !ok {
			return respAccess
		}
		c.resp.wmr, c.resp.wva, c.resp.wresid, c.resp.wlen = mr, va, n, n
	}
	n := p.PayloadLen
	if n > c.resp.wresid || info.Has(FlagEnd) && n != c.resp.wresid {
		return respInvalid
	}
	if info.Has(FlagRecvWQE) {
		// WRITE with immediate consumes a receive WQE at its last packet:
		// take it before placing data, so an RNR NAK leaves nothing half
		// done.
		if r := c.takeWQELocked(); r != respOK {
			return r
		}
	}
	if n > 0 {
		if !p.placed && c.resp.wmr.WriteAt(p.Payload(), c.resp.wva) != int(n) {
			return respAccess // the region's memory failed (memfault.go)
		}
		c.resp.wva += uint64(n)
		c.resp.wresid -= n
	}
	c.resp.epsn = p.PSN.Add(p.PSNs())
	if !info.Has(FlagEnd) {
		c.resp.inWrite = true
		return respOK
	}
	c.resp.inWrite = false
	c.resp.msn = (c.resp.msn + 1) & 0xFFFFFF
	if info.Has(FlagImm) {
		c.resp.haveWQE = false
		wc := c.recvWC(c.resp.wqe.WRID, cq.Success, cq.RecvRDMAWithImm)
		wc.ByteLen, wc.SrcQP, wc.Solicited = c.resp.wlen, c.qp.AttrLocked().DestQPN, p.SE
		wc.Flags, wc.ImmData = cq.WithImm, p.ImmDt().Imm()
	}
	return respOK
}

func (c *Conn) newResource() *resource {
	if c.resp.res == nil {
		c.resp.res = new([maxResources]resource)
	}
	r := &c.resp.res[c.resp.resNext]
	c.resp.resNext = (c.resp.resNext + 1) % len(c.resp.res)
	return r
}

// rethMRLocked checks the R_Key and range of p's RETH for access and
// returns the MR (nil for a zero-length request, which touches no memory),
// the address and the length; ok is false if the check fails.
func (c *Conn) rethMRLocked(p *Packet, access keys.Access) (mr *keys.MR, va uint64, n uint32, ok bool) {
	reth := p.RETH()
	va, n = reth.VA(), reth.DMALen()
	if n == 0 {
		return nil, va, 0, true
	}
	mr, err := c.qp.Keys().CheckRemote(c.qp.PD(), reth.RKey(), va, n, access)
	return mr, va, n, err == nil
}

func (c *Conn) readLocked(p *Packet, a *qp.Attr) respResult {
	mr, va, n, ok := c.rethMRLocked(p, keys.RemoteRead)
	if !ok {
		return respAccess
	}
	k := npkts(n, c.pmtu(a))
	res := c.newResource()
	*res = resource{valid: true, first: p.PSN, last: p.PSN.Add(k - 1), va: va, length: n}
	c.resp.epsn = p.PSN.Add(k)
	c.resp.msn = (c.resp.msn + 1) & 0xFFFFFF
	c.flushAckLocked()
	if sent, ok := c.sendReadResponsesLocked(p.PSN, mr, va, n, a); !ok {
		c.resp.faultPSN = p.PSN.Add(sent)
		return respReadFault
	}
	return respOK
}

func (c *Conn) atomicLocked(p *Packet) respResult {
	ae := p.AtomicETH()
	va := ae.VA()
	if va%8 != 0 {
		return respInvalid
	}
	mr, err := c.qp.Keys().CheckRemote(c.qp.PD(), ae.RKey(), va, 8, keys.RemoteAtomic)
	if err != nil {
		return respAccess
	}
	// The engine's lock makes the read-modify-write atomic against the
	// device's other atomics (IBV_ATOMIC_HCA), also on memory reached
	// through an accessor, which the CPU cannot update atomically.
	var orig uint64
	var ok bool
	cmp, swapAdd := ae.Compare(), ae.SwapAdd()
	c.e.atomicMu.Lock()
	if m := mr.Word(va); m != nil {
		orig, ok = binary.NativeEndian.Uint64(m), true
		if p.Opcode != RCCompareSwap {
			binary.NativeEndian.PutUint64(m, orig+swapAdd)
		} else if orig == cmp {
			binary.NativeEndian.PutUint64(m, swapAdd)
		}
	} else if p.Opcode == RCCompareSwap {
		orig, ok = mr.Atomic64(va, func(old uint64) (uint64, bool) { return swapAdd, old == cmp })
	} else {
		orig, ok = mr.Atomic64(va, func(old uint64) (uint64, bool) { return old + swapAdd, true })
	}
	c.e.atomicMu.Unlock()
	if !ok {
		return respAccess
	}
	res := c.newResource()
	*res = resource{valid: true, atomic: true, first: p.PSN, last: p.PSN, va: va, orig: orig}
	c.resp.epsn = p.PSN.Add(1)
	c.resp.msn = (c.resp.msn + 1) & 0xFFFFFF
	c.flushAckLocked()
	c.sendAtomicAckLocked(p.PSN, orig)
	return respOK
}

// duplicateLocked answers a request whose PSN is before the expected one
// (IBTA 9.7.5.1.1): SENDs and WRITEs are acknowledged again, READs are
// executed again from the saved resource, atomics answered from the saved
// result without executing them twice.
func (c *Conn) duplicateLocked(p *Packet, a *qp.Attr) {
	info := p.Info
	c.flushAckLocked()
	switch {
	case info.HasAny(FlagSend | FlagWrite):
		c.sendAckLocked(c.ackSyndrome(), c.resp.epsn.Sub(1))
	case info.Has(FlagRead):
		res := c.findResource(p.PSN, false)
		if res == nil {
			return
		}
		reth := p.RETH()
		va, n := reth.VA(), reth.DMALen()
		if va < res.va || uint64(va)+uint64(n) > res.va+uint64(res.length) {
			return
		}
		var mr *keys.MR
		if n > 0 {
			var err error
			mr, err = c.qp.Keys().CheckRemote(c.qp.PD(), reth.RKey(), va, n, keys.RemoteRead)
			if err != nil {
				return
			}
		}
		// A memory fault here sends nothing more: the requester
		// times out and asks again, or gives up.
		c.sendReadResponsesLocked(p.PSN, mr, va, n, a)
	case info.Has(FlagAtomic):
		if res := c.findResource(p.PSN, true); res != nil && res.first == p.PSN {
			c.sendAtomicAckLocked(p.PSN, res.orig)
		}
	}
}

func (c *Conn) findResource(psn PSN, atomic bool) *resource {
	if c.resp.res == nil {
		return nil
	}
	for i := range c.resp.res {
		r := &c.resp.res[i]
		if r.valid && r.atomic == atomic && r.first.LessEq(psn) && psn.LessEq(r.last) {
			return r
		}
	}
	return nil
}

// ackSyndrome is the syndrome of a positive ACK: the credit count of free
// receive WQEs, or "invalid" (unlimited) for a QP on an SRQ.
func (c *Conn) ackSyndrome() Syndrome {
	if c.qp.SRQ() != nil {
		return ACKSyndrome(CreditInvalid)
	}
	return ACKSyndrome(CreditCodeFor(uint32(c.qp.RecvLenLocked())))
}

func (c *Conn) flushAckLocked() {
	if !c.resp.ackPending {
		return
	}
	c.resp.ackPending = false
	c.sendAckLocked(c.ackSyndrome(), c.resp.ackPSN)
}

// respHeaderLocked starts a response on route r (see Engine.startTx) and
// writes the BTH of response opcode o with PSN psn, and its AETH (if o
// carries one) with syndrome syn and the current MSN; payload bounds the
// bytes that follow the headers (with the pad: at most payload+3). It
// returns the packet, its bytes from the BTH on, and o's entry.
func (c *Conn) respHeaderLocked(r *route, o Opcode, psn PSN, syn Syndrome, a *qp.Attr, payload uint32) (txPkt, []byte, *OpInfo) {
	if o != RCAck || syn.Type() != AckTypeACK {
		// A READ or atomic response or a NAK: the requester waits on it,
		// so this run's batch is flushed at once (see runRecv).
		c.resp.urgent = true
	}
	info := o.Info()
	t, b := c.e.startTx(r, &c.respTx, c.recvBufs, info.HdrLen+int(payload)+3)
	BTH(b).Init(o, DefaultPKey, a.DestQPN, psn)
	if off := info.Offset(HdrAETH); off != 0 {
		aeth := AETH(b[off:])
		aeth.SetSyndrome(syn)
		aeth.SetMSN(c.resp.msn)
	}
	return t, b, info
}

// sendAckLocked sends an ACK or NAK with the current MSN.
func (c *Conn) sendAckLocked(syn Syndrome, psn PSN) {
	if syn.Type() != AckTypeACK {
		c.flushAckLocked()
	}
	a := c.qp.AttrLocked()
	r := &c.pathLocked(a).r
	t, _, info := c.respHeaderLocked(r, RCAck, psn, syn, a, 0)
	c.e.xmit(c, r, t, info.HdrLen, nil)
}

func (c *Conn) sendAtomicAckLocked(psn PSN, orig uint64) {
	a := c.qp.AttrLocked()
	r := &c.pathLocked(a).r
	t, b, info := c.respHeaderLocked(r, RCAtomicAck, psn, c.ackSyndrome(), a, 0)
	AtomicAckETH(b[info.Offset(HdrAtomicAckETH):]).SetOrigData(orig)
	c.e.xmit(c, r, t, info.HdrLen, nil)
}

// sendReadResponsesLocked sends the responses to a READ of n bytes at va,
// the first with PSN psn. If the memory fails (an accessor MR) it stops
// and returns false with the number of responses sent.
func (c *Conn) sendReadResponsesLocked(psn PSN, mr *keys.MR, va uint64, n uint32, a *qp.Attr) (uint32, bool) {
	mtu := c.pmtu(a)
	r := &c.pathLocked(a).r
	k := npkts(n, mtu)
	syn := c.ackSyndrome()
	if r.fast && k > 1 {
		// Loopback: one burst covering all k response PSNs.
		if ext, ok := mr.View(va, uint64(n)); ok {
			t, b, info := c.respHeaderLocked(r, RCReadResponseOnly, psn, syn, a, n)
			BTH(b).SetPadCount(uint8((4 - n%4) % 4))
			c.e.xmitSpan(c, r, t, info.HdrLen, ext, k)
			return k, true
		}
	}
	var off uint32
	for i := uint32(0); i < k; i++ {
		var o Opcode
		switch {
		case k == 1:
			o = RCReadResponseOnly
		case i == 0:
			o = RCReadResponseFirst
		case i == k-1:
			o = RCReadResponseLast
		default:
			o = RCReadResponseMiddle
		}
		m := min(mtu, n-off)
		t, b, info := c.respHeaderLocked(r, o, psn.Add(i), syn, a, m)
		hl := info.HdrLen
		pad := (4 - m%4) % 4
		BTH(b).SetPadCount(uint8(pad))
		var ext []byte
		if m > 0 {
			// In place for loopback; on a frame, copied in with the
			// ICRC (xmitSpan).
			ext, _ = mr.View(va+uint64(off), uint64(m))
		}
		if ext != nil {
			c.e.xmit(c, r, t, hl, ext)
		} else {
			if m > 0 && mr.ReadAt(b[hl:hl+int(m)], va+uint64(off)) != int(m) {
				c.e.abortTx(t, c.recvBufs)
				return i, false
			}
			clear(b[hl+int(m) : hl+int(m+pad)])
			c.e.xmit(c, r, t, hl+int(m+pad), nil)
		}
		off += m
	}
	return k, true
}

// ucRequestLocked runs the UC responder: no ACKs, and a lost packet drops
// the rest of its message silently (IBTA 9.7.5.1).
func (c *Conn) ucRequestLocked(p *Packet, a *qp.Attr) {
	info := p.Info
	if p.Opcode.Class() != ClassUC {
		c.e.drop(c, DropQPType)
		return
	}
	if p.PSN != c.resp.epsn || c.resp.dropMsg {
		// A gap (or a message already broken): abandon the message in
		// progress; its receive WQE stays for the next one.
		if p.PSN != c.resp.epsn {
			c.count(OutOfSeqRequest)
		}
		c.resp.inSend, c.resp.inWrite, c.resp.off = false, false, 0
		c.resp.dropMsg = !info.Has(FlagStart)
		c.resp.epsn = p.PSN
		if c.resp.dropMsg {
			c.resp.epsn = p.PSN.Add(p.PSNs())
			return
		}
	}
	r := c.rcExecuteLocked(p, a)
	if r == respOK {
		return
	}
	// UC drops what it cannot take; the QP stays up.
	c.resp.epsn = p.PSN.Add(p.PSNs())
	c.resp.inSend, c.resp.inWrite, c.resp.off = false, false, 0
	c.resp.dropMsg = !info.Has(FlagEnd)
	if r == respRNR {
		c.count(RecvWQEMissing)
	}
}

// udRequestLocked runs the UD responder: Q_Key check, the 40-byte GRH
// area, then the payload.
func (c *Conn) udRequestLocked(pb *pktBuf, a *qp.Attr) {
	p := &pb.pkt
	if p.Opcode.Class() != ClassUD {
		c.e.drop(c, DropQPType)
		return
	}
	deth := p.DETH()
	if deth.QKey() != a.QKey {
		c.e.drop(c, DropBadQKey)
		return
	}
	if r := c.takeWQELocked(); r != respOK {
		// No WQE, or one whose memory was gone (takeWQELocked completed
		// it): the datagram is dropped.
		if r == respRNR {
			c.count(RecvWQEMissing)
		}
		return
	}
	c.resp.haveWQE = false
	var grh [40]byte
	if pb.v6 {
		copy(grh[:], pb.ipHdr)
	} else {
		copy(grh[20:], pb.ipHdr)
	}
	st := cq.Success
	r := c.placeLocked(grh[:], false)
	if r == respOK {
		r = c.placeLocked(p.Payload(), false)
	}
	switch r {
	case respOK:
	case respLocalProt:
		st = cq.LocProtErr // the WQE's memory failed (an accessor MR)
	default:
		st = cq.LocLenErr
	}
	wc := c.recvWC(c.resp.wqe.WRID, st, cq.Recv)
	wc.SrcQP, wc.Flags, wc.Solicited, wc.ByteLen = deth.SrcQP(), cq.GRH, p.SE, 40+p.PayloadLen
	if st != cq.Success {
		return
	}
	if p.Info.Has(FlagImm) {
		wc.Flags |= cq.WithImm
		wc.ImmData = p.ImmDt().Imm()
	}
	c.count(RDMARecvs)
}

// seqNAKRepeat is how many out-of-sequence packets the responder drops
// after a sequence NAK before it sends the NAK again, in case it was lost.
// It is above one run of a requester's batch (sendBatch) so that packets
// already in flight when the requester went back rarely trigger it.
const seqNAKRepeat = 2 * sendBatch

// seqErrorLocked answers an out-of-sequence request (PSN psn, beyond the
// expected one) with a PSN sequence error NAK for the expected PSN: once
// per gap, as rxe, and again once per go-back-N round that still misses
// the expected PSN. A round shows itself by its PSNs going back (psn not
// beyond the last out-of-sequence PSN): the requester went back, and what
// it resent first was lost too. Without the repeat only the requester's
// retransmit timer would recover. The NAK is sent again also after
// seqNAKRepeat dropped packets, in case the NAK itself was lost. Both
// speak go-back-N as before: a requester that ignores the repeat (rxe
// does while its retry is under way) loses nothing.
func (c *Conn) seqErrorLocked(psn PSN) {
	r := &c.resp
	switch {
	case !r.nakSent:
	case !r.seqNAK:
		return // waiting out an RNR NAK: the requester resends its PSN
	case !r.oosLast.Less(psn) || r.oosCount+1 >= seqNAKRepeat:
		c.count(SeqNAKRepeats)
	default:
		r.oosCount++
		r.oosLast = psn
		return
	}
	r.nakSent, r.seqNAK, r.oosLast, r.oosCount = true, true, psn, 0
	c.sendAckLocked(NAKSyndrome(NAKPSNSeqError), r.epsn)
}

package transport

import (
	"encoding/binary"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
)

// compState is the completer's state (rxe's qp->comp).
type compState struct {
	psn PSN // oldest PSN not yet acknowledged
}

// completeBatch bounds the responses one run of the send task handles.
const completeBatch = 256

// completeLocked handles queued ACKs, NAKs and responses.
func (c *Conn) completeLocked() bool {
	for i := 0; i < completeBatch; i++ {
		pb := c.popResp()
		if pb == nil {
			c.retireLocked()
			return false
		}
		c.responseLocked(pb)
		c.sendBufs.put(c.e, pb)
	}
	c.retireLocked()
	return true
}

func (c *Conn) responseLocked(pb *pktBuf) {
	p := &pb.pkt
	a := c.qp.AttrLocked()
	if c.qp.Type() != qp.RC || p.Opcode.Class() != ClassRC {
		c.e.drop(c, DropQPType)
		return
	}
	if !a.State.Allows(qp.ProcessSendOK) {
		c.e.drop(c, DropQPState)
		return
	}
	if pb.src != c.pathLocked(a).r.dst.IP {
		c.e.drop(c, DropBadSource)
		return
	}
	if !p.PSN.Less(c.req.maxPSN) || p.PSN.Less(c.comp.psn) && p.Opcode == RCAck && p.AETH().Syndrome().Type() != AckTypeACK {
		// A response to a PSN never sent (or a stale NAK): a ghost.
		c.count(GhostAcks)
		return
	}
	if aeth := p.AETH(); aeth != nil {
		c.creditsLocked(aeth.Syndrome(), aeth.MSN())
	}
	switch {
	case p.Info.Has(FlagRead):
		c.readResponseLocked(p, a)
	case p.Opcode == RCAtomicAck:
		c.atomicAckLocked(p)
	case p.Opcode == RCAck:
		c.ackLocked(p, a)
	}
}

// progressLocked notes forward progress: the retry counters reload and the
// retransmit deadline moves.
func (c *Conn) progressLocked(psn PSN) {
	if !c.comp.psn.Less(psn) {
		return
	}
	c.growWindowLocked(psn.Diff(c.comp.psn))
	if c.req.rtt.on {
		c.rttAckedLocked(psn)
	}
	c.comp.psn = psn
	c.req.retriedValid = false
	c.req.limitOn = false
	if c.req.rnrWait && c.req.retryPSN.Less(psn) {
		// The RNR-NAKed packet was accepted after all (the NAK answered
		// an older copy, reordered or delayed): the wait is over, and a
		// retry from the NAKed PSN would resend what is acknowledged.
		c.req.rnrWait = false
	}
	c.req.progressed = true
	c.req.probeShift, c.req.probesSpent, c.req.stalled = 0, false, 0
	a := c.qp.AttrLocked()
	c.req.retryLeft = a.RetryCnt
	c.req.rnrLeft = a.RNRRetry
	if c.comp.psn != c.req.maxPSN {
		c.armTimerLocked()
	}
	if c.e.probing() {
		c.probeProgressLocked()
	}
}

// ackBeforeLocked acknowledges every packet before psn: SEND and WRITE WQEs
// that end before it complete, including ones a retry had rewound past
// (the responder got them the first time; rdmavt's reset_psn). A READ or
// atomic WQE that started before psn and has not had its response is an
// implied NAK: it is retried, and false is returned.
func (c *Conn) ackBeforeLocked(psn PSN) bool {
	sq := &c.qp.SQ
	i := sq.Tail()
	for ; i != sq.Head(); i++ {
		w := sq.At(i)
		if w.State == qp.WQEDone || w.State == qp.WQEError {
			continue
		}
		if !w.Assigned {
			break
		}
		if w.WR.Opcode.ReadOrAtomic() {
			// Responses for this READ or atomic are still due: the
			// acknowledged point cannot pass the next one.
			want := PSN(w.FirstPSN).Add(w.Done / c.pmtu(c.qp.AttrLocked()))
			if PSN(w.LastPSN).Less(psn) {
				// Acknowledged past a READ or atomic whose response
				// never came: an implied NAK; ask again.
				c.count(CompleterRetryErr)
				c.progressLocked(want)
				c.requestRetryLocked(want)
				return false
			}
			if want.Less(psn) {
				psn = want
			}
			break
		}
		if !PSN(w.LastPSN).Less(psn) {
			break
		}
		if int32(i-sq.Next) >= 0 {
			sq.Next = i + 1 // a WQE a retry had rewound past
		}
		w.State, w.Status = qp.WQEDone, cq.Success
	}
	c.progressLocked(psn)
	if c.req.psn.Less(psn) {
		// The ACK is past where a retry rewound the requester to: go
		// forward to the first unacknowledged packet.
		c.fastForwardLocked(i, psn)
	}
	return true
}

// fastForwardLocked moves the requester to PSN psn, which falls in the WQE
// at index i (or at its start).
func (c *Conn) fastForwardLocked(i uint32, psn PSN) {
	sq := &c.qp.SQ
	if int32(i-sq.Next) > 0 {
		sq.Next = i
	}
	c.req.psn = psn
	c.req.noAck = 0
	if i == sq.Head() {
		return
	}
	w := sq.At(i)
	if !w.Assigned || w.State != qp.WQEPosted || !PSN(w.FirstPSN).Less(psn) {
		return
	}
	switch {
	case w.WR.Opcode == qp.OpRDMARead:
		w.Sent = w.Done // psn is its next expected response
	case !w.WR.Opcode.Atomic():
		w.Sent = uint32(psn.Diff(PSN(w.FirstPSN))) * c.pmtu(c.qp.AttrLocked())
	}
}

// oldestPendingLocked returns the oldest WQE awaiting a response.
func (c *Conn) oldestPendingLocked() *qp.SendWQE {
	sq := &c.qp.SQ
	for i := sq.Tail(); i != sq.Next; i++ {
		if w := sq.At(i); w.State == qp.WQEPending {
			return w
		}
	}
	return nil
}

// nakStatus maps NAK codes to the requester's completion status.
var nakStatus = map[NAKCode]cq.Status{
	NAKInvalidRequest:         cq.RemInvReqErr,
	NAKRemoteAccessError:      cq.RemAccessErr,
	NAKRemoteOperationalError: cq.RemOpErr,
	NAKInvalidRDRequest:       cq.RemInvRdReqErr,
}

func (c *Conn) ackLocked(p *Packet, a *qp.Attr) {
	syn := p.AETH().Syndrome()
	switch syn.Type() {
	case AckTypeACK:
		c.ackBeforeLocked(p.LastPSN().Add(1))
	case AckTypeRNRNAK:
		c.count(RcvdRNRErr)
		if !c.ackBeforeLocked(p.PSN) || c.req.rnrWait {
			return
		}
		// The responder answered: the transport retry count reloads; only
		// the RNR count runs down.
		c.req.retryLeft = a.RetryCnt
		if a.RNRRetry != 7 {
			if c.req.rnrLeft == 0 {
				c.count(RNRRetryExceededErr)
				c.failOldestLocked(cq.RNRRetryExcErr)
				return
			}
			c.req.rnrLeft--
		}
		c.req.rnrWait = true
		c.req.retryPSN = p.PSN
		c.startRNRTimer(syn.RNRTimer().Duration())
	case AckTypeNAK:
		code := syn.NAKCode()
		if code == NAKPSNSeqError {
			c.count(RcvdSeqErr)
			if !c.ackBeforeLocked(p.PSN) || c.req.rnrWait {
				return
			}
			c.seqNAKRetryLocked(p.PSN)
			return
		}
		c.ackBeforeLocked(p.PSN)
		status, ok := nakStatus[code]
		if !ok {
			status = cq.BadRespErr
		}
		c.failOldestLocked(status)
	default:
		c.failOldestLocked(cq.BadRespErr)
	}
}

func (c *Conn) readResponseLocked(p *Packet, a *qp.Attr) {
	if !c.ackBeforeLocked(p.PSN) {
		return
	}
	w := c.oldestPendingLocked()
	mtu := c.pmtu(a)
	if w == nil || w.WR.Opcode != qp.OpRDMARead {
		c.count(GhostAcks)
		return
	}
	want := PSN(w.FirstPSN).Add(w.Done / mtu)
	if d := p.PSN.Diff(want); d != 0 {
		if d > 0 {
			// Lost responses: ask again from the first missing one.
			c.count(CompleterRetryErr)
			c.requestRetryLocked(want)
		}
		return
	}
	n := p.PayloadLen
	info := p.Info
	switch {
	case info.HasAny(FlagFirst|FlagMiddle) && n != mtu,
		info.Has(FlagEnd) && w.Done+n != w.Length,
		w.Done+n > w.Length:
		c.failOldestLocked(cq.BadRespErr)
		return
	}
	if !scatter(w.WR.SGL, w.MRs, w.Done, p.Payload()) {
		c.failOldestLocked(cq.LocProtErr) // the READ's memory is gone
		return
	}
	w.Done += n
	c.progressLocked(p.LastPSN().Add(1))
	if info.Has(FlagEnd) {
		w.State, w.Status = qp.WQEDone, cq.Success
		c.req.rdAtomic--
	}
}

func (c *Conn) atomicAckLocked(p *Packet) {
	if !c.ackBeforeLocked(p.PSN) {
		return
	}
	w := c.oldestPendingLocked()
	if w == nil || !w.WR.Opcode.Atomic() || PSN(w.FirstPSN) != p.PSN {
		c.count(GhostAcks)
		return
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH().OrigData())
	if !scatter(w.WR.SGL, w.MRs, 0, orig[:]) {
		c.failOldestLocked(cq.LocProtErr)
		return
	}
	w.Done = 8
	w.State, w.Status = qp.WQEDone, cq.Success
	c.req.rdAtomic--
	c.progressLocked(p.PSN.Add(1))
}

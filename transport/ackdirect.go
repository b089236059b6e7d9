package transport

import (
	"net/netip"

	"github.com/softverbs/softverbs/qp"
)

// The loopback ACK without a packet (issue 19).
//
// When both QPs of an RC connection are on this device, the ACK that ends
// a responder's batch need not be built, queued, parsed and taken by the
// requester's send task in a batch of its own: the responder's batch does
// the requester's completer work itself (task.Join), with what the ACK
// would have said (acknowledged up to its PSN, the MSN, the credits), and
// the send completions are pushed at the end of the responder's batch,
// after its receive completions, as they would have been a task later.
// That is one task hop, two QP-lock and CQ-lock round trips of the three
// a message took, and a packet buffer fewer per message. Each QP's
// completions stay in its own outbox, and the CQ handlers and events they
// make due run in a batch of that QP's own task (endJoin): a handler may
// destroy or drain any QP but the one whose batch runs it.
//
// Only a positive ACK at the end of a batch goes this way, and only when
// nothing else waits for the requester's completer (its queue is empty:
// it would take what is queued first) and the ACK would pass every check
// the completer makes of a packet before it acts on it (the QP type and
// state, the source address, the PSN below the ghost limit). Everything
// else (NAKs of every kind, duplicate ACKs, READ and atomic responses, an
// ACK flushed mid-batch before one of those, an ACK the completer would
// drop, a requester busy or locked elsewhere, a QP connected to itself)
// takes the packet's way, as before. Links never see this: the route is
// the loopback fast path (route.fast) only when both QPs are here.
//
// The counts are those of the packet: sent by the responder's QP, received
// by the requester's and by the device.

// endAckLocked sends the coalesced ACK a batch ends with (flushAckLocked),
// or hands it over directly (ackDirectLocked).
func (c *Conn) endAckLocked() {
	if c.resp.ackPending && !c.ackDirectLocked() {
		c.flushAckLocked()
	}
}

// ackDirectLocked does the requester's completer work for the pending ACK
// if the requester is a QP on this device whose send task is idle and whose
// lock is free, and reports whether it did. The requester's send task then
// stays joined (c.joined) until the batch's completions are pushed
// (endJoin). The caller holds c's QP lock and runs its receive task.
func (c *Conn) ackDirectLocked() bool {
	a := c.qp.AttrLocked()
	r := &c.pathLocked(a).r
	if !r.fast || c.e.ackPackets.Load() {
		return false
	}
	p := c.e.peerOf(r, a.DestQPN)
	if p == nil || p == c {
		return false
	}
	// The requester whose batch runs ours (respondJoinedLocked) is locked
	// and its task is ours already.
	hosted := p == c.host
	if !hosted {
		if p.stopped.Load() || !p.sendTask.Join(c.recvTask) {
			return false
		}
		// Under c's lock, so only a try: the requester's side may hold
		// its lock and wait for ours.
		if !p.qp.TryLock() {
			p.sendTask.Leave(c.recvTask, false)
			return false
		}
	}
	// The requester's completions go in its own outbox (empty: its task
	// was idle; or, hosted, the one its running batch delivers): they
	// are pushed after this batch's, and its CQ handlers run in its own
	// task's batch, never in this one (endJoin).
	more, ok := p.takeAckLocked(c.resp.ackPSN, c.ackSyndrome(), c.resp.msn, r.src.IP)
	if !hosted {
		p.qp.Unlock()
		if !ok {
			p.sendTask.Leave(c.recvTask, false)
		}
	}
	if !ok {
		return false
	}
	c.resp.ackPending = false
	c.resp.directACKs++
	c.pend[SentPkts]++ // as xmit counts the packet
	c.looped++
	if hosted {
		p.hostMore = p.hostMore || more
	} else {
		c.joined, c.joinedMore = p, more
	}
	return true
}

// joinRespLocked reports whether a request packet c's requester sends to p,
// a QP on this device, may be listed for p's responder to take in c's
// batch, at its end (respondJoinedLocked): p's receive task was idle, and
// the batch joined it (task.Join), now or for an earlier packet. The
// caller holds c's QP lock and runs c's send task.
func (c *Conn) joinRespLocked(p *Conn) bool {
	if c.joinedResp == p {
		return true
	}
	// An empty queue: the responder takes its list first, and nothing
	// queued before may be passed.
	if c.joinedResp != nil || p == c || c.e.ackPackets.Load() || p.stopped.Load() ||
		!p.reqQ.empty() || !p.recvTask.Join(c.sendTask) {
		return false
	}
	c.joinedResp = p
	return true
}

// respondJoinedLocked runs the batch of responder p that c's send task
// joined (joinRespLocked), if p's lock is free, as p's receive task
// would: the requests c listed, and, if the batch ends with an ACK for
// c, c's completer work for it (ackDirectLocked, hosted). p's completions
// go in p's receive outbox, c's in its send outbox after the mark
// (c.joinMark), so that endRespJoin pushes them in the order two batches
// would have. It reports whether c's requester has work left. The
// caller holds c's QP lock; it calls endRespJoin after releasing it.
func (c *Conn) respondJoinedLocked(p *Conn) bool {
	c.hostMore = false
	if !p.qp.TryLock() {
		// Locked elsewhere: the responder runs as its own task, after
		// this batch (endRespJoin).
		p.joinedMore = true
		return false
	}
	p.recvBufs = c.sendBufs // the goroutine's
	p.host = c
	c.joinMark = len(c.sout.wcs)
	p.resp.urgent = false
	p.joinedMore = p.respondLocked()
	p.host = nil
	p.recvBufs = nil
	p.qp.Unlock()
	return c.hostMore
}

// endRespJoin ends a send batch that joined responder p: the completions
// are pushed (c's before the join, p's, c's from p's ACK), p's task is
// left (to run again if it has work, or handlers or events of its own
// to run: they run in its batch, as endJoin says), and then c's CQ
// handlers run and its events are raised.
func (c *Conn) endRespJoin(p *Conn) {
	k := min(c.joinMark, len(c.sout.wcs))
	c.joinMark = 0
	c.sout.pushSpan(0, k)
	pushPair(&p.rout, 0, &c.sout, k)
	p.rout.clearWCs()
	c.sout.clearWCs()
	p.signalRan()
	p.recvTask.Leave(c.sendTask, p.joinedMore || p.rout.pending())
	c.callBack(&c.sout, c.sendTask)
}

// takeAckLocked is the completer's work for an ACK of psn with syndrome syn
// (a positive ACK) and MSN msn from src, as responseLocked and ackLocked
// do it for the packet, for a caller that joined c's send task. It reports
// false, having done nothing, if the completer has responses queued or
// would not act on the ACK; more says the requester has work (its task
// must run). The caller holds c's QP lock.
func (c *Conn) takeAckLocked(psn PSN, syn Syndrome, msn uint32, src netip.Addr) (more, ok bool) {
	if !c.respQ.empty() || c.respLocal.head != nil || c.respIn.i != len(c.respIn.b) {
		return false, false // taken after what is queued: the packet's way
	}
	a := c.qp.AttrLocked()
	if c.qp.Type() != qp.RC || !a.State.Allows(qp.ProcessSendOK) ||
		src != c.pathLocked(a).r.dst.IP || !psn.Less(c.req.maxPSN) {
		return false, false // dropped or a ghost: the packet's way counts it
	}
	c.pend[RcvdPkts]++
	c.creditsLocked(syn, msn)
	c.ackBeforeLocked(psn.Add(1))
	c.retireLocked()
	sq := &c.qp.SQ
	// What the requester's half of the send task would find to do: WQEs
	// not sent yet (the ACK may have opened the window or brought
	// credits), a retry, a state other than RTS (a flush, an SQD drain).
	// Timer expiries schedule the task themselves (armed while joined).
	more = a.State != qp.RTS || sq.Next != sq.Head() || c.req.needRetry
	return more, true
}

// endJoin ends a receive batch that joined requester p's send task: the
// batch's completions and then p's are pushed, p's task is left (to run
// again after this batch if its requester has work, or handlers or
// events of its own to run), and only then are c's CQ handlers and events
// run, as a handler may wait for p's task (a drain) or stop it (a
// destroy). p's handlers run in p's next batch, never in this one: a
// handler may destroy or drain any QP but the one whose batch runs it,
// and here that is c (TestHandlerDestroysPeer).
func (c *Conn) endJoin(p *Conn) {
	c.joined = nil
	pushPair(&c.rout, 0, &p.sout, 0)
	c.rout.clearWCs()
	p.sout.clearWCs()
	p.signalRan()
	p.sendTask.Leave(c.recvTask, c.joinedMore || p.sout.pending())
	c.callBack(&c.rout, c.recvTask)
}

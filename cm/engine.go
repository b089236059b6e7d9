package cm

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// The protocol steps. Every function here runs with Agent.mu held, in the
// agent's task (received MADs, timers) or in an ID method; none blocks,
// modifies a QP or calls out: MADs and QP changes go to the outbox, events
// to the event list, and the task carries them out after unlocking.

// action kinds of the outbox.
const (
	actSend       = iota
	actConnectRTU // active side: QP to RTR and RTS, then send the RTU and report ESTABLISHED
	actErrQP      // move the QP to ERR (disconnect, failure)
)

// receiveLocked handles one MAD from QP 1 of the peer whose GRH is grh.
func (a *Agent) receiveLocked(grh []byte, srcQP uint32, b []byte) {
	from, dst, ok := a.peerFromGRH(grh)
	if !ok {
		a.countLocked("drop_bad_grh")
		return
	}
	m, err := ParseMAD(b)
	switch {
	case err == ErrNotCM:
		a.countLocked("drop_not_cm")
		return
	case m.Method() == MethodGet || m.Method() == MethodSet:
		a.answerGetLocked(from, m)
		return
	case m.Method()&0x80 != 0:
		a.countLocked("drop_response")
		return
	case err != nil:
		a.countLocked("drop_unknown_attr")
		return
	case m.Method() != MethodSend:
		a.countLocked("drop_bad_method")
		return
	}
	mad := append(MAD(nil), m...) // the views below may be kept (as last MADs)
	a.countLocked("rx_" + m.AttrID().String())
	switch m.AttrID() {
	case AttrREQ:
		a.onREQ(from, dst, REQ(mad))
	case AttrMRA:
		a.onMRA(MRA(mad))
	case AttrREJ:
		a.onREJ(REJ(mad))
	case AttrREP:
		a.onREP(from, REP(mad))
	case AttrRTU:
		a.onRTU(RTU(mad))
	case AttrDREQ:
		a.onDREQ(from, DREQ(mad))
	case AttrDREP:
		a.onDREP(DREP(mad))
	case AttrSIDRREQ:
		a.onSIDRREQ(from, dst, SIDRREQ(mad))
	case AttrSIDRREP:
		a.onSIDRREP(SIDRREP(mad))
	default: // LAP (ignored on RoCE, as Linux does), ClassPortInfo SEND
		a.countLocked("drop_unsupported")
	}
}

// peerFromGRH returns where to answer (the sender's GID from one of ours)
// and the address the MAD was sent to. rxe puts an IPv4 header in the last
// 20 bytes of the GRH area, an IPv6 header in all 40.
func (a *Agent) peerFromGRH(grh []byte) (peer, netip.Addr, bool) {
	var src, dst netip.Addr
	var tc uint8
	if grh[0]>>4 == 6 {
		src, dst = netip.AddrFrom16([16]byte(grh[8:24])), netip.AddrFrom16([16]byte(grh[24:40]))
		tc = grh[0]<<4 | grh[1]>>4
	} else if grh[20]>>4 == 4 {
		h := grh[20:]
		src, dst = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		tc = h[1]
	} else {
		return peer{}, netip.Addr{}, false
	}
	sgid, ok := a.sgidIndex(dst)
	if !ok {
		return peer{}, netip.Addr{}, false
	}
	return peer{gid: netdev.GIDFromIP(src), sgid: sgid, tc: tc, hopLimit: 64}, dst.Unmap(), true
}

// answerGetLocked answers a GET of ClassPortInfo, and any other GET or SET
// with status "unsupported method/attribute" (Linux mad.c).
func (a *Agent) answerGetLocked(to peer, m MAD) {
	r := make(MAD, MADLen)
	r.InitHeader(MethodGetResp, m.AttrID(), m.TID())
	r.SetAttrMod(m.AttrMod())
	if m.Method() == MethodGet && m.AttrID() == AttrClassPortInfo {
		c := ClassPortInfo(r)
		c.SetBaseVersion(BaseVersion)
		c.SetClassVersion(CMClassVersion)
		c.SetRespTimeValue(a.opts.ResponseTimeout)
		a.countLocked("rx_ClassPortInfo_GET")
	} else {
		r.SetStatus(statusUnsupAttr)
		a.countLocked("rx_unsupported_GET_SET")
	}
	a.sendLocked(to, r)
}

// replyHeader starts a MAD that echoes tid.
func replyHeader(id AttrID, tid uint64) MAD {
	m := make(MAD, MADLen)
	m.InitHeader(MethodSend, id, tid)
	return m
}

func (a *Agent) onREQ(from peer, dst netip.Addr, r REQ) {
	key := remoteKey{id: r.LocalCommID(), guid: r.LocalCAGUID()}
	if id := a.byRemote[key]; id != nil {
		a.countLocked("rx_dup_REQ")
		if !id.state.Handles(AttrREQ) {
			a.countLocked("drop_state")
			return
		}
		switch id.state {
		case StateREQRcvd: // the consumer is slow: ask the peer to wait (cma's MRA on a duplicate)
			m := replyHeader(AttrMRA, id.tid)
			x := MRA(m)
			x.SetLocalCommID(id.localID)
			x.SetRemoteCommID(id.remoteID)
			x.SetMsgMRAed(MsgREQ)
			x.SetServiceTimeout(a.opts.MRAServiceTimeout)
			id.state = StateMRAREQSent
			id.last = m
			a.sendLocked(id.to, m)
		case StateMRAREQSent:
			a.sendLocked(id.to, id.last)
		case StateTimeWait:
			m := replyHeader(AttrREJ, MAD(r).TID())
			x := REJ(m)
			x.SetLocalCommID(id.localID)
			x.SetRemoteCommID(r.LocalCommID())
			x.SetMsgRejected(MsgREQ)
			x.SetReason(RejStaleConn)
			a.sendLocked(from, m)
		default: // REP_SENT and later: the REP timer answers
		}
		return
	}
	if old := a.byQPN[qpnKey{r.LocalQPN(), r.LocalCAGUID()}]; old != nil {
		// A new REQ from a QP we think is connected: stale (cm_req_handler).
		a.countLocked("rej_stale")
		a.issueRejLocked(from, MAD(r).TID(), 0, r.LocalCommID(), MsgREQ, RejStaleConn)
		if old.state == StateEstablished {
			a.sendDREQLocked(old, nil)
			a.out = append(a.out, outMAD{act: actErrQP, q: old.q})
			a.emitLocked(old, Event{Type: EventDisconnected})
		}
		return
	}
	sid := r.ServiceID()
	priv := r.PrivateData()
	var hdr CMAHeader
	if cmaHeaderIn(sid, priv) {
		hdr = CMAHeader(priv[:CMAHeaderLen])
		if hdr.Check() != nil {
			a.countLocked("rej_bad_cma_header")
			a.issueRejLocked(from, MAD(r).TID(), 0, r.LocalCommID(), MsgREQ, RejConsumerDefined)
			return
		}
		dst = hdr.DstAddr()
		priv = priv[CMAHeaderLen:]
	}
	l := a.findListenerLocked(sid, dst)
	if l == nil {
		if a.parkREQLocked(from, dst, r) {
			return
		}
		a.countLocked("rej_no_listener")
		a.issueRejLocked(from, MAD(r).TID(), 0, r.LocalCommID(), MsgREQ, RejInvalidServiceID)
		return
	}
	if t := r.TransportType(); t != TransportRC && t != TransportUC {
		a.issueRejLocked(from, MAD(r).TID(), 0, r.LocalCommID(), MsgREQ, RejInvalidTransportType)
		return
	}
	id := &ID{a: a, ps: l.ps, ctx: l.ctx, sink: l.sink, listener: l, state: StateREQRcvd}
	a.ids[id] = struct{}{}
	id.localID = a.newCommIDLocked()
	a.byComm[id.localID] = id
	id.reg.comm = true
	// Our PSN is chosen now, not at Accept, so that InitQPAttr(RTR) before
	// Accept (librdmacm's order: the QP to RTS, then rdma_accept) gives
	// the PSN the REP will carry.
	id.localPSN = a.randPSNLocked()
	id.remoteID, id.remoteGUID, id.remoteQPN, id.remotePSN = r.LocalCommID(), r.LocalCAGUID(), r.LocalQPN(), r.StartingPSN()
	id.remoteKey = key
	a.byRemote[key] = id
	id.reg.remote = true
	a.byQPN[qpnKey{id.remoteQPN, id.remoteGUID}] = id
	id.reg.qpn = true
	id.tid = MAD(r).TID()
	id.to = from
	id.qpUC = r.TransportType() == TransportUC
	id.peerRespTO = r.LocalCMResponseTimeout()
	id.cmTimeout, id.avTimeout = convTime(id.peerRespTO), passiveAVTimeout(r.PrimaryLocalAckTimeout())
	if hdr != nil {
		id.remote = hdr.Src()
	} else {
		id.remote = netip.AddrPortFrom(netdev.GID(r.PrimaryLocalGID()).IP(), 0)
	}
	id.local = netip.AddrPortFrom(dst, sid.Port())
	sgid, _ := a.sgidIndex(dst)
	hl := r.PrimaryHopLimit()
	if hl == 0 {
		hl = 64
	}
	id.route = Route{Src: dst, Dst: id.remote.Addr(), SGIDIndex: sgid, SGID: netdev.GIDFromIP(dst),
		DGID: r.PrimaryLocalGID(), PathMTU: min(qp.MTU(r.PathMTU()), a.mtu), HopLimit: hl,
		TrafficClass: r.PrimaryTrafficClass()}
	id.addrOK = true
	// Until Accept: the peer's offer (see Accept).
	id.neg = negotiated{respRes: r.ResponderResources(), initDepth: r.InitiatorDepth(),
		retry: r.RetryCount(), rnr: r.RNRRetryCount(), mtu: id.route.PathMTU,
		ackTimeout: r.PrimaryLocalAckTimeout(), srq: r.SRQ()}
	a.emitLocked(id, Event{Type: EventConnectRequest, Param: ConnParam{
		PrivateData: append([]byte(nil), priv...), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), RetryCount: r.RetryCount(), RNRRetryCount: r.RNRRetryCount(),
		SRQ: r.SRQ(), QPN: r.LocalQPN()}})
}

// issueRejLocked rejects a message that has no ID here, in cm_issue_rej's
// form: the message's comm IDs swapped (local, the RemoteCommID it named,
// 0 for a REQ; remote, its LocalCommID, the sender's), its TID.
func (a *Agent) issueRejLocked(to peer, tid uint64, local, remote uint32, k MsgKind, reason RejectReason) {
	m := replyHeader(AttrREJ, tid)
	x := REJ(m)
	x.SetLocalCommID(local)
	x.SetRemoteCommID(remote)
	x.SetMsgRejected(k)
	x.SetReason(reason)
	a.sendLocked(to, m)
}

// sendRejLocked rejects the ID's connection.
func (a *Agent) sendRejLocked(id *ID, k MsgKind, reason RejectReason, priv []byte) {
	m := replyHeader(AttrREJ, id.tid)
	x := REJ(m)
	x.SetLocalCommID(id.localID)
	x.SetRemoteCommID(id.remoteID)
	x.SetMsgRejected(k)
	x.SetReason(reason)
	if reason == RejTimeout {
		var ari [8]byte
		binary.BigEndian.PutUint64(ari[:], a.guid)
		x.SetARI(ari[:])
	}
	x.SetPrivateData(priv)
	a.sendLocked(id.to, m)
}

// lookupLocked finds the ID a reply addresses by its RemoteCommID (our
// local comm ID) and checks the state handles the attribute.
func (a *Agent) lookupLocked(ourID uint32, attr AttrID) *ID {
	id := a.byComm[ourID]
	if id == nil {
		a.countLocked("drop_unknown_comm_id")
		return nil
	}
	if !id.state.Handles(attr) {
		a.countLocked("drop_state")
		return nil
	}
	return id
}

func (a *Agent) onMRA(m MRA) {
	id := a.lookupLocked(m.RemoteCommID(), AttrMRA)
	if id == nil {
		return
	}
	wait := convTime(m.ServiceTimeout()) + convTime(a.avTimeoutOf(id))
	switch {
	case id.state == StateREQSent && m.MsgMRAed() == MsgREQ:
		id.state = StateMRAREQRcvd
	case id.state == StateREPSent && m.MsgMRAed() == MsgREP:
		id.state = StateMRAREPRcvd
	default:
		a.countLocked("drop_state")
		return
	}
	a.armLocked(id, wait)
}

// rejectedIDLocked finds the ID a REJ is for, as Linux's
// cm_acquire_rejected_id does. A REJ TIMEOUT comes from an active side
// destroyed before it saw a REP (cm_destroy_id in REQ_SENT or
// MRA_REQ_RCVD): its RemoteCommID is 0, so it is matched by the pair its
// REQ registered, the sender's comm ID (the REJ's LocalCommID) and CA GUID
// (the first 8 bytes of the ARI, read whatever RejInfoLen says, as Linux
// reads them). One whose pair matches nothing but that names one of our
// comm IDs is matched by it, as every other REJ is.
func (a *Agent) rejectedIDLocked(m REJ) *ID {
	if m.Reason() == RejTimeout {
		guid := binary.BigEndian.Uint64(MAD(m).bytes(rejARI)[:8])
		if id := a.byRemote[remoteKey{id: m.LocalCommID(), guid: guid}]; id != nil {
			if !id.state.Handles(AttrREJ) {
				a.countLocked("drop_state")
				return nil
			}
			return id
		}
		if m.RemoteCommID() == 0 {
			a.countLocked("drop_unknown_comm_id")
			return nil
		}
	}
	return a.lookupLocked(m.RemoteCommID(), AttrREJ)
}

func (a *Agent) onREJ(m REJ) {
	id := a.rejectedIDLocked(m)
	if id == nil {
		a.dropParkedLocked(m.LocalCommID()) // the active side gave up on a parked REQ
		return
	}
	// A REJ of a REQ is matched by our comm ID only (cm_acquire_rejected_id):
	// the peer may have answered earlier copies of the REQ from other IDs.
	if m.MsgRejected() != MsgREQ && id.remoteID != 0 && m.LocalCommID() != 0 && m.LocalCommID() != id.remoteID {
		a.countLocked("drop_comm_id_mismatch")
		return
	}
	err := &RejectError{Reason: m.Reason(), PrivateData: append([]byte(nil), m.PrivateData()...)}
	ev := Event{Type: EventRejected, Err: err, Param: ConnParam{PrivateData: err.PrivateData}}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		if m.Reason() == RejStaleConn {
			a.enterTimeWaitLocked(id)
		} else {
			a.toIdleLocked(id)
		}
	case StateREPSent, StateMRAREPRcvd:
		a.out = append(a.out, outMAD{act: actErrQP, q: id.q})
		a.enterTimeWaitLocked(id)
	default: // REQ_RCVD, MRA_REQ_SENT, REP_RCVD, MRA_REP_SENT: the peer gave up
		a.toIdleLocked(id)
	}
	a.emitLocked(id, ev)
}

func (a *Agent) onREP(from peer, m REP) {
	if a.byComm[m.RemoteCommID()] == nil {
		// No ID holds the comm ID the REP answers: its active side was
		// destroyed, or gave up (UNREACHABLE), and the REJ it sent then,
		// if any, was lost. Tell the passive side now (REJ 6, "REP"
		// rejected), rather than leave it resending the REP until its
		// retries run out. Linux drops such a REP (cm_rep_handler, then
		// cm_dup_rep_handler, finds nothing) and never sends REJ 6; a
		// Linux passive side takes this REJ (cm_acquire_rejected_id by
		// its comm ID and ours; cm_rej_handler in REP_SENT: IDLE, and
		// rdma_cm's REJECTED with status 6).
		a.countLocked("rej_unknown_REP")
		a.issueRejLocked(from, MAD(m).TID(), m.RemoteCommID(), m.LocalCommID(), MsgREP, RejInvalidCommID)
		return
	}
	id := a.lookupLocked(m.RemoteCommID(), AttrREP)
	if id == nil {
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished: // our RTU was lost
		if m.LocalCommID() == id.remoteID && id.last != nil {
			a.countLocked("rx_dup_REP")
			a.sendLocked(id.to, id.last)
		}
		return
	case StateMRAREPSent:
		a.sendLocked(id.to, id.last)
		return
	default:
		a.countLocked("rx_dup_REP")
		return
	}
	a.stopTimerLocked(id)
	id.remoteID, id.remoteQPN, id.remotePSN, id.remoteGUID = m.LocalCommID(), m.LocalQPN(), m.StartingPSN(), m.LocalCAGUID()
	a.byQPN[qpnKey{id.remoteQPN, id.remoteGUID}] = id
	id.reg.qpn = true
	id.neg.initDepth = min(id.neg.initDepth, m.ResponderResources())
	id.neg.respRes = min(id.neg.respRes, m.InitiatorDepth())
	id.neg.rnr = m.RNRRetryCount()
	id.avTimeout = ackTimeout(m.TargetAckDelay(), a.avTimeoutOf(id)-1)
	id.state = StateREPRcvd
	param := ConnParam{PrivateData: append([]byte(nil), m.PrivateData()...),
		ResponderResources: m.ResponderResources(), InitiatorDepth: m.InitiatorDepth(),
		RNRRetryCount: m.RNRRetryCount(), SRQ: m.SRQ(), QPN: m.LocalQPN()}
	if id.q == nil {
		a.emitLocked(id, Event{Type: EventConnectResponse, Param: param})
		return
	}
	id.epoch++
	a.out = append(a.out, outMAD{act: actConnectRTU, id: id, epoch: id.epoch, param: param})
}

// sendRTULocked sends (and keeps, for duplicate REPs) the RTU.
func (a *Agent) sendRTULocked(id *ID, priv []byte) {
	m := replyHeader(AttrRTU, id.tid)
	x := RTU(m)
	x.SetLocalCommID(id.localID)
	x.SetRemoteCommID(id.remoteID)
	x.SetPrivateData(priv)
	id.last = m
	a.sendLocked(id.to, m)
}

func (a *Agent) establishActiveLocked(id *ID, param *ConnParam) {
	id.state = StateEstablished
	ev := Event{Type: EventEstablished}
	if param != nil {
		ev.Param = *param
	}
	a.emitLocked(id, ev)
}

// establishPassiveLocked: the RTU (or the first packet, COMM_EST) arrived.
func (a *Agent) establishPassiveLocked(id *ID, priv []byte) {
	a.stopTimerLocked(id)
	id.state = StateEstablished
	a.emitLocked(id, Event{Type: EventEstablished, Param: ConnParam{PrivateData: priv, QPN: id.remoteQPN}})
}

func (a *Agent) onRTU(m RTU) {
	id := a.lookupLocked(m.RemoteCommID(), AttrRTU)
	if id == nil || id.state == StateEstablished {
		return
	}
	a.establishPassiveLocked(id, append([]byte(nil), m.PrivateData()...))
}

// sendDREQLocked starts a disconnection: DREQ with a fresh TID, resent by
// the timer.
func (a *Agent) sendDREQLocked(id *ID, priv []byte) {
	id.tid = a.newTIDLocked(id.localID) ^ uint64(a.rng.Uint32()&0xFFFF)<<32
	m := replyHeader(AttrDREQ, id.tid)
	x := DREQ(m)
	x.SetLocalCommID(id.localID)
	x.SetRemoteCommID(id.remoteID)
	x.SetRemoteQPN(id.remoteQPN)
	x.SetPrivateData(priv)
	id.state = StateDREQSent
	id.last = m
	id.retries = 0
	a.sendLocked(id.to, m)
	a.armLocked(id, a.cmTimeoutOf(id))
}

func (a *Agent) sendDREPLocked(id *ID, priv []byte) {
	m := replyHeader(AttrDREP, id.tid)
	x := DREP(m)
	x.SetLocalCommID(id.localID)
	x.SetRemoteCommID(id.remoteID)
	x.SetPrivateData(priv)
	id.last = m
	a.sendLocked(id.to, m)
}

func (a *Agent) onDREQ(from peer, m DREQ) {
	id := a.byComm[m.RemoteCommID()]
	if id == nil || id.state == StateIdle {
		// cm_issue_drep: a DREQ for no connection still gets its DREP.
		a.countLocked("dreq_unknown")
		r := replyHeader(AttrDREP, MAD(m).TID())
		x := DREP(r)
		x.SetLocalCommID(m.RemoteCommID())
		x.SetRemoteCommID(m.LocalCommID())
		a.sendLocked(from, r)
		return
	}
	if !id.state.Handles(AttrDREQ) {
		a.countLocked("drop_state")
		return
	}
	if m.RemoteQPN() != id.qpn || (id.remoteID != 0 && m.LocalCommID() != id.remoteID) {
		a.countLocked("drop_dreq_mismatch")
		return
	}
	switch id.state {
	case StateDREQSent: // both sides disconnect at once: answer, keep waiting for ours
		r := replyHeader(AttrDREP, MAD(m).TID())
		x := DREP(r)
		x.SetLocalCommID(id.localID)
		x.SetRemoteCommID(id.remoteID)
		a.sendLocked(id.to, r)
		return
	case StateDREQRcvd:
		a.countLocked("rx_dup_DREQ")
		return
	case StateTimeWait:
		r := replyHeader(AttrDREP, MAD(m).TID())
		x := DREP(r)
		x.SetLocalCommID(id.localID)
		x.SetRemoteCommID(id.remoteID)
		a.sendLocked(id.to, r)
		return
	case StateREPSent, StateMRAREPRcvd: // the RTU was lost; the DREQ implies it
		a.establishPassiveLocked(id, nil)
	}
	a.stopTimerLocked(id)
	id.state = StateDREQRcvd
	id.tid = MAD(m).TID()
	a.out = append(a.out, outMAD{act: actErrQP, q: id.q})
	a.emitLocked(id, Event{Type: EventDisconnected, Param: ConnParam{PrivateData: append([]byte(nil), m.PrivateData()...)}})
}

func (a *Agent) onDREP(m DREP) {
	id := a.lookupLocked(m.RemoteCommID(), AttrDREP)
	if id == nil {
		return
	}
	was := id.state
	a.enterTimeWaitLocked(id)
	if was == StateDREQSent {
		a.emitLocked(id, Event{Type: EventDisconnected})
	}
}

func (a *Agent) onSIDRREQ(from peer, dst netip.Addr, r SIDRREQ) {
	key := remoteKey{id: r.RequestID(), gid: from.gid}
	if id := a.byRemote[key]; id != nil {
		a.countLocked("rx_dup_SIDR_REQ")
		if id.state == StateTimeWait && id.last != nil {
			a.sendLocked(id.to, id.last) // our SIDR_REP was lost
		}
		return
	}
	sid := r.ServiceID()
	priv := r.PrivateData()
	var hdr CMAHeader
	reply := func(st SIDRStatus) {
		m := replyHeader(AttrSIDRREP, MAD(r).TID())
		x := SIDRREP(m)
		x.SetRequestID(r.RequestID())
		x.SetStatus(st)
		x.SetServiceID(sid)
		a.sendLocked(from, m)
	}
	if cmaHeaderIn(sid, priv) {
		hdr = CMAHeader(priv[:CMAHeaderLen])
		if hdr.Check() != nil {
			reply(SIDRReject)
			return
		}
		dst = hdr.DstAddr()
		priv = priv[CMAHeaderLen:]
	}
	l := a.findListenerLocked(sid, dst)
	if l == nil {
		a.countLocked("sidr_no_listener")
		reply(SIDRUnsupported)
		return
	}
	id := &ID{a: a, ps: l.ps, ctx: l.ctx, sink: l.sink, listener: l, state: StateSIDRREQRcvd, ud: true}
	a.ids[id] = struct{}{}
	id.remoteID = r.RequestID()
	id.remoteKey = key
	a.byRemote[key] = id
	id.reg.remote = true
	id.tid = MAD(r).TID()
	id.to = from
	if hdr != nil {
		id.remote = hdr.Src()
	}
	id.local = netip.AddrPortFrom(dst, sid.Port())
	sgid, _ := a.sgidIndex(dst)
	id.route = Route{Src: dst, Dst: from.gid.IP(), SGIDIndex: sgid, SGID: netdev.GIDFromIP(dst),
		DGID: from.gid, PathMTU: a.mtu, HopLimit: 64, TrafficClass: from.tc}
	id.addrOK = true
	a.emitLocked(id, Event{Type: EventConnectRequest,
		Param: ConnParam{PrivateData: append([]byte(nil), priv...)},
		UD:    &UDParam{AV: id.route.AV()}})
}

// sidrReplyLocked answers a SIDR request and keeps the answer through a
// TIMEWAIT, for a peer whose copy is lost and asks again.
func (a *Agent) sidrReplyLocked(id *ID, st SIDRStatus, qpn uint32, priv []byte) {
	m := replyHeader(AttrSIDRREP, id.tid)
	x := SIDRREP(m)
	x.SetRequestID(id.remoteID)
	x.SetStatus(st)
	x.SetServiceID(MakeServiceID(id.ps, id.local.Port()))
	if st == SIDRSuccess {
		x.SetQPN(qpn)
		if id.ps == PSUDP || id.ps == PSIB {
			x.SetQKey(UDPQKey)
		}
	}
	x.SetPrivateData(priv)
	id.last = m
	a.sendLocked(id.to, m)
	a.enterTimeWaitLocked(id)
}

func (a *Agent) onSIDRREP(m SIDRREP) {
	id := a.lookupLocked(m.RequestID(), AttrSIDRREP)
	if id == nil {
		return
	}
	a.toIdleLocked(id)
	if m.Status() != SIDRSuccess {
		err := SIDRRejectError(m.Status(), m.PrivateData())
		a.emitLocked(id, Event{Type: EventRejected, Err: err, Param: ConnParam{PrivateData: err.PrivateData}})
		return
	}
	a.emitLocked(id, Event{Type: EventEstablished,
		Param: ConnParam{PrivateData: append([]byte(nil), m.PrivateData()...), QPN: m.QPN()},
		UD:    &UDParam{QPN: m.QPN(), QKey: m.QKey(), AV: id.route.AV()}})
}

// timeoutLocked runs when the ID's timer fired.
func (a *Agent) timeoutLocked(id *ID) {
	if id.resolve != nil {
		a.resolveTimerLocked(id)
		return
	}
	switch states[id.state].timer {
	case timerNone:
		return
	case timerTimeWait:
		a.toIdleLocked(id)
		if id.listener == nil || !id.ud {
			a.emitLocked(id, Event{Type: EventTimewaitExit})
		}
		return
	case timerMRA:
		// The time the peer asked for is over: back to resending.
		if id.state == StateMRAREQRcvd {
			id.state = StateREQSent
		} else {
			id.state = StateREPSent
		}
	}
	if id.retries < int(a.opts.MaxRetries) {
		id.retries++
		a.countLocked("retransmit_" + id.last.AttrID().String())
		a.sendLocked(id.to, id.last)
		a.armLocked(id, a.periodLocked(id))
		return
	}
	a.countLocked("timeout_" + id.state.String())
	switch id.state {
	case StateDREQSent:
		a.enterTimeWaitLocked(id)
		a.emitLocked(id, Event{Type: EventDisconnected})
	case StateREPSent:
		a.out = append(a.out, outMAD{act: actErrQP, q: id.q})
		a.toIdleLocked(id)
		a.emitLocked(id, Event{Type: EventUnreachable, Err: ErrUnreachable})
	default: // REQ_SENT, SIDR_REQ_SENT
		a.toIdleLocked(id)
		a.emitLocked(id, Event{Type: EventUnreachable, Err: ErrUnreachable})
	}
}

func (a *Agent) periodLocked(id *ID) time.Duration {
	if id.state == StateSIDRREQSent {
		return convTime(a.opts.ResponseTimeout)
	}
	return a.cmTimeoutOf(id)
}

func (a *Agent) enterTimeWaitLocked(id *ID) {
	id.state = StateTimeWait
	id.epoch++
	// The remote QP is no longer connected here: a new REQ from it (a
	// new process given the same QP number, say) is a new connection,
	// not a stale one. Linux's cm_enter_timewait forgets it too
	// (cm_remove_remote); the comm ID stays, for duplicate REQs.
	a.forgetQPNLocked(id)
	a.armLocked(id, convTime(a.avTimeoutOf(id)))
}

// forgetQPNLocked drops id's entry of byQPN (REJ 10's table).
func (a *Agent) forgetQPNLocked(id *ID) {
	if !id.reg.qpn {
		return
	}
	k := qpnKey{id.remoteQPN, id.remoteGUID}
	if a.byQPN[k] == id {
		delete(a.byQPN, k)
	}
	id.reg.qpn = false
}

// toIdleLocked ends the ID's connection: its comm ID, peer keys and QP are
// free again; a destroyed ID goes away.
func (a *Agent) toIdleLocked(id *ID) {
	a.stopTimerLocked(id)
	id.state = StateIdle
	id.epoch++
	id.last = nil
	if id.reg.comm {
		delete(a.byComm, id.localID)
		id.reg.comm = false
	}
	if id.reg.remote {
		if a.byRemote[id.remoteKey] == id {
			delete(a.byRemote, id.remoteKey)
		}
		id.reg.remote = false
	}
	a.forgetQPNLocked(id)
	a.releaseQPLocked(id)
	if id.destroyed || id.listener != nil && id.ud {
		a.removeLocked(id)
	}
}

func (a *Agent) releaseQPLocked(id *ID) {
	if id.reg.qp && id.q != nil {
		if a.qpUsers[id.q.Num()] == id {
			delete(a.qpUsers, id.q.Num())
		}
	}
	id.reg.qp = false
}

func (a *Agent) removeLocked(id *ID) {
	a.unbindLocked(id)
	delete(a.ids, id)
}

// runAction carries out one outbox entry, outside the lock.
func (a *Agent) runAction(o outMAD) {
	switch o.act {
	case actSend:
		a.transmit(o)
	case actErrQP:
		if o.q != nil {
			_ = o.q.Modify(&rvt.QPAttr{State: qp.Err}, qp.AttrState)
		}
	case actConnectRTU:
		id := o.id
		a.mu.Lock()
		q := id.q
		stale := id.epoch != o.epoch
		a.mu.Unlock()
		if stale || q == nil {
			return
		}
		err := a.connectQP(id, q)
		a.mu.Lock()
		if id.epoch != o.epoch {
			a.mu.Unlock()
			return
		}
		if err != nil {
			a.countLocked("qp_modify_failed")
			a.sendRejLocked(id, MsgREP, RejConsumerDefined, nil)
			a.toIdleLocked(id)
			a.emitLocked(id, Event{Type: EventConnectError, Err: err})
		} else {
			a.sendRTULocked(id, nil)
			a.establishActiveLocked(id, &o.param)
		}
		a.mu.Unlock()
	}
}

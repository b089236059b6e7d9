package cm

import (
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/clock"
)

// A REQ that finds no listener is rejected at once over Linux (cm.c's
// cm_issue_rej, REJ 8 INVALID_SERVICE_ID). With Options.NoListenerWait
// set, the agent instead keeps it ("parks" it) that long: a listener that
// appears meanwhile gets it as if it had just arrived, and only at the end
// is it rejected with REJ 8. It closes a race of programs that connect
// right after telling the peer, through another channel, to listen, and
// that do not retry on REJ 8 (perftest's -R: after its handshake the
// client's REQ can arrive before the server's rdma_listen; perftest 4.5's
// retry then uses freed memory). The active side waits for a REP or REJ
// far longer (its REQ timeout) than the wait, so nothing on the wire
// changes but the REJ's delay; a retransmitted REQ of a parked one is
// dropped.

// maxParked bounds the parked REQs of an agent; past it a REQ with no
// listener is rejected at once.
const maxParked = 64

type parkedREQ struct {
	from     peer
	dst      netip.Addr
	req      REQ
	key      remoteKey
	deadline time.Time
	timer    clock.Timer
}

// parkREQLocked keeps r for NoListenerWait; false if it cannot (the
// option is off, or too many are parked): the caller rejects it.
func (a *Agent) parkREQLocked(from peer, dst netip.Addr, r REQ) bool {
	w := a.opts.NoListenerWait
	if w <= 0 {
		return false
	}
	key := remoteKey{id: r.LocalCommID(), guid: r.LocalCAGUID()}
	for _, p := range a.parked {
		if p.key == key {
			a.countLocked("rx_dup_REQ_parked")
			return true
		}
	}
	if len(a.parked) >= maxParked {
		return false
	}
	p := &parkedREQ{from: from, dst: dst, req: r, key: key, deadline: a.clk.Now().Add(w)}
	// The callback only wakes the task (see the lock order in agent.go);
	// run() rejects what is due.
	p.timer = a.clk.AfterFunc(w, a.kick)
	a.parked = append(a.parked, p)
	a.countLocked("req_parked")
	return true
}

// unparkLocked hands the parked REQs that the listener l now matches to
// onREQ, in their order of arrival.
func (a *Agent) unparkLocked(l *ID) {
	if len(a.parked) == 0 {
		return
	}
	sid := MakeServiceID(l.ps, l.local.Port())
	var take []*parkedREQ
	keep := a.parked[:0]
	for _, p := range a.parked {
		if p.req.ServiceID() == sid && a.findListenerLocked(sid, p.dst) == l {
			take = append(take, p)
		} else {
			keep = append(keep, p)
		}
	}
	clear(a.parked[len(keep):])
	a.parked = keep
	for _, p := range take {
		p.timer.Stop()
		a.countLocked("req_unparked")
		a.onREQ(p.from, p.dst, p.req)
	}
}

// expireParkedLocked rejects the parked REQs whose wait is over.
func (a *Agent) expireParkedLocked() {
	if len(a.parked) == 0 {
		return
	}
	now := a.clk.Now()
	keep := a.parked[:0]
	for _, p := range a.parked {
		if now.Before(p.deadline) {
			keep = append(keep, p)
			continue
		}
		a.countLocked("rej_no_listener")
		a.issueRejLocked(p.from, MAD(p.req).TID(), 0, p.req.LocalCommID(), MsgREQ, RejInvalidServiceID)
	}
	clear(a.parked[len(keep):])
	a.parked = keep
}

// dropParkedLocked forgets the parked REQs of the peer's comm ID (its
// REJ: the active ID was destroyed while it waited). The REJ carries no CA
// GUID; a clash of comm IDs between peers costs the other peer a REQ
// retry.
func (a *Agent) dropParkedLocked(remoteCommID uint32) {
	if len(a.parked) == 0 || remoteCommID == 0 {
		return
	}
	keep := a.parked[:0]
	for _, p := range a.parked {
		if p.key.id == remoteCommID {
			p.timer.Stop()
			a.countLocked("req_parked_withdrawn")
			continue
		}
		keep = append(keep, p)
	}
	clear(a.parked[len(keep):])
	a.parked = keep
}

// stopParkedLocked stops the timers when the agent closes.
func (a *Agent) stopParkedLocked() {
	for _, p := range a.parked {
		p.timer.Stop()
	}
	a.parked = nil
}

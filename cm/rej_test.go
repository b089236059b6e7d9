package cm

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// An active side destroyed in REQ_SENT (its process died after
// rdma_connect) must not leave the passive side waiting out its REP
// retries. Two ways tell the passive side, in either order of events:
// the REJ (TIMEOUT) that the destruction sends, found by the CA GUID in
// its ARI and the sender's comm ID (its RemoteCommID is 0: no REP was
// seen), as Linux's cm_acquire_rejected_id finds it; and, when that REJ
// is lost, a REJ (INVALID_COMM_ID) answering the REP that reaches the
// dead ID.

// txLog records the MADs an agent sends and drops those drop returns
// true for.
type txLog struct {
	sent []MAD
	drop func(MAD) bool
}

func (l *txLog) hook(m MAD) bool {
	l.sent = append(l.sent, append(MAD(nil), m...))
	return l.drop != nil && l.drop(m)
}

func (l *txLog) rejs() []REJ {
	var r []REJ
	for _, m := range l.sent {
		if m.AttrID() == AttrREJ {
			r = append(r, REJ(m))
		}
	}
	return r
}

func commIDOf(id *ID) uint32 {
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.localID
}

// TestDestroyREQSentRejectsPassive: the REJ TIMEOUT of a destroyed active
// ID reaches the passive ID, before Accept and while an MRA holds the
// active side, at once.
func TestDestroyREQSentRejectsPassive(t *testing.T) {
	for _, tt := range []struct {
		name    string
		wait    time.Duration // before the destruction
		passive State
		active  State
	}{
		{name: "REQ_RCVD", passive: StateREQRcvd, active: StateREQSent},
		{name: "MRA_REQ_SENT", wait: 7 * time.Millisecond, passive: StateMRAREQSent, active: StateMRAREQRcvd},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 21})
			var log txLog
			a, b := w.nodes[0], w.nodes[1]
			a.agent.testDropTx = log.hook
			p := newPair(t, w, PSTCP, 7480)
			require.NoError(t, p.cid.Connect(a.newQP(t, qp.RC), nil))
			req := w.expect(t, p.lch, EventConnectRequest)
			w.settle(t, tt.wait)
			require.Equal(t, tt.passive, req.ID.State())
			require.Equal(t, tt.active, p.cid.State())
			ours := commIDOf(p.cid)

			start := w.clk.Now()
			p.cid.Destroy()
			ev := w.expect(t, p.lch, EventRejected)
			require.Zero(t, w.clk.Now().Sub(start), "REJECTED at once")
			require.Same(t, req.ID, ev.ID)
			require.ErrorIs(t, ev.Err, RejTimeout)
			require.Equal(t, StateIdle, req.ID.State())

			// The REJ as Linux's cm_destroy_id forms it in REQ_SENT
			// (cm_format_rej: MsgRejected "other", our comm ID, the
			// remote one still 0; the ARI our CA GUID).
			rejs := log.rejs()
			require.Len(t, rejs, 1)
			r := rejs[0]
			require.Equal(t, RejTimeout, r.Reason())
			require.Equal(t, ours, r.LocalCommID())
			require.Zero(t, r.RemoteCommID())
			require.Equal(t, MsgOther, r.MsgRejected())
			require.Equal(t, uint8(8), r.RejectInfoLen())
			require.Equal(t, a.agent.GUID(), binary.BigEndian.Uint64(r.ARI()))
			require.Equal(t, uint64(1), b.agent.Counters()["rx_REJ"])
			require.Zero(t, b.agent.Counters()["drop_unknown_comm_id"])

			require.ErrorIs(t, req.ID.Accept(nil, nil), ErrInvalidState)
			req.ID.Destroy()
			w.settle(t, 10*time.Millisecond)
			requireClean(t, w, 1)
		})
	}
}

// TestREJTimeoutNeedsTheGUID: a REJ TIMEOUT is matched by the pair (CA
// GUID in the ARI, sender's comm ID); the same comm ID from another CA
// finds nothing.
func TestREJTimeoutNeedsTheGUID(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 22})
	a, b := w.nodes[0], w.nodes[1]
	p := newPair(t, w, PSTCP, 7481)
	require.NoError(t, p.cid.Connect(a.newQP(t, qp.RC), nil))
	req := w.expect(t, p.lch, EventConnectRequest)

	m := make(MAD, MADLen)
	m.InitHeader(MethodSend, AttrREJ, 0x77)
	x := REJ(m)
	x.SetLocalCommID(commIDOf(p.cid))
	x.SetMsgRejected(MsgOther)
	x.SetReason(RejTimeout)
	var ari [8]byte
	binary.BigEndian.PutUint64(ari[:], a.agent.GUID()^1)
	x.SetARI(ari[:])
	r, err := a.agent.ResolveRoute(netip.Addr{}, b.ip, 0)
	require.NoError(t, err)
	a.agent.mu.Lock()
	a.agent.sendLocked(peer{gid: r.DGID, sgid: r.SGIDIndex}, m)
	a.agent.mu.Unlock()
	a.agent.kick()
	require.Equal(t, uint64(1), b.agent.Counters()["drop_unknown_comm_id"])
	require.Equal(t, StateREQRcvd, req.ID.State())
	_, ok := p.lch.Poll()
	require.False(t, ok)

	p.cid.Destroy()
	w.expect(t, p.lch, EventRejected)
	req.ID.Destroy()
	w.settle(t, 10*time.Millisecond)
	requireClean(t, w, 1)
}

// TestREPToDestroyedActiveGetsREJ: the REJ TIMEOUT is lost; the passive
// side accepts, and its REP to the dead ID is answered with REJ
// INVALID_COMM_ID, so the passive side is REJECTED within one round trip
// instead of UNREACHABLE after its 15 REP retries. If that answer is lost
// too, the REP's first resend brings another.
func TestREPToDestroyedActiveGetsREJ(t *testing.T) {
	for _, tt := range []struct {
		name     string
		lostREJ6 int
		within   time.Duration
	}{
		{name: "answered", within: 0},
		{name: "answer lost once", lostREJ6: 1, within: 4 * time.Millisecond}, // one REP period: conv(10)
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 23})
			var log txLog
			lost := 0
			log.drop = func(m MAD) bool {
				if m.AttrID() != AttrREJ {
					return false
				}
				switch REJ(m).Reason() {
				case RejTimeout:
					return true
				case RejInvalidCommID:
					if lost < tt.lostREJ6 {
						lost++
						return true
					}
				}
				return false
			}
			a, b := w.nodes[0], w.nodes[1]
			a.agent.testDropTx = log.hook
			var blog txLog
			b.agent.testDropTx = blog.hook
			p := newPair(t, w, PSTCP, 7482)
			require.NoError(t, p.cid.Connect(a.newQP(t, qp.RC), nil))
			req := w.expect(t, p.lch, EventConnectRequest)
			ours := commIDOf(p.cid)
			p.cid.Destroy()
			require.Equal(t, StateREQRcvd, req.ID.State(), "the REJ TIMEOUT was lost")

			qb := b.newQP(t, qp.RC)
			start := w.clk.Now()
			require.NoError(t, req.ID.Accept(qb, nil))
			ev := w.expect(t, p.lch, EventRejected)
			require.Equal(t, tt.within, w.clk.Now().Sub(start))
			require.Same(t, req.ID, ev.ID)
			require.ErrorIs(t, ev.Err, RejInvalidCommID)
			require.Equal(t, qp.Err, qb.State())
			require.Equal(t, uint64(tt.lostREJ6), b.agent.Counters()["retransmit_REP"])
			require.Equal(t, uint64(tt.lostREJ6+1), a.agent.Counters()["rej_unknown_REP"])

			// The answer is cm_issue_rej's form: the REP's comm IDs
			// swapped, its TID, "REP" rejected.
			var rep REP
			for _, m := range blog.sent {
				if m.AttrID() == AttrREP {
					rep = REP(m)
				}
			}
			require.NotNil(t, rep)
			require.Equal(t, ours, rep.RemoteCommID())
			rejs := log.rejs()
			require.Len(t, rejs, 2+tt.lostREJ6)
			r := rejs[len(rejs)-1]
			require.Equal(t, RejInvalidCommID, r.Reason())
			require.Equal(t, MsgREP, r.MsgRejected())
			require.Equal(t, ours, r.LocalCommID())
			require.Equal(t, rep.LocalCommID(), r.RemoteCommID())
			require.Equal(t, MAD(rep).TID(), MAD(r).TID())

			req.ID.Destroy()
			w.settle(t, 10*time.Millisecond)
			requireClean(t, w, 1)
		})
	}
}

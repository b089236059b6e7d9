package cm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestAckTimeout: Linux's cm_ack_timeout rounding, at the values peers
// use (rxe's ACK delay 15 with RoCE lifetimes 18 and 16, FastOptions' 8).
func TestAckTimeout(t *testing.T) {
	for _, c := range []struct{ delay, life, want uint8 }{
		{15, 18, 19}, {15, 16, 17}, {15, 8, 15}, {0, 18, 19}, {18, 18, 20},
		{20, 10, 20}, {12, 10, 13}, {31, 31, 31},
	} {
		require.Equal(t, c.want, ackTimeout(c.delay, c.life), "delay %d lifetime %d", c.delay, c.life)
	}
	require.Equal(t, uint8(19), passiveAVTimeout(19))
	require.Equal(t, uint8(1), passiveAVTimeout(0))
}

// TestDREQPeriod: a DREQ nobody answers is resent at the sender's CM
// period, as Linux's cm_send_dreq_locked resends it with the CM ID's
// timeout_ms: the active side every 2 x conv(18) + conv(20) = 6144 ms,
// the passive side every conv(the REQ's local CM response timeout, 20)
// = 4096 ms (measured against Linux 6.1 rxe: docs/cm.md); after 15
// retries, DISCONNECTED. Linux's default timings (Options{}).
func TestDREQPeriod(t *testing.T) {
	for _, c := range []struct {
		name    string
		passive bool
		period  time.Duration
	}{
		{"active", false, 6144 * time.Millisecond},
		{"passive", true, 4096 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{manual: true, seed: 31})
			p := newPair(t, w, PSTCP, 31)
			a, b := w.nodes[0], w.nodes[1]
			req := p.establish(t, a.newQP(t, qp.RC), b.newQP(t, qp.RC))
			id, ch, n, deaf := p.cid, p.cch, a, b
			if c.passive {
				id, ch, n, deaf = req.ID, p.lch, b, a
			}
			deaf.agent.Close() // nobody answers the DREQ
			require.NoError(t, id.Disconnect())
			start := w.clk.Now()
			var resent []time.Duration
			for {
				if ev, ok := ch.Poll(); ok {
					require.Equal(t, EventDisconnected, ev.Type)
					break
				}
				w.manual.Advance(time.Millisecond)
				if k := n.agent.Counters()["retransmit_DREQ"]; int(k) > len(resent) {
					resent = append(resent, w.clk.Now().Sub(start))
				}
				require.Less(t, w.clk.Now().Sub(start), 20*c.period, "no DISCONNECTED")
			}
			require.Len(t, resent, 15)
			for i, d := range resent {
				require.Equal(t, time.Duration(i+1)*c.period, d, "retry %d", i+1)
			}
			require.Equal(t, 16*c.period, w.clk.Now().Sub(start))
			require.Equal(t, StateTimeWait, id.State())
		})
	}
}

// TestTimewaitLength: TIMEWAIT lasts conv(the path's timeout), 2048
// ms on either side with Linux's timings (the passive side's from the
// REQ's local ACK timeout 19, the active side's ackTimeout(the REP's
// target ACK delay 15, lifetime 18) = 19), as cm_enter_timewait.
func TestTimewaitLength(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, seed: 32})
	p := newPair(t, w, PSTCP, 32)
	a, b := w.nodes[0], w.nodes[1]
	req := p.establish(t, a.newQP(t, qp.RC), b.newQP(t, qp.RC))
	require.Equal(t, uint8(19), p.cid.avTimeout)
	require.Equal(t, uint8(19), req.ID.avTimeout)
	require.Equal(t, 6144*time.Millisecond, p.cid.cmTimeout)
	require.Equal(t, 4096*time.Millisecond, req.ID.cmTimeout)
	require.NoError(t, req.ID.Disconnect())
	w.expect(t, p.cch, EventDisconnected)
	require.NoError(t, p.cid.Disconnect())
	start := w.clk.Now()
	w.expect(t, p.lch, EventDisconnected)
	w.expect(t, p.lch, EventTimewaitExit)
	require.InDelta(t, float64(2048*time.Millisecond), float64(w.clk.Now().Sub(start)), float64(5*time.Millisecond))
}

package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The estimate follows RFC 6298, 2.2-2.3: the first sample R gives SRTT = R,
// RTTVAR = R/2; each later one RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| and
// SRTT = 7/8 SRTT + 1/8 R; RTO = SRTT + 4 RTTVAR within [lo, hi].
func TestRTTSample(t *testing.T) {
	const us = time.Microsecond
	lo, hi := 50*us, 10*time.Millisecond
	for _, tc := range []struct {
		name              string
		samples           []time.Duration
		srtt, rttvar, rto time.Duration
	}{
		{"first sample", []time.Duration{100 * us}, 100 * us, 50 * us, 300 * us},
		{"second, equal", []time.Duration{100 * us, 100 * us}, 100 * us, 37500 * time.Nanosecond, 250 * us},
		// 2nd: RTTVAR = 3/4*50 + 1/4*|100-180| = 57.5; SRTT = 7/8*100 + 1/8*180 = 110.
		{"second, longer", []time.Duration{100 * us, 180 * us}, 110 * us, 57500 * time.Nanosecond, 340 * us},
		{"floor", []time.Duration{2 * us}, 2 * us, 1 * us, lo},
		{"ceiling", []time.Duration{5 * time.Millisecond}, 5 * time.Millisecond, 2500 * us, hi},
		{"negative (clock step) counts as 0", []time.Duration{-us}, 0, 0, lo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rttState
			for _, m := range tc.samples {
				r.sample(m, lo, hi)
			}
			require.Equal(t, tc.srtt, r.srtt, "SRTT")
			require.Equal(t, tc.rttvar, r.rttvar, "RTTVAR")
			require.Equal(t, tc.rto, r.rto, "RTO")
			require.EqualValues(t, len(tc.samples), r.samples)
		})
	}
}

// A steady round trip: SRTT converges to it and RTTVAR decays, so the RTO
// comes down from the first sample's 3 R towards R (and the floor).
func TestRTTConverges(t *testing.T) {
	const R = 200 * time.Microsecond
	var r rttState
	r.sample(R, 10*time.Microsecond, time.Second)
	first := r.rto
	require.Equal(t, 3*R, first)
	for range 100 {
		r.sample(R, 10*time.Microsecond, time.Second)
	}
	require.Equal(t, R, r.srtt)
	require.Less(t, r.rttvar, time.Microsecond)
	require.Less(t, r.rto, R+4*time.Microsecond)
	// A jittered one (R +- 50 us alternating): the RTO stays above every
	// sample, so a packet merely in flight does not draw a probe.
	for i := range 200 {
		m := R + 50*time.Microsecond
		if i%2 == 1 {
			m = R - 50*time.Microsecond
		}
		r.sample(m, 10*time.Microsecond, time.Second)
	}
	require.InDelta(t, float64(R), float64(r.srtt), float64(10*time.Microsecond))
	require.Greater(t, r.rto, R+50*time.Microsecond)
}

// rttHarness is an rcHarness whose engine measures round trips, with a
// floor of 20 us and a ceiling of 1 ms (the harness's local ACK timeout is
// 4.19 ms), and a window of 4 PSNs: a sample starts at most once per 4
// PSNs.
func rttHarness(t *testing.T) *rcHarness {
	return newRCHarnessConfig(t, Config{ProbeRTT: true, ProbeMin: 20 * time.Microsecond, ProbeMax: time.Millisecond, Window: 4})
}

// ack acknowledges everything up to and including psn.
func (h *rcHarness) ack(t *testing.T, psn PSN) {
	t.Helper()
	h.respond(t, psn, ACKSyndrome(CreditInvalid))
}

// Round trips measured on the virtual clock make the estimate; the probe
// then fires one RTO after the last progress, not before, resends only the
// oldest unacknowledged packet asking for an ACK, and counts no retry.
func TestProbeFollowsRTT(t *testing.T) {
	h := rttHarness(t)
	c := h.c
	get := func(k Counter) uint64 { return c.Counters().Get(k) }
	const R = 100 * time.Microsecond
	psn := PSN(0x100)
	for i := range 40 { // one packet a round trip: a sample every fourth
		h.send(t, uint64(i))
		h.clk.Advance(R)
		h.ack(t, psn)
		psn++
	}
	sn := c.Snapshot()
	require.Equal(t, R, sn.SRTT, "SRTT is the round trip")
	require.Less(t, sn.Probe, 2*R, "RTTVAR decayed")
	require.GreaterOrEqual(t, sn.Probe, R)
	require.Zero(t, get(Probes))
	rtoNow := sn.Probe

	// Three packets lost (one SEND each, no credit limit since the ACKs).
	sent := get(SentPkts)
	h.send(t, 100, 101, 102)
	require.EqualValues(t, sent+3, get(SentPkts))
	h.clk.Advance(rtoNow - time.Nanosecond)
	require.Zero(t, get(Probes), "no probe before one RTO")
	h.clk.Advance(time.Nanosecond)
	require.EqualValues(t, 1, get(Probes), "a probe at one RTO")
	require.EqualValues(t, sent+4, get(SentPkts), "the probe resends one packet")
	require.Zero(t, get(Timeouts), "a probe counts no retry")
	require.Equal(t, c.qp.AttrLocked().RetryCnt, c.req.retryLeft, "the retry count is untouched")
	require.Zero(t, c.req.cwnd, "a probe leaves the window whole")

	// The responder had the first two: its ACK for the probe says so; the
	// requester goes on from the third, and the probes start over.
	h.ack(t, psn+1)
	require.EqualValues(t, sent+5, get(SentPkts), "go-back-N from the first missing PSN")
	require.Zero(t, c.req.probeShift)
}

// Karn's rule: a PSN sent again gives no sample, and a retry drops the
// running one, whose ACK could answer either copy. Also: one sample a
// window (4 PSNs here), the last PSN of the batch that reaches it.
func TestRTTKarn(t *testing.T) {
	h := rttHarness(t)
	c := h.c
	h.send(t, 1) // PSN 0x100: the sample
	require.True(t, c.req.rtt.on)
	h.clk.Advance(time.Millisecond) // ProbeMax before any sample: a probe resends 0x100
	require.EqualValues(t, 1, c.Counters().Get(Probes))
	require.False(t, c.req.rtt.on, "the retry dropped the sample")
	h.clk.Advance(10 * time.Microsecond)
	h.ack(t, 0x100)
	require.Zero(t, c.req.rtt.samples, "no sample from a resent PSN")
	require.Zero(t, c.Snapshot().SRTT)

	// The next sample starts a window after the last one: at 0x104.
	h.send(t, 2)
	h.send(t, 3)
	h.send(t, 4)
	require.False(t, c.req.rtt.on, "within the window of the last sample")
	h.send(t, 5)
	require.True(t, c.req.rtt.on)
	require.Equal(t, PSN(0x104), c.req.rtt.psn)
	h.clk.Advance(30 * time.Microsecond)
	h.ack(t, 0x104)
	require.EqualValues(t, 1, c.req.rtt.samples)
	require.Equal(t, 30*time.Microsecond, c.Snapshot().SRTT)

	// A sequence NAK's go-back-N: PSNs 0x105-0x108 out in one batch (its
	// last, 0x108, sampled), NAK for 0x105: the resends of 0x105-0x108
	// are not sampled, and the ACK that follows gives no sample either.
	h.send(t, 6, 7, 8, 9)
	require.True(t, c.req.rtt.on)
	require.Equal(t, PSN(0x108), c.req.rtt.psn, "one sample per batch: its last PSN")
	h.respond(t, 0x105, NAKSyndrome(NAKPSNSeqError))
	require.False(t, c.req.rtt.on)
	require.EqualValues(t, 2, c.Counters().Get(Retransmits), "the probe's and the NAK's")
	h.ack(t, 0x108)
	require.EqualValues(t, 1, c.req.rtt.samples)
}

// With a fixed Probe, ProbeRTT changes nothing: the interval is Probe and
// no round trip is measured.
func TestFixedProbeWins(t *testing.T) {
	h := newRCHarnessConfig(t, Config{Probe: 300 * time.Microsecond, ProbeRTT: true})
	c := h.c
	h.send(t, 1)
	require.False(t, c.req.rtt.on, "nothing measured with a fixed probe")
	h.clk.Advance(300*time.Microsecond - time.Nanosecond)
	require.Zero(t, c.Counters().Get(Probes))
	h.clk.Advance(time.Nanosecond)
	require.EqualValues(t, 1, c.Counters().Get(Probes))
	require.Equal(t, 300*time.Microsecond, c.Snapshot().Probe)
}

// Without any probe setting nothing is measured and Snapshot says no probe.
func TestNoProbeNoRTT(t *testing.T) {
	h := newRCHarness(t)
	h.send(t, 1)
	require.False(t, h.c.req.rtt.on)
	require.Zero(t, h.c.Snapshot().Probe)
}

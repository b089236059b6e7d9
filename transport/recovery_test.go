package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
)

// With Config.Probe the requester goes back N after Probe without an ACK,
// then after twice as long, and so on, without counting timeouts; once a
// local ACK timeout has passed without progress it counts one, and the
// retry count still ends the QP as before.
func TestProbeRetriesEarlyThenTimesOut(t *testing.T) {
	const probe = 500 * time.Microsecond
	h := newRCHarnessProbe(t, probe)
	c := h.c
	get := func(k Counter) uint64 { return c.Counters().Get(k) }
	timeout := rto(10) // the harness's Timeout attribute: 4.19 ms

	h.send(t, 1) // PSN 0x100, lost
	require.EqualValues(t, 1, get(SentPkts))
	h.clk.Advance(probe)
	require.EqualValues(t, 1, get(Probes))
	require.EqualValues(t, 2, get(SentPkts), "resent after one probe interval")
	require.Zero(t, get(Timeouts))
	h.clk.Advance(2 * probe)
	require.EqualValues(t, 2, get(Probes), "backed off to twice the interval")
	require.EqualValues(t, 3, get(SentPkts))
	start := h.clk.Now().Add(-3 * probe)
	for get(Timeouts) == 0 {
		require.True(t, h.clk.AdvanceToNext(), "no retransmit timer")
	}
	if el := h.clk.Now().Sub(start); el < timeout || el > 2*timeout {
		t.Errorf("first timeout after %v, want one to two timeouts (%v)", el, timeout)
	}
	// Probes stop once a timeout's worth went by without progress.
	probes := get(Probes)
	for h.cq.Poll(make([]cq.WC, 1)) == 0 {
		require.True(t, h.clk.AdvanceToNext(), "no retransmit timer")
	}
	require.Equal(t, probes, get(Probes), "no probe after the first timeout")
	require.EqualValues(t, 8, get(Timeouts), "retry count 7: the eighth timeout ends it")
	require.EqualValues(t, 1, get(RetryExceededErr))
}

// Progress (an ACK) starts the probes over at Probe.
func TestProbeRestartsAfterProgress(t *testing.T) {
	const probe = 500 * time.Microsecond
	h := newRCHarnessProbe(t, probe)
	c := h.c
	get := func(k Counter) uint64 { return c.Counters().Get(k) }
	h.send(t, 1, 2) // PSN 0x100 (the second waits for credits): lost
	h.clk.Advance(probe)
	h.clk.Advance(2 * probe)
	require.EqualValues(t, 2, get(Probes))
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid)) // it arrived; PSN 0x101 goes, lost
	// Everything before 0x101 acknowledged: 0x101 arms a timer of its
	// own, one probe long again (not the running one, which would fire
	// up to twice as late).
	h.clk.Advance(probe - time.Nanosecond)
	require.EqualValues(t, 2, get(Probes))
	h.clk.Advance(time.Nanosecond)
	require.EqualValues(t, 3, get(Probes))
	h.clk.Advance(2 * probe) // then twice as long
	require.EqualValues(t, 4, get(Probes))
	require.Zero(t, get(Timeouts))
}

// Without Config.Probe nothing changes: the first retry is the timeout's.
func TestNoProbeWaitsForTheTimeout(t *testing.T) {
	h := newRCHarness(t)
	c := h.c
	h.send(t, 1)
	h.clk.Advance(rto(10) - time.Nanosecond)
	require.EqualValues(t, 1, c.Counters().Get(SentPkts))
	require.True(t, h.clk.AdvanceToNext())
	require.EqualValues(t, 1, c.Counters().Get(Timeouts))
	require.EqualValues(t, 2, c.Counters().Get(SentPkts))
	require.Zero(t, c.Counters().Get(Probes))
}

// A second PSN sequence error NAK for the PSN a retry restarted from
// starts another retry once that retry has resent the PSN and the one
// after it (the responder repeats its NAK for a round that missed the PSN
// again); before then it answers older packets and is ignored.
func TestRepeatedSeqNAK(t *testing.T) {
	h := newRCHarness(t)
	c := h.c
	get := func(k Counter) uint64 { return c.Counters().Get(k) }
	h.send(t, 1)
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid)) // no credit limit from here
	h.send(t, 2, 3, 4)                              // PSNs 0x101-0x103, lost
	require.EqualValues(t, 4, get(SentPkts))
	h.respond(t, 0x101, NAKSyndrome(NAKPSNSeqError))
	require.EqualValues(t, 1, get(Retransmits))
	require.EqualValues(t, 7, get(SentPkts))
	h.respond(t, 0x101, NAKSyndrome(NAKPSNSeqError)) // the round missed 0x101 too
	require.EqualValues(t, 2, get(Retransmits))
	require.EqualValues(t, 10, get(SentPkts))

	// One packet: the retry resent only the NAKed PSN; a second NAK for it
	// cannot come from a packet sent after the retry.
	h2 := newRCHarness(t)
	h2.send(t, 1)
	h2.respond(t, 0x100, NAKSyndrome(NAKPSNSeqError))
	h2.respond(t, 0x100, NAKSyndrome(NAKPSNSeqError))
	require.EqualValues(t, 1, h2.c.Counters().Get(Retransmits))
}

// The responder NAKs a gap once, again when the requester's PSNs go back
// (a go-back-N round that lacks the expected PSN too), and again after
// seqNAKRepeat dropped packets (the NAK may have been lost).
func TestResponderRepeatsSeqNAK(t *testing.T) {
	h := newRCHarness(t) // the responder expects PSN 0
	c := h.c
	get := func(k Counter) uint64 { return c.Counters().Get(k) }
	req := func(psn PSN) {
		t.Helper()
		info := RCSendOnly.Info()
		b := make([]byte, info.HdrLen+4)
		BTH(b).Init(RCSendOnly, DefaultPKey, c.qp.Num(), psn)
		pb := h.e.getBuf(wakeSchedule)
		pb.own = append(pb.own[:0], b...)
		require.NoError(t, Parse(pb.own, &pb.pkt))
		pb.src = h.peer
		h.e.deliver(pb, wakeSchedule)
	}
	for psn := PSN(2); psn <= 4; psn++ { // PSNs 0 and 1 lost
		req(psn)
	}
	require.EqualValues(t, 3, get(OutOfSeqRequest))
	require.EqualValues(t, 1, get(SentPkts), "one NAK for the gap")
	req(1) // the requester went back to 1: PSN 0 lost again
	require.EqualValues(t, 2, get(SentPkts), "NAKed again for the new round")
	require.EqualValues(t, 1, get(SeqNAKRepeats))
	for psn := PSN(2); psn < 2+seqNAKRepeat-1; psn++ {
		req(psn)
	}
	require.EqualValues(t, 2, get(SentPkts), "the round's later packets are dropped silently")
	req(2 + seqNAKRepeat - 1)
	require.EqualValues(t, 3, get(SentPkts), "after seqNAKRepeat drops the NAK goes again")
	require.EqualValues(t, 2, get(SeqNAKRepeats))
}

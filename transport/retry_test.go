package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// rcHarness is an RC QP in RTS on an engine with no link, under a manual
// clock and the inline executor. Its peer is a QP number nobody has, on
// this device: what it sends is dropped (lost), and the test plays the
// responder by handing ACKs and NAKs to the completer.
type rcHarness struct {
	e    *Engine
	c    *Conn
	clk  *clock.Manual
	cq   *cq.CQ
	peer netip.Addr
}

func newRCHarness(t *testing.T) *rcHarness {
	t.Helper()
	return newRCHarnessProbe(t, 0)
}

// newRCHarnessProbe is newRCHarness with Config.Probe set.
func newRCHarnessProbe(t *testing.T, probe time.Duration) *rcHarness {
	t.Helper()
	return newRCHarnessConfig(t, Config{Probe: probe})
}

// newRCHarnessConfig is newRCHarness on an engine with cfg's early-retry
// settings (Probe, ProbeRTT, ProbeMin, ProbeMax) and Window.
func newRCHarnessConfig(t *testing.T, cfg Config) *rcHarness {
	t.Helper()
	clk := clock.NewManual()
	kt := keys.NewTable(8)
	e, err := NewEngine(Config{Clock: clk, Exec: task.NewInline(), Keys: kt, Mcast: mcast.NewTable(4, 4),
		Probe: cfg.Probe, ProbeRTT: cfg.ProbeRTT, ProbeMin: cfg.ProbeMin, ProbeMax: cfg.ProbeMax, Window: cfg.Window})
	require.NoError(t, err)
	peer := netip.MustParseAddr("198.18.0.1")
	require.NoError(t, e.SetPort(PortConfig{Addrs: []netip.Addr{peer}}))
	c := newTestConn(t, e)
	q, scq := c.qp, c.qp.SendCQ()
	for _, a := range []qp.Attr{
		{State: qp.Init, Port: 1},
		{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: 0x99, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: qp.AddressVector{DGID: netdev.GIDFromIP(peer), HopLimit: 64, Port: 1}},
		{State: qp.RTS, SQPSN: 0x100, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
	} {
		require.NoError(t, c.Modify(&a, qp.RequiredAttrs(qp.RC, q.State(), a.State)), "to %v", a.State)
	}
	return &rcHarness{e: e, c: c, clk: clk, cq: scq, peer: peer}
}

// newTestConn returns a Conn on e for a new RC QP (QPN 0x11, in RESET)
// whose CQ, for sends and receives, has 64 entries.
func newTestConn(t *testing.T, e *Engine) *Conn { return newTestConnNum(t, e, 0x11) }

// send posts signaled inline SENDs of one packet each.
func (h *rcHarness) send(t *testing.T, wrids ...uint64) {
	t.Helper()
	wrs := make([]qp.SendWR, len(wrids))
	for i, id := range wrids {
		wrs[i] = qp.SendWR{WRID: id, Opcode: qp.OpSend, Flags: qp.Inline | qp.Signaled, InlineData: []byte{1, 2, 3, 4}}
	}
	require.NoError(t, h.c.PostSend(wrs))
}

// respond hands the completer an ACK-type packet for psn with syndrome syn,
// as if from the peer.
func (h *rcHarness) respond(t *testing.T, psn PSN, syn Syndrome) {
	t.Helper()
	info := RCAck.Info()
	b := make([]byte, info.HdrLen)
	BTH(b).Init(RCAck, DefaultPKey, h.c.qp.Num(), psn)
	AETH(b[info.Offset(HdrAETH):]).SetSyndrome(syn)
	pb := h.e.getBuf(wakeSchedule)
	pb.own = append(pb.own[:0], b...)
	require.NoError(t, Parse(pb.own, &pb.pkt))
	pb.src = h.peer
	h.e.deliver(pb, wakeSchedule)
}

// An RNR wait whose message was acknowledged meanwhile (the responder took
// a retransmission after its RNR NAK) ends in a retry with nothing to
// send. That RNR retry must not outlive it: a later timeout retry resends
// the whole window, not just its first message as after an RNR NAK.
func TestRNRRetryWithNothingToSendDoesNotLimitLaterRetry(t *testing.T) {
	h := newRCHarness(t)
	c := h.c
	sent := func() uint64 { return c.Counters().Get(SentPkts) }

	h.send(t, 1) // PSN 0x100, lost
	require.EqualValues(t, 1, sent())
	h.respond(t, 0x100, RNRNAKSyndrome(1))
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid))
	wcs := make([]cq.WC, 4)
	require.Equal(t, 1, h.cq.Poll(wcs))
	require.Equal(t, cq.Success, wcs[0].Status)
	h.clk.Advance(RNRTimerCode(1).Duration()) // the RNR wait ends: nothing to resend
	require.EqualValues(t, 1, sent())
	require.Zero(t, c.Counters().Get(Retransmits))

	h.send(t, 2, 3) // PSNs 0x101 and 0x102, lost
	require.EqualValues(t, 3, sent())
	for c.Counters().Get(Timeouts) == 0 {
		require.True(t, h.clk.AdvanceToNext(), "no retransmit timer")
	}
	require.EqualValues(t, 1, c.Counters().Get(Retransmits))
	require.EqualValues(t, 5, sent(), "the timeout retry resends both messages")
}

// An RNR NAK can answer an older copy of a packet that the responder then
// accepts (the copies crossed on the link). The ACK that passes the NAKed
// PSN ends the RNR wait: the requester goes on at once, and when the RNR
// timer fires it resends nothing that was acknowledged. Before, the timer
// restarted the message at the NAKed PSN, behind the acknowledged point,
// and the one-packet limit after an RNR NAK then stopped the requester for
// good (simulation seed 81547, delay and jitter, no loss: RETRY_EXC_ERR).
func TestLateRNRNakAfterTheAckEndsTheWait(t *testing.T) {
	h := newRCHarness(t)
	c := h.c
	buf := make([]byte, 3000) // three packets at MTU 1024: PSNs 0x100-0x102
	mr, err := h.e.keys.RegMR(c.qp.PD(), buf, 0x1000, keys.LocalWrite)
	require.NoError(t, err)
	require.NoError(t, c.PostSend([]qp.SendWR{{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []qp.SGE{{Addr: 0x1000, Length: 3000, Lkey: mr.Lkey}}}}))
	require.EqualValues(t, 3, c.Counters().Get(SentPkts))

	h.respond(t, 0x100, RNRNAKSyndrome(1))          // for an older copy of the first packet
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid)) // the responder took the first packet after all
	h.clk.Advance(RNRTimerCode(1).Duration())       // the RNR timer fires
	h.respond(t, 0x102, ACKSyndrome(CreditInvalid)) // and the rest arrived
	wcs := make([]cq.WC, 4)
	require.Equal(t, 1, h.cq.Poll(wcs), "the SEND completes")
	require.Equal(t, cq.Success, wcs[0].Status)
	require.Zero(t, c.Counters().Get(Retransmits), "nothing acknowledged is resent")
	require.Equal(t, qp.RTS, c.qp.State())
}

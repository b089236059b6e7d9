package transport

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// The retransmit timers share one clock timer: set while anything is
// armed, gone once the last QP has nothing outstanding.
func TestRetransmitTimerGoneWhenIdle(t *testing.T) {
	h := newRCHarness(t)
	require.Zero(t, h.clk.Pending(), "a new QP arms nothing")
	h.send(t, 1) // PSN 0x100
	require.Equal(t, 1, h.clk.Pending())
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid))
	h.send(t, 2) // PSN 0x101: the running timer covers it
	require.Equal(t, 1, h.clk.Pending(), "one engine timer, not one per send")
	h.respond(t, 0x101, ACKSyndrome(CreditInvalid))
	// The timer still runs out once and finds nothing outstanding.
	h.clk.Advance(rto(10))
	require.Zero(t, h.clk.Pending(), "idle: no timer")
	require.Zero(t, h.c.Counters().Get(Timeouts))
	require.EqualValues(t, 2, h.c.Counters().Get(SentPkts))
}

// A timer that runs out after progress is put back for a whole timeout
// from then, without a retry; without progress it times out on time.
func TestRetransmitTimerProgressPostpones(t *testing.T) {
	h := newRCHarness(t)
	d := rto(10)
	get := func(k Counter) uint64 { return h.c.Counters().Get(k) }
	h.send(t, 1, 2) // PSNs 0x100 (the second waits for credits)
	h.clk.Advance(d / 2)
	h.respond(t, 0x100, ACKSyndrome(CreditInvalid)) // progress; 0x101 goes
	h.clk.Advance(d / 2)                            // due: progress, armed again
	require.Zero(t, get(Timeouts))
	h.clk.Advance(d - time.Nanosecond)
	require.Zero(t, get(Timeouts), "a whole timeout from the re-arm")
	h.clk.Advance(time.Nanosecond)
	require.EqualValues(t, 1, get(Timeouts))
	require.EqualValues(t, 1, get(Retransmits))
}

// Several QPs' deadlines on the one engine timer each fire at their own
// time: QPs of an engine with different timeouts.
func TestRetransmitTimersOfSeveralQPs(t *testing.T) {
	h := newRCHarness(t)
	c2 := newTestConnNum(t, h.e, 0x12)
	bringUpTestConn(t, c2, h.peer, 12) // a timeout 4x as long
	h.send(t, 1)
	require.NoError(t, c2.PostSend(oneSend(7)))
	require.Equal(t, 1, h.clk.Pending())
	h.clk.Advance(rto(10))
	require.EqualValues(t, 1, h.c.Counters().Get(Timeouts))
	require.Zero(t, c2.Counters().Get(Timeouts))
	h.clk.Advance(rto(12) - rto(10))
	require.EqualValues(t, 1, c2.Counters().Get(Timeouts))
}

// The deadline heap pops in (deadline, arm order) order.
func TestTimerHeapOrder(t *testing.T) {
	var s sweeper
	r := rand.New(rand.NewPCG(1, 2))
	var want []timerEnt
	for i := range 500 {
		e := timerEnt{at: int64(r.IntN(50)), seq: uint64(i + 1)}
		s.push(e)
		want = append(want, e)
		if i%7 == 0 { // pops interleaved with pushes
			got := s.pop()
			min := 0
			for j := range want {
				if want[j].less(want[min]) {
					min = j
				}
			}
			require.Equal(t, want[min], got)
			want = append(want[:min], want[min+1:]...)
		}
	}
	prev := timerEnt{at: -1}
	for len(s.heap) > 0 {
		got := s.pop()
		require.True(t, prev.less(got), "%+v after %+v", got, prev)
		prev = got
	}
}

// newTestConnNum is newTestConn for QP number num.
func newTestConnNum(t *testing.T, e *Engine, num uint32) *Conn {
	return newTestConnWith(t, e, num, nil)
}

// newTestConnWith is newTestConnNum with the QP's config changed by set
// (nil: as it is) before the QP is made.
func newTestConnWith(t *testing.T, e *Engine, num uint32, set func(*qp.Config)) *Conn {
	t.Helper()
	scq, err := cq.New(64)
	require.NoError(t, err)
	cfg := qp.Config{
		Type: qp.RC, PD: keys.NewPD(1), SendCQ: scq, RecvCQ: scq, Keys: e.keys,
		Cap:    qp.Cap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxInlineData: 64},
		Limits: &qp.Limits{MaxMTU: qp.MTU4096, MaxRdAtomic: 1, MaxDestRdAtomic: 1, PkeyTableLen: 1, GIDTableLen: 1, Ports: 1},
	}
	if set != nil {
		set(&cfg)
	}
	q, err := qp.New(num, cfg)
	require.NoError(t, err)
	c, err := e.NewConn(q)
	require.NoError(t, err)
	return c
}

// bringUpTestConn moves c to RTS towards peer, as newRCHarness does, with
// the given timeout code.
func bringUpTestConn(t *testing.T, c *Conn, peer netip.Addr, timeout uint8) {
	t.Helper()
	for _, a := range []qp.Attr{
		{State: qp.Init, Port: 1},
		{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: 0x98, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: qp.AddressVector{DGID: netdev.GIDFromIP(peer), HopLimit: 64, Port: 1}},
		{State: qp.RTS, SQPSN: 0x200, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
	} {
		require.NoError(t, c.Modify(&a, qp.RequiredAttrs(qp.RC, c.qp.State(), a.State)), "to %v", a.State)
	}
}

// oneSend is a signaled inline SEND of one packet.
func oneSend(wrid uint64) []qp.SendWR {
	return []qp.SendWR{{WRID: wrid, Opcode: qp.OpSend, Flags: qp.Inline | qp.Signaled, InlineData: []byte{1, 2, 3, 4}}}
}

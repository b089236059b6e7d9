package transport

// The RC requester's round-trip estimate, for early retries that follow
// the link (Config.ProbeRTT).
//
// A lost packet that no later packet reveals (the tail of what is out, a
// lost sequence NAK, the lost ACK a full window waits for) is found only
// by a timer. Config.Probe fixes that timer's first interval for every QP;
// with Config.ProbeRTT each RC QP measures its own round trip and probes
// after RTO = SRTT + 4 RTTVAR, as TCP's retransmit timer (RFC 6298, 2):
// first sample R: SRTT = R, RTTVAR = R/2; then RTTVAR = 3/4 RTTVAR +
// 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R; the RTO clamped to
// [ProbeMin, ProbeMax], and ProbeMax until the first sample.
//
// The measurement costs two clock reads per window of PSNs (Config.Window,
// 128), none per packet: at the end of a send batch that sent a PSN for
// the first time, with no sample running and a window's PSNs gone by since
// the last sample started, the batch's last PSN becomes the sample and the
// clock is read once; the first ACK or response past it reads the clock
// again and gives the sample. Karn's rule (RFC 6298, 3): a PSN sent again is never
// a sample (hi, one past the highest PSN sent, tells a first transmission
// from a resend), and any retry drops a running sample, since its ACK
// could then answer either copy.
//
// A sample is the time from sending a PSN to the first progress past it:
// it includes the responder's ACK coalescing and, on a worker pool, the
// wake-ups on both sides. That is the quantity the probe waits against:
// the probe fires when no progress came for about an RTO, so an RTO
// above the samples and their variation is what keeps it from firing
// while packets are merely in flight.

import (
	"time"

	"github.com/softverbs/softverbs/clock"
)

// Defaults of ProbeMin and ProbeMax.
const (
	// DefaultProbeMin is the least early-retry interval ProbeRTT sets.
	// Below a few tens of microseconds a Go timer on a busy machine fires
	// late anyway, and the engine's timer fires about once per interval
	// while a QP has anything unacknowledged.
	DefaultProbeMin = 50 * time.Microsecond
	// DefaultProbeMax is the most, and the interval before the first
	// sample: a probe is one packet (a spurious one costs a packet and
	// its ACK), and the local ACK timeout still governs counted retries.
	DefaultProbeMax = 2 * time.Millisecond
)

// rttState is one RC requester's round-trip estimate (guarded by the QP
// lock).
type rttState struct {
	srtt, rttvar time.Duration // 0, 0: no sample yet
	rto          time.Duration // the probe interval they give (0: ProbeMax)
	sentAt       int64         // the running sample's send time (sweeper.now)
	psn          PSN           // the running sample's PSN
	hi           PSN           // one past the highest PSN sent
	next         PSN           // no sample starts before this PSN: one a window
	on           bool          // a sample is running
	samples      uint32        // samples taken (tests, Snapshot)
	one          bool          // the retry asked is a probe: one packet, AckReq

	// The early-retry timer (probe.go), made on first use.
	probeTimer clock.Timer
	probeD     time.Duration // the interval it was armed with
	probeStale int32         // fires under way for an arm since moved or stopped
	probeArmed bool
	probeIdle  bool // armed, but nothing was outstanding since: the next send moves it
}

// rttOn reports whether the engine's RC requesters measure round trips.
func (e *Engine) rttOn() bool { return e.cfg.ProbeRTT && e.cfg.Probe == 0 }

// rttResetLocked starts the estimate over at PSN psn (the QP enters RTS).
func (c *Conn) rttResetLocked(psn PSN) {
	c.stopProbeLocked()
	c.req.rtt = rttState{hi: psn, next: psn}
}

// rttSentLocked notes the end of a send batch that left the requester at
// req.psn: if it sent a PSN for the first time and no sample runs, its
// last PSN becomes one.
func (c *Conn) rttSentLocked() {
	r := &c.req.rtt
	if !r.hi.Less(c.req.psn) {
		return // nothing sent for the first time (a retry's resends, or nothing)
	}
	r.hi = c.req.psn
	last := c.req.psn.Sub(1)
	if r.on || last.Less(r.next) {
		return
	}
	r.on, r.psn, r.sentAt = true, last, c.e.sweep.now()
	r.next = last.Add(uint32(c.e.cfg.Window))
}

// rttAckedLocked notes progress to psn (everything before it acknowledged).
func (c *Conn) rttAckedLocked(psn PSN) {
	r := &c.req.rtt
	if !r.on || !r.psn.Less(psn) {
		return
	}
	r.on = false
	r.sample(time.Duration(c.e.sweep.now()-r.sentAt), c.e.cfg.ProbeMin, c.e.cfg.ProbeMax)
}

// rttRetryLocked drops a running sample: after a retry its ACK may answer
// the resent copy (Karn's rule).
func (c *Conn) rttRetryLocked() { c.req.rtt.on = false }

// sample folds round-trip sample m into the estimate (RFC 6298, 2.2-2.4)
// and sets rto, clamped to [lo, hi].
func (r *rttState) sample(m, lo, hi time.Duration) {
	m = max(m, 0)
	if r.samples == 0 {
		r.srtt, r.rttvar = m, m/2
	} else {
		d := r.srtt - m
		if d < 0 {
			d = -d
		}
		r.rttvar += (d - r.rttvar) / 4
		r.srtt += (m - r.srtt) / 8
	}
	r.samples++
	r.rto = min(max(r.srtt+4*r.rttvar, lo), hi)
}

// probeBase returns the first early-retry interval of c: Config.Probe,
// the QP's RTO under ProbeRTT, or 0 (no early retries).
func (c *Conn) probeBase() time.Duration {
	if p := c.e.cfg.Probe; p != 0 || !c.e.cfg.ProbeRTT {
		return p
	}
	if r := c.req.rtt.rto; r > 0 {
		return r
	}
	return c.e.cfg.ProbeMax
}

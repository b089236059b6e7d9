package transport

// Early retries (Config.Probe, Config.ProbeRTT): the probe timer.
//
// An RC requester with probes on has, while anything is unacknowledged, a
// timer of its own due one probe interval after the last progress (or
// after the first packet, from idle). Progress pushes it back (a Reset of
// the runtime timer, about 70 ns, once per ACK or response that moves the
// acknowledged point), so that while ACKs flow it never fires; with
// nothing outstanding it is stopped, so an idle QP has no timer pending.
// This replaces arming the engine's retransmit timer (sweeper.go) with the
// probe interval, which made the engine's timer fire once per interval
// for every busy QP, each fire a goroutine and usually the wake-up of an
// idle thread: with a 50 us interval that was a third more CPU time per
// 64 KiB WRITE on a lossless inline pair (BenchmarkFabricProbeCost). It
// also makes the probe come one interval after the last progress, not
// one to two.
//
// When it fires with no progress since, the requester sends the oldest
// unacknowledged packet again, asking for an ACK (retryLocked with
// rtt.one), counts `probes`, and the next probe waits twice as long. A
// probe never counts against the retry count and leaves the send window
// as it is: the responder answers the resent packet with an ACK for
// everything it has (a duplicate's ACK, IBTA 9.7.5.1.1, as rxe), so a
// lost ACK costs one packet, and a lost tail or NAK is resent from the
// first missing PSN. Once the probe intervals since progress add up to the
// QP's local ACK timeout, or a timeout counted (the engine's timer, as
// without probes), no more probes go until progress.

import "time"

// probing reports whether RC requesters retry early.
func (e *Engine) probing() bool { return e.cfg.Probe > 0 || e.cfg.ProbeRTT }

// armProbeLocked sets the probe timer for the next probe interval from
// now, unless probes are spent or the interval reaches the local ACK
// timeout.
func (c *Conn) armProbeLocked() {
	r := &c.req.rtt
	d := c.probeBase() << c.req.probeShift
	t := c.qp.AttrLocked().Timeout
	if d <= 0 || c.req.probesSpent || t == 0 || c.req.stalled+d > rto(t) {
		c.stopProbeLocked()
		return
	}
	if r.probeTimer != nil {
		if rt, ok := r.probeTimer.(interface{ Reset(time.Duration) bool }); ok {
			// A real timer: moved, not made again. If it was armed
			// and is no longer pending, its fire is under way.
			if !rt.Reset(d) && r.probeArmed {
				r.probeStale++
			}
			r.probeD, r.probeArmed = d, true
			return
		}
		c.stopProbeLocked()
	}
	r.probeD, r.probeArmed = d, true
	r.probeTimer = c.e.clk.AfterFunc(d, c.onProbe)
}

// stopProbeLocked stops the probe timer (nothing outstanding, or reset).
func (c *Conn) stopProbeLocked() {
	r := &c.req.rtt
	if r.probeArmed {
		r.probeArmed = false
		if !r.probeTimer.Stop() {
			r.probeStale++ // its fire is under way: onProbe ignores it
		}
	}
}

// probeProgressLocked pushes the probe timer back after progress. With
// nothing outstanding it leaves the timer as it is, marked idle: it fires
// once, for nothing, unless the next packet moves it first (stopping it
// here and arming it again for the next packet cost a wake-up of the Go
// runtime's poller per message: 6% more CPU time per 64 KiB WRITE on the
// inline pair, where every WRITE is acknowledged before the next).
func (c *Conn) probeProgressLocked() {
	if c.comp.psn == c.req.maxPSN {
		c.req.rtt.probeIdle = true
		return
	}
	c.armProbeLocked()
}

// probeSentLocked makes sure the probe timer runs for what is outstanding
// after a send batch.
func (c *Conn) probeSentLocked() {
	if r := &c.req.rtt; !r.probeArmed || r.probeIdle {
		r.probeIdle = false
		c.armProbeLocked()
	}
}

// onProbe runs when the probe timer fires: a probe is due if the timer is
// still armed for now (not pushed back or stopped since) and something is
// unacknowledged; the send task resends.
func (c *Conn) onProbe() {
	if c.stopped.Load() {
		return
	}
	c.qp.Lock()
	r := &c.req
	if r.rtt.probeStale > 0 || !r.rtt.probeArmed {
		// The fire of an arm moved or stopped while it was under way
		// (a later fire, if any, is the armed one's: late, not early).
		if r.rtt.probeStale > 0 {
			r.rtt.probeStale--
		}
		c.qp.Unlock()
		return
	}
	r.rtt.probeArmed, r.rtt.probeIdle = false, false
	wake := false
	if c.comp.psn != r.maxPSN && !r.rnrWait && !r.probesSpent {
		c.count(Probes)
		r.stalled += r.rtt.probeD
		r.probeShift++
		r.rtt.one = true
		r.needRetry = true
		r.retryPSN = c.comp.psn
		r.retriedValid = false
		wake = true
	}
	c.qp.Unlock()
	if wake {
		c.sendTask.Schedule() // the send task resends and arms the next probe
	}
}

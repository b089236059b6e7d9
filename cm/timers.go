package cm

import "time"

// The CM's timers, derived as Linux's cm.c derives them (facts from
// drivers/infiniband/core/cm.c: ib_send_cm_req, cm_req_handler,
// cm_send_dreq_locked, cm_rep_handler, cm_mra_handler,
// cm_enter_timewait, cm_ack_timeout; see docs/cm.md, "Timers"):
//
//   - Each connection has one resend period for everything it sends and
//     waits an answer for (REQ, REP, DREQ). The active side's is
//     2 x conv(packet lifetime) + conv(remote CM response timeout)
//     (6144 ms with Linux's 18 and 20); the passive side's is conv(the
//     REQ's local CM response timeout) (4096 ms from a Linux or softverbs
//     peer). A passive side that disconnects resends its DREQ at its
//     own period, not the active side's.
//   - The path's timeout exponent: the active side's starts at packet
//     lifetime + 1 and, at the REP, becomes ackTimeout(the REP's target
//     ACK delay, packet lifetime); the passive side's is the REQ's local
//     ACK timeout (at least 1). TIMEWAIT lasts conv of it; an MRA's wait
//     is conv(its service timeout) + conv of it.
//   - SIDR_REQ: conv(response timeout).

// reqTimeout is the active side's resend period.
func (a *Agent) reqTimeout() time.Duration {
	return 2*convTime(a.opts.PacketLifetime) + convTime(a.opts.ResponseTimeout)
}

// timeWait is the TIMEWAIT of an ID whose path timeout was never set
// from a REQ or a REP: conv(packet lifetime + 1).
func (a *Agent) timeWait() time.Duration { return convTime(a.opts.PacketLifetime + 1) }

// cmTimeoutOf is id's resend period (the active side's until set).
func (a *Agent) cmTimeoutOf(id *ID) time.Duration {
	if id.cmTimeout > 0 {
		return id.cmTimeout
	}
	return a.reqTimeout()
}

// avTimeoutOf is id's path timeout exponent (packet lifetime + 1 until
// set).
func (a *Agent) avTimeoutOf(id *ID) uint8 {
	if id.avTimeout > 0 {
		return id.avTimeout
	}
	return a.opts.PacketLifetime + 1
}

// passiveAVTimeout is the passive side's path timeout exponent from the
// REQ's local ACK timeout t: the packet lifetime is t - 1 (t if 0), and
// the path timeout lifetime + 1.
func passiveAVTimeout(t uint8) uint8 {
	if t > 0 {
		t--
	}
	return t + 1
}

// ackTimeout is the local ACK timeout exponent for a target ACK delay and
// a packet lifetime (IBTA: 4.096 µs x 2^t >= 4.096 µs x 2^delay + 2 x
// 4.096 µs x 2^lifetime), as Linux's cm_ack_timeout rounds it: the
// larger of delay and lifetime + 1, plus one when the other is within a
// factor of two of it, at most 31.
func ackTimeout(delay, lifetime uint8) uint8 {
	t := lifetime + 1
	if t >= delay {
		if delay >= t-1 {
			t++
		}
	} else {
		t = delay
		if lifetime+1 >= delay-1 {
			t++
		}
	}
	return min(t, 31)
}

package transport

// The RC requester's send window under loss. Go-back-N resends everything
// after a lost packet, so a loss costs about as many packets as are
// unacknowledged: with Config.Window (128) PSNs out and 5% of frames lost,
// about one packet in seven is new. After a go-back-N retry (a sequence
// error NAK, an implied NAK, a probe or a timeout; not an RNR NAK, which
// is no loss) the window halves, down to minWindow, and it grows back by
// one PSN for every window's worth of PSNs acknowledged (additive
// increase, multiplicative decrease, as TCP's congestion avoidance),
// until it is Config.Window again. Only how many PSNs the requester has
// out changes: the packets, their PSNs and AckReq bits stay what IBTA
// and rxe expect (a shrunk window asks for an ACK at its edge, so the
// responder answers when the requester has to wait).

// minWindow is the least the window shrinks to: a window of the fabric's
// 64 KiB messages at MTU 4096 and then some, so that a lossy link still
// keeps a message or two in flight.
const minWindow = 32

// windowLocked returns how many PSNs the requester may have
// unacknowledged.
func (c *Conn) windowLocked() int32 {
	if w := c.req.cwnd; w > 0 {
		return w
	}
	return int32(c.e.cfg.Window)
}

// shrinkWindowLocked halves the window after a go-back-N retry.
func (c *Conn) shrinkWindowLocked() {
	c.req.cwnd = max(c.windowLocked()/2, min(minWindow, int32(c.e.cfg.Window)))
	c.req.cwndAcked = 0
	if c.req.cwnd >= int32(c.e.cfg.Window) {
		c.req.cwnd = 0 // a window already at the floor
	}
}

// growWindowLocked notes n more PSNs acknowledged: one more PSN of window
// for each window's worth, until the window is whole again.
func (c *Conn) growWindowLocked(n int32) {
	if c.req.cwnd == 0 || n <= 0 {
		return
	}
	c.req.cwndAcked += n
	for c.req.cwndAcked >= c.req.cwnd && c.req.cwnd > 0 {
		c.req.cwndAcked -= c.req.cwnd
		c.req.cwnd++
		if c.req.cwnd >= int32(c.e.cfg.Window) {
			c.req.cwnd, c.req.cwndAcked = 0, 0
		}
	}
}

// windowEdgeLocked reports whether a packet that ends before PSN end fills
// a shrunk window: it then asks for an ACK, as the requester waits for one.
func (c *Conn) windowEdgeLocked(end PSN) bool {
	return c.req.cwnd > 0 && end.Diff(c.comp.psn) >= c.req.cwnd
}

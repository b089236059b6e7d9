package cq

// Source is where an external CQ's completions live: a queue this package
// does not fill, such as the completion ring of a CQ that rvtd serves to
// another process (rvt.Dial). The CQ's methods pass to it; what stays
// with the CQ is its bookkeeping: references, the handlers, the channel,
// destruction.
//
// Poll, Len and Depth are called without the CQ's lock; Arm, Resize and
// Destroy with it held (they must not call back into the CQ). Arm is
// ArmAndCheck: it requests the next (or next solicited) completion's event
// and reports whether completions are queued already.
type Source interface {
	Poll(out []WC) int
	Len() int
	Depth() int
	Arm(solicitedOnly bool) (queued bool, err error)
	Resize(depth int) error
	Destroy() error
}

// NewExternal returns a CQ whose completions come from src. Push and its
// variants are not for it: nothing queues in the CQ itself. The source
// reports its completion events with Notify and an overflow with Fail.
func NewExternal(src Source) *CQ { return &CQ{src: src} }

// External returns the CQ's source, or nil for a CQ of this package.
func (c *CQ) External() Source { return c.src }

// Notify is an external CQ's completion event (its arm condition met):
// the CQ is delivered to its channel and the completion handler runs, as
// when a pushed completion meets the arm of an ordinary CQ. A destroyed
// CQ ignores it.
func (c *CQ) Notify() {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return
	}
	comp := c.onComp
	c.deliverLocked()
	c.mu.Unlock()
	if comp != nil {
		comp(c)
	}
}

// Fail puts an external CQ in the error state (its source overflowed or
// stopped) and calls the error handler, once for the life of the CQ.
func (c *CQ) Fail() {
	c.mu.Lock()
	if c.destroyed || c.overflowed {
		c.mu.Unlock()
		return
	}
	c.overflowed = true
	f := c.onError
	c.mu.Unlock()
	if f != nil {
		f(c)
	}
}

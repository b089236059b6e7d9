package cq

import (
	"context"
	"sync/atomic"
)

// Channel is a completion event channel, like ibv_comp_channel: CQs attached
// to it (CQ.Attach) are delivered to it when their arm condition is met, and
// a consumer waits for them with Get.
//
// Events coalesce: while an event for a CQ is queued and not yet taken by
// Get, further events for that CQ are merged into it, so a CQ appears at most
// once in the queue. A consumer must therefore poll the CQ until it is empty
// (and re-arm) after each event. Delivery never blocks the producer: if the
// channel is full the event is dropped and counted (Dropped); with a capacity
// at least the number of attached CQs this cannot happen.
type Channel struct {
	events  chan *CQ
	dropped atomic.Uint64
}

// NewChannel returns a channel that queues up to capacity events (at least 1).
func NewChannel(capacity int) *Channel {
	return &Channel{events: make(chan *CQ, max(capacity, 1))}
}

// Get waits for an event and returns its CQ, or ctx.Err() if ctx is done
// first. Each event returned must be acknowledged with CQ.AckEvents before
// the CQ can be destroyed. Events for CQs destroyed or detached since they
// were queued are skipped.
func (ch *Channel) Get(ctx context.Context) (*CQ, error) {
	for {
		select {
		case c := <-ch.events:
			if c.take(ch) {
				return c, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TryGet is Get without waiting: it returns false when no event is queued.
func (ch *Channel) TryGet() (*CQ, bool) {
	for {
		select {
		case c := <-ch.events:
			if c.take(ch) {
				return c, true
			}
		default:
			return nil, false
		}
	}
}

// Dropped returns how many events were dropped because the channel was full.
func (ch *Channel) Dropped() uint64 { return ch.dropped.Load() }

// take accounts for an event for c received from ch; it reports false for a
// stale event (c destroyed or no longer attached to ch).
func (c *CQ) take(ch *Channel) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed || c.ch != ch || !c.pending {
		return false
	}
	c.pending = false
	c.events++
	return true
}

// Package linktest holds test doubles of links for the tests of netdev's
// users (and netdev's own external tests).
package linktest

import (
	"sync/atomic"

	"github.com/softverbs/softverbs/netdev/fabric"
)

// CapLink is a fabric port with the optional interfaces of a real link
// (netdev.Holder, netdev.Poller, netdev.OwnReceiver), counting the calls
// it gets: for tests that those interfaces are found through wrappers.
type CapLink struct {
	*fabric.Port
	Holds, Flushes, Polls atomic.Int64
}

// Hold counts a hold.
func (c *CapLink) Hold() { c.Holds.Add(1) }

// Flush counts a flush.
func (c *CapLink) Flush() { c.Flushes.Add(1) }

// FlushLazy counts a flush.
func (c *CapLink) FlushLazy() { c.Flushes.Add(1) }

// PollReceive counts a poll and reports that nothing arrived.
func (c *CapLink) PollReceive() bool { c.Polls.Add(1); return false }

// ReceivesOnOwnGoroutine reports false: the fabric delivers in Send.
func (c *CapLink) ReceivesOnOwnGoroutine() bool { return false }

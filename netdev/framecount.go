package netdev

import (
	"sync"
	"sync/atomic"
)

// FrameCount counts frames and their bytes, as a link's receive or
// transmit statistics do, with one locked instruction an Add where two
// counters take two (each about 9 ns right after a frame's stores, on
// every frame a link moves). It is safe for concurrent use; the zero
// value is ready.
//
// Both counts share one word, the frames in its top 24 bits and the
// bytes in the low 40. Before either field can fill (an Add that takes
// the frames to 2^23 or the bytes to 2^39, the top bit of its field), the
// Add that crossed moves the word's counts into two wide counters under
// a mutex, which Load takes too: so a Load never sees a carry half done.
// Between carries at least 2^23 frames pass, or 512 GiB.
type FrameCount struct {
	packed atomic.Uint64

	mu             sync.Mutex // guards the carried counts; held across a carry
	frames, nbytes uint64
}

const (
	frameCountShift = 40
	frameCountBytes = 1<<frameCountShift - 1
	// frameCountFull has the top bit of each field: an Add that sets one
	// carries.
	frameCountFull = 1<<63 | 1<<(frameCountShift-1)
)

// Add counts frames frames of nbytes bytes in all. One Add may count at
// most 2^16 frames and 2^32 bytes (a batch of maximum-sized frames), so
// that the fields cannot overflow before the crossing Add carries them.
func (c *FrameCount) Add(frames, nbytes uint64) {
	if frames > 1<<16 || nbytes > 1<<32 {
		panic("netdev: FrameCount.Add of too much at once")
	}
	if c.packed.Add(frames<<frameCountShift|nbytes)&frameCountFull != 0 {
		c.carry()
	}
}

// carry moves the packed counts into the wide ones.
func (c *FrameCount) carry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.packed.Load()
	if v&frameCountFull == 0 {
		return // another Add carried first
	}
	// Subtract exactly what was read: Adds since stay in the word. No
	// field borrows, as each only grew since the read.
	c.packed.Add(-v)
	c.frames += v >> frameCountShift
	c.nbytes += v & frameCountBytes
}

// Load returns the frames and bytes counted.
func (c *FrameCount) Load() (frames, nbytes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.packed.Load()
	return c.frames + v>>frameCountShift, c.nbytes + v&frameCountBytes
}

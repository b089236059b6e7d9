package fabric

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softverbs/softverbs/netdev"
)

// bufPool is a stack of frame buffers of one size, shared by the ports of
// a fabric. A frame sent with SendOwned is taken on the sender's goroutine
// and given back on the receiver's: a sync.Pool (netdev.FramePool) would
// empty on one processor and fill on the other, and pay for stealing
// (twice: its buffers and the boxes that carry them). One short critical
// section per Get and Put costs less, and bounded, it keeps at most
// a bounded number of buffers when a burst is over.
//
// In front of the stack is one buffer (hot) that Get and Put exchange
// with one locked instruction each, where the mutex costs two: the frame
// a goroutine sends and then receives itself (the Inline executor) cycles
// through it, two locked instructions a frame fewer. Each costs about
// 9 ns right after a frame's stores.
type bufPool struct {
	size int
	max  int                  // buffers kept at most, hot included
	hot  atomic.Pointer[byte] // a kept buffer's start (its capacity is size), or nil
	mu   sync.Mutex
	free [][]byte
}

// maxPooledBytes bounds what a bufPool keeps: 512 buffers of 9018 bytes
// (more than two QPs' windows of frames in flight), or as many smaller
// ones as fit in the same bytes (at smallFrame, 18,000: a packet in
// flight on each of 10,000 QPs and its ACK); never fewer than minPooled.
const (
	maxPooledBytes = 512 * 9018
	minPooled      = 512
)

func newBufPool(size int) *bufPool {
	return &bufPool{size: size, max: max(minPooled, maxPooledBytes/max(size, 1))}
}

// Size returns the length of the buffers Get returns.
func (p *bufPool) Size() int { return p.size }

// Get returns a buffer of Size bytes with arbitrary contents.
func (p *bufPool) Get() []byte {
	// A load first: a failed swap costs as much as one that succeeds.
	if p.hot.Load() != nil {
		if b := p.hot.Swap(nil); b != nil {
			return unsafe.Slice(b, p.size)
		}
	}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b[:p.size]
	}
	p.mu.Unlock()
	return newFrameBuf(p.size)
}

// frameAlign and frameSkew place a new buffer so that its address is
// frameSkew past a multiple of frameAlign: a RoCEv2 frame over IPv4 built
// at its start then has the payload of a packet with no extended header
// after the BTH (the middle and last packets of a message) on a cache
// line's start, and one after a RETH on 16 bytes. The copies into and out
// of the frame run faster aligned.
const (
	frameAlign = 64
	frameSkew  = frameAlign - (netdev.EthernetHeaderLen + netdev.IPv4HeaderLen + netdev.UDPHeaderLen + 12) // 12: the BTH
)

// newFrameBuf returns a buffer of size bytes whose capacity is size,
// placed as frameSkew says.
func newFrameBuf(size int) []byte {
	raw := make([]byte, size+frameAlign)
	a := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	off := int((frameSkew - a%frameAlign + frameAlign) % frameAlign)
	return raw[off : off+size : off+size]
}

// Put takes b back if it is long enough and the pool is not full.
func (p *bufPool) Put(b []byte) {
	if cap(b) < p.size {
		return
	}
	if p.hot.Load() == nil && p.hot.CompareAndSwap(nil, unsafe.SliceData(b)) {
		return
	}
	p.mu.Lock()
	if len(p.free) < p.max-1 {
		p.free = append(p.free, b[:cap(b)])
	}
	p.mu.Unlock()
}

// kept returns how many buffers p keeps.
func (p *bufPool) kept() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if p.hot.Load() != nil {
		n++
	}
	return n
}

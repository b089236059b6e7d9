// Package netdev moves Ethernet frames: the Link contract and what every
// link kind shares: the Ethernet/IPv4/IPv6/UDP framing RoCEv2 rides on, the
// ICRC, GIDs and addresses, multicast group counting, the kernel's
// neighbour table and address watching. Each link kind has a package of its
// own below it, as gVisor's tcpip/link/*: netdev/fabric (the in-memory
// fabric), netdev/faults (seeded fault injection), netdev/capture (pcap),
// netdev/host (a host's ARP/ND over any link), netdev/tap, netdev/xdp
// (AF_XDP) and netdev/udp (a UDP socket).
package netdev

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Send on a link that has been closed.
var ErrClosed = errors.New("netdev: link closed")

// Handler receives frames from a link. The handler owns frame from the call
// on: it may keep it, hand it to another goroutine, or, when done, give it
// back with Release if the link implements Releaser. A handler should only
// queue work; it may call Send on any link (the fabric holds no lock while it
// runs handlers).
type Handler func(frame []byte)

// Receiver is embedded by every link implementation (the link kinds under
// netdev/) to hold its receive handler and receive counters, so that all
// links treat a received frame alike: it is counted and handed to the
// handler, or, with no handler set, counted as dropped and its buffer given
// back to the link's pool.
type Receiver struct {
	handler   atomic.Pointer[Handler]
	rx        FrameCount
	rxDropped atomic.Uint64
}

// SetHandler sets the receive handler; nil drops received frames (counted
// as dropped).
func (r *Receiver) SetHandler(h Handler) {
	if h == nil {
		r.handler.Store(nil)
		return
	}
	r.handler.Store(&h)
}

// Deliver hands a received frame, which the link owns, to the handler,
// counting it and n bytes (the frame's length, or the payload's where the
// link counts payload bytes) as received. With no handler set it counts
// the frame as dropped and gives it back to rel, the link's pool.
func (r *Receiver) Deliver(frame []byte, n int, rel Releaser) {
	r.DeliverWith(nil, frame, n, rel)
}

// DeliverWith is Deliver with h, not the handler set, for a frame that
// arrives by another way than the link's usual one (HereReceiver); a nil
// h is Deliver.
func (r *Receiver) DeliverWith(h *Handler, frame []byte, n int, rel Releaser) {
	if h == nil {
		h = r.handler.Load()
	}
	if h == nil {
		r.rxDropped.Add(1)
		rel.Release(frame)
		return
	}
	r.rx.Add(1, uint64(n))
	(*h)(frame)
}

// CountDropped counts a received frame the link dropped itself, before
// Deliver (too long, closed).
func (r *Receiver) CountDropped() { r.rxDropped.Add(1) }

// RxCounts returns the frames and bytes delivered to the handler and the
// frames dropped, for the link's statistics.
func (r *Receiver) RxCounts() (frames, bytes, dropped uint64) {
	frames, bytes = r.rx.Load()
	return frames, bytes, r.rxDropped.Load()
}

// Link moves whole Ethernet frames (destination MAC first, no FCS).
type Link interface {
	// Send transmits frame. The link copies or consumes frame before
	// returning; the caller may reuse it afterwards. Send returns ErrClosed
	// after Close; a frame dropped on the way (fault, full queue, no
	// receiver) is counted, not reported.
	Send(frame []byte) error
	// SetHandler sets the receive handler; nil drops received frames.
	SetHandler(h Handler)
	// HardwareAddr returns the link's own MAC.
	HardwareAddr() MAC
	// MTU returns the Ethernet payload MTU (1500, 9000, ...): frames may be
	// up to MTU+14 bytes (MTU+18 with an 802.1Q tag).
	MTU() int
	// Close detaches the link; later Sends return ErrClosed.
	Close() error
}

// Releaser is implemented by links that hand received frames out of a buffer
// pool. A handler that is done with a frame may pass it to Release so the
// buffer is reused; a handler that keeps frames or drops them to the garbage
// collector is also correct, only slower. Never use a frame after releasing
// it.
type Releaser interface {
	Release(frame []byte)
}

// FrameLender is implemented by links that lend their own buffers for
// frames to be built in, so that a frame travels without a copy: the sender
// builds it at the start of a buffer from TxFrame and hands the buffer over
// with SendOwned, and the receiver gets that buffer (the in-memory fabric).
// The link owns the buffer again from SendOwned on, whatever it returns; a
// buffer that will not be sent goes back with Release. Ask for it with a
// type assertion on the link itself, not with As, and use it only if
// Lender returns that same link: a wrapper (faults, capture, a test's link
// that embeds a fabric port to watch its Send) must see every frame
// through Send, also when embedding gives it these methods.
type FrameLender interface {
	Releaser
	// Lender returns the link whose Send SendOwned stands for: the
	// lender itself (a wrapper that embeds it inherits the method, and
	// the answer then differs from the wrapper).
	Lender() Link
	// TxFrame returns a buffer of at least n bytes (the frame is built at
	// its start), or nil if the link has none that long.
	TxFrame(n int) []byte
	// SendOwned is Send for frame, which starts at the start of a buffer
	// from TxFrame; the caller must not use the buffer afterwards.
	SendOwned(frame []byte) error
}

// FrameRecycler is implemented by FrameLenders whose received frames are
// buffers they lend (the in-memory fabric). When RecyclesFrames is true, a
// handler done with a frame the link delivered may keep its buffer, whole
// from its start, and later build a frame to send in it with SendOwned, as
// if TxFrame had returned it (if it is long enough), instead of a Release
// and a TxFrame, which each take the link's pool. A wrapper that lends an
// inner link's buffers recycles if that link does; one that embeds a
// recycling link and lends for itself inherits RecyclesFrames, and must
// override it if the frames it delivers are not that link's buffers.
type FrameRecycler interface {
	FrameLender
	RecyclesFrames() bool
}

// Holder is implemented by links that can hand frames to the device in
// batches (one system call for many). Between Hold and its Flush, Send may
// queue a frame instead of transmitting it; Flush transmits what is
// queued. Holds nest and may come from several goroutines at once: a queued
// frame goes out at the latest when the last holder flushes. A holder must
// not wait for anything (a reply, a timer) between Hold and Flush.
//
// FlushLazy ends a hold like Flush, but lets the queued frames wait up to
// LazyFlushDelay for another Flush to carry them: for frames nobody waits
// on at once, like acknowledgements, so that they share a system call with
// what follows (a reply) instead of delaying it.
type Holder interface {
	Hold()
	Flush()
	FlushLazy()
}

// LazyFlushDelay bounds how long FlushLazy leaves frames queued.
const LazyFlushDelay = 20 * time.Microsecond

// OwnReceiver is implemented by links that call their handler from a
// receive goroutine of their own, never from inside Send, with no lock of
// their caller held. The transport may then do a packet's work right there
// instead of handing it to a worker. The in-memory fabric delivers inside
// Send and does not implement it.
type OwnReceiver interface {
	ReceivesOnOwnGoroutine() bool
}

// HereReceiver is implemented by the in-memory fabric, whose Send delivers
// a frame inside the sender's call, where the sender may hold its locks;
// so the transport hands such a frame's work to a worker. A frame sent
// between Hold and Flush (Holder) to a port with a handler set here is
// kept instead, and a Flush that carries it alone delivers it to that
// handler on the flushing goroutine, which holds no lock of its caller (a
// holder flushes when its run is over): the receiver may do the frame's
// work right there, as on an OwnReceiver link, with no hand-off to
// another goroutine. That is rxe's way between two devices of one host,
// where the receive softirq runs in the sender's context. (A burst goes to
// the ordinary handler at Flush.) Ask for it with a type assertion on the
// link itself, and only on a FrameLender that is its own lender: a
// wrapper that embeds a port must see its frames through its handler.
type HereReceiver interface {
	SetHandlerHere(h Handler)
}

// NeighbourQueuer is implemented by links that resolve neighbours
// themselves (netdev/host) and can hold frames for a neighbour they are
// still resolving, as Linux queues packets on an unresolved neighbour
// (unres_qlen). When QueuesUnresolved reports true, the link's Send
// accepts a frame whose destination MAC is zero (never a valid
// destination): it takes the next hop from the frame's IP destination
// (softverbs' hosts have no routes: every peer is on the segment), writes
// the neighbour's MAC in and sends the frame, or keeps a copy in a
// bounded queue until the neighbour answers, dropping it (counted) if the
// queue overflows or resolution fails. A sender that cannot resolve a
// neighbour itself (its resolver answers false) sends such a frame
// instead of dropping it. The frame travels the ordinary Send path, so
// wrappers above the host (capture, faults) see it like any other.
type NeighbourQueuer interface {
	QueuesUnresolved() bool
}

// Poller is implemented by links whose receive ring a spinning goroutine
// can drain itself: PollReceive hands waiting frames to the handler on the
// calling goroutine and reports whether there were any.
type Poller interface {
	PollReceive() bool
}

// Wrapper is implemented by links that wrap another link (capture.Link,
// faults.Link, host.Host): Unwrap returns the wrapped link. A wrapper forwards
// the basic Link methods; the optional interfaces above (Holder, Poller,
// OwnReceiver, NeighbourQueuer, GroupJoiner) are found through the chain with As.
type Wrapper interface {
	Unwrap() Link
}

// As returns l as a T if l implements T, or else the first link down l's
// chain of wrappers (Unwrap) that does; ok is false if none does. Like
// errors.As, a wrapper that implements T itself answers for the whole
// chain below it: that is how a wrapper takes over, or hides, a capability
// it cannot pass on unchanged. Ask with As, not a type assertion, for any
// optional interface of a link that may be wrapped.
func As[T any](l Link) (t T, ok bool) {
	for l != nil {
		if t, ok = l.(T); ok {
			return t, true
		}
		w, isW := l.(Wrapper)
		if !isW {
			break
		}
		l = w.Unwrap()
	}
	return t, false
}

// MaxFrameLen returns the longest frame (without FCS) a link of the given MTU
// carries: MTU plus the 14-byte Ethernet header plus room for one VLAN tag.
func MaxFrameLen(mtu int) int { return mtu + EthernetHeaderLen + VLANTagLen }

// FrameTooLong reports whether frame exceeds an MTU, allowing the VLAN tag
// only when the frame carries one.
func FrameTooLong(frame []byte, mtu int) bool {
	max := mtu + EthernetHeaderLen
	if len(frame) >= EthernetHeaderLen && Ethernet(frame).EtherType() == EtherTypeVLAN {
		max += VLANTagLen
	}
	return len(frame) > max
}

// FramePool recycles frame buffers of one size so links do not allocate per
// frame. Get returns a buffer of the pool's size; Put takes any buffer back
// whose capacity is at least that size (others are left to the garbage
// collector). Safe for concurrent use. It keeps two sync.Pools, one of
// filled boxes and one of empty ones, so that Put does not allocate a box
// for the slice header in steady state.
type FramePool struct {
	size  int
	full  sync.Pool // *[]byte holding a buffer
	boxes sync.Pool // *[]byte holding nil
}

// NewFramePool returns a pool of buffers of size bytes (use MaxFrameLen(mtu)).
func NewFramePool(size int) *FramePool { return &FramePool{size: size} }

// Size returns the length of the buffers Get returns.
func (p *FramePool) Size() int { return p.size }

// Get returns a buffer of Size bytes with arbitrary contents.
func (p *FramePool) Get() []byte {
	if box, ok := p.full.Get().(*[]byte); ok {
		b := (*box)[:p.size]
		*box = nil
		p.boxes.Put(box)
		return b
	}
	return make([]byte, p.size)
}

// Release is Put: a FramePool is the Releaser of the frames it lent.
func (p *FramePool) Release(b []byte) { p.Put(b) }

// Put returns b to the pool. The caller must not use b afterwards.
func (p *FramePool) Put(b []byte) {
	if cap(b) < p.size {
		return
	}
	box, ok := p.boxes.Get().(*[]byte)
	if !ok {
		box = new([]byte)
	}
	*box = b[:cap(b)]
	p.full.Put(box)
}

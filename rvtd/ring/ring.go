// Package ring holds rvtd's shared-memory rings (docs/rvtd-protocol.md,
// section 7): memfd-backed regions, single-producer single-consumer rings
// of fixed-size records with free-running u32 indices on cache lines of
// their own, the NEED_WAKEUP flag with an eventfd doorbell, CQ arming, and
// views of the WQE and CQE records.
//
// The other side of a ring is another process and is not trusted: every
// index read from shared memory is checked, and an index out of range is
// an error (ErrCorrupt) for the caller to hold against that client, never
// a panic. Slots are always inside the ring whatever the indices say.
package ring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Ring header layout (one 64-byte cache line per writer).
const (
	HeaderSize  = 256
	offProducer = 0   // producer index, written by the producer
	offArmDone  = 4   // CQ rings: written by the daemon (the producer)
	offConsumer = 64  // consumer index, written by the consumer
	offArmReq   = 68  // CQ rings: written by the client (the consumer)
	offFlags    = 128 // written by the consumer
	offMagic    = 192 // the description, written once by the daemon
	offKind     = 196
	offEntries  = 200
	offStride   = 204
	offStatus   = 208 // written by the daemon when it stops serving the ring
)

// Magic is "RVTR" in memory.
const Magic = 0x52545652

// NeedWakeup is the flags bit a sleeping consumer sets.
const NeedWakeup = 1

// Limits of a layout.
const (
	MaxEntries = 1 << 24
	MinStride  = 16
	MaxStride  = 1 << 16
)

// Kind says which queue a ring is.
type Kind uint32

// Ring kinds.
const (
	KindSend Kind = 1
	KindRecv Kind = 2
	KindSRQ  Kind = 3
	KindCQ   Kind = 4
)

// Errors.
var (
	// ErrCorrupt: an index the other side wrote is out of range.
	ErrCorrupt = errors.New("ring index out of range")
	// ErrLayout: a layout that does not fit its memory, or a header whose
	// description does not match it.
	ErrLayout = errors.New("bad ring layout")
)

// IndexError is an out-of-range index: it wraps ErrCorrupt.
type IndexError struct {
	Kind               Kind
	Producer, Consumer uint32
	Entries            uint32
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("ring kind %d: producer %d, consumer %d, %d entries: %v", e.Kind, e.Producer, e.Consumer, e.Entries, ErrCorrupt)
}

func (e *IndexError) Unwrap() error { return ErrCorrupt }

// Layout places a ring in a region: the header at Offset, then Entries
// records of Stride bytes.
type Layout struct {
	Offset  uint64
	Entries uint32
	Stride  uint32
}

// Size is the ring's bytes, header included.
func (l Layout) Size() uint64 { return HeaderSize + uint64(l.Entries)*uint64(l.Stride) }

func pow2(x uint32) bool { return x != 0 && x&(x-1) == 0 }

// Check reports whether l is a valid layout inside mem bytes.
func (l Layout) Check(size int) error {
	switch {
	case !pow2(l.Entries) || l.Entries > MaxEntries:
		return fmt.Errorf("%w: %d entries", ErrLayout, l.Entries)
	case !pow2(l.Stride) || l.Stride < MinStride || l.Stride > MaxStride:
		return fmt.Errorf("%w: stride %d", ErrLayout, l.Stride)
	case l.Offset%64 != 0:
		return fmt.Errorf("%w: offset %d not cache-line aligned", ErrLayout, l.Offset)
	case l.Offset > uint64(size) || l.Size() > uint64(size)-l.Offset:
		return fmt.Errorf("%w: %d bytes at %d do not fit %d", ErrLayout, l.Size(), l.Offset, size)
	}
	return nil
}

// RoundStride returns the stride for records of n bytes: the next power of
// two, at least min.
func RoundStride(n, min uint32) uint32 {
	s := min
	for s < n {
		s <<= 1
	}
	return s
}

// Init writes a fresh header for l in mem (the daemon, at creation):
// indices zero, the description filled.
func Init(mem []byte, kind Kind, l Layout) error {
	if err := l.Check(len(mem)); err != nil {
		return err
	}
	r := mem[l.Offset : l.Offset+HeaderSize]
	clear(r)
	h := header(r)
	h.u32(offMagic).Store(Magic)
	h.u32(offKind).Store(uint32(kind))
	h.u32(offEntries).Store(l.Entries)
	h.u32(offStride).Store(l.Stride)
	return nil
}

// header is a ring header in shared memory. Its words are accessed only
// atomically: the other process may write them at any time.
type header []byte

func (h header) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&h[off]))
}

// ring is what a producer and a consumer share: a private copy of the
// layout (never re-read from shared memory) and the mapped bytes.
type ring struct {
	kind    Kind
	hdr     header
	recs    []byte
	entries uint32
	mask    uint32
	stride  uint32
}

func newRing(mem []byte, kind Kind, l Layout, checkDesc bool) (ring, error) {
	if err := l.Check(len(mem)); err != nil {
		return ring{}, err
	}
	if uintptr(unsafe.Pointer(&mem[0]))%64 != 0 {
		return ring{}, fmt.Errorf("%w: memory not cache-line aligned", ErrLayout)
	}
	b := mem[l.Offset : l.Offset+l.Size()]
	r := ring{kind: kind, hdr: header(b[:HeaderSize]), recs: b[HeaderSize:], entries: l.Entries, mask: l.Entries - 1, stride: l.Stride}
	if checkDesc {
		h := r.hdr
		if h.u32(offMagic).Load() != Magic || Kind(h.u32(offKind).Load()) != kind ||
			h.u32(offEntries).Load() != l.Entries || h.u32(offStride).Load() != l.Stride {
			return ring{}, fmt.Errorf("%w: the header does not describe this ring", ErrLayout)
		}
	}
	return r, nil
}

func (r *ring) slot(i uint32) []byte {
	off := (i & r.mask) * r.stride
	return r.recs[off : off+r.stride : off+r.stride]
}

func (r *ring) corrupt(p, c uint32) error {
	return &IndexError{Kind: r.kind, Producer: p, Consumer: c, Entries: r.entries}
}

// Status is the errno with which the daemon stopped serving the ring (0:
// in service).
func (r *ring) Status() uint32 { return r.hdr.u32(offStatus).Load() }

// Fail records that the daemon stopped serving the ring, with errno.
func (r *ring) Fail(errno uint32) { r.hdr.u32(offStatus).Store(errno) }

// Entries is the ring's capacity.
func (r *ring) Entries() int { return int(r.entries) }

// Producer is the writing side of a ring. It is not safe for concurrent
// use: one goroutine produces.
type Producer struct {
	ring
	head     uint32 // our producer index: the shared one is published from it
	cons     uint32 // the consumer index last seen
	doorbell *Doorbell
}

// NewProducer makes the producer of the ring at l in mem, resuming from
// the indices there. doorbell, if not nil, is rung when the consumer
// sleeps. checkDesc verifies the header's description (a client attaching
// to a ring the daemon made; the daemon itself calls Init first).
func NewProducer(mem []byte, kind Kind, l Layout, doorbell *Doorbell, checkDesc bool) (*Producer, error) {
	r, err := newRing(mem, kind, l, checkDesc)
	if err != nil {
		return nil, err
	}
	p := &Producer{ring: r, doorbell: doorbell}
	p.head = r.hdr.u32(offProducer).Load()
	p.cons = r.hdr.u32(offConsumer).Load()
	if p.head-p.cons > r.entries {
		return nil, r.corrupt(p.head, p.cons)
	}
	return p, nil
}

// Free returns how many records can be written now. It reads the
// consumer's index (acquire); one out of range is ErrCorrupt.
func (p *Producer) Free() (int, error) {
	c := p.hdr.u32(offConsumer).Load()
	// The consumer may only move forward, up to what was published.
	if c-p.cons > p.head-p.cons {
		return 0, p.corrupt(p.head, c)
	}
	p.cons = c
	return int(p.entries - (p.head - c)), nil
}

// Slot returns the k-th record after those written so far (k < Free()).
// Its bytes are the caller's to fill until Publish.
func (p *Producer) Slot(k int) []byte { return p.slot(p.head + uint32(k)) }

// Publish makes the next n records visible (a release store of the
// producer index), then rings the doorbell if the consumer has said it
// sleeps. It reports whether it rang.
func (p *Producer) Publish(n int) (rang bool, err error) {
	p.head += uint32(n)
	p.hdr.u32(offProducer).Store(p.head)
	// The store above and this load are sequentially consistent (Go's
	// atomics are), pairing with the consumer's flag store and re-load.
	if p.doorbell != nil && p.hdr.u32(offFlags).Load()&NeedWakeup != 0 {
		return true, p.doorbell.Ring()
	}
	return false, nil
}

// TakeArm is the daemon's side of CQ arming: after publishing completions,
// it reports whether a pending arm is met by them (solicited: one of them
// was for a solicited message or has an error status) and, if so, marks it
// served. The caller then writes one completion event.
func (p *Producer) TakeArm(solicited bool) bool {
	req := p.hdr.u32(offArmReq).Load()
	done := p.hdr.u32(offArmDone)
	if req>>1 == done.Load() {
		return false
	}
	if req&1 != 0 && !solicited {
		return false
	}
	done.Store(req >> 1)
	return true
}

// Consumer is the reading side of a ring. It is not safe for concurrent
// use.
type Consumer struct {
	ring
	tail     uint32 // our consumer index
	doorbell *Doorbell
}

// NewConsumer makes the consumer of the ring at l in mem. doorbell is what
// Wait sleeps on (nil: Wait is not used).
func NewConsumer(mem []byte, kind Kind, l Layout, doorbell *Doorbell, checkDesc bool) (*Consumer, error) {
	r, err := newRing(mem, kind, l, checkDesc)
	if err != nil {
		return nil, err
	}
	c := &Consumer{ring: r, doorbell: doorbell}
	c.tail = r.hdr.u32(offConsumer).Load()
	if p := r.hdr.u32(offProducer).Load(); p-c.tail > r.entries {
		return nil, r.corrupt(p, c.tail)
	}
	return c, nil
}

// Available returns how many records are ready to read (an acquire load of
// the producer index). A producer index more than Entries ahead is
// ErrCorrupt.
func (c *Consumer) Available() (int, error) {
	p := c.hdr.u32(offProducer).Load()
	n := p - c.tail
	if n > c.entries {
		return 0, c.corrupt(p, c.tail)
	}
	return int(n), nil
}

// Slot returns the k-th unread record (k < Available()). Its bytes may
// still change under a hostile producer: copy, then validate the copy.
func (c *Consumer) Slot(k int) []byte { return c.slot(c.tail + uint32(k)) }

// Release hands n read records back to the producer (a release store of
// the consumer index).
func (c *Consumer) Release(n int) {
	c.tail += uint32(n)
	c.hdr.u32(offConsumer).Store(c.tail)
}

// Sleep is the first half of waiting: it sets NEED_WAKEUP and reports
// whether records arrived meanwhile (then it has cleared the flag again and
// the caller goes on consuming). When it returns false, the producer will
// ring the doorbell for the next record: the caller may sleep on it.
func (c *Consumer) Sleep() (ready bool, err error) {
	flags := c.hdr.u32(offFlags)
	flags.Or(NeedWakeup)
	n, err := c.Available()
	if n > 0 || err != nil {
		flags.And(^uint32(NeedWakeup))
		return true, err
	}
	return false, nil
}

// Wake clears NEED_WAKEUP (after the doorbell woke the consumer).
func (c *Consumer) Wake() { c.hdr.u32(offFlags).And(^uint32(NeedWakeup)) }

// Wait blocks until a record is available, sleeping on the doorbell with
// NEED_WAKEUP set when the ring is empty. It returns the number available.
func (c *Consumer) Wait() (int, error) {
	for {
		if n, err := c.Available(); n > 0 || err != nil {
			return n, err
		}
		ready, err := c.Sleep()
		if err != nil {
			return 0, err
		}
		if !ready {
			if c.doorbell == nil {
				c.Wake()
				return 0, errors.New("ring: no doorbell to wait on")
			}
			err = c.doorbell.Wait()
			c.Wake()
			if err != nil {
				return 0, err
			}
		}
	}
}

// Arm is the client's side of ibv_req_notify_cq on a CQ ring it consumes:
// it requests one completion event, for the next completion or (solicited)
// the next solicited or failed one. A pending next-completion arm is not
// narrowed by a later solicited-only one.
func (c *Consumer) Arm(solicitedOnly bool) {
	req := c.hdr.u32(offArmReq)
	done := c.hdr.u32(offArmDone).Load()
	cur := req.Load()
	if cur>>1 != done && (cur&1 == 0 || solicitedOnly) {
		return // pending, and at least as wide
	}
	v := (done + 1) << 1
	if solicitedOnly {
		v |= 1
	}
	req.Store(v)
}

package qp

import (
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
)

// WQEState is where a send WQE is in its life.
type WQEState uint8

// Send WQE states.
const (
	WQEPosted  WQEState = iota // not yet started by the requester
	WQEPending                 // packets (some or all) sent, awaiting ACK or response
	WQEDone                    // finished; waiting to be retired in order
	WQEError                   // finished with an error status
)

// SendWQE is a send queue entry: a copy of the posted WR, with its memory
// resolved, and the requester's progress on it.
type SendWQE struct {
	WR     SendWR
	sges   []SGE  // backing array for WR.SGL (capacity MaxSendSGE)
	inline []byte // backing array for WR.InlineData
	MRs    []*keys.MR
	Length uint32 // total payload bytes

	// Requester and completer progress, owned by the send task.
	State  WQEState
	Status cq.Status
	// Assigned says FirstPSN..LastPSN are fixed: set at the first
	// transmission and kept across retries, so ACKs can be matched to WQEs
	// the requester has rewound past.
	Assigned bool
	Signaled bool
	FirstPSN uint32
	LastPSN  uint32
	Sent     uint32 // payload bytes handed to packets so far
	Done     uint32 // bytes received (READ responses)
	SSN      uint32 // send sequence number for end-to-end credits (0 = none yet)
	Epoch    uint64 // the key table's epoch when MRs were checked

	// A UD WR's address handle is copied (the caller may free its AH) to
	// SendQueue.copies, and WR.AH points there, not here: with it, and the
	// fields in their old order, a WQE was 296 bytes; it is 248, so that
	// 16 of them with the allocator's 8-byte header for an object with
	// pointers fit the 4096-byte class (they took the 4864 one).
}

// RecvWQE is a receive queue entry.
type RecvWQE struct {
	WRID uint64
	// SGL is the WR's SGEs, copied into the entry's own array: SGL's
	// capacity is that array (MaxRecvSGE), which the next post reuses.
	// (No second slice header for it: 16 entries of 96 bytes and the
	// allocator's header took its 1792-byte class, of 72 bytes 1280.)
	SGL    []SGE
	MRs    []*keys.MR // the SGEs' MRs as checked at post time
	Epoch  uint64     // the key table's epoch then (keys.Table.Epoch)
	Length uint32
}

// ring is a fixed-capacity FIFO of T indexed by free-running uint32
// counters. The backing array's length is a power of two, so that counter i
// names the same slot before and after the counters wrap at 2^32 (with any
// other length, i%len jumps at the wrap and two live entries share a slot);
// it holds at most n entries.
type ring[T any] struct {
	e          []T
	n, mask    uint32
	head, tail uint32 // head: next to produce; tail: oldest live entry
}

// maxRing bounds a ring's capacity so that its backing length fits a uint32.
const maxRing = 1 << 31

func newRing[T any](n uint32) ring[T] {
	n = min(n, maxRing)
	size := uint32(1)
	for size < n {
		size <<= 1
	}
	return ring[T]{e: make([]T, size), n: n, mask: size - 1}
}

func (r *ring[T]) Len() int       { return int(r.head - r.tail) }
func (r *ring[T]) Cap() int       { return int(r.n) }
func (r *ring[T]) Free() int      { return r.Cap() - r.Len() }
func (r *ring[T]) At(i uint32) *T { return &r.e[i&r.mask] }

// SendQueue is a QP's send queue. Head is the producer counter, Tail the
// oldest WQE not yet retired to the CQ, and Next the next WQE the requester
// starts (Tail <= Next <= Head, in counter order).
type SendQueue struct {
	ring[SendWQE]
	Next uint32
	// copies holds what WQEs' WRs point to in place of the caller's
	// memory (see sendCopies). A pointer: more in the QP struct would
	// take it past the allocator's 288-byte class.
	copies *sendCopies
}

// sendCopies holds, slot by slot, the copies of what a posted WR points to
// that its caller owns and may reuse once PostSend returns: the AH of a UD
// WR, the BindWR of a bind, the RegWR of a fast registration. A WQE's WR
// points into these arrays, never into the caller's memory, so nothing
// the caller passes to PostSend escapes to the heap. Each array is made at
// the first post that needs it: an RC QP that only sends has none.
type sendCopies struct {
	ahs   []AH
	binds []BindWR
	regs  []RegWR
}

// side returns q.copies, making it on first use.
func (q *SendQueue) side() *sendCopies {
	if q.copies == nil {
		q.copies = &sendCopies{}
	}
	return q.copies
}

// copySlot returns slot i of the copies array *a (one entry per WQE slot),
// making the array on first use.
func copySlot[T any](q *SendQueue, a *[]T, i uint32) *T {
	if *a == nil {
		*a = make([]T, len(q.e))
	}
	return &(*a)[i&q.mask]
}

// ahSlot, bindSlot and regSlot return the AH, BindWR and RegWR copies of
// the WQE at counter i.
func (q *SendQueue) ahSlot(i uint32) *AH       { return copySlot(q, &q.side().ahs, i) }
func (q *SendQueue) bindSlot(i uint32) *BindWR { return copySlot(q, &q.side().binds, i) }
func (q *SendQueue) regSlot(i uint32) *RegWR   { return copySlot(q, &q.side().regs, i) }

// Head returns the producer counter.
func (q *SendQueue) Head() uint32 { return q.head }

// Tail returns the counter of the oldest live WQE.
func (q *SendQueue) Tail() uint32 { return q.tail }

// Retire drops the oldest WQE.
func (q *SendQueue) Retire() { q.tail++ }

// RecvQueue is a FIFO of receive WQEs, used for a QP's RQ and for SRQs.
type RecvQueue struct {
	ring[RecvWQE]
}

func newRecvQueue(n, maxSGE uint32) RecvQueue {
	q := RecvQueue{newRing[RecvWQE](n)}
	// One allocation each for all entries' SGEs and MRs, as the send
	// queue's: two per entry made 32 small objects a QP at depth 16, for
	// the allocator and the garbage collector.
	ns := int(maxSGE)
	sges := make([]SGE, len(q.e)*ns)
	mrs := make([]*keys.MR, len(q.e)*ns)
	for i := range q.e {
		q.e[i].SGL = sges[i*ns : i*ns : (i+1)*ns]
		q.e[i].MRs = mrs[i*ns : (i+1)*ns : (i+1)*ns]
	}
	return q
}

func newSendQueue(c Cap) SendQueue {
	q := SendQueue{ring: newRing[SendWQE](c.MaxSendWR)}
	// One allocation each for all entries' SGEs, MRs and inline bytes.
	ns, ni := int(c.MaxSendSGE), int(c.MaxInlineData)
	sges := make([]SGE, len(q.e)*ns)
	mrs := make([]*keys.MR, len(q.e)*ns)
	inline := make([]byte, len(q.e)*ni)
	for i := range q.e {
		q.e[i].sges = sges[i*ns : (i+1)*ns : (i+1)*ns]
		q.e[i].MRs = mrs[i*ns : (i+1)*ns : (i+1)*ns]
		if ni > 0 {
			q.e[i].inline = inline[i*ni : (i+1)*ni : (i+1)*ni]
		}
	}
	return q
}

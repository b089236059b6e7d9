package transport

import (
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/netdev"
)

// On a worker pool, packet buffers come from a stock that belongs to the
// goroutine running the task (task.Local: a worker's own, or one a caller
// running a batch borrows), not to the task: a loopback message's packet
// is taken by a requester and freed by the peer's responder, most often
// on the same goroutine (task.Carry), so a stock there gives the same few
// buffers back in turn, as the Inline engine's free list does, with no
// sync.Pool Get and Put per packet (13% of a small SEND on the pool). An
// idle QP holds no buffers: a stock lives as long as its goroutine, or is
// lent through a sync.Pool the garbage collector may empty.

// maxStock bounds a stock; what a goroutine frees beyond it goes to the
// engine's sync.Pool.
const maxStock = 64

// bufCache is a stock of empty packet buffers for one goroutine's batches.
// A nil *bufCache is the engine's own buffers (Engine.getBuf with
// wakeChain: the free list on an Inline engine, the sync.Pool otherwise).
//
// It also holds the goroutine's frame buffer, which a packet for the link
// is built in (the link copies it in Send): with one per QP instead, 10,000
// QPs held 80 MiB of them, and each packet of a QP that had not sent for a
// while missed the cache writing its headers (BenchmarkFabricScale).
//
// And it keeps a few frames the goroutine received from a link that
// recycles them (netdev.FrameRecycler: the fabric), for its next frames to
// be built in: a responder's batch takes requests and sends an ACK, and
// the request's buffer carries the ACK, with no trip through the link's
// pool (a lock taken by every sending and receiving goroutine: 10% of an
// 8-byte SEND's CPU time between two devices, BenchmarkFabricScale).
type bufCache struct {
	b  []*pktBuf
	tx []byte

	kept   [][]byte           // buffers whole, from their start
	keptBy netdev.FrameLender // the link they are from
}

// maxKept bounds the frames a bufCache keeps.
const maxKept = 8

// frame returns the buffer to build a frame in: the goroutine's, or for a
// nil bufCache (an Inline engine, whose tasks run one at a time) *own,
// made on first use.
func (bc *bufCache) frame(own *[]byte) []byte {
	p := own
	if bc != nil {
		p = &bc.tx
	}
	if *p == nil {
		*p = make([]byte, maxFrame)
	}
	return *p
}

// stockFor returns the stock for the batch of t that is running, which is
// what the goroutine running it lends it; nil on an Inline engine.
func stockFor(t *task.Task) *bufCache {
	l := t.Local()
	if l == nil {
		return nil
	}
	bc, _ := l.V.(*bufCache)
	if bc == nil {
		bc = &bufCache{b: make([]*pktBuf, 0, maxStock)}
		l.V = bc
	}
	return bc
}

// get returns an empty packet buffer.
func (bc *bufCache) get(e *Engine) *pktBuf {
	if bc == nil || len(bc.b) == 0 {
		return e.getBuf(wakeChain)
	}
	n := len(bc.b) - 1
	pb := bc.b[n]
	bc.b[n] = nil
	bc.b = bc.b[:n]
	return pb
}

// put gives the packet's frame back to its link, or keeps it (keep), and
// keeps the buffer.
func (bc *bufCache) put(e *Engine, pb *pktBuf) {
	if bc == nil {
		e.putBuf(pb, wakeChain)
		return
	}
	bc.keep(e, pb)
	if len(bc.b) == maxStock {
		e.putBuf(pb, wakeChain)
		return
	}
	pb.reset()
	bc.b = append(bc.b, pb)
}

// keep takes pb's frame, if its link recycles frames and there is room.
func (bc *bufCache) keep(e *Engine, pb *pktBuf) {
	if pb.rel == nil || len(bc.kept) == maxKept {
		return
	}
	ps := e.port.Load()
	if !ps.recycle || pb.rel != ps.rel {
		return
	}
	if bc.keptBy != ps.lend {
		bc.drop()
		bc.keptBy = ps.lend
	}
	bc.kept = append(bc.kept, pb.frame[:cap(pb.frame)])
	pb.frame, pb.rel = nil, nil
}

// takeKept returns a frame buffer of at least n bytes that bc keeps from l
// (see keep), or nil.
func (bc *bufCache) takeKept(l netdev.FrameLender, n int) []byte {
	if bc == nil || bc.keptBy != l {
		return nil
	}
	k := len(bc.kept) - 1
	if k < 0 || cap(bc.kept[k]) < n {
		return nil
	}
	buf := bc.kept[k]
	bc.kept[k] = nil
	bc.kept = bc.kept[:k]
	return buf
}

// drop gives the kept frames back to their link.
func (bc *bufCache) drop() {
	for i, buf := range bc.kept {
		bc.keptBy.Release(buf)
		bc.kept[i] = nil
	}
	bc.kept = bc.kept[:0]
}

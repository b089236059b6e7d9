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
// recycles them (keptFrames; the fabric), for its next frames to be built
// in: a responder's batch takes requests and sends an ACK, and the
// request's buffer carries the ACK, with no trip through the link's pool
// (a lock taken by every sending and receiving goroutine: 10% of an
// 8-byte SEND's CPU time between two devices, BenchmarkFabricScale).
type bufCache struct {
	b    []*pktBuf
	tx   []byte
	kept keptFrames
}

// keptFor returns the kept frames of the running batch: the goroutine's,
// or for a nil bufCache (an Inline engine) the engine's.
func (bc *bufCache) keptFor(e *Engine) *keptFrames {
	if bc == nil {
		return &e.kept
	}
	return &bc.kept
}

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
	bc.kept.keep(e, pb)
	if len(bc.b) == maxStock {
		e.putBuf(pb, wakeChain)
		return
	}
	pb.reset()
	bc.b = append(bc.b, pb)
}

// keptFrames is a stack of frames received from a link that recycles
// them (netdev.FrameRecycler), for frames to that link to be built in. A
// goroutine's stock has one (bufCache), and so has an Inline engine, for
// its tasks (Engine.kept), which run one at a time.
type keptFrames struct {
	frames [][]byte           // buffers whole, from their start
	by     netdev.FrameLender // the link they are from
}

// maxKept bounds the frames a keptFrames holds.
const maxKept = 8

// keep takes pb's frame, if its link is the port's, recycles frames, and
// there is room. Frames kept from a link the port has left go back to it.
func (k *keptFrames) keep(e *Engine, pb *pktBuf) {
	if pb.rel == nil {
		return
	}
	ps := e.port.Load()
	if k.by != nil && k.by != ps.lend {
		k.drop()
		k.by = nil
	}
	if !ps.recycle || pb.rel != ps.rel || len(k.frames) == maxKept {
		return
	}
	k.by = ps.lend
	k.frames = append(k.frames, pb.frame[:cap(pb.frame)])
	pb.frame, pb.rel = nil, nil
}

// take returns a frame buffer of at least n bytes kept from l, or nil. It
// looks at the last one kept only: a short one there (an ACK's) hides
// longer ones below, which costs a TxFrame, never a wrong frame.
func (k *keptFrames) take(l netdev.FrameLender, n int) []byte {
	if k.by != l {
		return nil
	}
	i := len(k.frames) - 1
	if i < 0 || cap(k.frames[i]) < n {
		return nil
	}
	buf := k.frames[i]
	k.frames[i] = nil
	k.frames = k.frames[:i]
	return buf
}

// drop gives the kept frames back to their link.
func (k *keptFrames) drop() {
	for i, buf := range k.frames {
		k.by.Release(buf)
		k.frames[i] = nil
	}
	k.frames = k.frames[:0]
}

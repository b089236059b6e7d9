package transport

// Packet buffers move one way on a stream: a requester takes one for each
// packet, and the peer's responder, on another task and perhaps another
// goroutine, frees it. A sync.Pool Get and Put per packet cost about 13%
// of a small SEND on a worker pool. Instead each task keeps its own stock
// (bufCache, touched only by the task's Func, so with no atomics), and
// stocks trade whole magazines of buffers through the engine's depot: one
// sync.Pool call per magSize packets. This is the magazine layer of
// Bonwick's slab allocator: two magazines per cache, so that a task
// taking and freeing around a magazine's edge does not go to the depot
// each time.

// depot holds magazines (*magazine): a sync.Pool, which lets the garbage
// collector take what no task needs.
type depot interface {
	Get() any
	Put(any)
}

// magSize is the number of buffers in a magazine.
const magSize = 32

type magazine struct {
	n int
	b [magSize]*pktBuf
}

// bufCache is one task's stock of empty packet buffers.
type bufCache struct {
	cur, prev *magazine // either may be nil
}

// get returns an empty packet buffer.
func (bc *bufCache) get(e *Engine) *pktBuf {
	if bc.cur == nil || bc.cur.n == 0 {
		if bc.prev != nil && bc.prev.n > 0 {
			bc.cur, bc.prev = bc.prev, bc.cur
		} else if m, _ := e.fullMags.Get().(*magazine); m != nil {
			if bc.prev != nil {
				e.emptyMags.Put(bc.prev)
			}
			bc.prev, bc.cur = bc.cur, m
		} else {
			return e.getBuf()
		}
	}
	bc.cur.n--
	pb := bc.cur.b[bc.cur.n]
	bc.cur.b[bc.cur.n] = nil
	return pb
}

// put gives the packet's frame back to its link and keeps the buffer.
func (bc *bufCache) put(e *Engine, pb *pktBuf) {
	pb.reset()
	if bc.cur == nil || bc.cur.n == magSize {
		if bc.prev != nil && bc.prev.n < magSize {
			bc.cur, bc.prev = bc.prev, bc.cur
		} else {
			if bc.prev != nil {
				e.fullMags.Put(bc.prev)
			}
			m, _ := e.emptyMags.Get().(*magazine)
			if m == nil {
				m = new(magazine)
			}
			bc.prev, bc.cur = bc.cur, m
		}
	}
	bc.cur.b[bc.cur.n] = pb
	bc.cur.n++
}

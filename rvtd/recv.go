package rvtd

import (
	"sync"
	"sync/atomic"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// A QP's receive ring. The loop takes new receive WQEs when the client
// rings (after setting NEED_WAKEUP on an empty ring, as for the send ring)
// and after modify_qp; and the engine pulls them itself, synchronously,
// when it finds its receive queue empty (qp.QP.SetRecvPull): so a receive
// posted just before a message arrives is used for it, with no RNR NAK and
// no dropped datagram, whether or not the loop has run since.
//
// Locks: recvRing.mu is taken under the engine QP's lock (the pull runs
// inside the responder, which holds it; the loop takes the engine lock
// first too), and takes only session.mu (SGE checks) and loop.mu (a kick)
// inside. The engine's lock is never taken with recvRing.mu held, and
// qpObj.mu never inside either.

// recvRing is the daemon's side of a QP's receive ring.
type recvRing struct {
	q      *qpObj
	maxSGE uint32

	mu     sync.Mutex // guards the fields below
	c      *ring.Consumer
	mask   uint32
	cons   uint32        // our copy of the ring's consumer index
	taken  uint32        // records after cons posted to the engine
	epoch  uint64        // bumped at RESET: older engine wr_ids are stale
	seen   atomic.Uint32 // cons + taken: where the next record to take is (for polls without mu)
	wrid   []uint64
	bad    map[uint32]cq.Status // a bad WQE's status, by ring index
	failed bool                 // the ring's indices went out of range, or its QP was destroyed
	gone   bool                 // its QP was destroyed: the ring is unmapped, or about to be
	fault  error                // a new such fault, for the loop to report
	halted bool                 // a bad WQE was taken: no more until the QP is in ERR
	buf    []byte
	wrs    []qp.RecvWR
	sges   []qp.SGE
}

func newRecvRing(q *qpObj, c *ring.Consumer, entries, stride, maxSGE uint32) *recvRing {
	return &recvRing{q: q, maxSGE: maxSGE, c: c, mask: entries - 1, wrid: make([]uint64, entries),
		bad: map[uint32]cq.Status{}, buf: make([]byte, stride),
		wrs: make([]qp.RecvWR, 0, postBatch), sges: make([]qp.SGE, 0, postBatch*int(maxSGE))}
}

// engineWRID is the engine's wr_id of the receive at ring index idx.
func (r *recvRing) engineWRID(idx uint32) uint64 {
	return uint64(idx) | recvTag | r.epoch<<epochShift
}

// takeLocked posts new receive records to the engine with post (the
// engine QP's PostRecvLocked: its lock is held), up to most. It reports
// trouble (a bad WQE, or the ring out of range) for the loop to act on
// outside the engine's lock. inErr: the QP is in ERR, so a halted ring
// goes on (what it takes is flushed).
func (r *recvRing) takeLocked(post func([]qp.RecvWR) error, most int, inErr bool) (n int, trouble bool) {
	defer func() { r.seen.Store(r.cons + r.taken) }()
	if r.failed || (r.halted && !inErr) {
		return 0, false
	}
	avail, err := r.c.Available()
	if err != nil {
		r.failed, r.fault = true, err
		r.c.Fail(uint32(proto.EPROTO))
		return 0, true
	}
	for r.taken < uint32(avail) && n < most {
		r.wrs, r.sges = r.wrs[:0], r.sges[:0]
		var bad cq.Status
		for r.taken+uint32(len(r.wrs)) < uint32(avail) && n+len(r.wrs) < most && len(r.wrs) < postBatch {
			k := r.taken + uint32(len(r.wrs))
			wr, st := r.recvWR(k, r.cons+k)
			if st != 0 {
				bad = st
				break
			}
			r.wrs = append(r.wrs, wr)
		}
		if len(r.wrs) > 0 {
			if err := post(r.wrs); err != nil {
				// One by one: the first the engine refuses is a bad WQE.
				for i := range r.wrs {
					if err := post(r.wrs[i : i+1]); err != nil {
						bad = statusOf(err)
						break
					}
					r.taken++
					n++
				}
			} else {
				r.taken += uint32(len(r.wrs))
				n += len(r.wrs)
			}
		}
		if bad != 0 {
			// In its place a stand-in the engine can hold; its
			// completion gets the bad WQE's status (complete), and the
			// loop moves the QP to ERR, so what follows is flushed.
			idx := r.cons + r.taken
			r.bad[idx] = bad
			_ = post([]qp.RecvWR{{WRID: r.engineWRID(idx)}})
			r.taken++
			n++
			r.halted = true
			return n, true
		}
	}
	return n, false
}

// recvWR copies the k-th unread record (ring index idx) and checks the
// copy: the engine WR, or the status of a bad WQE. Its client wr_id goes
// in the table.
func (r *recvRing) recvWR(k, idx uint32) (qp.RecvWR, cq.Status) {
	slot := r.c.Slot(int(k))
	rec := r.buf[:len(slot)]
	copy(rec, slot)
	w := ring.RecvWQE(rec)
	r.wrid[idx&r.mask] = w.WRID()
	wr := qp.RecvWR{WRID: r.engineWRID(idx)}
	n := int(w.NumSGE())
	if n > w.MaxSGEs() || uint32(n) > r.maxSGE {
		return wr, cq.LocLenErr
	}
	start := len(r.sges)
	for i := 0; i < n; i++ {
		s := w.SGE(i)
		if !r.q.sess.sgeOK(r.q.pd, s.LKey(), s.Addr(), s.Length()) {
			r.sges = r.sges[:start]
			return wr, cq.LocProtErr
		}
		r.sges = append(r.sges, qp.SGE{Addr: s.Addr(), Length: s.Length(), Lkey: s.LKey()})
	}
	wr.SGL = r.sges[start:len(r.sges):len(r.sges)]
	return wr, 0
}

// pullRecvBatch is the most receive WQEs one engine pull takes.
const pullRecvBatch = 16

// pullRecv is the engine's receive pull (qp.QP.SetRecvPull): its queue is
// empty, and the QP's lock is held.
func (q *qpObj) pullRecv() {
	r := q.rr
	r.mu.Lock()
	_, trouble := r.takeLocked(q.qp.PostRecvLocked, pullRecvBatch, false)
	r.mu.Unlock()
	if trouble {
		q.errPending.Store(true)
		q.loop.kickQP(q)
	}
}

// serviceRecv is the loop's look at the receive ring (q.mu held, the
// engine's lock not): it takes every new record, then asks the client to
// ring for the next one.
func (q *qpObj) serviceRecvLocked(st qp.State, spin bool) (did bool) {
	r := q.rr
	for {
		q.qp.Lock()
		r.mu.Lock()
		n, trouble := r.takeLocked(q.qp.PostRecvLocked, int(r.mask)+1, q.inErr || st == qp.Err)
		ready := false
		did = did || n > 0
		if spin && !trouble && !r.failed {
			r.c.Wake() // the loop polls: no doorbell needed
		} else if !trouble && !r.failed && !(r.halted && !q.inErr) {
			var err error
			ready, err = r.c.SleepBeyond(int(r.taken))
			if err != nil {
				r.failed, r.fault = true, err
				r.c.Fail(uint32(proto.EPROTO))
				trouble = true
			}
		}
		r.mu.Unlock()
		inErr := q.qp.AttrLocked().State == qp.Err
		q.qp.Unlock()
		if n > 0 && inErr {
			q.qp.Conn().Kick() // the engine flushes what was posted in ERR
		}
		if trouble {
			q.recvTroubleLocked()
			st = qp.Err
			continue // in ERR now: what follows the bad WQE is flushed
		}
		if !ready {
			return did
		}
	}
}

// recvTroubleLocked acts on what a take found (q.mu held): a ring out of
// range (QP_FATAL) or a bad WQE; either way the QP goes to ERR.
func (q *qpObj) recvTroubleLocked() {
	r := q.rr
	r.mu.Lock()
	fault := r.fault
	r.fault = nil
	r.mu.Unlock()
	if fault != nil {
		q.ringFaultLocked(nil, fault)
		return
	}
	q.toErrLocked()
}

// completeRecvLocked is complete for a receive of q's own ring.
func (r *recvRing) complete(wc *cq.WC) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := uint32(wc.WRID)
	if r.gone || wc.WRID>>epochShift != r.epoch || idx-r.cons >= r.taken {
		return false
	}
	wc.WRID = r.wrid[idx&r.mask]
	if st, ok := r.bad[idx]; ok {
		wc.Status = st
		delete(r.bad, idx)
	}
	n := idx + 1 - r.cons
	r.c.Release(int(n))
	r.cons += n
	r.taken -= n
	return true
}

// reset empties the ring at RESET: the engine has discarded what it held,
// so every slot goes back and the indices restart at 0.
func (r *recvRing) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.Reset()
	r.cons, r.taken = 0, 0
	r.seen.Store(0)
	r.epoch = (r.epoch + 1) & epochMask
	clear(r.bad)
	r.failed, r.fault, r.halted = false, nil, false
}

// depth is the ring's records not released and those on the engine (for
// metrics); ok false when the ring is no longer served.
func (r *recvRing) depth() (avail, taken, entries int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed {
		return 0, 0, 0, false
	}
	a, err := r.c.Available()
	if err != nil {
		return 0, 0, 0, false
	}
	return a, int(r.taken), r.c.Entries(), true
}

package rvtd

import (
	"sync"
	"sync/atomic"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// Shared receive queues. An SRQ's ring has no doorbell: the engine pulls
// its WQEs when a QP on it finds the engine's SRQ empty (qp.SRQ.SetPull),
// one at a time, so that the daemon counts exactly how many the ring
// still holds for the SRQ limit. A record's slot is released as soon as
// the daemon has copied it (its completion may come from any QP, in any
// order), and the engine carries the client's wr_id itself.
//
// Locks: srqObj.mu is taken under the engine SRQ's lock (and the pulling
// QP's); inside it only session.mu (SGE checks), a CQ's lock (the
// completion of a bad WQE), a device context's mutex (async events) and
// loop.mu (kicks).

// IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT (ibv_srq_attr_mask).
const (
	srqAttrMaxWR = 1
	srqAttrLimit = 2
)

type srqObj struct {
	handle uint32
	sess   *session
	pd     *pdObj
	srq    *rvt.SRQ
	cookie uint64
	maxWR  uint32
	maxSGE uint32
	refs   int // QPs (session.mu)

	asyncEvents atomic.Uint32

	mu     sync.Mutex // guards the fields below
	dead   bool
	reg    *ring.Region
	c      *ring.Consumer
	limit  uint32 // armed limit, 0 when not armed
	failed bool
	buf    []byte
	sges   []qp.SGE
	wrs    [1]qp.RecvWR
}

func (ss *session) createSRQ(h uint32, m *proto.CreateSRQ) (proto.Body, []int, error) {
	if m.MaxWR == 0 || m.MaxWR > maxWR || m.MaxSGE > maxSGE || m.SRQLimit > m.MaxWR {
		return nil, nil, proto.EINVAL
	}
	// An SRQ counts against the session's QP limit (its ring is memory
	// of the daemon's, as a QP's are).
	ss.mu.Lock()
	p := lookupLocked[pdObj](ss, h)
	switch {
	case p == nil:
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	case ss.nqp >= ss.srv.cfg.Limits.QPs:
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	if err := ss.takeFDsLocked(1, proto.ENOMEM); err != nil { // the memfd, until the reply
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.nqp++
	ss.mu.Unlock()
	fail := func(err error) (proto.Body, []int, error) {
		ss.mu.Lock()
		ss.nqp--
		ss.putFDsLocked(1)
		ss.mu.Unlock()
		return nil, nil, err
	}
	entries, sge := pow2(m.MaxWR), max(m.MaxSGE, 1)
	l := ring.Layout{Offset: 0, Entries: entries, Stride: ring.RecvStride(sge)}
	reg, err := ring.Create("rvtd-srq", int(l.Size()))
	if err != nil {
		return fail(proto.ENOMEM)
	}
	s := &srqObj{sess: ss, pd: p, cookie: m.Cookie, maxWR: entries, maxSGE: sge, reg: reg, limit: m.SRQLimit,
		buf: make([]byte, l.Stride), sges: make([]qp.SGE, 0, sge)}
	if err := ring.Init(reg.Bytes(), ring.KindSRQ, l); err != nil {
		reg.Close()
		return fail(err)
	}
	if s.c, err = ring.NewConsumer(reg.Bytes(), ring.KindSRQ, l, nil, false); err != nil {
		reg.Close()
		return fail(err)
	}
	if s.srq, err = p.pd.CreateSRQ(entries, sge); err != nil {
		reg.Close()
		return fail(err)
	}
	s.srq.SetPull(s.pull)
	ss.mu.Lock()
	s.handle = ss.addLocked(s)
	p.refs++
	ss.mu.Unlock()
	fd := reg.TakeFD() // passed, then closed: the daemon keeps its mapping
	return &proto.SRQReply{SRQ: s.handle, MaxWR: entries, MaxSGE: sge, MapSize: uint64(len(reg.Bytes())),
		Ring: proto.RingLayout{Offset: 0, Entries: entries, Stride: l.Stride}, FD: fd}, []int{fd}, nil
}

func (ss *session) modifySRQ(h uint32, m *proto.SRQAttr) error {
	s := lookup[srqObj](ss, h)
	if s == nil {
		return proto.EINVAL
	}
	if m.Mask&srqAttrMaxWR != 0 {
		return proto.EOPNOTSUPP // resize_srq: a new ring (srqresize.go)
	}
	if m.Mask&srqAttrLimit != 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		if m.SRQLimit > s.maxWR { // maxWR changes with resize_srq
			return proto.EINVAL
		}
		s.limit = m.SRQLimit
	}
	return nil
}

func (ss *session) querySRQ(h uint32) (proto.Body, []int, error) {
	s := lookup[srqObj](ss, h)
	if s == nil {
		return nil, nil, proto.EINVAL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &proto.SRQAttr{MaxWR: s.maxWR, MaxSGE: s.maxSGE, SRQLimit: s.limit}, nil, nil
}

func (ss *session) destroySRQ(h uint32) (proto.Body, []int, error) {
	ss.mu.Lock()
	s, err := unusedLocked(ss, h, func(o *srqObj) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.mu.Unlock()
	s.destroy()
	return &proto.EventsReply{AsyncEvents: s.asyncEvents.Load()}, nil, nil
}

// destroy releases the SRQ (no QP uses it any more).
func (s *srqObj) destroy() {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.dead = true
	s.mu.Unlock()
	if err := s.srq.Destroy(); err != nil {
		s.sess.log.Warn("destroy SRQ", "err", err)
	}
	s.mu.Lock()
	_ = s.reg.Close()
	s.reg, s.c = nil, nil
	s.mu.Unlock()
	ss := s.sess
	ss.mu.Lock()
	delete(ss.objs, s.handle)
	ss.nqp--
	s.pd.refs--
	ss.mu.Unlock()
}

// pull is the engine SRQ's pull (qp.SRQ.SetPull): QP eq found it empty.
// It posts the ring's next good WQE, if there is one.
func (s *srqObj) pull(eq *qp.QP) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.dead && !s.failed {
		avail, err := s.c.Available()
		if err != nil {
			s.faultLocked(err)
			return
		}
		if avail == 0 {
			return
		}
		slot := s.c.Slot(0)
		rec := s.buf[:len(slot)]
		copy(rec, slot)
		s.c.Release(1)
		w := ring.RecvWQE(rec)
		wr := &s.wrs[0]
		*wr = qp.RecvWR{WRID: w.WRID()}
		st := s.checkLocked(w, wr)
		if st == 0 {
			if err := s.srq.PostLocked(s.wrs[:]); err != nil {
				st = statusOf(err)
			}
		}
		if st != 0 {
			s.badLocked(eq, w.WRID(), st)
			continue // the message may still find a good one
		}
		if s.limit != 0 && uint32(avail-1) < s.limit {
			s.limit = 0
			s.asyncEvents.Add(1)
			s.sess.asyncEvent(s.pd.ctx, s.cookie, s.handle, uint32(rvt.EventType(15))) // IBV_EVENT_SRQ_LIMIT_REACHED
		}
		return
	}
}

// checkLocked checks a copied record and fills wr's SGL: a status for a
// bad WQE.
func (s *srqObj) checkLocked(w ring.RecvWQE, wr *qp.RecvWR) cq.Status {
	n := int(w.NumSGE())
	if n > w.MaxSGEs() || uint32(n) > s.maxSGE {
		return cq.LocLenErr
	}
	s.sges = s.sges[:0]
	for i := 0; i < n; i++ {
		g := w.SGE(i)
		if !s.sess.sgeOK(s.pd, g.LKey(), g.Addr(), g.Length()) {
			return cq.LocProtErr
		}
		s.sges = append(s.sges, qp.SGE{Addr: g.Addr(), Length: g.Length(), Lkey: g.LKey()})
	}
	wr.SGL = s.sges
	return 0
}

// badLocked completes a bad SRQ WQE with its status on the QP that found
// it, and has the loop move that QP to ERR (as for a bad WQE of its own).
func (s *srqObj) badLocked(eq *qp.QP, wrid uint64, st cq.Status) {
	v, ok := s.pd.ctx.d.qps.Load(eq.Num())
	if !ok {
		return
	}
	q := v.(*qpObj)
	q.rcq.cq.Push(&cq.WC{WRID: wrid, Status: st, Opcode: cq.Recv, QPNum: q.qpn})
	q.srqBad.Store(true)
	q.loop.kickQP(q)
}

// faultLocked: the client's producer index is out of range. The ring is
// no longer served (EPROTO), the client gets IBV_EVENT_SRQ_ERR, and every
// QP on the SRQ goes to ERR.
func (s *srqObj) faultLocked(err error) {
	s.failed = true
	s.c.Fail(uint32(proto.EPROTO))
	s.sess.log.Warn("SRQ ring corrupt", "srq", s.handle, "err", err)
	s.asyncEvents.Add(1)
	s.sess.asyncEvent(s.pd.ctx, s.cookie, s.handle, uint32(rvt.EventType(14))) // IBV_EVENT_SRQ_ERR
	s.pd.ctx.d.qps.Range(func(_, v any) bool {
		if q := v.(*qpObj); q.srq == s {
			q.srqBad.Store(true)
			q.loop.kickQP(q)
		}
		return true
	})
}

// complete is qpObj.complete for a receive of q taken from the SRQ: the
// engine carries the client's wr_id, and the slot went back when taken.
func (s *srqObj) complete(q *qpObj, wc *cq.WC) bool { return true }

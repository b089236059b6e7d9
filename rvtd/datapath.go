package rvtd

import (
	"errors"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// The data path. A client's QP has a send ring and a receive ring in a
// memfd both map; its CQ a completion ring. The daemon keeps an engine QP
// and an engine CQ behind each: a loop copies WQE records out of the rings,
// checks the copies, and posts them to the engine with the ring index as
// the engine's wr_id; it drains the engine CQ into the client's CQ ring,
// giving back the client's wr_id, and only then releases the WQE's ring
// slot (the consumer index moves when the completion is written, or for
// unsignaled WQEs when a later one completes: retirement is in order).
//
// A few loops (Options.Loops) serve every QP and CQ: each is an epoll over
// its QPs' doorbell eventfds and a wake-up eventfd the engine's kicks ring
// (loop.go). There is no periodic look at the rings: receive rings have
// the QP's doorbell too, and the engine pulls receives itself when it
// finds none (recv.go); SRQ rings are pulled only (srq.go).

// postBatch is the most WRs posted to the engine in one call.
const postBatch = 32

type cqObj struct {
	handle  uint32
	sess    *session
	ctx     *devCtx
	ch      *chanObj
	cookie  uint64
	cq      *rvt.CQ
	loop    *loop
	entries int
	queued  atomic.Bool
	failed  atomic.Bool
	refs    int // QPs (session.mu)

	compEvents  atomic.Uint32
	asyncEvents atomic.Uint32

	mu   sync.Mutex // guards the fields below
	dead bool
	reg  *ring.Region
	prod *ring.Producer
	wcs  []cq.WC
}

type qpObj struct {
	handle uint32
	sess   *session
	ctx    *devCtx
	pd     *pdObj
	scq    *cqObj
	rcq    *cqObj
	srq    *srqObj // nil: the QP has a receive ring of its own (rr)
	rr     *recvRing
	cookie uint64
	typ    uint8
	sigAll bool
	qp     *rvt.QP
	qpn    uint32
	loop   *loop
	bell   *ring.Doorbell
	cap    proto.Cap
	queued atomic.Bool
	active bool // in its loop's active set (the loop's own)

	errPending atomic.Bool // the receive side found trouble: the loop acts
	srqBad     atomic.Bool // a bad SRQ WQE completed here: the loop moves the QP to ERR

	asyncEvents atomic.Uint32 // async events sent about the QP

	mu       sync.Mutex // guards the fields below
	dead     bool
	reg      *ring.Region
	sq       *ring.Consumer
	sqMask   uint32
	sqCons   uint32               // our copy of the send ring's consumer index
	sqTaken  uint32               // records after sqCons posted to the engine
	sqEpoch  uint64               // bumped at RESET: older engine wr_ids are stale
	sqWRID   []uint64             // the client's wr_id of each posted slot
	sqBad    map[uint32]cq.Status // a bad WQE's status, by ring index
	sqFailed bool                 // the ring's indices went out of range: no longer served
	inErr    bool                 // the daemon moved the QP to ERR (or saw it there)
	buf      []byte
	wrs      []qp.SendWR
	sges     []qp.SGE // the SGLs of the batch in q.wrs
	inl      []byte   // and their inline data
}

// loop is one data-path goroutine.
type loop struct {
	srv  *Server
	id   int32         // from 1
	spin time.Duration // how long to poll after work (Server.spin); 0: never
	epfd int
	ep   *os.File        // epfd, watched by Go's netpoller
	rc   syscall.RawConn // ep's
	wake *ring.Doorbell
	quit atomic.Bool
	done chan struct{}

	mu       sync.Mutex // guards the fields below
	qps      map[*qpObj]struct{}
	cqs      map[*cqObj]struct{}
	byFD     map[int32]*qpObj
	dirtyQ   []*qpObj
	dirtyC   []*cqObj
	sleeping bool // the loop waits in the netpoller: kicks ring l.wake
}

func newLoop(s *Server, i int) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	w, err := ring.NewDoorbell()
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		w.Close()
		return nil, err
	}
	ep := os.NewFile(uintptr(epfd), "rvtd-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		w.Close()
		return nil, err
	}
	l := &loop{srv: s, id: int32(i + 1), spin: s.spin, epfd: epfd, ep: ep, rc: rc, wake: w, done: make(chan struct{}),
		qps: map[*qpObj]struct{}{}, cqs: map[*cqObj]struct{}{}, byFD: map[int32]*qpObj{}}
	if err := l.watch(w.FD()); err != nil {
		ep.Close()
		w.Close()
		return nil, err
	}
	return l, nil
}

func (l *loop) watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev))
}

func (l *loop) addQP(q *qpObj) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.watch(q.bell.FD()); err != nil {
		return err
	}
	l.qps[q] = struct{}{}
	l.byFD[int32(q.bell.FD())] = q
	return nil
}

func (l *loop) removeQP(q *qpObj) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, q.bell.FD(), nil)
	delete(l.qps, q)
	delete(l.byFD, int32(q.bell.FD()))
}

func (l *loop) addCQ(c *cqObj) {
	l.mu.Lock()
	l.cqs[c] = struct{}{}
	l.mu.Unlock()
}

func (l *loop) removeCQ(c *cqObj) {
	l.mu.Lock()
	delete(l.cqs, c)
	l.mu.Unlock()
}

// kickQP asks the loop to serve q's rings soon.
func (l *loop) kickQP(q *qpObj) {
	if q.queued.Swap(true) {
		return
	}
	l.mu.Lock()
	l.dirtyQ = append(l.dirtyQ, q)
	ring := l.sleeping
	l.sleeping = false
	l.mu.Unlock()
	if ring {
		_ = l.wake.Ring()
	}
}

// kickCQ asks the loop to drain c's engine CQ soon. It runs in the
// engine's completion callback, so it only queues.
func (l *loop) kickCQ(c *cqObj) {
	if c.queued.Swap(true) {
		return
	}
	l.mu.Lock()
	l.dirtyC = append(l.dirtyC, c)
	ring := l.sleeping
	l.sleeping = false
	l.mu.Unlock()
	if ring {
		_ = l.wake.Ring()
	}
}

func (l *loop) stop() {
	l.quit.Store(true)
	_ = l.wake.Ring() // whether it sleeps or spins
	<-l.done
	l.ep.Close()
	l.wake.Close()
}

// wait returns the ready doorbells, waiting at most timeout milliseconds
// (-1: no limit). It sleeps in Go's netpoller, which
// watches the loop's epoll descriptor, rather than in epoll_wait: a
// goroutine woken there runs at once, where a thread returning from a
// blocking system call must first win back a processor.
func (l *loop) wait(events []unix.EpollEvent, timeout int) (int, error) {
	n, err := unix.EpollWait(l.epfd, events, 0)
	if n != 0 || (err != nil && err != unix.EINTR) {
		return max(n, 0), err
	}
	var dl time.Time
	if timeout >= 0 {
		dl = l.srv.clk.Now().Add(time.Duration(timeout) * time.Millisecond)
	}
	if err := l.ep.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	rerr := l.rc.Read(func(fd uintptr) bool {
		n, err = unix.EpollWait(int(fd), events, 0)
		return n != 0 || (err != nil && err != unix.EINTR)
	})
	switch {
	case errors.Is(rerr, os.ErrDeadlineExceeded):
		return 0, nil
	case rerr != nil:
		return 0, rerr
	}
	return max(n, 0), err
}

func pow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

func pageUp(n uint64) uint64 {
	pg := uint64(os.Getpagesize())
	return (n + pg - 1) &^ (pg - 1)
}

func (ss *session) createCQ(h uint32, m *proto.CreateCQ) (proto.Body, []int, error) {
	if m.CQE == 0 || m.CQE > 1<<20 {
		return nil, nil, proto.EINVAL
	}
	entries := pow2(m.CQE)
	ss.mu.Lock()
	c := lookupLocked[devCtx](ss, h)
	var ch *chanObj
	if m.Channel != 0 {
		ch = lookupLocked[chanObj](ss, m.Channel)
	}
	switch {
	case c == nil || (m.Channel != 0 && (ch == nil || ch.ctx != c)):
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	case ss.ncqe+int(entries) > ss.srv.cfg.Limits.CQEntries:
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	if err := ss.takeFDsLocked(1, proto.ENOMEM); err != nil { // the memfd, until the reply
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.ncqe += int(entries)
	ss.mu.Unlock()
	o := &cqObj{sess: ss, ctx: c, ch: ch, cookie: m.Cookie, entries: int(entries), wcs: make([]cq.WC, 64)}
	fail := func(err error) (proto.Body, []int, error) {
		ss.mu.Lock()
		ss.ncqe -= int(entries)
		ss.putFDsLocked(1)
		ss.mu.Unlock()
		if o.reg != nil {
			o.reg.Close()
		}
		return nil, nil, err
	}
	l := ring.Layout{Offset: 0, Entries: entries, Stride: ring.CQESize}
	reg, err := ring.Create("rvtd-cq", int(l.Size()))
	if err != nil {
		return fail(proto.ENOMEM)
	}
	o.reg = reg
	if err := ring.Init(reg.Bytes(), ring.KindCQ, l); err != nil {
		return fail(err)
	}
	if o.prod, err = ring.NewProducer(reg.Bytes(), ring.KindCQ, l, nil, false); err != nil {
		return fail(err)
	}
	ss.mu.Lock()
	o.handle = ss.addLocked(o)
	o.loop = ss.srv.loopFor(o.handle + ss.id)
	ss.mu.Unlock()
	o.cq, err = c.d.dev.CreateCQ(2*int(entries), func(*rvt.CQ) { o.loop.kickCQ(o) })
	if err != nil {
		ss.mu.Lock()
		delete(ss.objs, o.handle)
		ss.mu.Unlock()
		return fail(err)
	}
	ss.mu.Lock()
	c.refs++
	if ch != nil {
		ch.refs++
		ch.cqs.Add(1)
	}
	ss.mu.Unlock()
	c.d.cqs.Store(o.cq, o)
	o.loop.addCQ(o)
	_, _ = o.cq.ArmAndCheck(false)
	fd := reg.TakeFD() // passed, then closed: the daemon keeps its mapping
	return &proto.CQReply{CQ: o.handle, CQE: entries, MapSize: uint64(len(reg.Bytes())),
		Ring: proto.RingLayout{Offset: 0, Entries: entries, Stride: ring.CQESize}, FD: fd}, []int{fd}, nil
}

func (ss *session) destroyCQ(h uint32) (proto.Body, []int, error) {
	ss.mu.Lock()
	o, err := unusedLocked(ss, h, func(o *cqObj) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.mu.Unlock()
	o.destroy()
	return &proto.EventsReply{CompEvents: o.compEvents.Load(), AsyncEvents: o.asyncEvents.Load()}, nil, nil
}

// destroy releases the CQ: the engine's, then the ring.
func (o *cqObj) destroy() {
	ss := o.sess
	o.loop.removeCQ(o)
	o.mu.Lock()
	if o.dead {
		o.mu.Unlock()
		return
	}
	o.dead = true // drain makes no more events
	o.mu.Unlock()
	if o.ch != nil {
		o.ch.forget(o.handle)
		o.ch.cqs.Add(-1)
	}
	o.ctx.d.cqs.Delete(o.cq)
	if err := o.ctx.d.dev.DestroyCQ(o.cq); err != nil {
		ss.log.Warn("destroy CQ", "err", err)
	}
	o.mu.Lock()
	_ = o.reg.Close()
	o.reg, o.prod = nil, nil
	o.mu.Unlock()
	ss.mu.Lock()
	delete(ss.objs, o.handle)
	ss.ncqe -= o.entries
	o.ctx.refs--
	if o.ch != nil {
		o.ch.refs--
	}
	ss.mu.Unlock()
}

// drain moves completions from the engine CQ to the client's ring and
// reports whether it wrote any.
func (o *cqObj) drain() (did bool) {
	overflowed := false
	defer func() { // after the unlock below: QP locks come before CQ locks
		if overflowed {
			o.errorQPs()
		}
	}()
	o.mu.Lock()
	defer o.mu.Unlock()
	for !o.dead && o.prod.Status() == 0 {
		free, err := o.prod.Free()
		if err != nil { // the client's consumer index is out of range
			o.failed.Store(true)
			o.prod.Fail(uint32(proto.EPROTO))
			o.sess.log.Warn("CQ ring corrupt", "cq", o.handle, "err", err)
			o.asyncEvents.Add(1)
			o.sess.asyncEvent(o.ctx, o.cookie, o.handle, uint32(rvt.EventType(0)))
			return
		}
		if free == 0 {
			if o.cq.Len() == 0 && !o.failed.Load() {
				// No room and nothing waiting: arm the engine's CQ so
				// that the next completion brings the loop back (an
				// overflow unless the client has polled by then).
				if queued, _ := o.cq.ArmAndCheck(false); !queued {
					return
				}
			}
			o.overflowLocked() // a completion and no room
			overflowed = true
			return
		}
		n := o.cq.Poll(o.wcs[:min(free, len(o.wcs))])
		if n == 0 {
			if o.failed.Load() { // the engine's CQ overflowed: what it held is delivered
				o.overflowLocked()
				overflowed = true
				return
			}
			if queued, _ := o.cq.ArmAndCheck(false); !queued {
				return
			}
			continue
		}
		written, notable := 0, false
		for i := range o.wcs[:n] {
			wc := &o.wcs[i]
			v, ok := o.ctx.d.qps.Load(wc.QPNum)
			if !ok {
				continue // a QP destroyed since: its completions go with it
			}
			q := v.(*qpObj)
			if q.sess != o.sess || !q.complete(wc) {
				continue
			}
			putCQE(ring.CQE(o.prod.Slot(written)), wc)
			written++
			notable = notable || wc.Solicited || wc.Status != cq.Success
		}
		if written == 0 {
			continue
		}
		_, _ = o.prod.Publish(written)
		did = true
		if o.ch != nil && o.prod.TakeArm(notable) {
			o.compEvents.Add(1)
			o.ch.notify(o.sess, o.cookie, o.handle)
		}
	}
	return did
}

// overflowLocked puts the CQ in error: the ring is no longer served (EIO
// in its status word) and the client gets IBV_EVENT_CQ_ERR; drain, the
// only caller, does it once (it serves a ring only while its status is 0)
// and then moves the CQ's QPs to ERR (errorQPs). The engine's CQ, twice
// the ring's size, has raised the event already if it overflowed first
// (and the engine has moved the QPs whose completions it lost).
func (o *cqObj) overflowLocked() {
	o.prod.Fail(uint32(proto.EIO))
	o.sess.log.Info("CQ overflow", "cq", o.handle)
	if o.failed.Swap(true) {
		return
	}
	o.asyncEvents.Add(1)
	o.sess.asyncEvent(o.ctx, o.cookie, o.handle, uint32(rvt.EventType(0)))
}

// errorQPs moves the QPs that complete to o to ERR once its ring has
// overflowed, as the engine does for a QP whose completion finds its CQ
// full (IBTA class G): their completions can no longer be seen.
func (o *cqObj) errorQPs() {
	ss := o.sess
	var qs []*qpObj
	ss.mu.Lock()
	for _, x := range ss.objs {
		if q, ok := x.(*qpObj); ok && (q.scq == o || q.rcq == o) {
			qs = append(qs, q)
		}
	}
	ss.mu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		if !q.dead {
			q.toErrLocked()
		}
		q.mu.Unlock()
	}
}

func putCQE(e ring.CQE, wc *cq.WC) {
	clear(e)
	e.SetWRID(wc.WRID)
	e.SetStatus(uint8(wc.Status))
	e.SetOpcode(uint8(wc.Opcode))
	e.SetSL(wc.SL)
	e.SetDLIDPathBits(wc.DLIDPathBits)
	e.SetVendorErr(wc.VendorErr)
	e.SetByteLen(wc.ByteLen)
	switch {
	case wc.Flags&cq.WithImm != 0:
		e.SetImmData(wc.ImmData)
	case wc.Flags&cq.WithInv != 0:
		e.SetInvalidatedRKey(wc.InvalidatedRkey)
	}
	e.SetQPNum(wc.QPNum)
	e.SetSrcQP(wc.SrcQP)
	e.SetWCFlags(uint32(wc.Flags))
	e.SetPKeyIndex(wc.PkeyIndex)
	e.SetSLID(wc.SLID)
	e.SetSolicited(wc.Solicited)
}

// complete turns an engine completion of q (whose wr_id is a ring index)
// into the client's: its wr_id, and a bad WQE's own status; and releases
// the ring slots it retires. It reports false for a completion that is not
// one of q's ring slots (then it is dropped).
func (q *qpObj) complete(wc *cq.WC) bool {
	if q.srq != nil && wc.Opcode&cq.Recv != 0 {
		return q.srq.complete(q, wc)
	}
	if wc.WRID&recvTag != 0 {
		if q.rr == nil {
			return false
		}
		return q.rr.complete(wc)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return false
	}
	idx := uint32(wc.WRID)
	if wc.WRID>>epochShift != q.sqEpoch || idx-q.sqCons >= q.sqTaken {
		return false
	}
	wc.WRID = q.sqWRID[idx&q.sqMask]
	if st, ok := q.sqBad[idx]; ok {
		wc.Status = st
		delete(q.sqBad, idx)
	}
	n := idx + 1 - q.sqCons
	q.sq.Release(int(n))
	q.sqCons += n
	q.sqTaken -= n
	return true
}

// The engine's wr_id of a WQE from a ring: the ring index in the low 32
// bits, recvTag for a receive (so a completion names its queue whatever
// its opcode), and the ring's epoch from bit 40 (bumped at RESET, so a
// completion of a WQE from before is told apart).
const (
	recvTag    = 1 << 32
	epochShift = 40
	epochMask  = 1<<(64-epochShift) - 1 // epochs wrap within the wr_id
)

func (q *qpObj) sendWRID(idx uint32) uint64 { return uint64(idx) | q.sqEpoch<<epochShift }

// resizeCQ gives the CQ a new ring of at least m.CQE entries: the
// completions the client has not consumed are copied into it, in order,
// and the daemon produces only there. The client stopped polling the old
// ring before asking; arming starts afresh on the new one.
func (ss *session) resizeCQ(h uint32, m *proto.ResizeCQ) (proto.Body, []int, error) {
	if m.CQE == 0 || m.CQE > 1<<20 {
		return nil, nil, proto.EINVAL
	}
	entries := pow2(m.CQE)
	ss.mu.Lock()
	o := lookupLocked[cqObj](ss, h)
	if o == nil {
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	}
	grow := int(entries) - o.entries
	if ss.ncqe+grow > ss.srv.cfg.Limits.CQEntries {
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	if err := ss.takeFDsLocked(1, proto.ENOMEM); err != nil { // the new memfd, until the reply
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.mu.Unlock()
	passed := false
	defer func() {
		if !passed {
			ss.putFDs(1)
		}
	}()

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead || o.prod.Status() != 0 {
		return nil, nil, proto.EINVAL
	}
	old := o.reg.Bytes()
	prodIdx := atomic.LoadUint32((*uint32)(unsafe.Pointer(&old[0])))
	consIdx := atomic.LoadUint32((*uint32)(unsafe.Pointer(&old[64])))
	used := prodIdx - consIdx
	if used > uint32(o.entries) {
		return nil, nil, proto.EINVAL // the client's consumer index is out of range
	}
	if used > entries {
		return nil, nil, proto.EINVAL // the new ring cannot hold what is unread
	}
	l := ring.Layout{Offset: 0, Entries: entries, Stride: ring.CQESize}
	reg, err := ring.Create("rvtd-cq", int(l.Size()))
	if err != nil {
		return nil, nil, proto.ENOMEM
	}
	var prod *ring.Producer
	if err = ring.Init(reg.Bytes(), ring.KindCQ, l); err == nil {
		prod, err = ring.NewProducer(reg.Bytes(), ring.KindCQ, l, nil, false)
	}
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	if err := o.cq.Resize(2 * int(entries)); err != nil {
		reg.Close()
		return nil, nil, err
	}
	mask := uint32(o.entries - 1)
	for k := uint32(0); k < used; k++ {
		i := (consIdx + k) & mask
		copy(prod.Slot(int(k)), old[ring.HeaderSize+int(i)*ring.CQESize:][:ring.CQESize])
	}
	if _, err := prod.Publish(int(used)); err != nil {
		reg.Close()
		return nil, nil, err
	}
	_ = o.reg.Close()
	o.reg, o.prod = reg, prod
	ss.mu.Lock()
	ss.ncqe += int(entries) - o.entries
	o.entries = int(entries)
	ss.mu.Unlock()
	o.loop.kickCQ(o)
	fd := reg.TakeFD() // passed, then closed: the daemon keeps its mapping
	passed = true
	return &proto.CQReply{CQ: o.handle, CQE: entries, MapSize: uint64(len(reg.Bytes())),
		Ring: proto.RingLayout{Offset: 0, Entries: entries, Stride: ring.CQESize}, FD: fd}, []int{fd}, nil
}

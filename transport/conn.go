package transport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/qp"
)

// Conn is the transport state of one QP. Its send task runs the completer
// (ACKs and responses) and then the requester (new packets, retries); its
// receive task runs the responder. Both take the QP lock for a bounded batch
// and issue completions and events after releasing it.
type Conn struct {
	// The fields a message touches come first, in as few cache lines as
	// may be: with 10,000 active QPs every message finds its Conn out of
	// the cache, and each line is a miss (BenchmarkFabricScale).
	e        *Engine
	qp       *qp.QP
	sendTask *task.Task
	recvTask *task.Task
	stopped  atomic.Bool
	removed  atomic.Bool // RemoveConn has taken it (Engine.RemoveConn)
	// nakQueued says a NAK waits for the completer: a requester in the
	// middle of a batch stops, as what it would send next after a loss
	// is dropped by the responder.
	nakQueued  atomic.Bool
	timerFired atomic.Bool
	rnrFired   atomic.Bool
	waiters    atomic.Int32 // goroutines in WaitFlushed or WaitSent
	srcPort    uint16

	reqQ  pktQueue // requests, for the responder
	respQ pktQueue // ACKs and responses, for the completer
	// Packets from tasks of an engine whose tasks run one at a time
	// (Engine.onDrainer), or from the goroutine that will run the task
	// next (task.TryCarry): lists without atomics, each touched only by
	// its task (reqLocal the responder's, respLocal the completer's) and
	// by whoever runs that task's next batch. A reset runs outside the
	// tasks, so it cannot empty them: it moves resetGen, each packet
	// carries the generation it was listed in, and each task drops the
	// older ones from its own list (inbox.seen).
	reqLocal, respLocal pktList
	resetGen            atomic.Uint32

	// Task-local batches taken from reqQ and respQ, under the QP lock.
	reqIn, respIn inbox

	// The stock of packet buffers each task's running batch uses: the
	// goroutine's (bufCache), nil between batches and on an Inline engine.
	sendBufs, recvBufs *bufCache

	tasks [2]task.Task // *sendTask, *recvTask: here, not apart

	// Send task state, under the QP lock.
	req  reqState
	comp compState

	// The cached route and MTU, under the QP lock.
	path path

	// Counts made under the QP lock (count), and packets sent over the
	// loopback path (which the device counts as received): the data path
	// counts with plain adds, and whoever reads the counters adds these in
	// first (countLocked), so a message costs no locked instruction for its
	// counts.
	pend   [NumCounters]uint64
	looped uint64

	// Completions and events of the send and receive tasks.
	sout, rout outbox
	// The requester whose send task the receive task's batch joined to
	// hand it an ACK directly (ackDirectLocked), until the batch ends;
	// joinedMore says its requester has work.
	joined     *Conn
	joinedMore bool
	// The responder whose receive task the send task's batch joined to
	// run it at the batch's end (joinRespLocked), and, in the responder's
	// Conn while that runs, the requester whose batch runs it (host).
	// hostMore says an ACK handed to the host left its requester work.
	joinedResp, host *Conn
	hostMore         bool
	// joinMark is how many of sout's completions were there when the
	// send batch ran its joined responder (respondJoinedLocked).
	joinMark int

	// Receive task state, under the QP lock.
	resp respState

	// Seldom touched, and made on first use: the counters when there are
	// counts to keep (countLocked, drop), ran at the first waitUntil.
	// With 10,000 QPs every byte here is 10,000 (the Conn was 1624 bytes,
	// in the allocator's 1792-byte class; 1320 now, in the 1408 class).
	counters atomic.Pointer[Counters]
	reqTx    []byte // frame buffers on an Inline engine (bufCache.frame)
	respTx   []byte
	timerMu  sync.Mutex
	rnrTimer clock.Timer                   // guarded by timerMu
	ran      atomic.Pointer[chan struct{}] // signalled after each task run while someone drains
}

// noCounters stands for the counters of a QP that has counted nothing
// yet; nothing writes it.
var noCounters Counters

// ctrs returns the QP's counters, making them if need be.
func (c *Conn) ctrs() *Counters {
	if p := c.counters.Load(); p != nil {
		return p
	}
	p := new(Counters)
	if c.counters.CompareAndSwap(nil, p) {
		return p
	}
	return c.counters.Load()
}

// readCounters returns the QP's counters for reading: noCounters while
// it has none.
func (c *Conn) readCounters() *Counters {
	if p := c.counters.Load(); p != nil {
		return p
	}
	return &noCounters
}

func newConn(e *Engine, q *qp.QP) *Conn {
	c := &Conn{
		e: e, qp: q,
		srcPort: 0xC000 | uint16(q.Num()*0x9E37)&0x3FFF,
	}
	c.sendTask, c.recvTask = &c.tasks[0], &c.tasks[1]
	c.sendTask.Init(e.cfg.Exec, "send", c.runSend)
	c.recvTask.Init(e.cfg.Exec, "recv", c.runRecv)
	return c
}

// QP returns the queue pair.
func (c *Conn) QP() *qp.QP { return c.qp }

// Counters returns the QP's counters, brought up to date, for reading.
func (c *Conn) Counters() *Counters {
	c.qp.Lock()
	c.countLocked()
	c.qp.Unlock()
	return c.readCounters()
}

// SrcPort returns the UDP source port of the QP's packets.
func (c *Conn) SrcPort() uint16 { return c.srcPort }

func (c *Conn) stop() {
	c.stopped.Store(true)
	c.sendTask.Stop()
	c.recvTask.Stop()
	// Handlers and events a joined batch left for a batch of these tasks
	// (endJoin) that will not run now: run them here, as a CQ the push
	// made due is disarmed until its handler has run.
	for _, o := range []*outbox{&c.sout, &c.rout} {
		if o.pending() {
			c.runCallbacks(o)
		}
	}
	c.timerMu.Lock()
	if c.rnrTimer != nil {
		c.rnrTimer.Stop()
	}
	c.timerMu.Unlock()
	c.reqQ.drain(c.e)
	c.respQ.drain(c.e)
}

// pktQueue is a FIFO of received packets that many goroutines push to and
// one task takes from: a Treiber stack that the task empties with one swap
// and reverses into its inbox. A push is one compare-and-swap and a take
// one swap, where a mutex-guarded queue cost three atomic operations on
// each side; a packet is pushed and taken once per hop. There is no ABA
// hazard: the consumer never pops one node, it takes the whole stack.
// task.Inline's run queue is the same queue, kept apart: a generic costs an indirect call.
type pktQueue struct {
	top atomic.Pointer[pktBuf]
}

func (pq *pktQueue) push(pb *pktBuf) {
	for {
		old := pq.top.Load()
		pb.next = old
		if pq.top.CompareAndSwap(old, pb) {
			return
		}
	}
}

// empty reports whether nothing is queued, without a write.
func (pq *pktQueue) empty() bool { return pq.top.Load() == nil }

// takeAll appends every queued packet to b, oldest first.
func (pq *pktQueue) takeAll(b []*pktBuf) []*pktBuf {
	pb := pq.top.Swap(nil)
	n := len(b)
	for pb != nil {
		next := pb.next
		pb.next = nil
		b = append(b, pb)
		pb = next
	}
	slices.Reverse(b[n:])
	return b
}

// pktList is a FIFO of packets with no synchronisation, for packets that
// one task hands another when the goroutine handing them will run the
// other next: an Inline drainer, or a carrier (task.TryCarry).
type pktList struct {
	head, tail *pktBuf
}

func (l *pktList) push(pb *pktBuf) {
	pb.next = nil
	if l.tail == nil {
		l.head = pb
	} else {
		l.tail.next = pb
	}
	l.tail = pb
}

// takeAll appends every listed packet to b, oldest first.
func (l *pktList) takeAll(b []*pktBuf) []*pktBuf {
	for pb := l.head; pb != nil; {
		next := pb.next
		pb.next = nil
		b = append(b, pb)
		pb = next
	}
	l.head, l.tail = nil, nil
	return b
}

// drain frees the listed packets; only a task may call it.
func (l *pktList) drain(e *Engine) {
	for pb := l.head; pb != nil; {
		next := pb.next
		pb.next = nil
		e.discard(pb, wakeChain)
		pb = next
	}
	l.head, l.tail = nil, nil
}

// dropOlder frees the listed packets of a generation other than gen; only
// a task may call it.
func (l *pktList) dropOlder(gen uint32, e *Engine) {
	var keep pktList
	for pb := l.head; pb != nil; {
		next := pb.next
		if pb.gen == gen {
			keep.push(pb)
		} else {
			pb.next = nil
			e.discard(pb, wakeChain)
		}
		pb = next
	}
	*l = keep
}

func (pq *pktQueue) drain(e *Engine) {
	for pb := pq.top.Swap(nil); pb != nil; {
		next := pb.next
		pb.next = nil
		e.discard(pb, wakeSchedule)
		pb = next
	}
}

// list puts pb on l (reqLocal or respLocal), stamped with the reset
// generation so that a reset meanwhile drops it (see next).
func (c *Conn) list(l *pktList, pb *pktBuf) {
	pb.gen = c.resetGen.Load()
	l.push(pb)
}

// enqueue queues a packet for the QP's responder or completer and wakes its
// task as w says; src, if not nil, is the task (with w = wakeChain) whose
// batch sent the packet, which then carries the QP's task (task.Carry).
func (c *Conn) enqueue(pb *pktBuf, w wake, src *task.Task) {
	if c.stopped.Load() {
		c.e.discard(pb, w)
		return
	}
	resp := pb.pkt.Info.Has(FlagResponse)
	t := c.recvTask
	if resp {
		t = c.sendTask
		if pb.pkt.Opcode == RCAck && pb.pkt.AETH().Syndrome().Type() == AckTypeNAK {
			c.nakQueued.Store(true) // the requester ends its batch early
		}
	}
	q, l := &c.reqQ, &c.reqLocal
	if resp {
		q, l = &c.respQ, &c.respLocal
	}
	// The list needs no atomics when the tasks run one at a time and we
	// are one (own), or when t's next batch runs here after ours
	// (carried): t takes it then. t takes its list before its queue, so a
	// carried packet is listed only behind an empty queue: an earlier one
	// of ours may wait there (queued while t was busy elsewhere, carried
	// when t went idle before our Carry).
	own := c.e.onDrainer(w)
	if own || src != nil && q.empty() && t.TryCarry(src) {
		c.list(l, pb)
		if c.stopped.Load() {
			// Stop ran meanwhile: nothing will take it. (Stop cannot
			// empty the lists; what a stop after this check leaves on
			// them goes to the garbage collector with the Conn.)
			l.drain(c.e)
			return
		}
		if own {
			t.Chain()
		}
		return
	}
	q.push(pb)
	if c.stopped.Load() {
		q.drain(c.e) // stop ran meanwhile: nothing will take it
		return
	}
	switch {
	case w == wakeHere:
		t.RunHere()
	case src != nil:
		t.Carry(src) // t is busy elsewhere, queued, or just went idle
	default:
		t.Schedule() // a Pool's Chain is Schedule
	}
}

// count adds one to counter k of the QP; the caller holds the QP lock.
func (c *Conn) count(k Counter) { c.pend[k]++ }

// countLocked moves the counts kept under the QP lock into the counters
// (the QP's, and the device's for looped packets). Readers call it; the
// data path never does.
func (c *Conn) countLocked() {
	var ctr *Counters
	for k, n := range c.pend {
		if n != 0 {
			if ctr == nil {
				ctr = c.ctrs()
			}
			ctr.c[k].Add(n)
			c.pend[k] = 0
		}
	}
	if c.looped != 0 {
		c.e.counters.c[RcvdPkts].Add(c.looped)
		c.looped = 0
	}
}

// inbox is a task's batch of packets taken from its queue at once.
type inbox struct {
	b    []*pktBuf
	i    int
	seen uint32 // the reset generation the task last saw (Conn.resetGen)
}

// next returns the next packet for a task, or nil: from its batch in hand,
// else from its list (l) and its queue (q), taken whole.
func (c *Conn) next(in *inbox, l *pktList, q *pktQueue) *pktBuf {
	if in.i == len(in.b) {
		in.b, in.i = in.b[:0], 0
		if g := c.resetGen.Load(); g != in.seen {
			// A reset since our last look: drop what was listed before
			// it. Only from our list: the other task's may be in use.
			in.seen = g
			l.dropOlder(g, c.e)
		}
		if l.head != nil {
			in.b = l.takeAll(in.b)
		}
		if !q.empty() {
			in.b = q.takeAll(in.b)
		}
		if len(in.b) == 0 {
			return nil
		}
		c.pend[RcvdPkts] += uint64(len(in.b))
	}
	pb := in.b[in.i]
	in.b[in.i] = nil
	in.i++
	if pb.icrc != nil && !pb.leftToResponder() {
		// Received with its ICRC left to us (Engine.lateICRC).
		ok := CheckICRC(pb.icrc)
		pb.icrc = nil
		if !ok {
			c.pend[RcvdPkts]--
			c.e.drop(nil, DropBadICRC)
			c.e.putBuf(pb, wakeSchedule)
			return c.next(in, l, q)
		}
	}
	if pb.pkt.span > 1 {
		// A loopback burst: the rest of the packets it stands for.
		c.pend[RcvdPkts] += uint64(pb.pkt.span - 1)
	}
	return pb
}

func (in *inbox) drain(e *Engine) {
	for ; in.i < len(in.b); in.i++ {
		e.discard(in.b[in.i], wakeSchedule)
		in.b[in.i] = nil
	}
	in.b, in.i = in.b[:0], 0
}

func (c *Conn) popReq() *pktBuf { return c.next(&c.reqIn, &c.reqLocal, &c.reqQ) }

func (c *Conn) popResp() *pktBuf { return c.next(&c.respIn, &c.respLocal, &c.respQ) }

// outbox collects completions and events produced under the QP lock; they
// are delivered after it is released, so CQ handlers and event subscribers
// may call back into the QP. Completions for the same CQ in a row go in one
// push.
type outbox struct {
	cqs []*cq.CQ // cqs[i] is the CQ of wcs[i]
	wcs []cq.WC
	evs []Event
	due []cqDue // handlers the pushes made due
}

type cqDue struct {
	cq  *cq.CQ
	due cq.Due
}

// wc appends a zeroed completion for q and returns it to be filled in
// place: building a cq.WC apart and copying it in costs a stall, as the
// copy's wide loads read the small stores just made. The pointer is good
// until the next call.
func (o *outbox) wc(q *cq.CQ) *cq.WC {
	o.cqs = append(o.cqs, q)
	o.wcs = append(o.wcs, cq.WC{})
	return &o.wcs[len(o.wcs)-1]
}

func (o *outbox) event(ev Event) { o.evs = append(o.evs, ev) }

// deliver pushes a run's completions and raises its events; t is the task
// whose batch made them, which is running. Before the first user callback
// (a CQ handler, an event subscriber) it hands what the batch carries to
// the executor's workers (task.Spill): a callback may wait for one of
// those tasks (a drain, a destroy), which would otherwise run on this
// goroutine only after the callback returns.
func (c *Conn) deliver(o *outbox, t *task.Task) {
	o.push()
	c.callBack(o, t)
}

// push pushes o's completions, each run for one CQ in one push, and keeps
// the handlers that made due for callBack.
func (o *outbox) push() {
	o.pushSpan(0, len(o.wcs))
	o.clearWCs()
}

// pushSpan pushes completions from to to of o, as push.
func (o *outbox) pushSpan(from, to int) {
	for i := from; i < to; {
		j := i + 1
		for j < to && o.cqs[j] == o.cqs[i] {
			j++
		}
		if _, due := o.cqs[i].PushBatchDeferred(o.wcs[i:j]); due.Any() {
			o.due = append(o.due, cqDue{o.cqs[i], due})
		}
		i = j
	}
}

// pushPair pushes a's completions from af on and then b's from bf on, as
// a.pushSpan and b.pushSpan in a row would, each part's due handlers
// kept with its own outbox; when they all go to one CQ (a loopback pair
// on a shared CQ, one completion each for a one-WR SEND), under one CQ
// lock instead of two.
func pushPair(a *outbox, af int, b *outbox, bf int) {
	q := a.oneCQ(af)
	if q == nil || b.oneCQ(bf) != q {
		a.pushSpan(af, len(a.wcs))
		b.pushSpan(bf, len(b.wcs))
		return
	}
	da, db := q.PushPairDeferred(a.wcs[af:], b.wcs[bf:])
	if da.Any() {
		a.due = append(a.due, cqDue{q, da})
	}
	if db.Any() {
		b.due = append(b.due, cqDue{q, db})
	}
}

// oneCQ returns the CQ of o's completions from i on if there are any and
// they all go to that one, else nil.
func (o *outbox) oneCQ(i int) *cq.CQ {
	if i >= len(o.cqs) {
		return nil
	}
	q := o.cqs[i]
	for _, x := range o.cqs[i+1:] {
		if x != q {
			return nil
		}
	}
	return q
}

// clearWCs empties o's completions once pushed.
func (o *outbox) clearWCs() {
	clear(o.cqs)
	o.cqs, o.wcs = o.cqs[:0], o.wcs[:0]
}

// pending reports whether o holds handlers or events for its task's next
// batch to run (a joined batch pushed its completions: endJoin).
func (o *outbox) pending() bool { return len(o.due) > 0 || len(o.evs) > 0 }

// callBack runs the CQ handlers push made due and raises o's events, as
// deliver says.
func (c *Conn) callBack(o *outbox, t *task.Task) {
	if len(o.due) == 0 && (len(o.evs) == 0 || c.e.cfg.Events == nil) {
		o.evs = o.evs[:0]
		return
	}
	t.Spill()
	c.runCallbacks(o)
}

// runCallbacks runs o's due CQ handlers and raises its events.
func (c *Conn) runCallbacks(o *outbox) {
	if len(o.due) == 0 && (len(o.evs) == 0 || c.e.cfg.Events == nil) {
		o.evs = o.evs[:0]
		return
	}
	c.e.callbacks.Add(1)
	lost := false
	for _, d := range o.due {
		d.due.Call(d.cq)
		lost = lost || d.due.Lost()
	}
	for _, ev := range o.evs {
		c.e.event(ev)
	}
	c.e.callbacks.Add(-1)
	clear(o.due)
	o.due, o.evs = o.due[:0], o.evs[:0]
	if lost {
		// A completion of this QP found its CQ full: the QP goes to ERR
		// (IBTA class G, as rxe's responder and rdmavt do) rather than
		// go on with work whose completions no one will see. (The
		// flushes are lost too: an overflowed CQ takes nothing more.)
		_ = c.Modify(&qp.Attr{State: qp.Err}, qp.AttrState)
	}
}

// Modify applies ibv_modify_qp and the engine's reaction to the transition.
func (c *Conn) Modify(a *qp.Attr, mask qp.AttrMask) error {
	q := c.qp
	q.Lock()
	from, to, err := q.ModifyLocked(a, mask)
	if err != nil {
		q.Unlock()
		return err
	}
	at := q.AttrLocked()
	c.path.port = nil // computed again for the new attributes
	switch {
	case to == qp.Reset:
		c.resetLocked()
	case from == qp.Init && to == qp.RTR:
		c.resp.epsn = PSN(at.RQPSN)
	case from == qp.RTR && to == qp.RTS:
		c.req.psn = PSN(at.SQPSN)
		c.req.maxPSN = PSN(at.SQPSN)
		c.comp.psn = PSN(at.SQPSN)
		c.req.retryLeft, c.req.rnrLeft = at.RetryCnt, at.RNRRetry
		c.rttResetLocked(PSN(at.SQPSN))
	case to == qp.SQD:
		c.req.drainedSent = false
	}
	if mask&qp.AttrRetryCnt != 0 {
		c.req.retryLeft = at.RetryCnt
	}
	if mask&qp.AttrRNRRetry != 0 {
		c.req.rnrLeft = at.RNRRetry
	}
	q.Unlock()
	if to != qp.Reset && to != qp.Init {
		c.sendTask.Schedule()
		c.recvTask.Schedule()
	}
	return nil
}

// resetLocked returns the engine state to that of a new QP.
func (c *Conn) resetLocked() {
	c.stopProbeLocked()
	c.req = reqState{}
	c.comp = compState{}
	c.resp = respState{}
	c.reqIn.drain(c.e)
	c.respIn.drain(c.e)
	c.reqQ.drain(c.e)
	c.respQ.drain(c.e)
	c.resetGen.Add(1) // the lists are the tasks' to empty: see next
	c.timerFired.Store(false)
	c.rnrFired.Store(false)
}

// PostSend posts send work requests (all or none) and wakes the requester.
func (c *Conn) PostSend(wrs []qp.SendWR) error {
	c.qp.Lock()
	if err := c.qp.PostSendLocked(wrs); err != nil {
		c.qp.Unlock()
		return err
	}
	// As rxe's post_send: run the requester in the caller's context when
	// it is idle, rather than waking a worker for it; and under the lock
	// already held (task.Claim).
	cl := c.sendTask.Claim()
	if cl != task.ClaimRun {
		c.qp.Unlock()
		c.sendTask.Release(cl, false)
		return nil
	}
	more := c.sendBatchUnlock()
	if c.e.callbacks.Load() != 0 {
		// Perhaps posted from a callback (see deliver), inside a batch
		// of this goroutine that is not over: running what this batch
		// carries here would nest without bound (a ping-pong driven
		// from CQ handlers) and could wait for a task further up the
		// stack. The workers run it. (A callback on another goroutine
		// makes this needlessly cautious, never wrong.)
		c.sendTask.Spill()
	} else if c.e.cfg.ReceiveHere {
		// The answer to what this batch sent (an ACK, a READ
		// response) may have come at its flush and found the task
		// busy: take it here too, rather than wake a worker for it.
		c.sendTask.ReleaseAgain(cl, more)
		return nil
	}
	c.sendTask.Release(cl, more)
	return nil
}

// PostRecv posts receive work requests (all or none).
func (c *Conn) PostRecv(wrs []qp.RecvWR) error {
	c.qp.Lock()
	err := c.qp.PostRecvLocked(wrs)
	flush := c.qp.AttrLocked().State == qp.Err
	c.qp.Unlock()
	if err == nil && flush {
		c.recvTask.Schedule()
	}
	return err
}

// Kick schedules both tasks (after an SRQ post, for example).
func (c *Conn) Kick() {
	c.sendTask.Schedule()
	c.recvTask.Schedule()
}

// rto returns the retransmit timeout for IBTA timeout code t.
func rto(t uint8) time.Duration {
	return time.Duration(4096<<t) * time.Nanosecond
}

// armTimerLocked makes sure the retransmit timer runs. The timer does not
// track a deadline: when it fires, it times out only if the requester made
// no progress since it was armed (one timeout period at least, two at most,
// as IBTA allows), so the data path never reads the clock.
func (c *Conn) armTimerLocked() {
	t := c.qp.AttrLocked().Timeout
	if t == 0 || c.req.timerOn {
		return
	}
	c.req.timerOn = true
	c.req.progressed = false
	c.e.sweep.arm(c, rto(t)) // the engine's timer (sweeper.go); early probes: probe.go
}

func (c *Conn) onTimer() {
	c.timerFired.Store(true)
	c.sendTask.Schedule()
}

func (c *Conn) onRNRTimer() {
	c.rnrFired.Store(true)
	c.sendTask.Schedule()
}

func (c *Conn) startRNRTimer(d time.Duration) {
	c.timerMu.Lock()
	c.rnrTimer = c.e.clk.AfterFunc(d, c.onRNRTimer)
	c.timerMu.Unlock()
}

// Snapshot is a QP's transport state for tools (rvt_qp_iter).
type Snapshot struct {
	NextPSN     PSN // requester: next PSN to send
	UnackedPSN  PSN // completer: oldest unacknowledged PSN
	ExpectedPSN PSN // responder: expected PSN
	MSN         uint32
	SQPosted    int // send WQEs not yet retired
	RQPosted    int // receive WQEs queued
	// DirectACKs is how many ACKs the responder handed a requester on
	// this device without a packet (ackdirect.go); they are counted as
	// packets in Counters too.
	DirectACKs uint64
	Counters   map[string]uint64
	// The requester's round-trip estimate (Config.ProbeRTT; zero without
	// samples) and its early-retry interval (0 without early retries).
	SRTT, RTTVar, Probe time.Duration
}

// Snapshot returns the QP's transport state.
func (c *Conn) Snapshot() Snapshot {
	c.qp.Lock()
	s := Snapshot{
		NextPSN: c.req.psn, UnackedPSN: c.comp.psn, ExpectedPSN: c.resp.epsn, MSN: c.resp.msn,
		SQPosted: c.qp.SQ.Len(), RQPosted: c.qp.RecvLenLocked(), DirectACKs: c.resp.directACKs,
		SRTT: c.req.rtt.srtt, RTTVar: c.req.rtt.rttvar, Probe: c.probeBase(),
	}
	c.countLocked()
	c.qp.Unlock()
	s.Counters = c.readCounters().Snapshot()
	return s
}

func (c *Conn) signalRan() {
	if c.waiters.Load() == 0 {
		return
	}
	ran := c.ran.Load() // stored before waiters was raised (waitUntil)
	select {
	case *ran <- struct{}{}:
	default:
	}
}

// flushed reports whether the QP is in ERR with every WR completed.
func (c *Conn) flushed() bool {
	c.qp.Lock()
	done := c.qp.AttrLocked().State == qp.Err && c.qp.SQ.Len() == 0 && !c.resp.haveWQE &&
		(c.qp.SRQ() != nil || c.qp.RQ.Len() == 0)
	c.qp.Unlock()
	return done
}

// WaitFlushed waits until the QP is in ERR and every posted WR has been
// completed (the drain of ib_drain_qp).
func (c *Conn) WaitFlushed(ctx context.Context) error {
	return c.waitUntil(ctx, c.flushed, "drain")
}

// WaitSent waits until every posted send WR has completed, or the QP is
// in a state that starts none (RESET, INIT, RTR, SQD; in ERR and SQE they
// complete flushed). For a UD QP that is soon: each datagram completes
// once it is on the link. An RC QP's WRs wait for the peer's ACKs.
func (c *Conn) WaitSent(ctx context.Context) error {
	return c.waitUntil(ctx, c.sent, "send what was posted on")
}

// sent is WaitSent's condition.
func (c *Conn) sent() bool {
	c.qp.Lock()
	st := c.qp.AttrLocked().State
	done := c.qp.SQ.Len() == 0 || !st.Allows(qp.ProcessNextSendOK) && !st.Allows(qp.FlushSend)
	c.qp.Unlock()
	return done
}

// waitUntil waits until done reports true, looking again each time a
// task of the QP has run a batch; what names the wait in its error.
func (c *Conn) waitUntil(ctx context.Context, done func() bool, what string) error {
	ran := c.ran.Load()
	if ran == nil {
		ch := make(chan struct{}, 1)
		if !c.ran.CompareAndSwap(nil, &ch) {
			ch = *c.ran.Load()
		}
		ran = &ch
	}
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	for !done() {
		c.Kick()
		select {
		case <-*ran:
		case <-ctx.Done():
			return fmt.Errorf("%s QP %#x: %w", what, c.qp.Num(), ctx.Err())
		}
	}
	return nil
}

// path is a QP's cached route and path MTU.
type path struct {
	port *portState // the port they were computed for; nil: compute again
	mtu  uint32
	r    route
}

// pathLocked returns the QP's route (connected QPs) and path MTU, computed
// again when the attributes or the port changed.
func (c *Conn) pathLocked(a *qp.Attr) *path {
	p := &c.path
	ps := c.e.port.Load()
	if p.port == ps {
		return p
	}
	p.port = ps
	p.mtu = uint32(ps.mtu.Bytes())
	if !c.qp.Type().Datagram() && a.PathMTU.Valid() {
		p.mtu = min(uint32(a.PathMTU.Bytes()), p.mtu)
	}
	if !c.qp.Type().Datagram() {
		p.r = ps.routeTo(&a.AV, c.srcPort, false)
		if p.r.bad || p.r.unresolved {
			// A failed or unresolved route is not kept: the next packet
			// tries again (a neighbour may have been learned meanwhile
			// without a port change).
			p.port = nil
		}
	}
	return p
}

package transport

// The engine: one per device. It owns the QP-number table, the port (GIDs,
// link, MTU), the receive demultiplexer and the transmit path, counters and
// asynchronous events. Per-QP protocol state lives in Conn (conn.go), whose
// send task runs the completer and requester and whose receive task runs
// the responder.
//
// Lock order: qp.QP lock -> Conn.timerMu, qp.QP lock -> sweeper.mu, and
// qp.QP lock -> the engine's atomicMu; Engine.countMu -> qp.QP lock and
// Engine.countMu -> Engine.mu (Snapshot, RemoveConn); Engine.mu (the QP table) is otherwise taken with
// no transport lock held, and nothing is taken under it. CQ pushes and
// events are issued after the QP lock is released. A receive task holding
// its QP lock only tries the lock of its loopback peer (ackdirect.go).

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// Errors returned by the engine's verbs.
var (
	ErrInvalidArgument = verr.ErrInvalidArgument
	ErrExists          = errors.New("already exists")
)

// EventType is an asynchronous event, with the ibv_event_type values.
type EventType uint8

// Asynchronous events.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventGIDChange        EventType = 18
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL", EventQPReqErr: "QP_REQ_ERR",
	EventQPAccessErr: "QP_ACCESS_ERR", EventCommEst: "COMM_EST", EventSQDrained: "SQ_DRAINED",
	EventDeviceFatal: "DEVICE_FATAL", EventPortActive: "PORT_ACTIVE", EventPortErr: "PORT_ERR",
	EventSRQLimitReached: "SRQ_LIMIT_REACHED", EventQPLastWQEReached: "QP_LAST_WQE_REACHED",
	EventGIDChange: "GID_CHANGE",
}

func (t EventType) String() string {
	if s, ok := eventNames[t]; ok {
		return s
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is an asynchronous event. QPN is set for QP events, SRQ for SRQ
// events, CQ for CQ events, Port for port events.
type Event struct {
	Type EventType
	QPN  uint32
	SRQ  *qp.SRQ
	CQ   *cq.CQ
	Port uint8
}

// Config configures an engine.
type Config struct {
	Clock  clock.Clock   // nil: the real clock
	Exec   task.Executor // required: where QP tasks run
	Logger *slog.Logger  // nil: discard
	Keys   *keys.Table   // required
	Mcast  *mcast.Table  // required
	Events func(Event)   // asynchronous events; may be nil
	// Window is the most PSNs a requester has unacknowledged (default 128,
	// rxe's RXE_MAX_UNACKED_PSNS: more overflows ordinary device queues,
	// e.g. a 1000-packet TAP queue, and turns into go-back-N storms).
	Window int
	// AckInterval asks for an ACK at least every AckInterval packets of a
	// long message (default 64, as rxe).
	AckInterval int
	// Credits makes RC requesters obey the responder's end-to-end credits.
	Credits bool
	// Probe, when not zero, lets an RC requester that has had no ACK for
	// Probe go back N early, and again after twice as long, and so on,
	// until one local ACK timeout (the QP's Timeout attribute) has passed
	// without progress; only then does it count a timeout against the
	// retry count, as before. A lost tail packet, ACK or NAK then costs
	// about Probe instead of the whole timeout. Choose it above the
	// link's round trip: an early retry only resends, but one that comes
	// too soon resends what was not lost.
	Probe time.Duration
	// ProbeRTT, when Probe is zero, sets each RC QP's first early-retry
	// interval from its measured round trip: SRTT + 4 RTTVAR, as TCP's
	// RTO (RFC 6298), within [ProbeMin, ProbeMax] (defaults
	// DefaultProbeMin, DefaultProbeMax), and ProbeMax until the first
	// sample (rtt.go). The backing off and the local ACK timeout are as
	// with Probe.
	ProbeRTT           bool
	ProbeMin, ProbeMax time.Duration
	// ReceiveHere: a frame the in-memory fabric brings from a run that
	// sent only that one (netdev.HereReceiver) is handled at the end of
	// that run, on its goroutine, rather than handed to a worker, between
	// two engines that both have it. A
	// request-response exchange then waits for no worker's wake-up
	// (microseconds in a VM); but when one goroutine posts on many QPs,
	// it also does their receivers' work, which workers did beside it.
	// Ignored with the Inline executor, which hands nothing over.
	ReceiveHere bool
}

// PortConfig describes the engine's port.
type PortConfig struct {
	Link  netdev.Link // nil: loopback only
	MAC   netdev.MAC
	Addrs []netip.Addr // GID table sources, in GID index order
	// Resolve maps a peer IP to its MAC (the fabric's table, or ARP/ND).
	// When it answers false and the link holds frames for resolution
	// (netdev.NeighbourQueuer), the packet is sent with a zero destination
	// MAC for the link to complete; otherwise it is dropped (SendErr).
	Resolve func(netip.Addr) (netdev.MAC, bool)
	// MTU is the Ethernet MTU of the link (default 1500; 4096+headers for
	// loopback only).
	MTU int
	TTL uint8
}

// maxIBHdr is the largest BTH plus extension headers we send (atomic).
const maxIBHdr = BTHLen + AtomicETHLen

// maxFrame bounds a frame the engine builds: headroom for the Ethernet, IP
// and UDP headers, the IB headers, an MTU of payload, pad and the ICRC.
const maxFrame = netHeadroom + maxIBHdr + 4096 + 4 + ICRCLen

// netHeadroom is room for Ethernet + IPv6 + UDP in front of the BTH.
const netHeadroom = 14 + 40 + 8

// ibOverhead is what a RoCEv2 packet adds to its payload inside an Ethernet
// MTU: IPv6, UDP, the largest header set and the ICRC (as rxe computes the
// active MTU).
const ibOverhead = 40 + 8 + maxIBHdr + ICRCLen

// MinLinkMTU is the smallest Ethernet MTU a port takes: one that holds a
// 256-byte path MTU's packets (SetPort refuses less).
const MinLinkMTU = 256 + ibOverhead // qp.MTU256

// Engine is the transport of one device.
type Engine struct {
	cfg  Config
	clk  clock.Clock
	log  *slog.Logger
	keys *keys.Table
	mc   *mcast.Table

	// mu serialises the writers of qps and port. Every packet reads them,
	// so the hot paths take no lock: port is replaced whole and never
	// modified, and qps (qptable.go) is made for readers without locks.
	// QPs cache their route and MTU with the port they were computed for,
	// and compute them again when port moves.
	mu   sync.Mutex
	qps  qpTable
	port atomic.Pointer[portState]

	atomicMu sync.Mutex // serialises atomics on memory

	sweep sweeper // the QPs' retransmit timers (sweeper.go)

	// countMu makes a removed QP's counts move into counters at once as
	// far as Snapshot can tell: Snapshot sums under it, and RemoveConn
	// unregisters the QP and adds its counts under it, so no sum counts a
	// QP twice or not at all (the device's counters never go down).
	countMu sync.Mutex
	// The counters every received frame writes (rcvd_pkts) get cache
	// lines of their own: next to port, which every packet reads, they
	// cost a cache miss per packet to the other core.
	_        [128]byte
	counters Counters
	pool     sync.Pool         // *pktBuf
	local    *netdev.FramePool // copies of frames sent to this device (UD, multicast)

	// Goroutines running user callbacks (CQ handlers, event subscribers)
	// from a task's batch: see Conn.deliver and Conn.PostSend.
	callbacks atomic.Int32

	// With an Inline executor, task Funcs run one at a time, on the
	// goroutine draining it, and that role passes from one goroutine to the
	// next through atomic operations. Packet buffers that tasks take and
	// return then need no sync.Pool, whose shared queues cost locked
	// instructions as soon as more than one buffer is out (a post list of
	// 16 SENDs has 16): inline is that executor (nil on a Pool), and free
	// is the tasks' own list.
	// On a Pool, tasks use the stock of the goroutine running them
	// (bufCache).
	inline *task.Inline
	free   []*pktBuf
	kept   keptFrames // on an Inline engine: the tasks' own (bufCache.keptFor)

	// ackPackets turns the loopback ACK hand-off off (ackdirect.go).
	ackPackets atomic.Bool
	// reqHeaders makes loopback requests carry a BTH (bare.go).
	reqHeaders atomic.Bool
}

// SetLoopbackACKPackets makes RC responders send their ACKs to requesters
// on this device as packets, as they do over a link, instead of handing
// them over directly (ackdirect.go); false, the default, lets them. For
// tests and measurements that compare the two.
func (e *Engine) SetLoopbackACKPackets(on bool) { e.ackPackets.Store(on) }

type portState struct {
	link    netdev.Link
	rel     netdev.Releaser    // the link takes frames back, if it can
	lend    netdev.FrameLender // the link lends buffers to build frames in, if it can
	recycle bool               // frames rel takes back may be sent again (keptFrames)
	hold    netdev.Holder      // the link batches transmits, if it can
	poll    netdev.Poller      // the link's receive ring can be polled, if it can
	here    bool               // the link's handler runs on its own goroutine
	queue   bool               // the link holds frames for unresolved neighbours
	mac     netdev.MAC
	gids    []netdev.GID
	ips     []netip.Addr // gids[i].IP(): what a received frame's destination is compared with
	resolve func(netip.Addr) (netdev.MAC, bool)
	mtu     qp.MTU
	ttl     uint8
}

// NewEngine creates an engine with no port: call SetPort.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Exec == nil || cfg.Keys == nil || cfg.Mcast == nil {
		return nil, fmt.Errorf("new engine: %w: executor, key table and multicast table are required", ErrInvalidArgument)
	}
	if cfg.Window <= 0 {
		cfg.Window = 128
	}
	if cfg.AckInterval <= 0 {
		cfg.AckInterval = 64
	}
	if cfg.ProbeMin <= 0 {
		cfg.ProbeMin = DefaultProbeMin
	}
	if cfg.ProbeMax <= 0 {
		cfg.ProbeMax = DefaultProbeMax
	}
	cfg.ProbeMax = max(cfg.ProbeMax, cfg.ProbeMin)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg: cfg, clk: clock.OrReal(cfg.Clock), log: log, keys: cfg.Keys, mc: cfg.Mcast,
		local: netdev.NewFramePool(maxFrame),
	}
	e.sweep.e, e.sweep.epoch = e, e.clk.Now()
	// A buffer's own bytes are made when first needed (pktBuf.room):
	// packets from the link live in the link's frame, and with 10,000 QPs
	// busy some 20,000 buffers are out at once, which the pool makes
	// again after each garbage collection.
	e.pool.New = func() any { return new(pktBuf) }
	e.inline, _ = cfg.Exec.(*task.Inline)
	e.port.Store(&portState{mtu: qp.MTU4096})
	return e, nil
}

// SetPort configures the port: its link, addresses and MTU. The link's
// handler is set to the engine's receive path.
func (e *Engine) SetPort(pc PortConfig) error {
	if pc.MTU == 0 {
		if pc.Link != nil {
			pc.MTU = pc.Link.MTU()
		} else {
			pc.MTU = 4096 + ibOverhead
		}
	}
	if pc.MTU < MinLinkMTU {
		return fmt.Errorf("set port: %w: link MTU %d too small for RoCEv2 (at least %d)", ErrInvalidArgument, pc.MTU, MinLinkMTU)
	}
	m := qp.MTUFromBytes(pc.MTU - ibOverhead)
	gids, ips := gidTable(pc.Addrs)
	if pc.TTL == 0 {
		pc.TTL = 64
	}
	e.mu.Lock()
	ps := &portState{link: pc.Link, mac: pc.MAC, gids: gids, ips: ips, resolve: pc.Resolve, mtu: m, ttl: pc.TTL}
	ps.rel, _ = pc.Link.(netdev.Releaser)
	// Not As: a wrapper that does not lend buffers sees every frame.
	if l, ok := pc.Link.(netdev.FrameLender); ok && l.Lender() == pc.Link {
		ps.lend = l
		r, ok := l.(netdev.FrameRecycler)
		ps.recycle = ok && r.RecyclesFrames() && netdev.Releaser(l) == ps.rel
	}
	ps.hold, _ = netdev.As[netdev.Holder](pc.Link)
	// Config.ReceiveHere: the fabric's frames sent inside a hold come at
	// its Flush, where the sender holds no lock, and their work is done
	// there. The fabric's holds do nothing else, so a device without
	// the option does not take them (it saves two atomic operations a
	// run): the option works between devices that both have it. (The
	// Inline executor hands nothing to another goroutine: there frames
	// keep coming inside Send, and a frame's work is done while its bytes
	// are in the cache.)
	var here netdev.HereReceiver
	if hr, ok := pc.Link.(netdev.HereReceiver); ok && ps.lend != nil { // the port itself
		if e.cfg.ReceiveHere && e.inline == nil {
			here = hr
		} else {
			ps.hold = nil
		}
	}
	ps.poll, _ = netdev.As[netdev.Poller](pc.Link)
	if o, ok := netdev.As[netdev.OwnReceiver](pc.Link); ok {
		ps.here = o.ReceivesOnOwnGoroutine()
	}
	if q, ok := netdev.As[netdev.NeighbourQueuer](pc.Link); ok {
		ps.queue = q.QueuesUnresolved()
	}
	e.port.Store(ps)
	e.mu.Unlock()
	if pc.Link != nil {
		pc.Link.SetHandler(e.ReceiveFrame)
		if here != nil {
			here.SetHandlerHere(e.receiveHere)
		}
	}
	return nil
}

// SetAddrs replaces the GID table (addresses in GID index order). QPs
// recompute their routes; a QP whose source GID index no longer exists
// drops its packets (counted) until it is modified.
func (e *Engine) SetAddrs(addrs []netip.Addr) {
	gids, ips := gidTable(addrs)
	e.mu.Lock()
	ps := *e.port.Load()
	ps.gids, ps.ips = gids, ips
	e.port.Store(&ps)
	e.mu.Unlock()
}

// gidTable returns the GIDs of addrs, and the addresses they stand for
// (IPv4 unmapped).
func gidTable(addrs []netip.Addr) ([]netdev.GID, []netip.Addr) {
	gids, ips := make([]netdev.GID, len(addrs)), make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		gids[i] = netdev.GIDFromIP(a)
		ips[i] = gids[i].IP()
	}
	return gids, ips
}

// hold opens a transmit batch on the link, if it batches; the caller
// passes the result to flush when its run ends.
func (e *Engine) hold() netdev.Holder {
	h := e.port.Load().hold
	if h != nil {
		h.Hold()
	}
	return h
}

// flush ends a batch hold opened: with FlushLazy if lazy (the run sent
// nothing anyone waits on at once), else with Flush.
func flush(h netdev.Holder, lazy bool) {
	switch {
	case h == nil:
	case lazy:
		h.FlushLazy()
	default:
		h.Flush()
	}
}

// PollLink drives the link's receive path on the calling goroutine if the
// link allows it (netdev.Poller): received packets are processed, and
// their QPs' work done, right here. It reports whether anything arrived.
// A goroutine that spins on a CQ calls it between polls (busy polling);
// on other links it returns false at once.
func (e *Engine) PollLink() bool {
	p := e.port.Load().poll
	return p != nil && p.PollReceive()
}

// ActiveMTU returns the port's active path MTU.
func (e *Engine) ActiveMTU() qp.MTU { return e.port.Load().mtu }

// GIDs returns a copy of the GID table.
func (e *Engine) GIDs() []netdev.GID {
	return append([]netdev.GID(nil), e.port.Load().gids...)
}

// NumGIDs returns the number of GIDs in the table.
func (e *Engine) NumGIDs() int { return len(e.port.Load().gids) }

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.clk }

// Snapshot returns the device's counters by name: its own plus the sum of
// every QP's, live and destroyed. Received packets are the device's own
// count (frames from the link, and packets a QP sent to one on this device
// over the loopback path), not the QPs' sum, which leaves out packets no QP
// took.
func (e *Engine) Snapshot() map[string]uint64 {
	e.countMu.Lock()
	defer e.countMu.Unlock()
	var total Counters
	e.qps.each(func(c *Conn) {
		// Counters also moves the QP's looped packets into the device's
		// count, so the device's own counters are added after the loop.
		total.add(c.Counters(), false)
	})
	total.add(&e.counters, true)
	return total.Snapshot()
}

func (e *Engine) event(ev Event) {
	if e.cfg.Events != nil {
		e.cfg.Events(ev)
	}
}

// NewConn attaches the transport to a new QP and registers its number.
func (e *Engine) NewConn(q *qp.QP) (*Conn, error) {
	c := newConn(e, q)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.qps.get(q.Num()) != nil {
		return nil, fmt.Errorf("new QP %#x: %w", q.Num(), ErrExists)
	}
	e.qps.set(q.Num(), c)
	return c, nil
}

// RemoveConn stops a QP's tasks and timers and unregisters it, adding its
// counts to the device's (the destroyed QP stays in the totals). A conn
// that is not registered (removed already) is left alone, so its counts
// are added once. It stops the QP first, so that the counts it adds are
// final; packets that find the stopped QP meanwhile are dropped.
func (e *Engine) RemoveConn(c *Conn) {
	if e.lookup(c.qp.Num()) != c || !c.removed.CompareAndSwap(false, true) {
		return
	}
	c.stop()
	e.countMu.Lock()
	defer e.countMu.Unlock()
	e.mu.Lock()
	e.qps.set(c.qp.Num(), nil)
	e.mu.Unlock()
	e.counters.add(c.Counters(), false)
}

func (e *Engine) lookup(qpn uint32) *Conn { return e.qps.get(qpn) }

// peerOf is lookup for a route's packets, cached in r until the QP found
// is destroyed (a modify computes the route again, which clears it). The
// caller holds the lock of the QP that owns r.
func (e *Engine) peerOf(r *route, qpn uint32) *Conn {
	if r.peer == nil || r.peer.stopped.Load() {
		r.peer = e.lookup(qpn)
	}
	return r.peer
}

// pktBuf is a received packet: the parsed descriptor plus where it came
// from. own is a pooled buffer for packets that were copied (loopback);
// frame is a link's frame handed to us.
type pktBuf struct {
	pkt   Packet
	own   []byte
	ipHdr []byte // the IP header (for the UD GRH), nil on the loopback fast path
	frame []byte // the link's frame the packet lives in, returned when done
	rel   netdev.Releaser
	src   netip.Addr
	dst   netip.Addr
	v6    bool
	next  *pktBuf // in a Conn's pktQueue or pktList
	gen   uint32  // in a pktList: the Conn's reset generation when listed
	// icrc, if not nil, is the packet from its IP header through its
	// ICRC, not checked yet: the QP's task checks it (lateICRC), or, for a
	// fusable opcode, its responder as it places the payload
	// (Conn.placeFused).
	icrc []byte
}

// leftToResponder reports whether pb's ICRC is for its responder to check
// (placeFused), not for the task that takes it (Conn.next).
func (pb *pktBuf) leftToResponder() bool { return pb.icrc != nil && fusable(pb.pkt.Opcode) }

// fusable reports whether a packet of opcode o may leave its ICRC to its
// responder's placeFused: the middle and last packets of an RC SEND or
// WRITE, which name no address of their own (no immediate, no
// invalidation: nothing beyond their bytes takes effect).
func fusable(o Opcode) bool {
	switch o {
	case RCSendMiddle, RCSendLast, RCWriteMiddle, RCWriteLast:
		return true
	}
	return false
}

// lateICRC reports whether a frame received with w leaves its ICRC check
// to the task that takes the packet: on a worker pool, from a link that
// delivers on the sender's goroutine (the fabric: inside Send). The
// sender then makes the ICRC and the receiver checks it, each on its own
// core, instead of the sender doing both.
func (e *Engine) lateICRC(w wake) bool { return w == wakeSchedule && e.inline == nil }

// dropReason is r for a packet dropped before its task took it, or
// DropBadICRC if its ICRC was left for later and is wrong: a corrupted
// frame is counted as one whatever its corrupted headers say.
func (pb *pktBuf) dropReason(r DropReason) DropReason {
	if pb.icrc != nil && !CheckICRC(pb.icrc) {
		return DropBadICRC
	}
	return r
}

// discard frees pb, a packet dropped unprocessed (its QP flushed, reset
// or gone). One whose ICRC was left unchecked (lateICRC, placeFused) is
// counted as a bad ICRC if it is one, as it would have been on arrival.
func (e *Engine) discard(pb *pktBuf, w wake) {
	if pb.icrc != nil && !CheckICRC(pb.icrc) {
		e.drop(nil, DropBadICRC)
	}
	e.putBuf(pb, w)
}

// onDrainer reports whether code that passes w runs where the tasks' own
// lists may be used: in a task of this engine (wakeChain) while the tasks
// run one at a time. Nothing checks the first half: wakeChain is passed
// only by the requester, responder and completer (and what they call,
// such as xmit), always inside a task's Func.
func (e *Engine) onDrainer(w wake) bool { return w == wakeChain && e.inline != nil }

// getBuf returns an empty packet buffer; w says where the caller runs
// (see onDrainer).
func (e *Engine) getBuf(w wake) *pktBuf {
	if e.onDrainer(w) && len(e.free) > 0 {
		n := len(e.free)
		pb := e.free[n-1]
		e.free[n-1] = nil
		e.free = e.free[:n-1]
		return pb
	}
	return e.pool.Get().(*pktBuf)
}

// maxFree bounds the tasks' free list (a burst that needs more takes the
// rest from the pool).
const maxFree = 256

// putBuf gives the packet's frame back to its link (or, on the drainer,
// keeps it: keptFrames) and keeps the buffer for reuse; w is as for
// getBuf.
func (e *Engine) putBuf(pb *pktBuf, w wake) {
	drainer := e.onDrainer(w)
	if drainer {
		e.kept.keep(e, pb)
	}
	pb.reset()
	if drainer && len(e.free) < maxFree {
		e.free = append(e.free, pb)
		return
	}
	e.pool.Put(pb)
}

// room returns the buffer's own bytes, emptied, with room for a frame.
func (pb *pktBuf) room() []byte {
	if cap(pb.own) < maxFrame {
		pb.own = make([]byte, 0, maxFrame)
	}
	return pb.own[:0]
}

// reset gives the link its frame back and clears the buffer for reuse.
func (pb *pktBuf) reset() {
	if pb.rel != nil {
		pb.rel.Release(pb.frame)
	}
	pb.frame, pb.rel = nil, nil
	pb.pkt = Packet{}
	pb.ipHdr = nil
	pb.icrc = nil
	pb.own = pb.own[:0]
}

// drop counts a dropped packet.
func (e *Engine) drop(c *Conn, r DropReason) {
	if c != nil {
		c.ctrs().drops[r].Add(1)
		return
	}
	e.counters.drops[r].Add(1)
}

// ReceiveFrame is the link handler: it parses an Ethernet frame once,
// checks the ICRC and hands the packet to its QP (or multicast group).
//
// On a link that calls it from its own receive goroutine (OwnReceiver),
// the QP's task runs there if it is idle, as rxe runs its responder in
// the receive softirq: a hand-off to a worker costs a goroutine wake-up
// per packet, most of a small message's latency. Elsewhere (the fabric
// delivers inside the sender's Send, under the sender's QP lock) the task
// is scheduled; but see receiveHere.
//
// On an Inline executor that nobody drains (the in-memory fabric delivers
// inside the sender's Send, which runs outside any task when the sender
// posts), the frame is handled as the drainer: the packet goes on its
// task's own list and the task runs when the frame is handled, with none
// of the locked instructions of the shared queue and of Schedule (three
// a packet of the eight a hand-off took; each about 9 ns).
func (e *Engine) ReceiveFrame(frame []byte) {
	ps := e.port.Load()
	w := wakeSchedule
	switch {
	case ps.here:
		w = wakeHere
	case e.inline != nil && e.inline.Enter():
		e.receiveFrame(frame, ps.rel, wakeChain, false)
		e.inline.Leave()
		return
	}
	e.receiveFrame(frame, ps.rel, w, false)
}

// receiveHere is ReceiveFrame for frames a link delivers where the task
// may run at once (netdev.HereReceiver).
func (e *Engine) receiveHere(frame []byte) {
	e.receiveFrame(frame, e.port.Load().rel, wakeHere, false)
}

// wake says where the caller runs, and so how a packet it queues for a QP
// wakes the QP's task and where its packet buffers come from (onDrainer).
type wake uint8

const (
	wakeSchedule wake = iota // any goroutine: task.Schedule
	wakeHere                 // a link's own receive goroutine: task.RunHere
	wakeChain                // a task of this engine (the loopback path): task.Chain
)

// receiveFrame handles a frame; rel, if not nil, takes it back when done;
// w says how to wake the QP's task; checked says the frame's ICRC is known
// to be right (the engine wrote it).
func (e *Engine) receiveFrame(frame []byte, rel netdev.Releaser, w wake, checked bool) {
	fi, ok := e.roceFrame(frame)
	end := fi.End()
	// The ICRC is checked here, or later by the QP's task (lateICRC), or
	// for an RC SEND's or WRITE's middle or last packet by its responder,
	// as it copies the payload out (placeFused): all of a long message's
	// packets but the first.
	late := !checked && (ok && fusable(Opcode(frame[fi.PayloadOff])) || e.lateICRC(w))
	if ok && !checked && !late && !CheckICRC(frame[fi.IPOff:end]) {
		e.drop(nil, DropBadICRC)
		ok = false
	}
	if !ok {
		if rel != nil {
			rel.Release(frame) // the link reuses it: not garbage
		}
		return
	}
	pb := e.getBuf(w)
	pb.frame, pb.rel = frame, rel
	if late {
		pb.icrc = frame[fi.IPOff:end]
	}
	if err := Parse(frame[fi.PayloadOff:end-ICRCLen], &pb.pkt); err != nil {
		r, _ := DropReasonOf(err)
		e.drop(nil, pb.dropReason(r))
		e.putBuf(pb, w)
		return
	}
	pb.ipHdr = frame[fi.IPOff:fi.UDPOff]
	pb.src, pb.dst, pb.v6 = fi.Src, fi.Dst, fi.IsIPv6()
	if !fi.Dst.IsMulticast() && !e.isLocalIP(fi.Dst) {
		// A frame flooded to us (unknown or corrupted MAC): the ICRC
		// does not cover the MAC, the destination GID decides (rxe's
		// rxe_chk_dgid).
		e.drop(nil, pb.dropReason(DropNotLocal))
		e.putBuf(pb, w)
		return
	}
	e.deliver(pb, w)
}

// roceFrame parses frame's headers and reports whether it is a RoCEv2
// packet to take further: long enough for a BTH and an ICRC (not checked
// here). It counts what it drops; other traffic on the link is not counted.
func (e *Engine) roceFrame(frame []byte) (netdev.FrameInfo, bool) {
	fi, err := netdev.ParseFrame(frame)
	if err != nil || fi.DstPort != RoCEv2Port {
		return fi, false
	}
	e.counters.c[RcvdPkts].Add(1)
	if fi.PayloadLen < BTHLen+ICRCLen {
		e.drop(nil, DropTruncated)
		return fi, false
	}
	return fi, true
}

// deliver routes a parsed packet to its QP's queue, or to every member of
// its multicast group; w is as for receiveFrame.
func (e *Engine) deliver(pb *pktBuf, w wake) {
	p := &pb.pkt
	if p.PKey&^PKeyFullMember != DefaultPKey&^PKeyFullMember {
		e.drop(nil, pb.dropReason(DropBadPKey))
		e.putBuf(pb, w)
		return
	}
	if p.Info.Has(FlagCNP) {
		e.drop(nil, pb.dropReason(DropNotSupported)) // no congestion control
		e.putBuf(pb, w)
		return
	}
	if p.DestQP == multicastQPN {
		if pb.icrc != nil && !CheckICRC(pb.icrc) {
			e.drop(nil, DropBadICRC)
			e.putBuf(pb, w)
			return
		}
		e.deliverMulticast(pb, w)
		return
	}
	c := e.lookup(p.DestQP)
	if c == nil {
		e.drop(nil, pb.dropReason(DropUnknownQP))
		e.putBuf(pb, w)
		return
	}
	c.enqueue(pb, w, nil)
}

const multicastQPN = 0xFFFFFF

// deliverMulticast queues a copy for each member; their tasks are
// scheduled, not run here one after the other (w = wakeHere).
func (e *Engine) deliverMulticast(pb *pktBuf, w wake) {
	if w == wakeHere {
		w = wakeSchedule
	}
	defer e.putBuf(pb, w)
	if pb.pkt.Opcode.Class() != ClassUD {
		e.drop(nil, DropQPType)
		return
	}
	gid := mcast.GID(netdev.GIDFromIP(pb.dst))
	_, members, ok := e.mc.Lookup(gid)
	if !ok || len(members) == 0 {
		e.drop(nil, DropUnknownQP)
		return
	}
	for _, m := range members {
		c := e.lookup(m.QPN())
		if c == nil {
			continue
		}
		cp := e.getBuf(w)
		cp.own = append(cp.room(), pb.pkt.Buf...)
		cp.pkt = pb.pkt
		cp.pkt.Buf = cp.own
		n := len(cp.own)
		cp.own = append(cp.own, pb.ipHdr...)
		cp.ipHdr = cp.own[n:]
		cp.src, cp.dst, cp.v6 = pb.src, pb.dst, pb.v6
		c.enqueue(cp, w, nil)
	}
}

// isLocalIP reports whether ip is the address of one of the port's GIDs.
// It compares addresses, not GIDs: making a received frame's destination
// a GID (As16) was 2% of a fabric WRITE's CPU time.
func (e *Engine) isLocalIP(ip netip.Addr) bool {
	if !ip.Is4() {
		ip = ip.Unmap() // an IPv4-mapped destination in an IPv6 header
	}
	for _, x := range e.port.Load().ips {
		if x == ip {
			return true
		}
	}
	return false
}

// isLocal reports whether gid is one of the port's GIDs.
func (ps *portState) isLocal(g netdev.GID) bool {
	for _, x := range ps.gids {
		if x == g {
			return true
		}
	}
	return false
}

// route describes where a QP's packets go.
type route struct {
	local    bool // deliver to this device
	wire     bool // send on the link
	fast     bool // local RC/UC: skip framing and ICRC
	src, dst netdev.Endpoint
	ttl, tos uint8
	bad      bool // no route (bad GID index, no link, MAC unresolved)
	// The MAC is not resolved yet and the link resolves it: dst.MAC is
	// zero, and the link fills it in or holds the frame until it can
	// (netdev.NeighbourQueuer).
	unresolved bool

	// On the loopback path: the destination QP's conn (Engine.peerOf).
	peer *Conn

	// A connected QP's headers for frames, built once (routeTo).
	hdr netdev.Headers
}

// routeTo resolves a destination GID from a source GID index.
func (ps *portState) routeTo(av *qp.AddressVector, srcPort uint16, datagram bool) route {
	var r route
	if int(av.SGIDIndex) >= len(ps.gids) {
		r.bad = true
		return r
	}
	sgid := ps.gids[av.SGIDIndex]
	dgid := netdev.GID(av.DGID)
	r.src = netdev.Endpoint{MAC: ps.mac, IP: sgid.IP(), Port: srcPort}
	r.dst = netdev.Endpoint{IP: dgid.IP(), Port: RoCEv2Port}
	r.ttl = av.HopLimit
	if r.ttl == 0 {
		r.ttl = ps.ttl
	}
	r.tos = av.TrafficClass
	switch {
	case dgid.IP().IsMulticast():
		r.local = true
		r.wire = ps.link != nil
		r.dst.MAC, _ = netdev.MulticastMAC(r.dst.IP)
	case ps.isLocal(dgid):
		r.local = true
		r.fast = !datagram
		r.dst.MAC = ps.mac
	default:
		r.wire = true
		if ps.link == nil {
			r.bad = true
			break
		}
		mac, ok := netdev.MAC{}, false
		if ps.resolve != nil {
			mac, ok = ps.resolve(r.dst.IP)
		}
		switch {
		case ok:
			r.dst.MAC = mac
		case ps.queue:
			r.unresolved = true
		default:
			r.bad = true
		}
	}
	if !datagram && !r.fast && !r.bad && !r.unresolved {
		r.hdr.Init(r.src, r.dst, r.ttl, r.tos)
	}
	return r
}

// txPkt is a packet being built: on the loopback fast path in a packet
// buffer the receiver takes as it is (pb), else in a frame buffer (frame)
// with head bytes of headroom for the framing before the BTH. The frame
// buffer is the QP's own, or, for a unicast packet on a link that lends
// buffers (lend), one of the link's, handed over with the frame.
type txPkt struct {
	pb    *pktBuf
	frame []byte
	head  int
	lend  netdev.FrameLender
}

// loop hands pb, a packet c built on the loopback fast path and described
// in pb.pkt, to its destination QP on this device. The caller holds c's
// QP lock, as for every transmit. A burst counts as the packets it stands
// for (span), as they would on a wire.
func (e *Engine) loop(c *Conn, r *route, pb *pktBuf, span uint32) {
	c.pend[SentPkts] += uint64(span)
	c.looped += uint64(span) // received by this device: see countLocked
	pb.src, pb.dst = r.src.IP, r.dst.IP
	// Our own unicast RC/UC packet (the default P_Key, never a CNP):
	// straight to the destination QP, which the route caches.
	peer := e.peerOf(r, pb.pkt.DestQP)
	if peer == nil {
		e.drop(nil, DropUnknownQP)
		e.putBuf(pb, wakeChain)
		return
	}
	// xmit runs in a task of ours: the requester's (c.sendTask) for
	// a request, the responder's for a response.
	src := c.sendTask
	if pb.pkt.Info.Has(FlagResponse) {
		src = c.recvTask
	} else if c.joinRespLocked(peer) {
		// The requester's batch runs the peer's responder at its
		// end (ackdirect.go).
		peer.list(&peer.reqLocal, pb)
		return
	}
	peer.enqueue(pb, wakeChain, src)
}

// startTx returns where to build a packet for route r, and the bytes to
// write it into from the BTH on: a packet buffer on the fast path, else a
// frame buffer past the headroom: one the link lends for a unicast packet
// to the wire (the frame then starts at the buffer's start, so the
// receiver gets the buffer whole), else the running goroutine's
// (bc.frame), or on an Inline engine the task's own, *own, made on first
// use. ib bounds the packet's bytes from the BTH through the pad (the
// caller writes no further): a lent buffer need be no longer.
func (e *Engine) startTx(r *route, own *[]byte, bc *bufCache, ib int) (txPkt, []byte) {
	if r.fast {
		pb := bc.get(e)
		b := pb.room()
		return txPkt{pb: pb}, b[:cap(b)]
	}
	if r.wire && !r.local && !r.bad {
		if l := e.port.Load().lend; l != nil {
			head := netdev.HeaderLen(netdev.UsesIPv6(r.src.IP, r.dst.IP))
			// Only as long as the packet: a short one (an ACK, a
			// small SEND) in a short buffer (see fabric.smallFrame).
			n := min(ib, maxFrame-netHeadroom-ICRCLen)
			if buf := bc.keptFor(e).take(l, head+n+ICRCLen); buf != nil {
				return txPkt{frame: buf, head: head, lend: l}, buf[head:]
			}
			if buf := l.TxFrame(head + n + ICRCLen); buf != nil {
				return txPkt{frame: buf, head: head, lend: l}, buf[head:]
			}
		}
	}
	frame := bc.frame(own)
	return txPkt{frame: frame, head: netHeadroom}, frame[netHeadroom:]
}

// xmit sends one packet, built in t (see startTx) and ib bytes long from
// the BTH through the pad. It frames it, adds the ICRC and sends it on the
// link and/or delivers it to this device. On the loopback fast path ext may
// hold the payload in place (then the packet is the headers only, ib
// bytes, and the payload is never staged): the receiver copies from it
// directly.
func (e *Engine) xmit(c *Conn, r *route, t txPkt, ib int, ext []byte) {
	e.xmitSpan(c, r, t, ib, ext, 1)
}

// xmitSpan is xmit for a loopback burst that covers span PSNs (span > 1
// only on the fast path, with ext holding the whole payload). Off the fast
// path, ext is a payload (span 1) to copy into the frame behind the ib
// bytes of headers: a payload in one piece of memory goes in as the ICRC
// is made, in one pass.
func (e *Engine) xmitSpan(c *Conn, r *route, t txPkt, ib int, ext []byte, span uint32) {
	if pb := t.pb; pb != nil {
		pb.own = pb.own[:ib]
		fillBuilt(&pb.pkt, pb.own, ext, span)
		e.loop(c, r, pb, span)
		return
	}
	// Under c's QP lock, as every transmit is.
	c.pend[SentPkts] += uint64(span)
	if r.bad {
		e.counters.c[SendErr].Add(1)
		e.abortTx(t, nil)
		return
	}
	buf := t.frame
	v6 := netdev.UsesIPv6(r.src.IP, r.dst.IP)
	start := t.head - netdev.HeaderLen(v6)
	body, pad := len(ext), (4-len(ext)%4)%4
	udpLen := ib + body + pad + ICRCLen
	frame := buf[start : t.head+udpLen]
	var hl int
	if r.hdr.Ready() {
		hl = r.hdr.Put(frame, udpLen)
	} else {
		hl = netdev.EncodeRoCEv2Headers(frame, r.src, r.dst, r.ttl, r.tos, udpLen)
	}
	if hl == 0 {
		e.counters.c[SendErr].Add(1)
		e.abortTx(t, nil)
		return
	}
	fused := r.wire && body > 0 && pad == 0
	if body > 0 && !fused {
		at := t.head - start + ib
		copy(frame[at:], ext)
		clear(frame[at+body : at+body+pad])
	}
	if r.wire {
		// Only the wire needs the ICRC and the UDP checksum: the local
		// copy below is received as checked.
		ip := frame[netdev.EthernetHeaderLen:]
		var err error
		if fused {
			err = PutICRCCopy(ip, len(ip)-ICRCLen-body, ext)
		} else {
			err = PutICRC(ip)
		}
		if err != nil {
			e.counters.c[SendErr].Add(1)
			e.abortTx(t, nil)
			return
		}
		if v6 {
			netdev.PutUDPChecksum(frame, r.src.IP, r.dst.IP) // it covers the ICRC
		}
		ps := e.port.Load()
		if l := ps.link; l != nil {
			var err error
			switch {
			case t.lend == nil:
				err = l.Send(frame)
			case ps.lend == t.lend:
				err = t.lend.SendOwned(frame) // start is 0: the buffer whole
			default: // the port changed since startTx
				err = l.Send(frame)
				t.lend.Release(buf)
			}
			if err != nil {
				e.counters.c[SendErr].Add(1)
			} else if r.unresolved {
				e.counters.c[SentUnresolved].Add(1)
			}
		} else {
			e.abortTx(t, nil)
		}
	}
	if r.local {
		// Datagrams to ourselves take the receive path (the GRH needs
		// the IP header) in a copy, as the receiver owns its frame, and
		// without an ICRC check: the engine built it.
		b := e.local.Get()
		e.receiveFrame(b[:copy(b, frame)], e.local, wakeChain, true)
	}
}

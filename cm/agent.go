// Package cm is softverbs' connection manager: the InfiniBand CM (IBTA
// vol. 1 chapter 12) on QP 1 of an rvt.Device, with the rdma_cm layer
// (port spaces, the rdma_cm header in private data, SIDR for UD) and
// address/route resolution on RoCE, wire-compatible with Linux's cm.c and
// cma.c.
//
// There are two faces. The event form mirrors librdmacm: an ID
// (rdma_cm_id) per connection or listener, and an EventChannel that yields
// rdma_cm's events (ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST,
// ESTABLISHED, REJECTED, DISCONNECTED, TIMEWAIT_EXIT, ...); it never
// blocks, so it runs under a manual clock on an Inline device. The net-like
// form (Listen, Dial, Listener.Accept, Request.Accept/Reject, Conn) is
// built on it for Go programs.
//
// Each device has one Agent, which the device keeps (rvt.Device.Service)
// and closes when it closes, telling every ID (DEVICE_REMOVAL,
// ErrDeviceRemoved; see Agent.Close): it owns the GSI QP, posts its
// receives, answers from the address of each received MAD, and runs every
// protocol step in one run-to-completion task. Timers run on the device's clock and
// only flag work for that task. See docs/cm.md.
package cm

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/transport"
)

// Lock order: Agent.mu, then EventChannel.mu; Agent.dueMu is a leaf.
// Nothing calls a user callback, PostSend, Modify or a clock method that
// runs timers while holding Agent.mu, except clock.AfterFunc and
// Timer.Stop, which never run callbacks.

// Options configure an Agent. The zero value gives Linux's defaults.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Seed seeds comm IDs, PSNs and ephemeral ports. 0: derived from the
	// clock and the device GUID.
	Seed uint64

	// CM timing, as the IBTA's 4.096 µs × 2^x exponents (they go on the
	// wire too). Zero: Linux's values (20, 18, 24); MaxRetries 0: 15.
	ResponseTimeout   uint8 // CM response timeout (CMA_CM_RESPONSE_TIMEOUT 20)
	PacketLifetime    uint8 // path packet lifetime (18 on RoCE)
	MRAServiceTimeout uint8 // service timeout sent in MRAs (CMA_CM_MRA_SETTING 24)
	MaxRetries        uint8 // CM retries (CMA_MAX_CM_RETRIES 15)

	// RouteTTL is how long a resolved route stays cached (default 1 min);
	// a GID change on the device drops the cache.
	RouteTTL time.Duration
	// RecvDepth is the number of receive buffers on QP 1 (default 256).
	RecvDepth int
	// NoListenerWait is how long a REQ that finds no listener waits for
	// one before REJ 8 (park.go). 0: rejected at once, as Linux.
	NoListenerWait time.Duration
}

func (o *Options) defaults() {
	if o.ResponseTimeout == 0 {
		o.ResponseTimeout = 20
	}
	if o.PacketLifetime == 0 {
		o.PacketLifetime = 18
	}
	if o.MRAServiceTimeout == 0 {
		o.MRAServiceTimeout = 24
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 15
	}
	if o.RouteTTL == 0 {
		o.RouteTTL = time.Minute
	}
	if o.RecvDepth == 0 {
		o.RecvDepth = 256
	}
}

// FastOptions are timings for tests and simulations: response timeout 10
// (4 ms), packet lifetime 8 (1 ms), so a REQ is resent every 6 ms and
// TIMEWAIT lasts 1 ms; MRA service timeout 12 (16 ms).
func FastOptions() Options {
	return Options{ResponseTimeout: 10, PacketLifetime: 8, MRAServiceTimeout: 12}
}

const grhLen = 40

// Agent is the connection manager of one device.
type Agent struct {
	dev   *rvt.Device
	opts  Options
	clk   clock.Clock
	log   *slog.Logger
	guid  uint64
	mtu   qp.MTU
	maxRd uint8

	pd      *rvt.PD
	cq      *rvt.CQ
	qp1     *rvt.QP
	recvMR  *rvt.MR
	recvBuf []byte
	exec    *task.Inline
	task    *task.Task
	unsub   func()

	dueMu sync.Mutex
	due   []timerRef

	mu        sync.Mutex
	closed    bool
	rng       *rand.Rand
	ids       map[*ID]struct{}
	byComm    map[uint32]*ID    // local comm ID (and SIDR request ID) -> ID
	byRemote  map[remoteKey]*ID // passive side: the peer's (comm ID, CA GUID) or (request ID, GID)
	byQPN     map[qpnKey]*ID    // (remote QPN, remote CA GUID) of connections, for REJ 10
	qpUsers   map[uint32]*ID    // local QPs bound to a connection (until TIMEWAIT ends)
	ports     map[portKey][]*ID // bound ports, by port space and port
	listeners map[ServiceID][]*ID
	parked    []*parkedREQ // REQs waiting for a listener (park.go)
	ahs       map[ahKey]*rvt.AH
	routes    map[routeKey]routeEntry
	out       []outMAD
	events    []*pendingEvent
	counters  map[string]uint64
	wcs       []rvt.WC

	// testDropTx, set by tests only, drops the MADs it returns true for.
	testDropTx func(MAD) bool

	remote *remoteAgent // the agent of a device served by rvtd (remote.go)
}

type remoteKey struct {
	id   uint32
	guid uint64
	gid  netdev.GID
}

type qpnKey struct {
	qpn  uint32
	guid uint64
}

type portKey struct {
	ps   PortSpace
	port uint16
}

type ahKey struct {
	gid  netdev.GID
	sgid uint8
	tc   uint8
}

type timerRef struct {
	id  *ID
	gen uint64
}

// peer is where a MAD goes: QP 1 at a GID, from one of our GIDs.
type peer struct {
	gid      netdev.GID
	sgid     uint8
	tc       uint8
	hopLimit uint8
}

// outMAD is one entry of the outbox: a MAD to send, or a QP change.
type outMAD struct {
	act   int
	to    peer
	mad   MAD
	q     *rvt.QP
	id    *ID
	epoch uint64
	param ConnParam
}

type pendingEvent struct {
	id *ID
	ev Event
}

// agentKey is the key of a device's agent among its services
// (rvt.Device.Service), the way the kernel keeps one ib_cm client per
// device.
type agentKey struct{}

// AgentFor returns the device's agent, opening one with default options
// if it has none. The device closes it when it closes.
func AgentFor(dev *rvt.Device) (*Agent, error) {
	v, err := dev.Service(agentKey{}, func() (io.Closer, error) { return newAgent(dev, Options{}) })
	if err != nil {
		return nil, err
	}
	return v.(*Agent), nil
}

// NewAgent opens the connection manager of dev: it creates the GSI QP (QP
// 1), which must not exist yet, and keeps the agent as the device's
// service (AgentFor, Listen and Dial then use it; the device closes it
// when it closes). A device has at most one.
func NewAgent(dev *rvt.Device, o Options) (*Agent, error) {
	opened := false
	v, err := dev.Service(agentKey{}, func() (io.Closer, error) {
		opened = true
		return newAgent(dev, o)
	})
	if err != nil {
		return nil, err
	}
	if !opened {
		return nil, fmt.Errorf("cm agent for %s: %w: the device has one", dev.Name(), ErrInvalidState)
	}
	return v.(*Agent), nil
}

func newAgent(dev *rvt.Device, o Options) (*Agent, error) {
	o.defaults()
	if dev.Remote() != nil {
		return newRemoteAgent(dev, o)
	}
	a := &Agent{
		dev: dev, opts: o, clk: dev.Clock(), log: o.Logger,
		ids: map[*ID]struct{}{}, byComm: map[uint32]*ID{}, byRemote: map[remoteKey]*ID{},
		byQPN: map[qpnKey]*ID{}, qpUsers: map[uint32]*ID{}, ports: map[portKey][]*ID{},
		listeners: map[ServiceID][]*ID{}, ahs: map[ahKey]*rvt.AH{}, routes: map[routeKey]routeEntry{},
		counters: map[string]uint64{}, wcs: make([]rvt.WC, 32),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	da := dev.QueryDevice()
	a.guid = da.NodeGUID
	a.maxRd = uint8(min(da.MaxQPRdAtom, da.MaxQPInitRdAtom, 255))
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	a.mtu = pa.ActiveMTU
	seed := o.Seed
	if seed == 0 {
		seed = uint64(a.clk.Now().UnixNano()) ^ a.guid
	}
	a.rng = rand.New(rand.NewPCG(seed, a.guid))
	a.exec = task.NewInline()
	a.task = task.New(a.exec, "cm "+dev.Name(), a.run)

	if a.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	depth := o.RecvDepth
	if a.cq, err = dev.CreateCQ(2*depth+1024, func(*rvt.CQ) { a.task.Schedule() }); err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	a.qp1, err = a.pd.CreateQP(rvt.QPInitAttr{Type: qp.GSI, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: rvt.QPCap{MaxSendWR: 1024, MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: MADLen}})
	if err != nil {
		a.cleanup()
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	steps := []struct {
		attr rvt.QPAttr
		from qp.State
	}{
		{rvt.QPAttr{State: qp.Init, QKey: QP1QKey, Port: 1}, qp.Reset},
		{rvt.QPAttr{State: qp.RTR}, qp.Init},
		{rvt.QPAttr{State: qp.RTS}, qp.RTR},
	}
	for _, s := range steps {
		if err := a.qp1.Modify(&s.attr, qp.AttrState|qp.RequiredAttrs(qp.GSI, s.from, s.attr.State)); err != nil {
			a.cleanup()
			return nil, fmt.Errorf("cm agent: QP1 to %v: %w", s.attr.State, err)
		}
	}
	a.recvBuf = make([]byte, depth*(grhLen+MADLen))
	if a.recvMR, err = a.pd.Reg(a.recvBuf, keys.LocalWrite); err != nil {
		a.cleanup()
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	for i := range depth {
		if err := a.postRecv(uint64(i)); err != nil {
			a.cleanup()
			return nil, fmt.Errorf("cm agent: %w", err)
		}
	}
	a.unsub = dev.Subscribe(a.onDeviceEvent)
	if err := a.cq.Arm(false); err != nil {
		a.cleanup()
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	return a, nil
}

func (a *Agent) postRecv(slot uint64) error {
	sz := uint64(grhLen + MADLen)
	return a.qp1.PostRecv(rvt.RecvWR{WRID: slot, SGL: []rvt.SGE{{
		Addr: a.recvMR.IOVA + slot*sz, Length: uint32(sz), Lkey: a.recvMR.Lkey}}})
}

func (a *Agent) cleanup() {
	if a.unsub != nil {
		a.unsub()
	}
	if a.qp1 != nil {
		_ = a.qp1.Destroy()
	}
	if a.recvMR != nil {
		_ = a.dev.DeregMR(a.recvMR)
	}
	if a.cq != nil {
		_ = a.dev.DestroyCQ(a.cq)
	}
	if a.pd != nil {
		_ = a.pd.Dealloc()
	}
}

// Close stops the agent; the device closes it when it closes (and Close
// lets the device open a new one). As Linux's cma does for every ID
// bound to a removed device (cma_process_remove), every ID of the agent
// that is not destroyed is told once: events already queued are
// delivered, then DEVICE_REMOVAL (Err ErrDeviceRemoved), on the caller's
// goroutine; an ID from NewID belongs to its agent's device from the
// start, so every one is told. Before that, the QPs given to Connect and
// Accept move to ERR (their posted work requests flush), as a
// disconnection moves them. No MAD is sent: peers are not told (they
// learn by their own timeouts, as when an HCA goes). Every timer stops,
// QP 1 is destroyed and the agent forgets its IDs, ports and listeners;
// later calls on its IDs fail with ErrDeviceRemoved, and Destroy of
// them only marks them destroyed.
func (a *Agent) Close() error {
	if a.remote != nil {
		return a.closeRemote()
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.stopParkedLocked()
	told, qps := a.removeAllLocked()
	evs := a.events
	a.events, a.out = nil, nil
	ahs := a.ahs
	a.ahs = nil
	a.mu.Unlock()
	a.task.Stop() // a batch under way delivers its events first
	for _, q := range qps {
		_ = q.Modify(&rvt.QPAttr{State: qp.Err}, qp.AttrState)
	}
	for _, pe := range evs {
		pe.id.deliver(pe.ev)
	}
	for _, id := range told {
		id.deliverRemoval()
	}
	for _, ah := range ahs {
		_ = a.dev.DestroyAH(ah)
	}
	a.cleanup()
	a.dev.DropService(agentKey{}, a)
	return nil
}

// removeAllLocked stops every ID's timer, forgets what the agent holds
// and returns the IDs to tell of the removal (not destroyed, not told
// yet) and the QPs of connections, to move to ERR.
func (a *Agent) removeAllLocked() (told []*ID, qps []*rvt.QP) {
	for id := range a.ids {
		if id.timer != nil {
			id.timer.Stop()
			id.timer = nil
		}
		id.timerGen++
		id.timerOn = false
		id.resolve = nil
		id.epoch++ // actions of a batch under way are dropped
		if id.reg.qp && id.q != nil && !id.destroyed {
			qps = append(qps, id.q)
		}
		id.reg = struct{ comm, remote, qpn, qp bool }{}
		id.portBound = false
		id.state = StateIdle
		if !id.destroyed {
			told = append(told, id)
		}
	}
	clear(a.ids)
	clear(a.byComm)
	clear(a.byRemote)
	clear(a.byQPN)
	clear(a.qpUsers)
	clear(a.ports)
	clear(a.listeners)
	return told, qps
}

// removedErrLocked is the error of a call on an ID of a closed agent.
func (a *Agent) removedErrLocked(op string) error {
	if a.closed {
		return fmt.Errorf("%s: %w", op, ErrDeviceRemoved)
	}
	return nil
}

// Device returns the agent's device.
func (a *Agent) Device() *rvt.Device { return a.dev }

// GUID returns the CA GUID the agent puts in REQ and REP.
func (a *Agent) GUID() uint64 { return a.guid }

// Counters returns the agent's counters: rx_<ATTR>, tx_<ATTR>,
// retransmit_<ATTR>, drop_<reason>.
func (a *Agent) Counters() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]uint64, len(a.counters))
	for k, v := range a.counters {
		out[k] = v
	}
	return out
}

func (a *Agent) countLocked(name string) { a.counters[name]++ }

// Stats counts what the agent holds, for leak checks.
type Stats struct {
	IDs, CommIDs, Remote, QPNs, QPs, Ports, Listeners, Timers int
}

// Stats returns what the agent holds now.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{IDs: len(a.ids), CommIDs: len(a.byComm), Remote: len(a.byRemote), QPNs: len(a.byQPN),
		QPs: len(a.qpUsers), Listeners: len(a.listeners)}
	for _, l := range a.ports {
		s.Ports += len(l)
	}
	for id := range a.ids {
		if id.timerOn {
			s.Timers++
		}
	}
	return s
}

func (a *Agent) onDeviceEvent(ev rvt.Event) {
	switch ev.Type {
	case transport.EventGIDChange:
		a.mu.Lock()
		clear(a.routes)
		a.mu.Unlock()
	case transport.EventCommEst:
		// Data arrived on a QP in RTR whose RTU is late or lost: the
		// connection is established (Linux: ib_cm_notify). Accept moves
		// the QP to RTS before the REP, as Linux does, so this only
		// happens to a QP a caller kept in RTR; otherwise a lost RTU is
		// recovered by the REP's resend and the RTU sent again.
		a.mu.Lock()
		if id := a.qpUsers[ev.QPN]; id != nil && (id.state == StateREPSent || id.state == StateMRAREPRcvd) {
			a.establishPassiveLocked(id, nil)
		}
		a.mu.Unlock()
		a.task.Schedule()
	}
}

// run is the agent's task: received MADs, due timers, then what they
// produced (MADs to send, events to deliver), outside the lock.
func (a *Agent) run() bool {
	n := a.cq.Poll(a.wcs)
	var mad [MADLen]byte
	for i := range n {
		wc := &a.wcs[i]
		if wc.Opcode != cq.Recv {
			continue // send completions (errors of unsignalled sends)
		}
		slot := wc.WRID
		if wc.Status != cq.Success {
			continue // flushed: the QP is going away
		}
		off := int(slot) * (grhLen + MADLen)
		b := a.recvBuf[off : off+grhLen+MADLen]
		var grh [grhLen]byte
		copy(grh[:], b)
		ok := int(wc.ByteLen) >= grhLen+MADLen
		copy(mad[:], b[grhLen:])
		_ = a.postRecv(slot)
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return false
		}
		if !ok {
			a.countLocked("drop_short")
		} else {
			a.receiveLocked(grh[:], wc.SrcQP, mad[:])
		}
		a.mu.Unlock()
	}
	a.dueMu.Lock()
	due := a.due
	a.due = nil
	a.dueMu.Unlock()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	for _, t := range due {
		if t.id.timerGen == t.gen && t.id.timerOn {
			t.id.timerOn = false
			a.timeoutLocked(t.id)
		}
	}
	a.expireParkedLocked()
	out, evs := a.out, a.events
	a.out, a.events = nil, nil
	a.mu.Unlock()
	for _, o := range out {
		a.runAction(o)
	}
	for _, pe := range evs {
		pe.id.deliver(pe.ev)
	}
	if n == len(a.wcs) {
		return true
	}
	a.dueMu.Lock()
	more := len(a.due) > 0
	a.dueMu.Unlock()
	a.mu.Lock()
	more = more || len(a.out) > 0 || len(a.events) > 0
	a.mu.Unlock()
	if more {
		return true
	}
	queued, err := a.cq.ArmAndCheck(false)
	return err == nil && queued
}

// transmit sends one MAD to QP 1 of its peer as a UD SEND (inline, so the
// buffer belongs to the WQE).
func (a *Agent) transmit(o outMAD) {
	if a.testDropTx != nil && a.testDropTx(o.mad) {
		return
	}
	ah, err := a.ahFor(o.to)
	if err == nil {
		err = a.qp1.PostSend(rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Inline, InlineData: o.mad,
			AH: ah, RemoteQPN: 1, RemoteQKey: QP1QKey})
	}
	a.mu.Lock()
	if err != nil {
		a.countLocked("drop_tx_error")
		a.log.Debug("cm send", "attr", o.mad.AttrID(), "err", err)
	} else {
		a.countLocked("tx_" + o.mad.AttrID().String())
	}
	a.mu.Unlock()
}

func (a *Agent) ahFor(p peer) (*rvt.AH, error) {
	k := ahKey{p.gid, p.sgid, p.tc}
	a.mu.Lock()
	ah := a.ahs[k]
	a.mu.Unlock()
	if ah != nil {
		return ah, nil
	}
	hl := p.hopLimit
	if hl == 0 {
		hl = 64
	}
	ah, err := a.pd.CreateAH(rvt.AddressVector{DGID: p.gid, SGIDIndex: p.sgid, HopLimit: hl, TrafficClass: p.tc, Port: 1})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if old := a.ahs[k]; old != nil || a.ahs == nil {
		a.mu.Unlock()
		_ = a.dev.DestroyAH(ah)
		if old == nil {
			return nil, ErrClosed
		}
		return old, nil
	}
	a.ahs[k] = ah
	a.mu.Unlock()
	return ah, nil
}

// sendLocked queues a MAD for the task to send.
func (a *Agent) sendLocked(to peer, m MAD) { a.out = append(a.out, outMAD{to: to, mad: m}) }

// emitLocked queues an event for the task to deliver.
func (a *Agent) emitLocked(id *ID, ev Event) {
	ev.ID = id
	a.events = append(a.events, &pendingEvent{id: id, ev: ev})
}

// kick runs the task (after a user call queued work).
func (a *Agent) kick() { a.task.Schedule() }

// Timers. A timer callback only records which ID's timer fired and
// schedules the task; a generation number makes a stopped or re-armed
// timer's late callback harmless.
func (a *Agent) armLocked(id *ID, d time.Duration) {
	if id.timer != nil {
		id.timer.Stop()
	}
	id.timerGen++
	gen := id.timerGen
	id.timerOn = true
	id.timer = a.clk.AfterFunc(d, func() {
		a.dueMu.Lock()
		a.due = append(a.due, timerRef{id, gen})
		a.dueMu.Unlock()
		a.task.Schedule()
	})
}

func (a *Agent) stopTimerLocked(id *ID) {
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
	id.timerGen++
	id.timerOn = false
}

// newCommIDLocked allocates a local comm ID (never 0, never in use).
func (a *Agent) newCommIDLocked() uint32 {
	for {
		v := a.rng.Uint32()
		if v != 0 && a.byComm[v] == nil {
			return v
		}
	}
}

func (a *Agent) newTIDLocked(local uint32) uint64 { return 1<<32 | uint64(local) }

func (a *Agent) randPSNLocked() uint32 { return a.rng.Uint32() & 0xFFFFFF }

// sgidIndex returns the index of our GID for ip, or false.
func (a *Agent) sgidIndex(ip netip.Addr) (uint8, bool) {
	ip = ip.Unmap()
	for i := 0; ; i++ {
		g, err := a.dev.QueryGID(1, i)
		if err != nil {
			return 0, false
		}
		if g.IP() == ip {
			return uint8(i), true
		}
	}
}

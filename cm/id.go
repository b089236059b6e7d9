package cm

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// ID is a communication identifier (rdma_cm_id): one connection, SIDR
// resolution or listener. Its methods never block; outcomes arrive as
// events on its channel (or its handler, for the net-like API).
type ID struct {
	a   *Agent
	ps  PortSpace
	ctx any

	// All below guarded by a.mu.
	sink      func(Event)
	listener  *ID
	state     State
	ud        bool // SIDR (UD service resolution)
	destroyed bool
	told      bool   // DEVICE_REMOVAL delivered (deliverRemoval)
	epoch     uint64 // moves when queued actions of the ID must be dropped

	portBound     bool
	local, remote netip.AddrPort
	route         Route
	addrOK        bool
	resolve       *resolveWait // ResolveAddr waiting for the neighbour (resolve.go)
	tc            uint8
	ackTimeout    uint8 // SetAckTimeout (0: the negotiated one)

	q    *rvt.QP
	qpn  uint32
	qpUC bool

	localID, remoteID uint32
	remoteGUID        uint64
	remoteQPN         uint32
	remoteKey         remoteKey
	tid               uint64
	localPSN          uint32
	remotePSN         uint32
	neg               negotiated
	peerRespTO        uint8
	// cmTimeout is how long a MAD of ours waits for its answer before it
	// is resent (Linux's timeout_ms of the CM ID, the same for REQ, REP
	// and DREQ): on the active side 2 x conv(packet lifetime) +
	// conv(remote CM response timeout), on the passive side conv(the
	// REQ's local CM response timeout). avTimeout is the exponent of the
	// path's timeout (Linux's av.timeout): TIMEWAIT lasts conv(avTimeout),
	// and a received MRA adds it to the peer's service timeout. See
	// timers.go.
	cmTimeout time.Duration
	avTimeout uint8

	to       peer
	last     MAD // the MAD the timer resends
	retries  int
	timer    clock.Timer
	timerGen uint64
	timerOn  bool

	reg struct{ comm, remote, qpn, qp bool }

	r *remoteID // set for an ID of a device served by rvtd (remote.go)

	mc map[netip.Addr]mcJoin // multicast groups joined (mcast.go; a.mu)
}

// negotiated are the connection's settled attributes.
type negotiated struct {
	respRes, initDepth uint8 // ours: max_dest_rd_atomic, max_rd_atomic
	retry, rnr         uint8 // for our QP
	mtu                qp.MTU
	ackTimeout         uint8
	minRNR             uint8
	srq                bool
}

// NewID creates an ID in port space ps whose events go to ch
// (rdma_create_id). ctx is returned by Context.
func (a *Agent) NewID(ch *EventChannel, ps PortSpace, ctx any) *ID {
	var sink func(Event)
	if ch != nil {
		sink = ch.push
	}
	return a.newID(ps, ctx, sink)
}

func (a *Agent) newID(ps PortSpace, ctx any, sink func(Event)) *ID {
	id := &ID{a: a, ps: ps, ctx: ctx, sink: sink}
	a.mu.Lock()
	if !a.closed { // an ID of a closed agent only fails (ErrDeviceRemoved)
		a.ids[id] = struct{}{}
	}
	a.mu.Unlock()
	if a.remote != nil {
		a.newRemoteID(id)
	}
	return id
}

func (id *ID) deliver(ev Event) {
	id.a.mu.Lock()
	sink, gone := id.sink, id.destroyed
	id.a.mu.Unlock()
	if sink != nil && !gone {
		sink(ev)
	}
}

// deliverRemoval gives the ID DEVICE_REMOVAL, once: from Agent.Close,
// and for an ID of a remote device also when the daemon sends it.
func (id *ID) deliverRemoval() {
	id.a.mu.Lock()
	sink, skip := id.sink, id.destroyed || id.told
	id.told = true
	id.a.mu.Unlock()
	if sink != nil && !skip {
		sink(Event{Type: EventDeviceRemoval, ID: id, Err: ErrDeviceRemoved})
	}
}

// setSink replaces where the ID's events go (the net-like API).
func (id *ID) setSink(f func(Event)) {
	id.a.mu.Lock()
	id.sink = f
	id.a.mu.Unlock()
}

// Agent returns the ID's agent.
func (id *ID) Agent() *Agent { return id.a }

// Context returns the value given to NewID (or, for a passive ID, the
// listener's).
func (id *ID) Context() any { return id.ctx }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// State returns the ID's CM state.
func (id *ID) State() State {
	if id.r != nil {
		return State(id.r.query().State)
	}
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.state
}

// Listener returns the listening ID a passive ID came from.
func (id *ID) Listener() *ID { return id.listener }

// LocalAddr and RemoteAddr return the addresses (rdma_get_local_addr,
// rdma_get_peer_addr).
func (id *ID) LocalAddr() netip.AddrPort {
	if id.r != nil {
		return client.AddrPort(id.r.query().Src)
	}
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.local
}

func (id *ID) RemoteAddr() netip.AddrPort {
	if id.r != nil {
		return client.AddrPort(id.r.query().Dst)
	}
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.remote
}

// Route returns the resolved route.
func (id *ID) Route() Route {
	if id.r != nil {
		return id.r.route()
	}
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.route
}

// QP returns the QP given to Connect or Accept.
func (id *ID) QP() *rvt.QP {
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.q
}

// SetTOS sets the traffic class of the ID's route (rdma_set_option TOS),
// before ResolveAddr.
func (id *ID) SetTOS(tos uint8) {
	if id.r != nil {
		id.remoteOption(proto.OptIDTOS, tos)
		return
	}
	id.a.mu.Lock()
	id.tc = tos
	id.a.mu.Unlock()
}

// SetAckTimeout sets the local ACK timeout exponent (4.096 µs × 2^t) the
// ID gives its QP on the way to RTS, instead of packet lifetime + 1
// (rdma_set_option ACK_TIMEOUT: it changes our QP only, not the wire);
// 0 restores the default.
func (id *ID) SetAckTimeout(t uint8) {
	if id.r != nil {
		id.remoteOption(proto.OptIDAckTimeout, t)
		return
	}
	id.a.mu.Lock()
	id.ackTimeout = t
	id.a.mu.Unlock()
}

// roceSpace refuses the IPoIB port space where an ID binds or resolves:
// every softverbs device is RoCE (an Ethernet link layer), and Linux's cma
// answers EINVAL for RDMA_PS_IPOIB on one (cma_acquire_dev_by_src_ip), as
// rxe does. (rvtd refuses such an ID when it is made.)
func (id *ID) roceSpace(op string) error {
	if id.ps == PSIPoIB {
		return fmt.Errorf("%s: %w: the IPoIB port space on a RoCE device", op, ErrInvalidArgument)
	}
	return nil
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr); an
// unspecified address listens on every GID, port 0 takes an ephemeral one.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	if id.r != nil {
		return id.remoteBind(addr)
	}
	if err := id.roceSpace("bind"); err != nil {
		return err
	}
	a := id.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.removedErrLocked(fmt.Sprintf("bind %v", addr)); err != nil {
		return err
	}
	if id.portBound {
		return fmt.Errorf("bind %v: %w: bound already", addr, ErrInvalidState)
	}
	ip := addr.Addr().Unmap()
	if ip.IsValid() && !ip.IsUnspecified() {
		if _, ok := a.sgidIndex(ip); !ok {
			return fmt.Errorf("bind %v: %w: not an address of %s", addr, ErrInvalidArgument, a.dev.Name())
		}
	}
	return a.bindLocked(id, netip.AddrPortFrom(ip, addr.Port()))
}

// bindLocked reserves the port in the ID's port space.
func (a *Agent) bindLocked(id *ID, addr netip.AddrPort) error {
	port := addr.Port()
	if port == 0 {
		for {
			// Linux's ip_local_port_range: 32768-60999.
			port = uint16(32768 + a.rng.IntN(60999-32768+1))
			if len(a.ports[portKey{id.ps, port}]) == 0 {
				break
			}
		}
	}
	k := portKey{id.ps, port}
	for _, o := range a.ports[k] {
		oa := o.local.Addr()
		if !oa.IsValid() || oa.IsUnspecified() || !addr.Addr().IsValid() || addr.Addr().IsUnspecified() || oa == addr.Addr() {
			return fmt.Errorf("bind %v: %w", addr, ErrAddrInUse)
		}
	}
	a.ports[k] = append(a.ports[k], id)
	id.portBound = true
	id.local = netip.AddrPortFrom(addr.Addr(), port)
	return nil
}

func (a *Agent) unbindLocked(id *ID) {
	if !id.portBound {
		return
	}
	k := portKey{id.ps, id.local.Port()}
	l := a.ports[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(a.ports, k)
	} else {
		a.ports[k] = l
	}
	id.portBound = false
}

// Listen makes a bound ID a listener (rdma_listen): REQs and SIDR_REQs for
// its service ID (and, when bound to an address, for that destination)
// become CONNECT_REQUEST events whose ID is a new passive ID.
func (id *ID) Listen() error {
	if id.r != nil {
		return id.remoteCall("listen", func() error { return id.r.cid.Listen(0) })
	}
	a := id.a
	a.mu.Lock()
	defer a.kick() // a REQ that waited for this listener (park.go)
	defer a.mu.Unlock()
	if err := a.removedErrLocked("listen"); err != nil {
		return err
	}
	if id.state != StateIdle || id.destroyed {
		return fmt.Errorf("listen: %w: %v", ErrInvalidState, id.state)
	}
	if !id.portBound {
		if err := a.bindLocked(id, netip.AddrPortFrom(netip.Addr{}, 0)); err != nil {
			return err
		}
	}
	sid := MakeServiceID(id.ps, id.local.Port())
	a.listeners[sid] = append(a.listeners[sid], id)
	id.state = StateListen
	a.unparkLocked(id)
	return nil
}

func (a *Agent) findListenerLocked(sid ServiceID, dst netip.Addr) *ID {
	var any *ID
	for _, l := range a.listeners[sid] {
		la := l.local.Addr()
		if !la.IsValid() || la.IsUnspecified() {
			any = l
			continue
		}
		if la == dst.Unmap() {
			return l
		}
	}
	return any
}

// ResolveAddr is ResolveAddrTimeout with DefaultResolveTimeout
// (rdma_resolve_addr).
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort) error {
	return id.ResolveAddrTimeout(src, dst, DefaultResolveTimeout)
}

// ResolveRoute queues ROUTE_RESOLVED (rdma_resolve_route): on RoCE the
// route was settled with the address; this re-reads it through the cache.
func (id *ID) ResolveRoute() error {
	if id.r != nil {
		return id.remoteCall("resolve route", func() error { return id.r.cid.ResolveRoute(2000) })
	}
	a := id.a
	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("resolve route"); err != nil {
		return err
	}
	if !id.addrOK || id.state != StateIdle {
		return fmt.Errorf("resolve route: %w: address not resolved", ErrInvalidState)
	}
	r, err := a.resolveLocked(id.route.Src, id.route.Dst, id.tc)
	if err != nil {
		a.emitLocked(id, Event{Type: EventRouteError, Err: err})
		return nil
	}
	id.route = r
	a.emitLocked(id, Event{Type: EventRouteResolved})
	return nil
}

// qpIsUD reports whether connecting on the ID means SIDR.
func (id *ID) sidrFor(q *rvt.QP) bool {
	if id.ps == PSUDP {
		return true
	}
	return q != nil && q.Type() == qp.UD
}

func checkParam(p *ConnParam) ConnParam {
	if p == nil {
		return ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	}
	c := *p
	c.RetryCount = min(c.RetryCount, 7)
	c.RNRRetryCount = min(c.RNRRetryCount, 7)
	return c
}

// Connect starts the connection (rdma_connect): a REQ for RC/UC, a
// SIDR_REQ for UD (port space UDP, or a UD QP). The address must be
// resolved. q, if not nil, is moved to INIT now and to RTR/RTS when the
// REP arrives (then ESTABLISHED); with no QP the caller gets
// CONNECT_RESPONSE and finishes with Accept. A nil p gives rping's
// parameters (1, 1, retry 7, RNR retry 7).
func (id *ID) Connect(q *rvt.QP, p *ConnParam) error {
	if id.r != nil {
		return id.remoteConnect(q, p)
	}
	a := id.a
	prm := checkParam(p)
	sidr := id.sidrFor(q)
	maxPD := MaxConnPrivateData
	if sidr {
		maxPD = MaxUDPrivateData
	}
	if len(prm.PrivateData) > maxPD {
		return fmt.Errorf("connect: %w: %d bytes of private data, at most %d", ErrInvalidArgument, len(prm.PrivateData), maxPD)
	}
	a.mu.Lock()
	if err := a.removedErrLocked("connect"); err != nil {
		a.mu.Unlock()
		return err
	}
	if id.state != StateIdle || !id.addrOK || id.destroyed {
		a.mu.Unlock()
		return fmt.Errorf("connect: %w: %v (address resolved: %v)", ErrInvalidState, id.state, id.addrOK)
	}
	if q != nil && !sidr {
		if a.qpUsers[q.Num()] != nil {
			a.mu.Unlock()
			return fmt.Errorf("connect: %w: QP %#x is in use or in TIMEWAIT", ErrInvalidState, q.Num())
		}
		if q.Type() != qp.RC && q.Type() != qp.UC {
			a.mu.Unlock()
			return fmt.Errorf("connect: %w: QP type %v", ErrInvalidArgument, q.Type())
		}
		a.qpUsers[q.Num()] = id // reserved while INIT is set
		id.reg.qp = true
	}
	id.q = q
	if q != nil {
		id.qpn = q.Num()
	} else {
		id.qpn = prm.QPN
	}
	a.mu.Unlock()

	if q != nil && !sidr && q.State() == qp.Reset {
		if err := modifyQP(q, connInitAttr(q), qp.Init); err != nil {
			a.mu.Lock()
			a.releaseQPLocked(id)
			a.mu.Unlock()
			return fmt.Errorf("connect: %w", err)
		}
	}

	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("connect"); err != nil {
		return err
	}
	if id.state != StateIdle || id.destroyed {
		a.releaseQPLocked(id)
		return fmt.Errorf("connect: %w: %v", ErrInvalidState, id.state)
	}
	id.localID = a.newCommIDLocked()
	a.byComm[id.localID] = id
	id.reg.comm = true
	id.tid = a.newTIDLocked(id.localID)
	id.retries = 0
	id.to = peer{gid: id.route.DGID, sgid: id.route.SGIDIndex, tc: id.route.TrafficClass, hopLimit: id.route.HopLimit}
	// The rdma_cm header in every port space (IP addresses; psib.go).
	priv := make([]byte, 0, SIDRREQPrivateDataLen)
	h := make(CMAHeader, CMAHeaderLen)
	h.Set(id.local, id.remote.Addr())
	priv = append(priv, h...)
	priv = append(priv, prm.PrivateData...)
	sid := MakeServiceID(id.ps, id.remote.Port())
	m := make(MAD, MADLen)
	if sidr {
		id.ud = true
		m.InitHeader(MethodSend, AttrSIDRREQ, id.tid)
		s := SIDRREQ(m)
		s.SetRequestID(id.localID)
		s.SetPKey(DefaultPKey)
		s.SetServiceID(sid)
		s.SetPrivateData(priv)
		id.state = StateSIDRREQSent
		id.last = m
		a.sendLocked(id.to, m)
		a.armLocked(id, convTime(a.opts.ResponseTimeout))
		return nil
	}
	id.localPSN = a.randPSNLocked()
	id.neg = negotiated{
		respRes: min(prm.ResponderResources, a.maxRd), initDepth: min(prm.InitiatorDepth, a.maxRd),
		retry: prm.RetryCount, mtu: id.route.PathMTU, ackTimeout: a.opts.PacketLifetime + 1, srq: prm.SRQ,
	}
	id.qpUC = q != nil && q.Type() == qp.UC
	id.cmTimeout, id.avTimeout = a.reqTimeout(), a.opts.PacketLifetime+1
	m.InitHeader(MethodSend, AttrREQ, id.tid)
	r := REQ(m)
	r.SetLocalCommID(id.localID)
	r.SetServiceID(sid)
	r.SetLocalCAGUID(a.guid)
	r.SetLocalQPN(id.qpn)
	r.SetResponderResources(id.neg.respRes)
	r.SetInitiatorDepth(id.neg.initDepth)
	r.SetRemoteCMResponseTimeout(a.opts.ResponseTimeout)
	if id.qpUC {
		r.SetTransportType(TransportUC)
	}
	r.SetStartingPSN(id.localPSN)
	r.SetLocalCMResponseTimeout(a.opts.ResponseTimeout)
	r.SetRetryCount(prm.RetryCount)
	r.SetPKey(DefaultPKey)
	r.SetPathMTU(uint8(id.route.PathMTU))
	r.SetRNRRetryCount(prm.RNRRetryCount)
	r.SetMaxCMRetries(a.opts.MaxRetries)
	r.SetSRQ(prm.SRQ)
	// cma_resolve_iboe_route: LIDs 0xFFFF beyond one hop, SubnetLocal at one.
	if id.route.HopLimit > 1 {
		r.SetPrimaryLocalLID(0xFFFF)
		r.SetPrimaryRemoteLID(0xFFFF)
	} else {
		r.SetPrimarySubnetLocal(true)
	}
	r.SetPrimaryLocalGID(id.route.SGID)
	r.SetPrimaryRemoteGID(id.route.DGID)
	r.SetPrimaryFlowLabel(flowLabel(id.qpn, id.localPSN))
	r.SetPrimaryTrafficClass(id.route.TrafficClass)
	r.SetPrimaryHopLimit(id.route.HopLimit)
	r.SetPrimaryLocalAckTimeout(id.neg.ackTimeout)
	r.SetPrivateData(priv)
	id.state = StateREQSent
	id.last = m
	a.sendLocked(id.to, m)
	a.armLocked(id, id.cmTimeout)
	return nil
}

// flowLabel folds a QPN-derived value into 20 bits, as rdma_calc_flow_label
// does for RoCEv2 (the value only needs to be stable per connection).
func flowLabel(qpn, salt uint32) uint32 {
	v := uint64(qpn)*0x9E3779B1 ^ uint64(salt)
	return uint32((v ^ v>>20) & 0xFFFFF)
}

// Accept answers a CONNECT_REQUEST (rdma_accept): q goes INIT -> RTR ->
// RTS with the settled attributes and a REP goes out; ESTABLISHED follows
// the RTU. For a SIDR request it sends the SIDR_REP with q's number and
// the port space's Q_Key. On an active ID in REP_RCVD (Connect without a
// QP), it sends the RTU. A nil p accepts the REQ's offer (resources and
// depth swapped, capped by the device; RNR retry 7). An Accept that fails
// past the state check (private data too long, q in use, q's modify)
// rejects the request, as Linux's rdma_accept does: REJ reason 28 (a SIDR
// request: SIDR_REP REJECT), q to ERR, the ID idle (Reject then fails).
func (id *ID) Accept(q *rvt.QP, p *ConnParam) error {
	if id.r != nil {
		return id.remoteAccept(q, p)
	}
	a := id.a
	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		return fmt.Errorf("accept: %w", ErrDeviceRemoved)
	case id.destroyed:
		a.mu.Unlock()
		return fmt.Errorf("accept: %w", ErrClosed)
	case id.state == StateSIDRREQRcvd:
		defer a.kick()
		defer a.mu.Unlock()
		prm := checkParam(p)
		if len(prm.PrivateData) > SIDRREPPrivateDataLen {
			// As Linux's rdma_accept on any failure past its state
			// check: the request is rejected, not left waiting.
			a.sidrReplyLocked(id, SIDRReject, 0, nil)
			return fmt.Errorf("accept: %w: private data too long (the request is rejected)", ErrInvalidArgument)
		}
		qpn := prm.QPN
		if q != nil {
			qpn = q.Num()
		}
		a.sidrReplyLocked(id, SIDRSuccess, qpn, prm.PrivateData)
		return nil
	case id.state == StateREPRcvd || id.state == StateMRAREPSent:
		defer a.kick()
		defer a.mu.Unlock()
		prm := checkParam(p)
		a.sendRTULocked(id, prm.PrivateData)
		a.establishActiveLocked(id, nil)
		return nil
	case id.state != StateREQRcvd && id.state != StateMRAREQSent:
		a.mu.Unlock()
		return fmt.Errorf("accept: %w: %v", ErrInvalidState, id.state)
	}
	var prm ConnParam
	if p == nil {
		prm = ConnParam{ResponderResources: id.neg.initDepth, InitiatorDepth: id.neg.respRes, RNRRetryCount: 7}
	} else {
		prm = checkParam(p)
	}
	if len(prm.PrivateData) > REPPrivateDataLen {
		a.failAcceptLocked(id, q)
		return fmt.Errorf("accept: %w: %d bytes of private data, at most %d (the request is rejected)", ErrInvalidArgument, len(prm.PrivateData), REPPrivateDataLen)
	}
	if q != nil {
		if a.qpUsers[q.Num()] != nil {
			a.failAcceptLocked(id, nil) // the QP is another connection's
			return fmt.Errorf("accept: %w: QP %#x is in use or in TIMEWAIT (the request is rejected)", ErrInvalidState, q.Num())
		}
		a.qpUsers[q.Num()] = id
		id.reg.qp = true
		id.q, id.qpn = q, q.Num()
	} else {
		id.qpn = prm.QPN
	}
	// The peer offered: id.neg.respRes = its responder resources (our
	// initiator depth's ceiling), initDepth = its initiator depth.
	id.neg.respRes, id.neg.initDepth = min(prm.ResponderResources, a.maxRd, id.neg.initDepth), min(prm.InitiatorDepth, a.maxRd, id.neg.respRes)
	rnrForPeer := prm.RNRRetryCount
	id.neg.srq = prm.SRQ
	epoch := id.epoch
	a.mu.Unlock()

	if q != nil {
		if err := a.connectQP(id, q); err != nil {
			a.mu.Lock()
			if id.epoch == epoch && (id.state == StateREQRcvd || id.state == StateMRAREQSent) {
				a.failAcceptLocked(id, q)
			} else {
				a.releaseQPLocked(id)
				id.q = nil
				a.mu.Unlock()
			}
			return fmt.Errorf("accept: %w (the request is rejected)", err)
		}
	}

	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("accept"); err != nil {
		return err
	}
	if id.epoch != epoch || (id.state != StateREQRcvd && id.state != StateMRAREQSent) {
		return fmt.Errorf("accept: %w: the request ended meanwhile (%v)", ErrInvalidState, id.state)
	}
	m := make(MAD, MADLen)
	m.InitHeader(MethodSend, AttrREP, id.tid)
	r := REP(m)
	r.SetLocalCommID(id.localID)
	r.SetRemoteCommID(id.remoteID)
	r.SetLocalQPN(id.qpn)
	r.SetStartingPSN(id.localPSN)
	r.SetResponderResources(id.neg.respRes)
	r.SetInitiatorDepth(id.neg.initDepth)
	r.SetTargetAckDelay(0x0F) // rxe's ack delay, as Linux sends it
	r.SetRNRRetryCount(rnrForPeer)
	r.SetSRQ(id.neg.srq)
	r.SetLocalCAGUID(a.guid)
	r.SetPrivateData(prm.PrivateData)
	id.state = StateREPSent
	id.last = m
	id.retries = 0
	a.sendLocked(id.to, m)
	a.armLocked(id, id.cmTimeout)
	return nil
}

// failAcceptLocked ends a request whose Accept failed past the state
// check, as Linux's rdma_accept does on any such failure: REJ reason 28
// (consumer defined) to the peer, the ID back to idle (a later Reject
// fails), and q, if given, to ERR. It unlocks a.mu.
func (a *Agent) failAcceptLocked(id *ID, q *rvt.QP) {
	a.sendRejLocked(id, MsgREQ, RejConsumerDefined, nil)
	a.toIdleLocked(id)
	id.q = nil
	a.mu.Unlock()
	a.kick()
	if q != nil {
		_ = q.Modify(&rvt.QPAttr{State: qp.Err}, qp.AttrState)
	}
}

// Reject refuses a CONNECT_REQUEST with REJ reason 28 (consumer defined)
// and private data (rdma_reject); a SIDR request gets SIDR_REP status
// REJECT; an active ID in REP_RCVD rejects the REP.
func (id *ID) Reject(priv []byte) error {
	if id.r != nil {
		return id.remoteCall("reject", func() error { return id.r.cid.Reject(priv) })
	}
	a := id.a
	if len(priv) > REJPrivateDataLen {
		return fmt.Errorf("reject: %w: %d bytes of private data, at most %d", ErrInvalidArgument, len(priv), REJPrivateDataLen)
	}
	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("reject"); err != nil {
		return err
	}
	switch id.state {
	case StateSIDRREQRcvd:
		a.sidrReplyLocked(id, SIDRReject, 0, priv)
	case StateREQRcvd, StateMRAREQSent:
		a.sendRejLocked(id, MsgREQ, RejConsumerDefined, priv)
		a.toIdleLocked(id)
	case StateREPRcvd, StateMRAREPSent:
		a.sendRejLocked(id, MsgREP, RejConsumerDefined, priv)
		a.toIdleLocked(id)
	default:
		return fmt.Errorf("reject: %w: %v", ErrInvalidState, id.state)
	}
	return nil
}

// Disconnect ends an established connection (rdma_disconnect): a DREQ
// (DISCONNECTED follows the DREP, or the DREQ's last retry), or the DREP
// when the peer's DREQ came first. The QP moves to ERR.
func (id *ID) Disconnect() error {
	if id.r != nil {
		return id.remoteCall("disconnect", id.r.cid.Disconnect)
	}
	a := id.a
	a.mu.Lock()
	if err := a.removedErrLocked("disconnect"); err != nil {
		a.mu.Unlock()
		return err
	}
	q := id.q
	switch id.state {
	case StateEstablished:
		a.sendDREQLocked(id, nil)
	case StateDREQRcvd:
		a.sendDREPLocked(id, nil)
		a.enterTimeWaitLocked(id)
	case StateDREQSent, StateTimeWait:
		a.mu.Unlock()
		return nil
	case StateIdle:
		if id.localID != 0 {
			// The connection ended already (or was refused): as Linux's
			// rdma_disconnect on an ID that has its IB CM ID, which
			// sends nothing and returns 0.
			a.mu.Unlock()
			return nil
		}
		fallthrough
	default:
		s := id.state
		a.mu.Unlock()
		return fmt.Errorf("disconnect: %w: %v", ErrInvalidState, s)
	}
	a.mu.Unlock()
	a.kick()
	if q != nil {
		_ = q.Modify(&rvt.QPAttr{State: qp.Err}, qp.AttrState)
	}
	return nil
}

// Discard ends a connection request the consumer will not take without
// answering it, and destroys the ID, as Linux's rdma_cm does when a
// listener's backlog is full (ucma's handler fails with ENOMEM and ib_cm
// forgets the request without a REJ, cm_destroy_id): the peer resends
// its REQ after its CM period, and the resent REQ is a new request. A
// SIDR request is answered SIDR_REP REJECT, as Linux answers it then; in
// any other state Discard is Destroy. On a device served by rvtd the
// daemon discards the request (cm_discard), or, if it speaks protocol 1.1
// only, destroys it (a REJ 28).
func (id *ID) Discard() {
	if id.r != nil {
		id.leaveAllMulticast()
		id.remoteDestroy(true)
		return
	}
	a := id.a
	a.mu.Lock()
	if id.destroyed || a.closed || (id.state != StateREQRcvd && id.state != StateMRAREQSent) {
		a.mu.Unlock()
		id.Destroy()
		return
	}
	id.destroyed = true
	a.countLocked("req_discarded")
	a.toIdleLocked(id)
	a.mu.Unlock()
	a.kick()
}

// Destroy releases the ID (rdma_destroy_id). What is under way ends as
// Linux ends it: a REQ in flight gets a REJ (timeout), a request not yet
// answered a REJ (consumer), an established connection a DREQ; the comm
// ID, port and QP stay reserved through TIMEWAIT. No event follows.
func (id *ID) Destroy() {
	id.leaveAllMulticast()
	if id.r != nil {
		id.remoteDestroy(false)
		return
	}
	a := id.a
	a.mu.Lock()
	if id.destroyed {
		a.mu.Unlock()
		return
	}
	id.destroyed = true
	if a.closed { // the agent forgot the ID already (Close)
		a.mu.Unlock()
		return
	}
	// The port is free at once, as Linux's rdma_destroy_id releases it
	// (cma_release_port) while the CM's DREQ and TIMEWAIT run on: they
	// find the ID by its comm ID, not by its port.
	a.unbindLocked(id)
	q := id.q
	toErr := false
	switch id.state {
	case StateListen:
		sid := MakeServiceID(id.ps, id.local.Port())
		l := a.listeners[sid]
		for i, o := range l {
			if o == id {
				l = append(l[:i], l[i+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(a.listeners, sid)
		} else {
			a.listeners[sid] = l
		}
		id.state = StateIdle
		a.removeLocked(id)
	case StateIdle:
		if id.resolve != nil {
			id.resolve = nil
			a.stopTimerLocked(id)
		}
		a.removeLocked(id)
	case StateREQSent, StateMRAREQRcvd:
		// As cm_format_rej forms it in these states: MsgRejected
		// "other", RemoteCommID still 0, the ARI our CA GUID.
		a.sendRejLocked(id, MsgOther, RejTimeout, nil)
		a.toIdleLocked(id)
	case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
		k := MsgREQ
		if id.state == StateREPRcvd || id.state == StateMRAREPSent {
			k = MsgREP
		}
		a.sendRejLocked(id, k, RejConsumerDefined, nil)
		a.toIdleLocked(id)
	case StateREPSent, StateMRAREPRcvd:
		a.sendRejLocked(id, MsgREP, RejConsumerDefined, nil)
		a.enterTimeWaitLocked(id)
		toErr = true
	case StateEstablished:
		a.sendDREQLocked(id, nil)
		toErr = true
	case StateDREQRcvd:
		a.sendDREPLocked(id, nil)
		a.enterTimeWaitLocked(id)
	case StateSIDRREQSent:
		a.toIdleLocked(id)
	case StateSIDRREQRcvd:
		a.sidrReplyLocked(id, SIDRReject, 0, nil)
	}
	a.mu.Unlock()
	a.kick()
	if toErr && q != nil {
		_ = q.Modify(&rvt.QPAttr{State: qp.Err}, qp.AttrState)
	}
}

// InitQPAttr returns the attributes and mask that move the ID's QP to
// state (INIT, RTR or RTS), as rdma_init_qp_attr does, for a caller that
// modifies its QP itself.
func (id *ID) InitQPAttr(state qp.State) (rvt.QPAttr, rvt.QPAttrMask, error) {
	if id.r != nil {
		return id.remoteInitQPAttr(state)
	}
	a := id.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("init qp attr"); err != nil {
		return rvt.QPAttr{}, 0, err
	}
	typ := qp.RC
	if id.qpUC {
		typ = qp.UC
	}
	switch state {
	case qp.Init:
		return connInitAttr(id.q), qp.AttrState | qp.RequiredAttrs(typ, qp.Reset, qp.Init), nil
	case qp.RTR:
		if id.remoteQPN == 0 && id.state < StateREQRcvd {
			return rvt.QPAttr{}, 0, fmt.Errorf("init qp attr: %w: no peer yet", ErrInvalidState)
		}
		return id.rtrAttr(), qp.AttrState | qp.RequiredAttrs(typ, qp.Init, qp.RTR), nil
	case qp.RTS:
		return id.rtsAttr(), qp.AttrState | qp.RequiredAttrs(typ, qp.RTR, qp.RTS), nil
	}
	return rvt.QPAttr{}, 0, fmt.Errorf("init qp attr: %w: state %v", ErrInvalidArgument, state)
}

// connInitAttr are the INIT attributes of a connected (RC or UC) QP.
func connInitAttr(q *rvt.QP) rvt.QPAttr {
	acc := keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic
	if q != nil && q.Type() == qp.UC {
		acc = keys.LocalWrite | keys.RemoteWrite
	}
	return rvt.QPAttr{State: qp.Init, Port: 1, AccessFlags: acc}
}

// PrepareConn moves an RC or UC QP from RESET to INIT with the attributes
// Connect and Accept would give it, as rdma_create_qp does for a connected
// ID, so that receives can be posted before the connection is made (the
// peer may SEND as soon as it is established). Connect and Accept then
// take the QP on from INIT.
func PrepareConn(q *rvt.QP) error {
	if t := q.Type(); t != qp.RC && t != qp.UC {
		return fmt.Errorf("prepare QP %#x: %w: not RC or UC", q.Num(), ErrInvalidArgument)
	}
	if err := modifyQP(q, connInitAttr(q), qp.Init); err != nil {
		return fmt.Errorf("prepare QP %#x: %w", q.Num(), err)
	}
	return nil
}

// The PSNs as Linux's cm.c sets them: the Starting PSN a side puts in its
// REQ or REP is the PSN it receives from (its rq_psn), and the peer's is
// the PSN it sends from (sq_psn). The active side of rping.pcap sends its
// first SEND with the REP's Starting PSN, the passive side its first READ
// with the REQ's; a peer that does it the other way gets PSN sequence
// error NAKs from Linux.
func (id *ID) rtrAttr() rvt.QPAttr {
	return rvt.QPAttr{State: qp.RTR, AV: id.route.AV(), PathMTU: id.neg.mtu, DestQPN: id.remoteQPN,
		RQPSN: id.localPSN, MaxDestRdAtomic: id.neg.respRes, MinRNRTimer: id.neg.minRNR}
}

func (id *ID) rtsAttr() rvt.QPAttr {
	t := id.neg.ackTimeout
	if id.ackTimeout != 0 {
		t = id.ackTimeout
	}
	return rvt.QPAttr{State: qp.RTS, SQPSN: id.remotePSN, Timeout: t,
		RetryCnt: id.neg.retry, RNRRetry: id.neg.rnr, MaxRdAtomic: id.neg.initDepth}
}

// modifyQP applies one transition with the mask the QP type requires.
func modifyQP(q *rvt.QP, attr rvt.QPAttr, to qp.State) error {
	attr.State = to
	mask := qp.AttrState | qp.RequiredAttrs(q.Type(), q.State(), to)
	return q.Modify(&attr, mask)
}

// connectQP moves q through INIT, RTR and RTS with the ID's attributes.
// It runs without the agent lock (a modify may run the QP's tasks).
func (a *Agent) connectQP(id *ID, q *rvt.QP) error {
	a.mu.Lock()
	rtr, rts := id.rtrAttr(), id.rtsAttr()
	a.mu.Unlock()
	if q.State() == qp.Reset {
		if err := modifyQP(q, connInitAttr(q), qp.Init); err != nil {
			return err
		}
	}
	if err := modifyQP(q, rtr, qp.RTR); err != nil {
		return err
	}
	return modifyQP(q, rts, qp.RTS)
}

// PrepareUD moves a UD QP from RESET to RTS with the Q_Key of port space
// ps (rdma_create_qp does this for UD IDs), ready for SIDR peers.
func PrepareUD(q *rvt.QP, ps PortSpace) error {
	qkey := uint32(UDPQKey)
	if ps != PSUDP && ps != PSIB {
		qkey = 0
	}
	for _, to := range []qp.State{qp.Init, qp.RTR, qp.RTS} {
		attr := rvt.QPAttr{Port: 1, QKey: qkey}
		if err := modifyQP(q, attr, to); err != nil {
			return fmt.Errorf("prepare UD QP %#x: %w", q.Num(), err)
		}
	}
	return nil
}

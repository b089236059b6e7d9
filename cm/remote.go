package cm

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// The connection manager of a device served by rvtd (rvt.Dial): the
// daemon runs the CM on QP 1 of its device, so an Agent of a remote
// device has no QP 1 of its own. Its IDs are rdma_cm IDs of the device's
// session (docs/rvtd-protocol.md section 9): every ID method is a call on
// the session's socket, and one goroutine per agent reads the agent's
// event channel and delivers each record as an Event to its ID's channel
// or handler, as the task does for an embedded device. The event form and
// the net form (Listen, Dial, ResolveUD) work unchanged on top.

// remoteAgent is what an Agent of a remote device holds.
type remoteAgent struct {
	c    *client.Client
	ch   *client.CMChannel
	done chan struct{}
	byH  map[uint32]*ID // the agent's IDs by handle (Agent.mu)
}

// remoteID is what an ID of a remote device holds.
type remoteID struct {
	ra    *remoteAgent
	cid   *client.CMID
	err   error     // creating the ID failed: every method returns it
	offer ConnParam // a passive ID's request, for Accept with nil params
}

func newRemoteAgent(dev *rvt.Device, o Options) (*Agent, error) {
	c := dev.Remote().Client()
	ch, err := c.CreateEventChannel()
	if err != nil {
		return nil, fmt.Errorf("cm agent for %s: rdma_cm event channel: %w", dev.Name(), err)
	}
	a := &Agent{
		dev: dev, opts: o, clk: dev.Clock(), log: o.Logger,
		ids: map[*ID]struct{}{}, byComm: map[uint32]*ID{}, byRemote: map[remoteKey]*ID{},
		byQPN: map[qpnKey]*ID{}, qpUsers: map[uint32]*ID{}, ports: map[portKey][]*ID{},
		listeners: map[ServiceID][]*ID{}, ahs: map[ahKey]*rvt.AH{}, routes: map[routeKey]routeEntry{},
		counters: map[string]uint64{},
		remote:   &remoteAgent{c: c, ch: ch, done: make(chan struct{}), byH: map[uint32]*ID{}},
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.guid = dev.QueryDevice().NodeGUID
	go a.remoteRun()
	return a, nil
}

// closeRemote tells the agent's IDs of the removal (those the daemon
// has not told already, at its shutdown), then destroys them in the
// daemon, and the channel.
func (a *Agent) closeRemote() error {
	ra := a.remote
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	var ids []*ID
	for id := range a.ids {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	for _, id := range ids {
		id.deliverRemoval()
	}
	for _, id := range ids {
		id.Destroy()
	}
	_ = ra.ch.Destroy()
	_ = ra.ch.File.Close()
	<-ra.done
	a.dev.DropService(agentKey{}, a)
	return nil
}

// remoteRun reads the agent's event channel until it closes.
func (a *Agent) remoteRun() {
	ra := a.remote
	defer close(ra.done)
	for {
		rec, err := ra.ch.GetEvent(0)
		if err != nil {
			return
		}
		ev := remoteEvent(rec)
		a.mu.Lock()
		id := ra.byH[rec.ID]
		if id == nil && ev.Type == EventConnectRequest {
			if l := ra.byH[rec.ListenID]; l != nil && !l.destroyed {
				id = &ID{a: a, ps: l.ps, ctx: l.ctx, sink: l.sink, listener: l, state: StateREQRcvd,
					r: &remoteID{ra: ra, cid: ra.c.EventID(rec), offer: ev.Param}}
				a.ids[id] = struct{}{}
				ra.byH[rec.ID] = id
			}
		}
		a.mu.Unlock()
		if id == nil {
			if ev.Type == EventConnectRequest {
				_, _ = ra.c.EventID(rec).Destroy() // nobody to take it: a REJ
			}
			continue
		}
		ev.ID = id
		if ev.Type == EventDeviceRemoval {
			id.deliverRemoval() // once, whoever tells first
			continue
		}
		id.deliver(ev)
	}
}

// remoteEvent converts a cm_event record (without its ID).
func remoteEvent(r proto.CMEvent) Event {
	ev := Event{Type: EventType(r.Event)}
	ev.Param = ConnParam{PrivateData: append([]byte(nil), r.PrivateData[:r.PrivateDataLen]...),
		ResponderResources: r.ResponderResources, InitiatorDepth: r.InitiatorDepth,
		RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount, SRQ: r.SRQ, QPN: r.QPNum}
	switch ev.Type {
	case EventRejected:
		ev.Err = &RejectError{Reason: RejectReason(r.Status), PrivateData: ev.Param.PrivateData}
	case EventUnreachable:
		ev.Err = ErrUnreachable
		if r.Status > 0 && !r.UD {
			// A SIDR_REP status (see cmEventRecord in rvtd): REJECTED, as
			// for an in-process ID.
			ev.Type = EventRejected
			ev.Err = SIDRRejectError(SIDRStatus(r.Status), ev.Param.PrivateData)
		}
	case EventAddrError, EventRouteError:
		ev.Err = ErrNoRoute
		if r.Status == -98 { // -EADDRINUSE
			ev.Err = ErrAddrInUse
		}
		if r.Status == -110 { // -ETIMEDOUT
			ev.Err = ErrAddrTimeout
		}
	case EventConnectError:
		ev.Err = ErrInvalidArgument
	case EventDeviceRemoval:
		ev.Err = ErrDeviceRemoved
	}
	if r.UD {
		ev.UD = &UDParam{QPN: r.QPNum, QKey: r.QKey, AV: rvt.AddressVector{DGID: r.AH.DGID, SGIDIndex: r.AH.SGIDIndex,
			HopLimit: r.AH.HopLimit, TrafficClass: r.AH.TrafficClass, FlowLabel: r.AH.FlowLabel, SL: r.AH.SL,
			StaticRate: r.AH.StaticRate, Port: max(r.AH.Port, 1)}}
	}
	return ev
}

// newRemoteID makes the ID in the daemon (newID of a remote agent).
func (a *Agent) newRemoteID(id *ID) {
	typ := uint8(qp.RC)
	if id.ps == PSUDP || id.ps == PSIPoIB {
		typ = uint8(qp.UD)
	}
	r := &remoteID{ra: a.remote}
	r.cid, r.err = a.remote.ch.CreateID(0, uint16(id.ps), typ)
	id.r = r
	if r.err == nil {
		a.mu.Lock()
		a.remote.byH[r.cid.Handle] = id
		a.mu.Unlock()
	}
}

// rerr wraps a daemon's answer as the cm errors the embedded agent
// returns.
func rerr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch err {
	case proto.EADDRINUSE:
		return fmt.Errorf("%s: %w", op, ErrAddrInUse)
	case proto.EINVAL:
		return fmt.Errorf("%s: %w (rvtd: %v)", op, ErrInvalidState, err)
	case proto.ENETUNREACH:
		return fmt.Errorf("%s: %w (rvtd)", op, ErrNetUnreachable)
	}
	return fmt.Errorf("%s: rvtd: %w", op, err)
}

func (r *remoteID) query() *proto.CMQueryReply {
	if r.err != nil {
		return &proto.CMQueryReply{}
	}
	q, err := r.cid.Query()
	if err != nil {
		return &proto.CMQueryReply{}
	}
	return q
}

func (r *remoteID) route() Route {
	q := r.query()
	if q.NumPaths == 0 {
		return Route{}
	}
	return Route{Src: client.AddrPort(q.Src).Addr(), Dst: client.AddrPort(q.Dst).Addr(), SGIDIndex: q.SGIDIndex,
		SGID: netdev.GID(q.SGID), DGID: netdev.GID(q.DGID), PathMTU: qp.MTU(q.MTU), HopLimit: q.HopLimit,
		TrafficClass: q.TrafficClass}
}

// devAddr returns the device's address of like's family (the daemon
// picks devices by address: an ID of this agent must name this device's).
func (a *Agent) devAddr(like netip.Addr) (netip.Addr, bool) {
	like = like.Unmap()
	for i := 0; ; i++ {
		g, err := a.dev.QueryGID(1, i)
		if err != nil {
			return netip.Addr{}, false
		}
		if ip := g.IP(); ip.Is4() == like.Is4() && ip.IsLinkLocalUnicast() == like.IsLinkLocalUnicast() {
			return ip, true
		}
	}
}

// bind binds to addr; the unspecified address means this device's
// address (in the daemon it would mean every device's).
func (id *ID) remoteBind(addr netip.AddrPort) error {
	r := id.r
	if r.err != nil {
		return r.err
	}
	ip := addr.Addr()
	if !ip.IsValid() {
		ip = netip.IPv4Unspecified()
	}
	if ip.IsUnspecified() {
		if own, ok := id.a.devAddr(ip); ok {
			ip = own
		}
	}
	addr = netip.AddrPortFrom(ip, addr.Port())
	return rerr(fmt.Sprintf("bind %v", addr), r.cid.BindAddr(addr))
}

func (r *remoteID) connParam(q *rvt.QP, p ConnParam) proto.CMConnParam {
	c := proto.CMConnParam{QPNum: p.QPN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, PrivateData: p.PrivateData}
	if q != nil {
		c.QP = q.RemoteHandle()
	}
	return c
}

// remoteQPAttr converts init_qp_attr's answer.
func remoteQPAttr(a proto.QPAttr) rvt.QPAttr {
	return rvt.QPAttr{State: qp.State(a.State), AccessFlags: rvt.Access(a.AccessFlags), PkeyIndex: a.PKeyIndex,
		Port: a.Port, QKey: a.QKey, PathMTU: qp.MTU(a.PathMTU), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN,
		AV: rvt.AddressVector{DGID: a.AV.DGID, SGIDIndex: a.AV.SGIDIndex, HopLimit: a.AV.HopLimit,
			TrafficClass: a.AV.TrafficClass, FlowLabel: a.AV.FlowLabel, SL: a.AV.SL, StaticRate: a.AV.StaticRate,
			Port: a.AV.Port}}
}

// The ID methods of a remote device. Each is called by the method of the
// same name when id.r is set.

func (id *ID) remoteConnect(q *rvt.QP, p *ConnParam) error {
	r := id.r
	if r.err != nil {
		return r.err
	}
	prm := checkParam(p)
	if err := r.cid.Connect(r.connParam(q, prm)); err != nil {
		return rerr("connect", err)
	}
	id.a.mu.Lock()
	id.q = q
	id.a.mu.Unlock()
	return nil
}

func (id *ID) remoteAccept(q *rvt.QP, p *ConnParam) error {
	r := id.r
	if r.err != nil {
		return r.err
	}
	var prm ConnParam
	if p == nil {
		prm = ConnParam{ResponderResources: r.offer.InitiatorDepth, InitiatorDepth: r.offer.ResponderResources, RNRRetryCount: 7}
	} else {
		prm = checkParam(p)
	}
	if err := r.cid.Accept(r.connParam(q, prm)); err != nil {
		return rerr("accept", err)
	}
	id.a.mu.Lock()
	id.q = q
	id.a.mu.Unlock()
	return nil
}

// remoteDestroy is Destroy on an rvtd device; with discard, Discard
// (cm_discard: a request stays unanswered).
func (id *ID) remoteDestroy(discard bool) {
	a := id.a
	a.mu.Lock()
	if id.destroyed {
		a.mu.Unlock()
		return
	}
	id.destroyed = true
	delete(a.ids, id)
	if id.r.cid != nil {
		delete(a.remote.byH, id.r.cid.Handle)
	}
	a.mu.Unlock()
	switch {
	case id.r.err != nil:
	case discard:
		_, _ = id.r.cid.Discard()
	default:
		_, _ = id.r.cid.Destroy()
	}
}

func (id *ID) remoteInitQPAttr(state qp.State) (rvt.QPAttr, rvt.QPAttrMask, error) {
	if id.r.err != nil {
		return rvt.QPAttr{}, 0, id.r.err
	}
	a, mask, err := id.r.cid.InitQPAttr(uint8(state))
	if err != nil {
		return rvt.QPAttr{}, 0, rerr("init qp attr", err)
	}
	return remoteQPAttr(a), rvt.QPAttrMask(mask), nil
}

func (id *ID) remoteOption(name uint32, v uint8) {
	if id.r.err == nil {
		_ = id.r.cid.SetOption(proto.OptLevelID, name, uint64(v))
	}
}

func (id *ID) remoteResolveAddr(src netip.Addr, dst netip.AddrPort) error {
	if id.r.err != nil {
		return id.r.err
	}
	if !src.IsValid() || src.IsUnspecified() {
		// From this device (the daemon would pick by destination).
		if own, ok := id.a.devAddr(dst.Addr()); ok {
			src = own
		}
	}
	return rerr("resolve addr", id.r.cid.ResolveAddr(src, dst, 2000))
}

func (id *ID) remoteCall(op string, f func() error) error {
	if id.r.err != nil {
		return id.r.err
	}
	return rerr(op, f())
}

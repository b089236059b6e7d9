package rvtd

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/qpconv"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// The connection manager served to clients (docs/rvtd-protocol.md section
// 9). A session's rdma_cm IDs are real cm.IDs on the agent of their
// device, so ports are device-wide across sessions, incoming requests go
// to the session of the listener and the other CM MADs to the session of
// the connection (the agent routes by ID), and address/route resolution
// is the agent's cache. Each ID's events are written, as 384-byte
// cm_event records, to the socket of its event channel.
//
// Lock order: session.mu, then the agent's lock (inside cm.ID methods).
// The agent calls cmEvent without its lock held; cmEvent takes
// session.mu, and never calls a cm.ID method while holding it.

// maxPendingCMEvents bounds the records kept for a channel whose client
// does not read.
const maxPendingCMEvents = 4096

// cmChanObj is an rdma_cm event channel.
type cmChanObj struct {
	handle uint32
	refs   int // IDs (session.mu)
	sock   *eventSock
	// CONNECT_REQUEST records the client has not read yet (session.mu),
	// each holding a place in its listener's backlog.
	reqs []chanReq
}

// chanReq is a CONNECT_REQUEST record: its place in the channel's stream
// (eventSock.sendSeq) and its listener.
type chanReq struct {
	seq uint64
	l   *cmIDObj
}

// cmBinding is one cm.ID of an rdma_cm ID and its device.
type cmBinding struct {
	d  *device
	id *cm.ID
}

// cmIDObj is an rdma_cm ID of a session.
type cmIDObj struct {
	handle uint32
	ps     cm.PortSpace
	qpType uint8
	ctx    uint64

	// Guarded by session.mu.
	ch       *cmChanObj
	reported uint32 // records written about the ID to ch
	// backlog (a listener's, from cm_listen) bounds its CONNECT_REQUEST
	// records not yet read (waiting), as ucma's backlog.
	backlog, waiting int
	b                cmBinding // the ID's device and cm.ID, once it has one
	wild             []cmBinding
	tos              uint8
	ackTO            uint8
	q                *qpObj // the QP given to connect or accept, by handle or number
	dead             bool
	removed          bool // DEVICE_REMOVAL reported (removalLocked)

	mc map[netip.Addr]bool // multicast groups joined (cmmcast.go; session.mu)
	// mcLost: joined groups MULTICAST_ERROR has reported lost, once each
	// (cmmcasterr.go; session.mu).
	mcLost map[netip.Addr]bool
}

// cmSession is a session's connection manager state.
type cmSession struct {
	byID    map[*cm.ID]*cmIDObj // every cm.ID of the session's IDs (session.mu)
	n       int                 // IDs, for the limit
	closing bool                // teardown has begun: no new passive IDs
}

// openCM opens the device's connection manager when the daemon starts, as
// the kernel's CM is there for every HCA: QP 1 answers from the start
// (a REQ for a port nobody listens on gets REJ 8, not silence), whether or
// not a client has used rdma_cm on the device yet.
//
// A REQ for a port nobody listens on waits cmNoListenerWait for a
// listener before that REJ (cm.Options.NoListenerWait): perftest -R's
// client connects right after its handshake, sometimes before the
// server's rdma_listen (docs/dropin.md).
func (d *device) openCM() error {
	_, err := cm.NewAgent(d.dev, cm.Options{NoListenerWait: cmNoListenerWait})
	if errors.Is(err, cm.ErrInvalidState) {
		_, err = cm.AgentFor(d.dev) // the embedding program opened it
	}
	return err
}

const cmNoListenerWait = time.Second

// cmDispatch serves the rdma_cm opcodes.
func (ss *session) cmDispatch(m proto.Msg) (proto.Body, []int, error) {
	if ss.minor < 1 || m.Op == proto.OpCMDiscard && ss.minor < 2 {
		return nil, nil, proto.EOPNOTSUPP
	}
	h := m.Handle
	switch m.Op {
	case proto.OpCMCreateEventChannel:
		return ss.cmCreateChannel()
	case proto.OpCMDestroyEventChannel:
		return nil, nil, ss.cmDestroyChannel(h)
	case proto.OpCMCreateID:
		return ss.cmCreateID(h, m.Body.(*proto.CMCreateID))
	}
	o := lookup[cmIDObj](ss, h)
	if o == nil {
		return nil, nil, proto.EINVAL
	}
	switch m.Op {
	case proto.OpCMDestroyID:
		return &proto.CMEventsReply{EventsReported: ss.cmDestroyID(o, false)}, nil, nil
	case proto.OpCMDiscard:
		return &proto.CMEventsReply{EventsReported: ss.cmDestroyID(o, true)}, nil, nil
	case proto.OpCMBindAddr:
		return nil, nil, ss.cmBind(o, m.Body.(*proto.CMBindAddr).Addr)
	case proto.OpCMResolveAddr:
		return nil, nil, ss.cmResolveAddr(o, m.Body.(*proto.CMResolveAddr))
	case proto.OpCMResolveRoute:
		id := ss.cmIDOf(o)
		if id == nil {
			return nil, nil, proto.EINVAL
		}
		return nil, nil, cmErrno(id.ResolveRoute())
	case proto.OpCMQuery:
		return ss.cmQuery(o), nil, nil
	case proto.OpCMListen:
		ss.mu.Lock()
		o.backlog = listenBacklog(m.Body.(*proto.CMListen).Backlog)
		ss.mu.Unlock()
		return nil, nil, ss.cmListen(o)
	case proto.OpCMConnect:
		return nil, nil, ss.cmConnect(o, m.Body.(*proto.CMConnParam), false)
	case proto.OpCMAccept:
		return nil, nil, ss.cmConnect(o, m.Body.(*proto.CMConnParam), true)
	case proto.OpCMReject:
		r := m.Body.(*proto.CMReject)
		if r.Reason != 0 && r.Reason != proto.RejConsumerDefined {
			return nil, nil, proto.EOPNOTSUPP
		}
		id := ss.cmIDOf(o)
		if id == nil {
			return nil, nil, proto.EINVAL
		}
		return nil, nil, cmErrno(id.Reject(r.PrivateData))
	case proto.OpCMDisconnect:
		id := ss.cmIDOf(o)
		if id == nil {
			return nil, nil, proto.EINVAL
		}
		ss.mu.Lock()
		q := o.q
		ss.mu.Unlock()
		if q != nil {
			q.service(false) // qp.go, "Requests that follow posts"
		}
		err := id.Disconnect()
		if q != nil {
			q.loop.kickQP(q) // its state changed
		}
		return nil, nil, cmErrno(err)
	case proto.OpCMInitQPAttr:
		return ss.cmInitQPAttr(o, qp.State(m.Body.(*proto.CMInitQPAttr).State))
	case proto.OpCMEstablish:
		return nil, nil, ss.cmEstablish(o)
	case proto.OpCMNotify:
		id := ss.cmIDOf(o)
		if id == nil || m.Body.(*proto.CMNotify).Event != 4 { // IBV_EVENT_COMM_EST
			return nil, nil, proto.EINVAL
		}
		return nil, nil, cmErrno(id.NotifyCommEst())
	case proto.OpCMJoinMulticast:
		return nil, nil, ss.cmJoinMulticast(o, m.Body.(*proto.CMMulticast))
	case proto.OpCMLeaveMulticast:
		return nil, nil, ss.cmLeaveMulticast(o, m.Body.(*proto.CMMulticast))
	case proto.OpCMSetOption:
		return nil, nil, ss.cmSetOption(o, m.Body.(*proto.CMSetOption))
	case proto.OpCMMigrateID:
		return ss.cmMigrate(o, m.Body.(*proto.CMMigrateID).Channel)
	}
	return nil, nil, proto.EOPNOTSUPP
}

// cmErrno maps the connection manager's errors to the errno librdmacm
// gets from the kernel for the same failure.
func cmErrno(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cm.ErrAddrInUse):
		return proto.EADDRINUSE
	case errors.Is(err, cm.ErrNoRoute):
		return proto.EHOSTUNREACH
	case errors.Is(err, cm.ErrNetUnreachable):
		return proto.ENETUNREACH
	case errors.Is(err, cm.ErrInvalidState), errors.Is(err, cm.ErrInvalidArgument), errors.Is(err, cm.ErrClosed):
		return proto.EINVAL
	}
	var e proto.Errno
	if errors.As(err, &e) {
		return e
	}
	return proto.ErrnoOf(err)
}

func (ss *session) cmCreateChannel() (proto.Body, []int, error) {
	// EMFILE past the session's share, as opening /dev/infiniband/rdma_cm.
	if err := ss.takeFDs(2, proto.EMFILE); err != nil {
		return nil, nil, err
	}
	keep, pass, err := proto.RawPair()
	if err != nil {
		ss.putFDs(2)
		return nil, nil, proto.ENOMEM
	}
	_ = unix.SetNonblock(keep, true)
	ch := &cmChanObj{sock: newEventSock(keep)}
	ss.mu.Lock()
	ch.handle = ss.addLocked(ch)
	ss.mu.Unlock()
	return &proto.CMChannelReply{Channel: ch.handle, FD: pass}, []int{pass}, nil
}

func (ss *session) cmDestroyChannel(h uint32) error {
	ss.mu.Lock()
	ch, err := unusedLocked(ss, h, func(o *cmChanObj) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	delete(ss.objs, h)
	ss.putFDsLocked(1)
	ss.mu.Unlock()
	ch.close()
	return nil
}

func (ch *cmChanObj) close() { ch.sock.close(false) }

// send writes one record without blocking; a full socket keeps it
// pending, in order, until the client reads (eventSock).
func (ch *cmChanObj) send(ss *session, rec []byte) {
	_, _ = ch.sendSeq(ss, rec)
}

// sendSeq is send, and returns the record's place in the channel's
// stream (see eventSock.sendSeq) or the error that lost it.
func (ch *cmChanObj) sendSeq(ss *session, rec []byte) (uint64, error) {
	seq, _, err := ch.sock.sendSeq(rec, maxPendingCMEvents)
	switch {
	case errors.Is(err, errEventsFull):
		ss.log.Warn("cm event dropped: the client does not read its event channel")
	case err != nil:
		ss.log.Debug("cm event lost", "err", err)
	}
	return seq, err
}

func (ss *session) cmCreateID(h uint32, m *proto.CMCreateID) (proto.Body, []int, error) {
	switch m.PortSpace {
	case proto.PSTCP, proto.PSUDP, proto.PSIB, proto.PSIPoIB:
	default:
		return nil, nil, proto.EINVAL
	}
	switch qp.Type(m.QPType) {
	case qp.RC, qp.UC, qp.UD:
	default:
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ch := lookupLocked[cmChanObj](ss, h)
	if ch == nil {
		return nil, nil, proto.EINVAL
	}
	if ss.cm.n >= ss.srv.cfg.Limits.CMIDs {
		return nil, nil, proto.ENOMEM
	}
	o := &cmIDObj{ps: cm.PortSpace(m.PortSpace), qpType: m.QPType, ctx: m.Context, ch: ch}
	o.handle = ss.addLocked(o)
	ch.refs++
	ss.cm.n++
	return &proto.CMIDReply{ID: o.handle}, nil, nil
}

// cmIDOf returns the ID's cm.ID, nil while it has no device.
func (ss *session) cmIDOf(o *cmIDObj) *cm.ID {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return o.b.id
}

// cmNewID makes a cm.ID for o on d's agent. An ID of the IPoIB port
// space gets none: every device is RoCE (an Ethernet link layer), and
// Linux's cma refuses RDMA_PS_IPOIB on one with EINVAL when it binds,
// resolves or takes a request (cma_acquire_dev_by_src_ip), as rxe does.
func (ss *session) cmNewID(o *cmIDObj, d *device) (*cm.ID, error) {
	if o.ps == cm.PSIPoIB {
		return nil, proto.EINVAL
	}
	a, err := cm.AgentFor(d.dev)
	if err != nil {
		return nil, proto.ENODEV
	}
	id := a.NewIDHandler(o.ps, nil, ss.cmEvent)
	ss.mu.Lock()
	if ss.cm.byID == nil {
		ss.cm.byID = map[*cm.ID]*cmIDObj{}
	}
	ss.cm.byID[id] = o
	tos, ack := o.tos, o.ackTO
	ss.mu.Unlock()
	if tos != 0 {
		id.SetTOS(tos)
	}
	if ack != 0 {
		id.SetAckTimeout(ack)
	}
	return id, nil
}

// cmDrop destroys cm.IDs of the session that no ID of the client names.
func (ss *session) cmDrop(ids ...*cm.ID) {
	ss.mu.Lock()
	for _, id := range ids {
		delete(ss.cm.byID, id)
	}
	ss.mu.Unlock()
	for _, id := range ids {
		id.Destroy()
	}
}

func fromCMAddr(a proto.CMAddr) (netip.AddrPort, bool) {
	ip := netip.AddrFrom16(a.Addr)
	switch a.Family {
	case proto.AFInet:
		if !ip.Is4In6() {
			return netip.AddrPort{}, false
		}
		ip = ip.Unmap()
	case proto.AFInet6:
	default:
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, a.Port), true
}

func toCMAddr(ap netip.AddrPort) proto.CMAddr {
	ip := ap.Addr()
	if !ip.IsValid() {
		return proto.CMAddr{}
	}
	fam := uint16(proto.AFInet6)
	if ip.Unmap().Is4() {
		fam = proto.AFInet
	}
	return proto.CMAddr{Family: fam, Port: ap.Port(), Addr: netip.AddrFrom16(ip.As16()).As16()}
}

// deviceOwning returns the device with address ip.
func (s *Server) deviceOwning(ip netip.Addr) *device {
	ip = ip.Unmap()
	for _, d := range s.devices {
		for i := 0; ; i++ {
			g, err := d.dev.QueryGID(1, i)
			if err != nil {
				break
			}
			if g.IP() == ip {
				return d
			}
		}
	}
	return nil
}

// deviceFor picks the device to reach dst from, as Linux's route lookup
// picks the output interface: the one that owns it (loopback), else the
// first whose routing table has dst on-link (on its subnet), else the
// first with a route through a gateway; each with an address of dst's
// family. None: proto.ENETUNREACH (rdma_resolve_addr's errno when no
// route covers the destination).
func (s *Server) deviceFor(dst netip.Addr) (*device, error) {
	dst = dst.Unmap()
	if d := s.deviceOwning(dst); d != nil {
		return d, nil
	}
	var viaGateway *device
	for _, d := range s.devices {
		if !d.hasFamilyOf(dst) {
			continue
		}
		next, err := d.dev.Route(dst)
		switch {
		case err != nil:
		case next == dst:
			return d, nil
		case viaGateway == nil:
			viaGateway = d
		}
	}
	if viaGateway != nil {
		return viaGateway, nil
	}
	return nil, proto.ENETUNREACH
}

// hasFamilyOf reports whether d has an address of dst's kind (IPv4,
// IPv6 link-local, other IPv6).
func (d *device) hasFamilyOf(dst netip.Addr) bool {
	for i := 0; ; i++ {
		g, err := d.dev.QueryGID(1, i)
		if err != nil {
			return false
		}
		if ip := g.IP(); ip.Is4() == dst.Is4() && ip.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			return true
		}
	}
}

func (ss *session) cmBind(o *cmIDObj, a proto.CMAddr) error {
	ap, ok := fromCMAddr(a)
	if !ok {
		return proto.EINVAL
	}
	ss.mu.Lock()
	busy := o.b.id != nil || o.wild != nil
	ss.mu.Unlock()
	if busy {
		return proto.EINVAL
	}
	if !ap.Addr().IsUnspecified() {
		d := ss.srv.deviceOwning(ap.Addr())
		if d == nil {
			return proto.EADDRNOTAVAIL
		}
		id, err := ss.cmNewID(o, d)
		if err != nil {
			return err
		}
		if err := id.BindAddr(ap); err != nil {
			ss.cmDrop(id)
			return cmErrno(err)
		}
		ss.mu.Lock()
		o.b = cmBinding{d, id}
		ss.mu.Unlock()
		return nil
	}
	return ss.cmBindWild(o, ap)
}

// cmBindWild binds o to the unspecified address on every device, with
// one port for all (port 0: one free on all of them).
func (ss *session) cmBindWild(o *cmIDObj, ap netip.AddrPort) error {
	var last error
	for try := 0; try < 16; try++ {
		port := ap.Port()
		var bs []cmBinding
		var failed error
		for _, d := range ss.srv.devices {
			id, err := ss.cmNewID(o, d)
			if err == nil {
				err = id.BindAddr(netip.AddrPortFrom(ap.Addr(), port))
				if err != nil {
					ss.cmDrop(id)
				}
			}
			if err != nil {
				failed = err
				break
			}
			bs = append(bs, cmBinding{d, id})
			port = id.LocalAddr().Port()
		}
		if failed == nil {
			ss.mu.Lock()
			o.wild = bs
			ss.mu.Unlock()
			return nil
		}
		for _, b := range bs {
			ss.cmDrop(b.id)
		}
		last = failed
		if ap.Port() != 0 || !errors.Is(failed, cm.ErrAddrInUse) {
			break
		}
	}
	return cmErrno(last)
}

func (ss *session) cmResolveAddr(o *cmIDObj, m *proto.CMResolveAddr) error {
	dst, ok := fromCMAddr(m.Dst)
	if !ok || dst.Addr().IsUnspecified() {
		return proto.EINVAL
	}
	var src netip.Addr
	if m.Src.Family != proto.AFUnspec {
		s, ok := fromCMAddr(m.Src)
		if !ok {
			return proto.EINVAL
		}
		if !s.Addr().IsUnspecified() {
			src = s.Addr()
		}
	}
	ss.mu.Lock()
	id, wild := o.b.id, o.wild
	ss.mu.Unlock()
	if id == nil {
		var d *device
		if src.IsValid() {
			d = ss.srv.deviceOwning(src)
			if d == nil {
				return proto.EADDRNOTAVAIL
			}
		} else {
			var err error
			if d, err = ss.srv.deviceFor(dst.Addr()); err != nil {
				return err
			}
		}
		if wild != nil {
			// A wildcard-bound ID keeps the binding of the device it
			// resolves from.
			var drop []*cm.ID
			var keep cmBinding
			for _, b := range wild {
				if b.d == d {
					keep = b
				} else {
					drop = append(drop, b.id)
				}
			}
			if keep.id == nil {
				return proto.EINVAL
			}
			ss.cmDrop(drop...)
			ss.mu.Lock()
			o.b, o.wild = keep, nil
			ss.mu.Unlock()
			id = keep.id
		} else {
			var err error
			if id, err = ss.cmNewID(o, d); err != nil {
				return err
			}
			ss.mu.Lock()
			o.b = cmBinding{d, id}
			ss.mu.Unlock()
		}
	}
	return cmErrno(id.ResolveAddrTimeout(src, dst, time.Duration(m.TimeoutMS)*time.Millisecond))
}

func (ss *session) cmListen(o *cmIDObj) error {
	ss.mu.Lock()
	id, wild := o.b.id, o.wild
	ss.mu.Unlock()
	if id == nil && wild == nil {
		// rdma_listen of an unbound ID listens on any address, any port.
		if err := ss.cmBindWild(o, netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
		ss.mu.Lock()
		wild = o.wild
		ss.mu.Unlock()
	}
	if id != nil {
		return cmErrno(id.Listen())
	}
	for _, b := range wild {
		if err := b.id.Listen(); err != nil {
			return cmErrno(err)
		}
	}
	return nil
}

func (o *cmIDObj) isUD() bool { return o.ps == cm.PSUDP || qp.Type(o.qpType) == qp.UD }

// udQKey is the Q_Key of a UD ID's port space (as cm.PrepareUD).
func (o *cmIDObj) udQKey() uint32 {
	if o.ps == cm.PSUDP || o.ps == cm.PSIB {
		return cm.UDPQKey
	}
	return 0
}

// cmConnect serves cm_connect and cm_accept.
func (ss *session) cmConnect(o *cmIDObj, p *proto.CMConnParam, accept bool) error {
	ss.mu.Lock()
	b := o.b
	var q *qpObj
	if p.QP != 0 {
		q = lookupLocked[qpObj](ss, p.QP)
	}
	ss.mu.Unlock()
	if b.id == nil || (p.QP != 0 && (q == nil || q.ctx.d != b.d)) {
		return proto.EINVAL
	}
	if accept && o.isUD() && p.QKey != 0 && p.QKey != o.udQKey() {
		return proto.EINVAL // the SIDR_REP carries the port space's Q_Key
	}
	prm := &cm.ConnParam{PrivateData: p.PrivateData, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount,
		SRQ: p.SRQ, QPN: p.QPNum}
	var rq *rvt.QP
	if q != nil {
		rq = q.qp
	}
	var err error
	if accept {
		err = b.id.Accept(rq, prm)
	} else {
		err = b.id.Connect(rq, prm)
	}
	if err != nil {
		return cmErrno(err)
	}
	if q == nil && p.QPNum != 0 {
		// librdmacm names its QP by number (it is in the process's
		// libibverbs session) and moves it itself; the ID still
		// stands for it below (cm_disconnect's service, cmEvent's
		// drain).
		q = b.d.qpOfProcess(p.QPNum, ss.pid)
	}
	if q != nil {
		ss.mu.Lock()
		o.q = q
		ss.mu.Unlock()
		q.loop.kickQP(q)
	}
	return nil
}

// qpOfProcess returns d's QP of number qpn if a session of process pid
// made it, else nil.
func (d *device) qpOfProcess(qpn, pid uint32) *qpObj {
	if v, ok := d.qps.Load(qpn); ok {
		if q := v.(*qpObj); q.sess.pid == pid {
			return q
		}
	}
	return nil
}

func (ss *session) cmInitQPAttr(o *cmIDObj, st qp.State) (proto.Body, []int, error) {
	id := ss.cmIDOf(o)
	if id == nil {
		return nil, nil, proto.EINVAL
	}
	if o.isUD() {
		// What librdmacm does for a UD rdma_create_qp: INIT with the
		// port space's Q_Key, RTR, RTS from PSN 0.
		var from qp.State
		switch st {
		case qp.Init:
			from = qp.Reset
		case qp.RTR:
			from = qp.Init
		case qp.RTS:
			from = qp.RTR
		default:
			return nil, nil, proto.EINVAL
		}
		a := rvt.QPAttr{State: st, Port: 1, QKey: o.udQKey()}
		mask := qp.AttrState | qp.RequiredAttrs(qp.UD, from, st)
		return &proto.CMInitQPAttrReply{Mask: uint32(mask), Attr: qpconv.FromQPAttr(a)}, nil, nil
	}
	a, mask, err := id.InitQPAttr(st)
	if err != nil {
		return nil, nil, cmErrno(err)
	}
	a.State = st
	return &proto.CMInitQPAttrReply{Mask: uint32(mask), Attr: qpconv.FromQPAttr(a)}, nil, nil
}

func (ss *session) cmEstablish(o *cmIDObj) error {
	id := ss.cmIDOf(o)
	if id == nil {
		return proto.EINVAL
	}
	switch id.State() {
	case cm.StateREPRcvd, cm.StateMRAREPSent:
		return cmErrno(id.Accept(nil, nil)) // the RTU
	case cm.StateEstablished:
		return nil
	}
	return proto.EINVAL
}

func (ss *session) cmSetOption(o *cmIDObj, m *proto.CMSetOption) error {
	if m.Level != proto.OptLevelID {
		return proto.EOPNOTSUPP
	}
	switch m.Name {
	case proto.OptIDReuseAddr, proto.OptIDAFOnly:
		if m.Value > 1 {
			return proto.EINVAL
		}
		return nil // ports are free once their ID is destroyed; IPv4 and IPv6 are separate
	case proto.OptIDTOS, proto.OptIDAckTimeout:
	default:
		return proto.EOPNOTSUPP
	}
	if (m.Name == proto.OptIDTOS && m.Value > 255) || (m.Name == proto.OptIDAckTimeout && m.Value > 31) {
		return proto.EINVAL
	}
	v := uint8(m.Value)
	ss.mu.Lock()
	if m.Name == proto.OptIDTOS {
		o.tos = v
	} else {
		o.ackTO = v
	}
	ids := o.ids()
	ss.mu.Unlock()
	for _, id := range ids {
		if m.Name == proto.OptIDTOS {
			id.SetTOS(v)
		} else {
			id.SetAckTimeout(v)
		}
	}
	return nil
}

// ids returns every cm.ID of o (session.mu).
func (o *cmIDObj) ids() []*cm.ID {
	var l []*cm.ID
	if o.b.id != nil {
		l = append(l, o.b.id)
	}
	for _, b := range o.wild {
		l = append(l, b.id)
	}
	return l
}

func (ss *session) cmMigrate(o *cmIDObj, h uint32) (proto.Body, []int, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ch := lookupLocked[cmChanObj](ss, h)
	if ch == nil {
		return nil, nil, proto.EINVAL
	}
	n := o.reported
	o.ch.refs--
	o.ch, o.reported = ch, 0
	ch.refs++
	return &proto.CMEventsReply{EventsReported: n}, nil, nil
}

func (ss *session) cmQuery(o *cmIDObj) *proto.CMQueryReply {
	ss.mu.Lock()
	b, wild := o.b, o.wild
	ss.mu.Unlock()
	r := &proto.CMQueryReply{QPType: o.qpType, PortSpace: uint16(o.ps)}
	if b.id == nil {
		if len(wild) > 0 {
			r.Src = toCMAddr(wild[0].id.LocalAddr())
			r.State = uint8(wild[0].id.State())
		}
		return r
	}
	id := b.id
	r.Src, r.Dst = toCMAddr(id.LocalAddr()), toCMAddr(id.RemoteAddr())
	r.State = uint8(id.State())
	r.DeviceName = b.d.cfg.Name
	r.NodeGUID = b.d.dev.QueryDevice().NodeGUID
	r.Port, r.PKey = 1, 0xffff
	if cs := ss.contexts(b.d); len(cs) > 0 {
		r.Device = cs[0].handle
		for _, c := range cs[1:] {
			r.Device = min(r.Device, c.handle)
		}
	}
	if rt := id.Route(); rt.Dst.IsValid() {
		r.NumPaths = 1
		r.SGID, r.DGID = rt.SGID, rt.DGID
		r.SGIDIndex, r.HopLimit, r.TrafficClass, r.MTU = rt.SGIDIndex, rt.HopLimit, rt.TrafficClass, uint8(rt.PathMTU)
		r.PacketLife = id.Agent().Options().PacketLifetime
	}
	return r
}

// cmDestroyID destroys o's cm.IDs as rdma_destroy_id does, and returns
// how many records were written about it. No event follows. With discard
// (cm_discard), a connection request not answered yet stays unanswered
// (cm.ID.Discard: no REJ, the peer resends its REQ) as Linux leaves one
// its listener's full backlog refused.
func (ss *session) cmDestroyID(o *cmIDObj, discard bool) uint32 {
	ss.mu.Lock()
	if o.dead {
		ss.mu.Unlock()
		return 0
	}
	o.dead = true
	delete(ss.objs, o.handle)
	ss.cm.n--
	o.ch.refs--
	ids := o.ids()
	for _, id := range ids {
		delete(ss.cm.byID, id)
	}
	n, q := o.reported, o.q
	ss.mu.Unlock()
	for _, id := range ids {
		if discard {
			id.Discard()
		} else {
			id.Destroy()
		}
	}
	if q != nil {
		q.loop.kickQP(q)
	}
	return n
}

// cmEvent receives every event of the session's cm.IDs from the agents:
// it makes the new ID of a CONNECT_REQUEST and writes the record to the
// ID's channel.
func (ss *session) cmEvent(ev cm.Event) {
	if ev.ID == nil {
		return
	}
	// Read before session.mu: they take the agent's lock.
	src, dst := ev.ID.LocalAddr(), ev.ID.RemoteAddr()
	ss.mu.Lock()
	o := ss.cm.byID[ev.ID]
	var listenH uint32
	var l *cmIDObj // the listener of a new request
	if o == nil && ev.Type == cm.EventConnectRequest {
		l = ss.cm.byID[ev.ID.Listener()]
		if l == nil || l.dead || ss.cm.closing || ss.cm.n >= ss.srv.cfg.Limits.CMIDs {
			ss.mu.Unlock()
			if l != nil && !ss.cm.closing {
				ss.log.Warn("rdma_cm request refused: the session's ID limit", "limit", ss.srv.cfg.Limits.CMIDs)
			}
			ev.ID.Destroy() // a REJ (or SIDR_REP REJECT) to the peer
			return
		}
		if ss.backlogFullLocked(l) {
			ss.mu.Unlock()
			ev.ID.Discard() // no answer: the peer's REQ comes again
			return
		}
		o = &cmIDObj{ps: l.ps, qpType: l.qpType, ctx: l.ctx, ch: l.ch}
		for _, d := range ss.srv.devices {
			if d.dev == ev.ID.Agent().Device() {
				o.b = cmBinding{d, ev.ID}
			}
		}
		o.handle = ss.addLocked(o)
		o.ch.refs++
		ss.cm.n++
		ss.cm.byID[ev.ID] = o
		listenH = l.handle
	}
	if o == nil || o.dead {
		ss.mu.Unlock()
		return
	}
	if ev.Type == cm.EventDeviceRemoval {
		// The agent of a device closed (cm.Agent.Close).
		rec := ss.removalLocked(o, ev.ID)
		ch := o.ch
		ss.mu.Unlock()
		if rec != nil {
			ch.send(ss, rec)
		}
		return
	}
	rec := cmEventRecord(o, listenH, ev, src, dst)
	ch, q := o.ch, o.q
	o.reported++
	if l != nil {
		// The record takes a place in the listener's backlog until the
		// client reads it.
		l.waiting++
	}
	ss.mu.Unlock()
	if q != nil {
		// What completed before the event is in the rings when the
		// client reads it, as a NIC writes its CQEs at once: a loop
		// may not have drained them yet. rsockets, for one, takes a
		// DISCONNECTED with nothing in its CQ for the end of the data.
		q.scq.drain()
		if q.rcq != q.scq {
			q.rcq.drain()
		}
		if ev.Type == cm.EventEstablished || ev.Type == cm.EventDisconnected {
			q.loop.kickQP(q)
		}
	}
	seq, err := ch.sendSeq(ss, rec)
	if l != nil {
		ss.mu.Lock()
		if err == nil {
			ch.reqs = append(ch.reqs, chanReq{seq, l})
		} else {
			l.waiting--
		}
		ss.mu.Unlock()
	}
}

// listenBacklog is the backlog of cm_listen's value b, as ucma takes
// rdma_listen's: b if 0 < b < 1024 (net.rdma_ucm.max_backlog), else 1024.
func listenBacklog(b uint32) int {
	if b > 0 && b < maxBacklog {
		return int(b)
	}
	return maxBacklog
}

// maxBacklog is Linux's net.rdma_ucm.max_backlog default.
const maxBacklog = 1024

// backlogFullLocked reports whether listener l has as many CONNECT_REQUEST
// records unread as its backlog, after forgetting those its channel's
// client has read (Linux's rule, ucma: a request takes a place in the
// listener's backlog from its event until rdma_get_cm_event returns the
// event; beyond the backlog the request is dropped unanswered).
func (ss *session) backlogFullLocked(l *cmIDObj) bool {
	ch := l.ch
	if len(ch.reqs) > 0 {
		read := ch.sock.read(ss.srv.cmRecordCharge)
		ch.reqs = slices.DeleteFunc(ch.reqs, func(r chanReq) bool {
			if r.seq < read {
				r.l.waiting--
				return true
			}
			return false
		})
	}
	return l.backlog > 0 && l.waiting >= l.backlog
}

// cmEventRecord lays out the cm_event record of ev.
func cmEventRecord(o *cmIDObj, listen uint32, ev cm.Event, src, dst netip.AddrPort) []byte {
	r := proto.CMEvent{Context: o.ctx, ID: o.handle, ListenID: listen, Event: uint32(ev.Type),
		Src: toCMAddr(src), Dst: toCMAddr(dst)}
	p := ev.Param
	var rej *cm.RejectError
	switch {
	case errors.As(ev.Err, &rej) && rej.SIDR != 0:
		// Linux (cma_sidr_rep_handler): a SIDR_REP that is not SUCCESS
		// is UNREACHABLE with the SIDR status (udaddy with no listener:
		// "RDMA_CM_EVENT_UNREACHABLE, error: 1").
		r.Event = uint32(cm.EventUnreachable)
		r.Status = int32(rej.SIDR)
		if len(p.PrivateData) == 0 {
			p.PrivateData = rej.PrivateData
		}
	case errors.As(ev.Err, &rej):
		r.Status = int32(rej.Reason)
		if len(p.PrivateData) == 0 {
			p.PrivateData = rej.PrivateData
		}
	case ev.Type == cm.EventUnreachable:
		r.Status = -int32(unix.ETIMEDOUT)
	case ev.Type == cm.EventAddrError, ev.Type == cm.EventRouteError:
		r.Status = -int32(unix.EHOSTUNREACH)
		if errors.Is(ev.Err, cm.ErrAddrInUse) {
			r.Status = -int32(unix.EADDRINUSE)
		}
		if errors.Is(ev.Err, cm.ErrAddrTimeout) {
			r.Status = -int32(unix.ETIMEDOUT)
		}
	case ev.Type == cm.EventConnectError:
		r.Status = -int32(unix.EINVAL)
	}
	r.QPNum = p.QPN
	r.ResponderResources, r.InitiatorDepth = p.ResponderResources, p.InitiatorDepth
	r.RetryCount, r.RNRRetryCount, r.SRQ = p.RetryCount, p.RNRRetryCount, p.SRQ
	n := copy(r.PrivateData[:], p.PrivateData)
	r.PrivateDataLen = uint8(min(n, 255))
	if ev.UD != nil {
		r.UD = true
		r.QPNum, r.QKey = ev.UD.QPN, ev.UD.QKey
		r.AH = qpconv.FromAV(ev.UD.AV)
	}
	b := make([]byte, proto.CMEventRecordSize)
	if err := proto.PutRecord(b, &r); err != nil {
		panic(err) // a fixed layout: cannot fail
	}
	return b
}

// cmDeviceRemoval tells every ID that has a device that it is going
// (RDMA_CM_EVENT_DEVICE_REMOVAL), at shutdown; an ID told already, when
// the agent under it closed, is not told again.
func (ss *session) cmDeviceRemoval() {
	ss.mu.Lock()
	type out struct {
		ch  *cmChanObj
		rec []byte
	}
	var l []out
	for _, o := range ss.objs {
		if o, ok := o.(*cmIDObj); ok {
			if rec := ss.removalLocked(o, nil); rec != nil {
				l = append(l, out{o.ch, rec})
			}
		}
	}
	ss.mu.Unlock()
	for _, x := range l {
		x.ch.send(ss, x.rec)
	}
}

// removalLocked returns the DEVICE_REMOVAL record of o, once, or nil: o
// is dead, has no device, or was told. gone is the cm.ID whose agent
// closed (nil: every device goes, at shutdown). As Linux tells only the
// IDs bound to the removed device (cma_process_remove), a wildcard ID
// that still has other devices only loses gone's binding.
func (ss *session) removalLocked(o *cmIDObj, gone *cm.ID) []byte {
	if o.dead || o.removed || (o.b.id == nil && o.wild == nil) {
		return nil
	}
	if gone != nil && gone != o.b.id {
		i := slices.IndexFunc(o.wild, func(b cmBinding) bool { return b.id == gone })
		if i < 0 {
			return nil
		}
		delete(ss.cm.byID, gone)
		if len(o.wild) > 1 {
			o.wild = slices.Delete(o.wild, i, i+1)
			return nil
		}
	}
	o.removed = true
	o.reported++
	return cmEventRecord(o, 0, cm.Event{Type: cm.EventDeviceRemoval}, netip.AddrPort{}, netip.AddrPort{})
}

// cmTeardown destroys the session's IDs as the kernel does when a
// process's rdma_cm file closes (DREQ for connections, REJ for requests,
// listeners and ports released), before its QPs go.
func (ss *session) cmTeardown() {
	ss.mu.Lock()
	ss.cm.closing = true
	var ids []*cmIDObj
	var chans []*cmChanObj
	for _, o := range ss.objs {
		switch o := o.(type) {
		case *cmIDObj:
			ids = append(ids, o)
		case *cmChanObj:
			chans = append(chans, o)
		}
	}
	ss.mu.Unlock()
	for _, o := range ids {
		ss.cmDestroyID(o, false)
	}
	for _, ch := range chans {
		ch.close()
	}
}

// CMStats counts the daemon's rdma_cm objects, for leak checks: the
// sessions' IDs and the agents' state summed over the devices.
type CMStats struct {
	IDs   int // rdma_cm IDs of all sessions
	Agent cm.Stats
}

// CMStats returns what the sessions and the agents hold now.
func (s *Server) CMStats() CMStats {
	var st CMStats
	for _, ss := range s.sessionList() {
		ss.mu.Lock()
		st.IDs += ss.cm.n
		ss.mu.Unlock()
	}
	for _, d := range s.devices {
		a, err := cm.AgentFor(d.dev)
		if err != nil {
			continue
		}
		x := a.Stats()
		st.Agent.IDs += x.IDs
		st.Agent.CommIDs += x.CommIDs
		st.Agent.Remote += x.Remote
		st.Agent.QPNs += x.QPNs
		st.Agent.QPs += x.QPs
		st.Agent.Ports += x.Ports
		st.Agent.Listeners += x.Listeners
		st.Agent.Timers += x.Timers
	}
	return st
}

package rvtd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/internal/qpconv"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// session is one client connection and everything it owns. Its control
// requests are served one at a time on its own goroutine (serve); the data
// path reaches its QPs and CQs through the loops.
type session struct {
	srv  *Server
	id   uint32
	conn *proto.Conn
	pid  uint32
	uid  uint32
	comm string
	log  *slog.Logger

	mu      sync.Mutex // guards the fields below
	objs    map[uint32]any
	next    uint32
	lkeys   map[lkeyOf]*mrObj // the session's MRs by device and lkey without its key byte (keyOf), for SGE checks
	nqp     int
	nmr     int
	ncqe    int
	mem     uint64
	fds     int         // the daemon's descriptors the session holds (fds.go)
	user    *userFDs    // its uid's (fds.go); set at accept
	refused proto.Errno // not 0: the session is refused at hello (fds.go)
	helloed bool
	// fdsRefused: a create was refused for descriptors (logged once).
	fdsRefused bool

	proc procAccessor // the client's memory (reg_mr kind 2), from hello on; nil if unavailable
	// procErr is reg_mr kind 2's status when proc is nil: EPERM if the
	// system refused the daemon the client's memory, EOPNOTSUPP else.
	procErr proto.Errno
	minor   uint16    // the agreed minor protocol version
	cm      cmSession // rdma_cm IDs (cm.go)
}

// The session's objects, named by handles.
type devCtx struct {
	handle uint32
	d      *device
	refs   int        // PDs, CQs, channels (session.mu)
	async  *eventSock // the async event socket
}

// maxPendingEvents bounds the async events kept for a client that does
// not read them; beyond it they are dropped (and logged).
const maxPendingEvents = 4096

// lkeyOf names an MR of a session: keys are per device, and a session
// may open several devices.
type lkeyOf struct {
	d    *device
	lkey uint32 // without its key byte (mrKey): fast-register changes it
}

func keyOf(p *pdObj, lkey uint32) lkeyOf { return lkeyOf{p.ctx.d, mrKey(lkey)} }

type pdObj struct {
	handle uint32
	ctx    *devCtx
	pd     *rvt.PD
	refs   int // MRs, QPs (session.mu)
}

type shmObj struct {
	handle uint32
	reg    *ring.Region
	size   uint64
	refs   int // MRs (session.mu)
}

type mrObj struct {
	handle uint32
	pd     *pdObj
	shm    *shmObj // kind 1; nil for kind 2 and fast-register MRs
	mr     *rvt.MR
	iova   uint64
	length uint64
	key    lkeyOf // keyOf its lkey, fixed for its life
	vm     bool   // kind 2
	fast   bool   // alloc_mr: its keys and range change with REG_MR WQEs

	maxPages uint32           // alloc_mr
	segs     map[*shmObj]bool // segments REG_MR WQEs of a fast-register MR named (session.mu)
}

type mwObj struct {
	handle uint32
	pd     *pdObj
	mw     *rvt.MW
}

type ahObj struct {
	handle uint32
	pd     *pdObj
	ah     *rvt.AH
}

type chanObj struct {
	handle uint32
	ctx    *devCtx
	sock   *eventSock
	refs   int          // CQs (session.mu)
	cqs    atomic.Int32 // CQs, for notify (refs without session.mu)
	warned atomic.Bool  // a comp event was dropped (logged once)
}

func newSession(s *Server, id uint32, c *proto.Conn) *session {
	ss := &session{srv: s, id: id, conn: c, objs: map[uint32]any{}, lkeys: map[lkeyOf]*mrObj{}, fds: 1}
	if cred, err := c.PeerCred(); err == nil {
		ss.pid, ss.uid = uint32(cred.Pid), cred.Uid
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid)); err == nil {
			ss.comm = strings.TrimSpace(string(b))
		}
	}
	ss.log = s.log.With("session", id, "pid", ss.pid, "comm", ss.comm)
	return ss
}

// add gives obj a new handle. The caller holds ss.mu.
func (ss *session) addLocked(obj any) uint32 {
	ss.next++
	ss.objs[ss.next] = obj
	return ss.next
}

// lookup returns the session's object of type T named by h: nil for a
// handle of nobody, of another kind, or of a destroyed object.
func lookup[T any](ss *session, h uint32) *T {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return lookupLocked[T](ss, h)
}

func lookupLocked[T any](ss *session, h uint32) *T {
	o, _ := ss.objs[h].(*T)
	return o
}

// unusedLocked is lookupLocked for a destroy: EINVAL if the session has no
// object h of kind T, EBUSY while other objects use it (refs not 0).
func unusedLocked[T any](ss *session, h uint32, refs func(*T) int) (*T, error) {
	o := lookupLocked[T](ss, h)
	if o == nil {
		return nil, proto.EINVAL
	}
	if refs(o) > 0 {
		return nil, proto.EBUSY
	}
	return o, nil
}

// serve reads requests until the connection ends, then tears the session
// down.
func (ss *session) serve() {
	if ss.refused != 0 {
		ss.serveRefused()
		return
	}
	ss.log.Info("session start")
	defer ss.teardown()
	for {
		b, fds, err := ss.conn.ReadRaw()
		if err != nil {
			if errors.Is(err, proto.ErrFraming) {
				ss.protocolError(proto.Header{}, proto.EPROTO, err.Error())
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) && !errors.Is(err, unix.ECONNRESET) {
				ss.log.Debug("read", "err", err)
			}
			return
		}
		if !ss.request(b, fds) {
			return
		}
	}
}

// request decodes and serves one message; false ends the session.
func (ss *session) request(b []byte, fds []int) bool {
	msg, err := proto.Decode(b, fds)
	if err == nil && msg.Flags != 0 {
		err = &proto.Error{Msg: "header", Err: proto.ErrFraming, Detail: "a client sends only requests"}
	}
	if err != nil {
		closeFDs(fds)
		if errors.Is(err, proto.ErrFraming) || !ss.helloed {
			ss.protocolError(msg.Header, proto.EPROTO, err.Error())
			return false
		}
		ss.srv.badRequests.Add(1)
		ss.log.Debug("refused", "op", fmt.Sprintf("%#04x", uint16(msg.Op)), "err", err)
		return ss.reply(msg.Header, proto.DecodeErrno(err), nil, nil)
	}
	if !ss.helloed {
		if msg.Op != proto.OpHello {
			ss.protocolError(msg.Header, proto.EPROTO, "the first message must be hello")
			return false
		}
		return ss.hello(msg)
	}
	body, pass, err := ss.dispatch(msg)
	st := proto.ErrnoOf(err)
	if err != nil {
		ss.log.Debug("request failed", "op", fmt.Sprintf("%#04x", uint16(msg.Op)), "handle", msg.Handle, "err", err)
		body = nil
	}
	ok := ss.reply(msg.Header, st, body, pass)
	ss.putFDs(len(pass)) // the reply passed them and closed ours (counted by the handler)
	return ok
}

func (ss *session) reply(h proto.Header, st proto.Errno, body proto.Body, closeAfter []int) bool {
	defer closeFDs(closeAfter)
	if st != 0 {
		body = nil
	}
	rh := proto.Header{Op: h.Op, Flags: proto.FlagReply, ReqID: h.ReqID, Handle: h.Handle, Status: st}
	var err error
	if st == 0 {
		err = ss.conn.Send(rh, body)
	} else {
		// An error reply is the bare header. Written raw, because the
		// encoder refuses a reply to an opcode the table does not have
		// in this direction (EOPNOTSUPP for an unknown or event opcode).
		var b [proto.HeaderSize]byte
		rh.Length = proto.HeaderSize
		proto.PutHeader(b[:], rh)
		err = ss.conn.WriteRaw(b[:], nil)
	}
	if err != nil {
		ss.log.Debug("reply", "err", err)
		return false
	}
	return true
}

// protocolError tells the client why its connection is being closed.
func (ss *session) protocolError(h proto.Header, e proto.Errno, text string) {
	ss.srv.protoErrors.Add(1)
	ss.log.Warn("protocol error", "err", text)
	if len(text) > 200 {
		text = text[:200]
	}
	_ = ss.conn.Send(proto.Header{Op: proto.OpProtocolError, Flags: proto.FlagEvent},
		&proto.ProtocolError{Errno: e, BadReqID: h.ReqID, BadOp: uint16(h.Op), Text: []byte(text)})
}

func (ss *session) hello(msg proto.Msg) bool {
	m := msg.Body.(*proto.Hello)
	if m.Magic != proto.Magic {
		ss.protocolError(msg.Header, proto.EPROTO, "hello with a wrong magic")
		return false
	}
	if m.Major != proto.Major {
		ss.reply(msg.Header, proto.EPROTONOSUPPORT, nil, nil)
		return false
	}
	ss.helloed = true
	if p, err := openProcAccessor(int(ss.pid), ss.uid); err == nil {
		ss.proc = p
		if pm, ok := p.(interface{ descriptors() int }); ok {
			ss.mu.Lock()
			ss.addFDsLocked(pm.descriptors()) // the mem file and pidfd: counted, never refused
			ss.mu.Unlock()
		}
	} else {
		ss.procErr = proto.EOPNOTSUPP
		if probeErrno(err) == proto.EPERM {
			ss.procErr = proto.EPERM
		}
		ss.log.Info("no access to the client's memory: reg_mr kind 2 refused", "err", err)
	}
	ss.minor = min(m.Minor, proto.Minor)
	ss.log.Info("hello", "client", m.Client, "version", fmt.Sprintf("%d.%d", m.Major, m.Minor))
	return ss.reply(msg.Header, 0, &proto.HelloReply{
		Magic: proto.Magic, Major: proto.Major, Minor: min(m.Minor, proto.Minor),
		DaemonPID: uint32(os.Getpid()), Session: ss.id, MaxMessage: proto.MaxMessage,
		PageSize: uint32(os.Getpagesize()), Daemon: "rvtd (softverbs)",
	}, nil)
}

// dispatch serves one decoded request. It returns the reply body and the
// descriptors to close once the reply has passed them.
func (ss *session) dispatch(m proto.Msg) (proto.Body, []int, error) {
	h := m.Handle
	switch m.Op {
	case proto.OpHello:
		return nil, nil, proto.EINVAL
	case proto.OpListDevices:
		r := &proto.ListDevicesReply{}
		for _, d := range ss.srv.devices {
			a := d.dev.QueryDevice()
			r.Devices = append(r.Devices, proto.DeviceEntry{Name: d.cfg.Name, NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, NodeType: 1})
		}
		return r, nil, nil
	case proto.OpOpenDevice:
		return ss.openDevice(m.Body.(*proto.OpenDevice))
	case proto.OpCloseDevice:
		return nil, nil, ss.closeDevice(h)
	case proto.OpQueryDevice, proto.OpQueryPort, proto.OpQueryGID, proto.OpQueryPKey:
		c := lookup[devCtx](ss, h)
		if c == nil {
			return nil, nil, proto.EINVAL
		}
		b, err := query(c.d.dev, m)
		if a, ok := b.(*proto.DeviceAttr); ok {
			ss.srv.cfg.Limits.clamp(a)
		}
		return b, nil, err
	case proto.OpAllocPD:
		return ss.allocPD(h)
	case proto.OpDeallocPD:
		return nil, nil, ss.deallocPD(h)
	case proto.OpShmAlloc:
		return ss.shmAlloc(h, m.Body.(*proto.ShmAlloc))
	case proto.OpShmAttach:
		return ss.shmAttach(h, m.Body.(*proto.ShmAttach))
	case proto.OpShmFree:
		return nil, nil, ss.shmFree(h)
	case proto.OpRegMR:
		return ss.regMR(h, m.Body.(*proto.RegMR))
	case proto.OpDeregMR:
		return nil, nil, ss.deregMR(h)
	case proto.OpAllocMR:
		return ss.allocMR(h, m.Body.(*proto.AllocMR))
	case proto.OpCreateCompChannel:
		return ss.createChannel(h)
	case proto.OpDestroyCompChannel:
		return nil, nil, ss.destroyChannel(h)
	case proto.OpCreateCQ:
		return ss.createCQ(h, m.Body.(*proto.CreateCQ))
	case proto.OpDestroyCQ:
		return ss.destroyCQ(h)
	case proto.OpResizeCQ:
		return ss.resizeCQ(h, m.Body.(*proto.ResizeCQ))
	case proto.OpCreateQP:
		return ss.createQP(h, m.Body.(*proto.CreateQP))
	case proto.OpModifyQP:
		return nil, nil, ss.modifyQP(h, m.Body.(*proto.ModifyQP))
	case proto.OpQueryQP:
		q := lookup[qpObj](ss, h)
		if q == nil {
			return nil, nil, proto.EINVAL
		}
		return &proto.QueryQPReply{Attr: qpconv.FromQPAttr(q.qp.Query()), Type: q.typ, SigAll: q.sigAll}, nil, nil
	case proto.OpDestroyQP:
		return ss.destroyQP(h)
	case proto.OpQueryCounters:
		return ss.counters(h)
	case proto.OpListQPs:
		return ss.listQPs(h, m.Body.(*proto.ListQPs))
	case proto.OpAllocMW:
		return ss.allocMW(h, m.Body.(*proto.AllocMW))
	case proto.OpDeallocMW:
		return nil, nil, ss.deallocMW(h)
	case proto.OpBindMW:
		return ss.bindMW(h, m.Body.(*proto.BindMW))
	case proto.OpCreateAH:
		return ss.createAH(h, m.Body.(*proto.CreateAH))
	case proto.OpDestroyAH:
		return nil, nil, ss.destroyAH(h)
	case proto.OpCreateSRQ:
		return ss.createSRQ(h, m.Body.(*proto.CreateSRQ))
	case proto.OpModifySRQ:
		return nil, nil, ss.modifySRQ(h, m.Body.(*proto.SRQAttr))
	case proto.OpQuerySRQ:
		return ss.querySRQ(h)
	case proto.OpDestroySRQ:
		return ss.destroySRQ(h)
	case proto.OpResizeSRQ:
		return ss.resizeSRQ(h, m.Body.(*proto.ResizeSRQ))
	case proto.OpAttachMcast:
		return nil, nil, ss.attachMcast(h, m.Body.(*proto.Mcast))
	case proto.OpDetachMcast:
		return nil, nil, ss.detachMcast(h, m.Body.(*proto.Mcast))
	}
	if proto.IsCM(m.Op) {
		return ss.cmDispatch(m)
	}
	// A request the table knows and this daemon does not serve.
	return nil, nil, proto.EOPNOTSUPP
}

func (ss *session) openDevice(m *proto.OpenDevice) (proto.Body, []int, error) {
	d := ss.srv.byName[m.Name]
	if d == nil {
		return nil, nil, proto.ENOENT
	}
	// A descriptor each, as opening /dev/infiniband/uverbsN would take
	// one of the process's: EMFILE past the session's share.
	if err := ss.takeFDs(2, proto.EMFILE); err != nil {
		return nil, nil, err
	}
	keep, pass, err := proto.RawPair()
	if err != nil {
		ss.putFDs(2)
		return nil, nil, proto.ENOMEM
	}
	_ = unix.SetNonblock(keep, true)
	c := &devCtx{d: d, async: newEventSock(keep)}
	ss.mu.Lock()
	c.handle = ss.addLocked(c)
	ss.mu.Unlock()
	ss.log.Info("open device", "device", d.cfg.Name, "handle", c.handle)
	return &proto.OpenDeviceReply{Device: c.handle, AsyncFD: pass}, []int{pass}, nil
}

func (ss *session) closeDevice(h uint32) error {
	ss.mu.Lock()
	c, err := unusedLocked(ss, h, func(o *devCtx) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	delete(ss.objs, h)
	ss.putFDsLocked(1)
	ss.mu.Unlock()
	c.close()
	return nil
}

// close closes the async event socket; what is still pending goes if
// the socket takes it now (DEVICE_FATAL at shutdown).
func (c *devCtx) close() { c.async.close(true) }

// asyncEvent writes one async_event record to the device context's
// socket without blocking. A full socket keeps the event pending, in
// order, until the client reads (eventSock).
func (ss *session) asyncEvent(c *devCtx, cookie uint64, element, typ uint32) {
	if c == nil {
		return
	}
	var rec [16]byte
	asyncEventRecord(rec[:], cookie, element, typ)
	first, err := c.async.send(rec[:], maxPendingEvents)
	switch {
	case errors.Is(err, errEventsFull):
		ss.log.Warn("async event dropped: the client does not read its events", "type", typ)
	case err != nil:
		ss.log.Debug("async event lost", "type", typ, "err", err)
	case first:
		ss.log.Debug("async event socket full: events pending")
	}
}

// contexts returns the session's open contexts of d (all devices: nil).
func (ss *session) contexts(d *device) []*devCtx {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var l []*devCtx
	for _, o := range ss.objs {
		if c, ok := o.(*devCtx); ok && (d == nil || c.d == d) {
			l = append(l, c)
		}
	}
	return l
}

// fatal tells the client its devices are gone and closes the connection:
// serve then returns and tears the session down.
func (ss *session) fatal() {
	for _, c := range ss.contexts(nil) {
		ss.asyncEvent(c, 0, 1, uint32(rvt.EventType(8))) // IBV_EVENT_DEVICE_FATAL, element: the port
	}
	ss.cmDeviceRemoval()
	_ = ss.conn.Close()
}

func (ss *session) allocPD(h uint32) (proto.Body, []int, error) {
	c := lookup[devCtx](ss, h)
	if c == nil {
		return nil, nil, proto.EINVAL
	}
	pd, err := c.d.dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	p := &pdObj{ctx: c, pd: pd}
	ss.mu.Lock()
	p.handle = ss.addLocked(p)
	c.refs++
	ss.mu.Unlock()
	return &proto.HandleReply{Handle: p.handle}, nil, nil
}

func (ss *session) deallocPD(h uint32) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p, err := unusedLocked(ss, h, func(p *pdObj) int { return p.refs })
	if err != nil {
		return err
	}
	if err := p.pd.Dealloc(); err != nil {
		return err
	}
	delete(ss.objs, h)
	p.ctx.refs--
	return nil
}

func (ss *session) shmAlloc(h uint32, m *proto.ShmAlloc) (proto.Body, []int, error) {
	if lookup[devCtx](ss, h) == nil {
		return nil, nil, proto.EINVAL
	}
	if m.Size == 0 || m.Size > 1<<40 {
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	if ss.mem+m.Size > ss.srv.cfg.Limits.MemBytes {
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	if err := ss.takeFDsLocked(1, proto.ENOMEM); err != nil { // the memfd, until the reply
		ss.mu.Unlock()
		return nil, nil, err
	}
	ss.mem += m.Size
	ss.mu.Unlock()
	reg, err := ring.Create("rvtd-shm", int(m.Size))
	if err != nil {
		ss.mu.Lock()
		ss.mem -= m.Size
		ss.putFDsLocked(1)
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	sh := &shmObj{reg: reg, size: uint64(len(reg.Bytes()))}
	ss.mu.Lock()
	ss.mem += sh.size - m.Size
	sh.handle = ss.addLocked(sh)
	ss.mu.Unlock()
	// The daemon keeps its mapping, not the memfd: nothing passes it again.
	fd := reg.TakeFD()
	return &proto.ShmAllocReply{Shm: sh.handle, Size: sh.size, FD: fd}, []int{fd}, nil
}

func (ss *session) shmAttach(h uint32, m *proto.ShmAttach) (proto.Body, []int, error) {
	if lookup[devCtx](ss, h) == nil {
		unix.Close(m.FD)
		return nil, nil, proto.EINVAL
	}
	if m.Size == 0 || m.Size > 1<<40 {
		unix.Close(m.FD)
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	if ss.mem+m.Size > ss.srv.cfg.Limits.MemBytes {
		ss.mu.Unlock()
		unix.Close(m.FD)
		return nil, nil, proto.ENOMEM
	}
	ss.mem += m.Size
	ss.mu.Unlock()
	reg, err := ring.Map(m.FD, int(m.Size), true)
	if err != nil {
		ss.mu.Lock()
		ss.mem -= m.Size
		ss.mu.Unlock()
		if errors.Is(err, ring.ErrNotSealed) {
			return nil, nil, proto.EBADF
		}
		if errors.Is(err, ring.ErrLayout) {
			return nil, nil, proto.EINVAL
		}
		return nil, nil, proto.EBADF
	}
	_ = reg.CloseFD() // the mapping keeps the client's memory; the descriptor is not needed again
	sh := &shmObj{reg: reg, size: m.Size}
	ss.mu.Lock()
	sh.handle = ss.addLocked(sh)
	ss.mu.Unlock()
	return &proto.HandleReply{Handle: sh.handle}, nil, nil
}

func (ss *session) shmFree(h uint32) error {
	ss.mu.Lock()
	sh, err := unusedLocked(ss, h, func(o *shmObj) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	delete(ss.objs, h)
	ss.mem -= sh.size
	ss.mu.Unlock()
	ss.srv.retire(sh.reg)
	return nil
}

func (ss *session) regMR(h uint32, m *proto.RegMR) (proto.Body, []int, error) {
	switch m.Kind {
	case proto.MRShm:
	case proto.MRVM:
		return ss.regMRVM(h, m)
	default:
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p := lookupLocked[pdObj](ss, h)
	sh := lookupLocked[shmObj](ss, m.Shm)
	if p == nil || sh == nil || m.Length == 0 || m.ShmOffset > sh.size || m.Length > sh.size-m.ShmOffset {
		return nil, nil, proto.EINVAL
	}
	if ss.nmr >= ss.srv.cfg.Limits.MRs {
		return nil, nil, proto.ENOMEM
	}
	buf := sh.reg.Bytes()[m.ShmOffset : m.ShmOffset+m.Length]
	mr, err := p.pd.RegMR(buf, m.IOVA, rvt.Access(m.Access))
	if err != nil {
		return nil, nil, err
	}
	o := &mrObj{pd: p, shm: sh, mr: mr, iova: m.IOVA, length: m.Length, key: keyOf(p, mr.Lkey)}
	o.handle = ss.addLocked(o)
	ss.lkeys[o.key] = o
	ss.nmr++
	p.refs++
	sh.refs++
	return &proto.MRReply{MR: o.handle, LKey: mr.Lkey, RKey: mr.Rkey}, nil, nil
}

func (ss *session) deregMR(h uint32) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	o := lookupLocked[mrObj](ss, h)
	if o == nil {
		return proto.EINVAL
	}
	return ss.deregLocked(o)
}

func (ss *session) deregLocked(o *mrObj) error {
	if err := o.pd.ctx.d.dev.DeregMR(o.mr); err != nil {
		return err
	}
	delete(ss.objs, o.handle)
	delete(ss.lkeys, o.key)
	ss.nmr--
	o.pd.refs--
	if o.shm != nil {
		o.shm.refs--
	}
	for sh := range o.segs {
		sh.refs--
	}
	return nil
}

// sgeOK reports whether length bytes at addr under lkey lie inside one of
// the session's MRs in pd: the daemon's own check of a copied WQE, before
// the engine's.
func (ss *session) sgeOK(pd *pdObj, lkey uint32, addr uint64, length uint32) bool {
	ss.mu.Lock()
	o := ss.lkeys[keyOf(pd, lkey)]
	ss.mu.Unlock()
	if o == nil || o.pd != pd {
		return false
	}
	if o.fast {
		return true // its key byte and range follow REG_MR WQEs: the engine checks
	}
	return o.mr.Lkey == lkey && addr >= o.iova && uint64(length) <= o.length && addr-o.iova <= o.length-uint64(length)
}

func (ss *session) allocMW(h uint32, m *proto.AllocMW) (proto.Body, []int, error) {
	p := lookup[pdObj](ss, h)
	if p == nil || (m.Type != 1 && m.Type != 2) {
		return nil, nil, proto.EINVAL
	}
	mw, err := p.pd.AllocMW(keys.MWType(m.Type))
	if err != nil {
		return nil, nil, err
	}
	o := &mwObj{pd: p, mw: mw}
	ss.mu.Lock()
	o.handle = ss.addLocked(o)
	p.refs++
	// Read under ss.mu: a BIND_MW WQE, which changes the rkey on a loop
	// goroutine, finds the window under ss.mu too (the socket between the
	// reply and the post is no ordering the race detector sees).
	rkey := mw.Rkey
	ss.mu.Unlock()
	return &proto.MWReply{MW: o.handle, RKey: rkey}, nil, nil
}

func (ss *session) deallocMW(h uint32) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	o := lookupLocked[mwObj](ss, h)
	if o == nil {
		return proto.EINVAL
	}
	return ss.deallocMWLocked(o)
}

func (ss *session) deallocMWLocked(o *mwObj) error {
	if err := o.pd.ctx.d.dev.DeallocMW(o.mw); err != nil {
		return err
	}
	delete(ss.objs, o.handle)
	o.pd.refs--
	return nil
}

// bindMW binds a type-1 window at once (ibv_bind_mw for Go clients).
func (ss *session) bindMW(h uint32, m *proto.BindMW) (proto.Body, []int, error) {
	ss.mu.Lock()
	o := lookupLocked[mwObj](ss, h)
	mr := lookupLocked[mrObj](ss, m.MR)
	ss.mu.Unlock()
	if o == nil || mr == nil || mr.pd != o.pd {
		return nil, nil, proto.EINVAL
	}
	rkey, err := o.pd.ctx.d.dev.BindMW(o.mw, mr.mr, m.Addr, m.Length, rvt.Access(m.Access))
	if err != nil {
		return nil, nil, err
	}
	return &proto.RKeyReply{RKey: rkey}, nil, nil
}

func (ss *session) createAH(h uint32, m *proto.CreateAH) (proto.Body, []int, error) {
	p := lookup[pdObj](ss, h)
	if p == nil || !m.AV.IsGlobal {
		return nil, nil, proto.EINVAL
	}
	ah, err := p.pd.CreateAH(qpconv.ToAV(m.AV))
	if err != nil {
		return nil, nil, err
	}
	o := &ahObj{pd: p, ah: ah}
	ss.mu.Lock()
	o.handle = ss.addLocked(o)
	p.refs++
	ss.mu.Unlock()
	return &proto.HandleReply{Handle: o.handle}, nil, nil
}

func (ss *session) destroyAH(h uint32) error {
	// Posted WQEs may name the AH (qp.go, "Requests that follow posts"):
	// the UD QPs of its PD take theirs first, which resolves it.
	ss.mu.Lock()
	o := lookupLocked[ahObj](ss, h)
	if o == nil {
		ss.mu.Unlock()
		return proto.EINVAL
	}
	var uds []*qpObj
	for _, x := range ss.objs {
		if q, ok := x.(*qpObj); ok && q.pd == o.pd && qp.Type(q.typ) == qp.UD {
			uds = append(uds, q)
		}
	}
	ss.mu.Unlock()
	for _, q := range uds {
		q.service(false)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if lookupLocked[ahObj](ss, h) != o {
		return proto.EINVAL
	}
	return ss.destroyAHLocked(o)
}

func (ss *session) destroyAHLocked(o *ahObj) error {
	if err := o.pd.ctx.d.dev.DestroyAH(o.ah); err != nil {
		return err
	}
	delete(ss.objs, o.handle)
	o.pd.refs--
	return nil
}

func (ss *session) createChannel(h uint32) (proto.Body, []int, error) {
	c := lookup[devCtx](ss, h)
	if c == nil {
		return nil, nil, proto.EINVAL
	}
	// EMFILE past the session's share: a channel is a descriptor of the
	// process over the kernel too.
	if err := ss.takeFDs(2, proto.EMFILE); err != nil {
		return nil, nil, err
	}
	keep, pass, err := proto.RawPair()
	if err != nil {
		ss.putFDs(2)
		return nil, nil, proto.ENOMEM
	}
	_ = unix.SetNonblock(keep, true)
	ch := &chanObj{ctx: c, sock: newEventSock(keep)}
	ss.mu.Lock()
	ch.handle = ss.addLocked(ch)
	c.refs++
	ss.mu.Unlock()
	return &proto.ChannelReply{Channel: ch.handle, FD: pass}, []int{pass}, nil
}

func (ss *session) destroyChannel(h uint32) error {
	ss.mu.Lock()
	ch, err := unusedLocked(ss, h, func(o *chanObj) int { return o.refs })
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	delete(ss.objs, h)
	ch.ctx.refs--
	ss.putFDsLocked(1)
	ss.mu.Unlock()
	ch.close()
	return nil
}

func (ch *chanObj) close() { ch.sock.close(false) }

// notify writes one comp_event record to the channel without blocking. A
// full socket keeps it pending, in order, until the client reads, as the
// kernel queues every completion event. What can wait is bounded: an event
// is made only for an armed CQ and disarms it, so a client that reads its
// events before it arms again has at most one outstanding per CQ of the
// channel; one that arms again first and does not read loses the events
// past that (logged once).
func (ch *chanObj) notify(ss *session, cookie uint64, cq uint32) {
	var b [16]byte
	compEventRecord(b[:], cookie, cq)
	first, err := ch.sock.send(b[:], max(int(ch.cqs.Load()), 1))
	switch {
	case errors.Is(err, errEventsFull):
		if !ch.warned.Swap(true) {
			ss.log.Warn("completion event dropped: the client arms its CQs again without reading their events", "channel", ch.handle, "pending", ch.sock.waiting())
		}
	case err != nil:
		ss.log.Debug("completion event lost", "channel", ch.handle, "err", err)
	case first:
		ss.log.Debug("completion channel full: events pending", "channel", ch.handle)
	}
}

// forget drops the events of CQ cq still pending (it was destroyed).
func (ch *chanObj) forget(cq uint32) {
	ch.sock.forget(func(rec []byte) bool { return binary.LittleEndian.Uint32(rec[8:]) == cq })
}

// listQPs answers the device's QPs from a QP number on, with the process
// that owns each (rdma resource show qp); only the asking session's own
// QPs carry a handle.
func (ss *session) listQPs(h uint32, m *proto.ListQPs) (proto.Body, []int, error) {
	c := lookup[devCtx](ss, h)
	if c == nil {
		return nil, nil, proto.EINVAL
	}
	const room = (proto.MaxMessage - proto.HeaderSize) / 56
	r := &proto.ListQPsReply{}
	for _, qi := range c.d.dev.QPs() {
		if qi.Num < m.StartQPN {
			continue
		}
		if len(r.QPs) == room {
			break
		}
		e := proto.QPEntry{QPN: qi.Num, NextPSN: uint32(qi.NextPSN), UnackedPSN: uint32(qi.UnackedPSN),
			ExpectedPSN: uint32(qi.ExpectedPSN), MSN: qi.MSN, SQPosted: u32(qi.SQPosted), RQPosted: u32(qi.RQPosted),
			Type: uint8(qi.Type), State: uint8(qi.State), Comm: "rvtd"}
		if v, ok := c.d.qps.Load(qi.Num); ok {
			q := v.(*qpObj)
			e.PID, e.Comm = q.sess.pid, truncate(q.sess.comm, 15)
			if q.sess == ss {
				e.Handle = q.handle
			}
		}
		r.QPs = append(r.QPs, e)
	}
	return r, nil, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (ss *session) counters(h uint32) (proto.Body, []int, error) {
	var m map[string]uint64
	if c := lookup[devCtx](ss, h); c != nil {
		m = c.d.dev.Counters()
	} else if q := lookup[qpObj](ss, h); q != nil {
		m = q.qp.Counters()
	} else {
		return nil, nil, proto.EINVAL
	}
	r := &proto.CountersReply{}
	for k, v := range m {
		if len(k) < 48 && len(r.Counters) < (proto.MaxMessage-proto.HeaderSize)/56 {
			r.Counters = append(r.Counters, proto.Counter{Name: k, Value: v})
		}
	}
	return r, nil, nil
}

// teardown releases everything the session owned, in the order of
// docs/rvtd-protocol.md section 3: rdma_cm IDs, QPs to error and destroyed, MRs
// deregistered, then CQs, PDs, channels, shared memory and device contexts.
func (ss *session) teardown() {
	_ = ss.conn.Close()
	ss.cmTeardown()
	ss.mu.Lock()
	var qps []*qpObj
	var cqs []*cqObj
	var mrs []*mrObj
	var pds []*pdObj
	var shms []*shmObj
	var chans []*chanObj
	var ctxs []*devCtx
	var ahs []*ahObj
	var mws []*mwObj
	var srqs []*srqObj
	for _, o := range ss.objs {
		switch o := o.(type) {
		case *qpObj:
			qps = append(qps, o)
		case *cqObj:
			cqs = append(cqs, o)
		case *mrObj:
			mrs = append(mrs, o)
		case *pdObj:
			pds = append(pds, o)
		case *shmObj:
			shms = append(shms, o)
		case *chanObj:
			chans = append(chans, o)
		case *devCtx:
			ctxs = append(ctxs, o)
		case *ahObj:
			ahs = append(ahs, o)
		case *mwObj:
			mws = append(mws, o)
		case *srqObj:
			srqs = append(srqs, o)
		}
	}
	ss.mu.Unlock()
	for _, q := range qps {
		q.destroy(true)
	}
	for _, s := range srqs {
		s.destroy()
	}
	ss.mu.Lock()
	for _, o := range ahs {
		_ = ss.destroyAHLocked(o)
	}
	for _, o := range mws {
		if err := ss.deallocMWLocked(o); err != nil {
			ss.log.Warn("teardown: dealloc MW", "err", err)
		}
	}
	for _, o := range mrs {
		if err := ss.deregLocked(o); err != nil {
			ss.log.Warn("teardown: dereg MR", "err", err)
		}
	}
	ss.mu.Unlock()
	for _, c := range cqs {
		c.destroy()
	}
	for _, p := range pds {
		if err := p.pd.Dealloc(); err != nil {
			ss.log.Warn("teardown: dealloc PD", "err", err)
		}
	}
	for _, ch := range chans {
		ch.close()
	}
	for _, sh := range shms {
		ss.srv.retire(sh.reg)
	}
	for _, c := range ctxs {
		c.close()
	}
	ss.mu.Lock()
	clear(ss.objs)
	clear(ss.lkeys)
	ss.mu.Unlock()
	if ss.proc != nil {
		ss.proc.Close() // after the MRs that read through it are gone
	}
	ss.release() // the socket is closed, and the pidfd
	ss.log.Info("session end", "qps", len(qps), "mrs", len(mrs), "cqs", len(cqs))
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// compEventRecord and asyncEventRecord lay out the 16-byte records of
// docs/rvtd-protocol.md section 7 (proto.CompEvent, proto.AsyncEvent).
func compEventRecord(b []byte, cookie uint64, cq uint32) {
	binary.LittleEndian.PutUint64(b[0:], cookie)
	binary.LittleEndian.PutUint32(b[8:], cq)
	binary.LittleEndian.PutUint32(b[12:], 0)
}

func asyncEventRecord(b []byte, cookie uint64, element, typ uint32) {
	binary.LittleEndian.PutUint64(b[0:], cookie)
	binary.LittleEndian.PutUint32(b[8:], element)
	binary.LittleEndian.PutUint32(b[12:], typ)
}

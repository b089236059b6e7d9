package rvt

// A remote device: the same Device, PD, CQ, QP, MR, MW and AH as Open's,
// served by rvtd through rvtd/client, as database/sql hides its driver.
// Every object keeps its local face (a CQ is a *cq.CQ, a QP embeds a
// *qp.QP, an MR is a *keys.MR), and what it does is redirected to the
// daemon:
//
//   - control verbs are calls on the session's socket;
//   - PostSend and PostRecv write WQE records into the QP's shared-memory
//     rings (a doorbell only when the daemon has set NEED_WAKEUP);
//   - a CQ is an external cq.CQ (cq.NewExternal) whose Poll reads CQE
//     records from its ring, with no system call;
//   - completion events come from one completion channel per device, async
//     events from the device's async socket: a goroutine each reads them
//     and calls CQ.Notify and the subscribers.
//
// The local objects behind a remote QP (a qp.QP in RESET holding its PD
// and CQs) and behind a remote MR or MW (keys.Table.Mirror) keep the
// bookkeeping the embedded device does: a CQ used by a QP is busy, a PD
// with QPs is busy, an MR's keys and address are in its fields.
//
// The embedded hot path pays one nil check: QP.PostSend and PostRecv test
// QP.r, cq.CQ.Poll tests its source.
//
// Lock order: Device.mu, then remoteDev.mu (a leaf); remoteQP.smu and rmu,
// remoteCQ.mu are leaves, never held across a daemon call.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/transport"
)

// Remote is the rvtd device behind d (a device from Dial), or nil for an
// embedded device. Higher layers (the connection manager) use it to reach
// the daemon's services for the device.
func (d *Device) Remote() *client.Device { return d.remote }

// RemoteHandle is the QP's handle in its rvtd session, or 0 for a QP of an
// embedded device.
func (q *QP) RemoteHandle() uint32 { return q.rhandle }

// DefaultSocket is the socket Dial uses for "": $RVTD_SOCKET, else
// /run/rvtd/rvtd.sock for root, else $XDG_RUNTIME_DIR/rvtd.sock (or
// /tmp/rvtd-UID.sock), as rvtd listens.
func DefaultSocket() string { return client.DefaultSocket() }

// DialOptions configure a device from rvtd.
type DialOptions struct {
	Socket string // the daemon's socket ("": DefaultSocket())
	Name   string // the daemon's device (default "rvt0")
	// Client is the name the session gives the daemon for its logs
	// (default: the program's name).
	Client string
	Logger *slog.Logger // nil: discard
}

// Dial opens device name of the rvtd daemon listening on socket ("": the
// default socket). The Device it returns has the types and methods of one
// from Open, so a program moves between an embedded device and the
// daemon's by this one call. What differs:
//
//   - Memory the daemon reaches without copying comes from AllocBuf (a
//     shared-memory segment); RegMR and Reg of other memory ask the daemon
//     for a process_vm registration (an error wrapping ErrNotSupported
//     where the daemon does not serve it).
//   - Reg chooses the buffer's own address as its I/O virtual address.
//   - Engine returns nil, PollLink false, Clock the real clock, QP.Conn
//     nil; SetAddrs is ErrNotSupported (the daemon owns the port).
//   - Errors of the daemon (an errno) wrap the matching sentinel
//     (ErrInvalidArgument, ErrNotSupported, ErrBusy, ErrNoResources) and
//     the errno itself.
//   - A WR the daemon finds bad completes in error rather than failing
//     PostSend (as on a hardware device).
func Dial(socket, name string) (*Device, error) {
	return DialWith(DialOptions{Socket: socket, Name: name})
}

// DialWith is Dial with options.
func DialWith(o DialOptions) (*Device, error) {
	if o.Socket == "" {
		o.Socket = DefaultSocket()
	}
	if o.Name == "" {
		o.Name = "rvt0"
	}
	if o.Client == "" {
		o.Client = filepath.Base(os.Args[0])
	}
	c, err := client.Dial(o.Socket, o.Client)
	if err != nil {
		return nil, fmt.Errorf("dial rvtd %s: %w", o.Socket, err)
	}
	cd, err := c.OpenDevice(o.Name)
	if err != nil {
		c.Close()
		return nil, remoteErr("open "+o.Name+" on "+o.Socket, err)
	}
	pa, err := cd.QueryDevice()
	if err != nil {
		c.Close()
		return nil, remoteErr("query device "+o.Name, err)
	}
	ch, err := cd.CreateCompChannel()
	if err != nil {
		c.Close()
		return nil, remoteErr("create completion channel", err)
	}
	r := &remoteDev{
		c: c, dev: cd, ch: ch, attr: fromDeviceAttr(pa), mirror: keys.NewTable(keys.MinTableBits),
		cqs: map[uint32]*cq.CQ{}, qps: map[uint32]*QP{}, mrs: map[*MR]uint32{}, mws: map[*MW]uint32{},
		ahs: map[*AH]uint32{}, bufs: map[uintptr]*client.Shm{}, srqs: map[*remoteSRQ]struct{}{},
	}
	r.limits = qp.Limits{MaxMTU: qp.MTU4096, MaxRdAtomic: maxRdAtom, MaxDestRdAtomic: maxRdAtom,
		PkeyTableLen: 1, GIDTableLen: gidTableLen, GIDs: func() int { return gidTableLen }, Ports: 1}
	d := &Device{
		name: o.Name, clk: clock.Real(), log: o.Logger,
		qps: make(map[uint32]*QP), ahs: make(map[*AH]struct{}), subs: make(map[int]func(Event)),
		remote: cd, rd: r,
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.opts.Name = o.Name
	r.wg.Add(2)
	go r.readCompEvents()
	go r.readAsyncEvents(d)
	return d, nil
}

// remoteDev is the daemon's side of a Dial'd device.
type remoteDev struct {
	c      *client.Client
	dev    *client.Device
	ch     *client.Channel // every CQ's completion channel
	attr   DeviceAttr
	mirror *keys.Table // what mirrored MRs and MWs, and shadow QPs, refer to
	limits qp.Limits   // the shadow QPs'
	wg     sync.WaitGroup

	mu   sync.Mutex
	cqs  map[uint32]*cq.CQ // by handle
	qps  map[uint32]*QP    // by handle
	mrs  map[*MR]uint32
	mws  map[*MW]uint32
	ahs  map[*AH]uint32
	bufs map[uintptr]*client.Shm // AllocBuf's segments by address
	srqs map[*remoteSRQ]struct{}
	// closed: the session is ending; objects made meanwhile are born dead
	// (their rings are unmapped with the session's).
	closed bool
}

// close ends the session: the daemon tears down everything it owned, and
// the event readers end with their sockets.
func (r *remoteDev) close() {
	// No post or poll may touch a ring once the session's mappings go.
	r.mu.Lock()
	r.closed = true
	qps := make([]*remoteQP, 0, len(r.qps))
	for _, q := range r.qps {
		qps = append(qps, q.r)
	}
	cqs := make([]*remoteCQ, 0, len(r.cqs))
	for _, c := range r.cqs {
		cqs = append(cqs, c.External().(*remoteCQ))
	}
	srqs := make([]*remoteSRQ, 0, len(r.srqs))
	for s := range r.srqs {
		srqs = append(srqs, s)
	}
	r.mu.Unlock()
	for _, x := range qps {
		x.smu.Lock()
		x.rmu.Lock()
		x.dead = true
	}
	for _, c := range cqs {
		c.mu.Lock()
		c.dead = true
	}
	for _, s := range srqs {
		s.mu.Lock()
		s.dead = true
	}
	_ = r.c.Close()
	for _, s := range srqs {
		s.mu.Unlock()
	}
	for _, c := range cqs {
		c.mu.Unlock()
	}
	for _, x := range qps {
		x.rmu.Unlock()
		x.smu.Unlock()
	}
	r.wg.Wait()
}

// readCompEvents delivers the completion channel's events to their CQs.
func (r *remoteDev) readCompEvents() {
	defer r.wg.Done()
	for {
		h, err := r.ch.GetEvent()
		if err != nil {
			return
		}
		r.mu.Lock()
		c := r.cqs[h]
		r.mu.Unlock()
		if c != nil {
			c.Notify()
		}
	}
}

// readAsyncEvents turns the async socket's records into Events for the
// device's subscribers.
func (r *remoteDev) readAsyncEvents(d *Device) {
	defer r.wg.Done()
	for {
		ae, err := r.dev.ReadAsyncEvent()
		if err != nil {
			return
		}
		ev := Event{Type: transport.EventType(ae.Type)}
		r.mu.Lock()
		switch ev.Type {
		case transport.EventCQErr:
			ev.CQ = r.cqs[ae.Element]
		case transport.EventSRQLimitReached:
		case transport.EventDeviceFatal, transport.EventPortActive, transport.EventPortErr, transport.EventGIDChange:
			ev.Port = uint8(ae.Element)
		default: // QP events
			if q := r.qps[ae.Element]; q != nil {
				ev.QPN = q.Num()
			}
		}
		r.mu.Unlock()
		if ev.CQ != nil {
			ev.CQ.Fail()
		}
		d.dispatch(ev)
	}
}

// remoteErr wraps a daemon error: an errno also wraps the sentinel of the
// same failure, so errors.Is(err, ErrNotSupported) holds for EOPNOTSUPP.
func remoteErr(op string, err error) error {
	var e proto.Errno
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: rvtd: %w", op, err)
	}
	var s error
	switch e {
	case proto.EINVAL, proto.EPROTO, proto.EBADF:
		s = verr.ErrInvalidArgument
	case proto.EOPNOTSUPP, proto.ENOSYS:
		s = verr.ErrNotSupported
	case proto.EBUSY:
		s = verr.ErrBusy
	case proto.ENOMEM, proto.EAGAIN:
		s = verr.ErrNoResources
	case proto.EACCES:
		s = keys.ErrAccess
	default:
		return fmt.Errorf("%s: rvtd: %w", op, err)
	}
	return fmt.Errorf("%s: rvtd: %w (%w)", op, s, e)
}

func fromDeviceAttr(a *proto.DeviceAttr) DeviceAttr {
	r := DeviceAttr{
		FWVer: a.FWVer, NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, MaxMRSize: a.MaxMRSize,
		PageSizeCap: a.PageSizeCap, VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		MaxQP: int(a.MaxQP), MaxQPWR: int(a.MaxQPWR), MaxSGE: int(a.MaxSGE), MaxSGERd: int(a.MaxSGERd),
		MaxCQ: int(a.MaxCQ), MaxCQE: int(a.MaxCQE), MaxMR: int(a.MaxMR), MaxPD: int(a.MaxPD),
		MaxQPRdAtom: int(a.MaxQPRdAtom), MaxQPInitRdAtom: int(a.MaxQPInitRdAtom), MaxResRdAtom: int(a.MaxResRdAtom),
		MaxMW: int(a.MaxMW), MaxAH: int(a.MaxAH), MaxSRQ: int(a.MaxSRQ), MaxSRQWR: int(a.MaxSRQWR),
		MaxSRQSGE: int(a.MaxSRQSGE), MaxMcastGrp: int(a.MaxMcastGrp), MaxMcastQPAttach: int(a.MaxMcastQPAttach),
		MaxTotalMcastQPAttach: int(a.MaxTotalMcastQPAttach), MaxInlineData: int(a.MaxInlineData),
		MaxMsgSize: a.MaxMsgSize, MaxPkeys: int(a.MaxPKeys), PhysPortCnt: int(a.PhysPortCnt),
	}
	if a.AtomicCap != 0 {
		r.AtomicCap = "HCA"
	}
	return r
}

// AllocBuf returns n bytes of memory the device reaches without copying,
// for RegMR and Reg: for an embedded device a Go slice, for a Dial'd
// device a mapping of a shared-memory segment the daemon maps too
// (shm_alloc), which stays mapped until FreeBuf or Close. Registrations
// of any part of it are shared-memory MRs.
func (d *Device) AllocBuf(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("alloc buffer of %d bytes: %w", n, ErrInvalidArgument)
	}
	r := d.rd
	if r == nil {
		return make([]byte, n), nil
	}
	s, err := r.dev.ShmAlloc(uint64(n))
	if err != nil {
		return nil, remoteErr("alloc buffer", err)
	}
	r.mu.Lock()
	r.bufs[uintptr(s.Addr())] = s
	r.mu.Unlock()
	return s.Mem[:n:n], nil
}

// FreeBuf releases a buffer from AllocBuf (the slice AllocBuf returned):
// for a Dial'd device the segment is freed and unmapped (ErrBusy while
// MRs use it); for an embedded device it is left to the garbage collector.
func (d *Device) FreeBuf(buf []byte) error {
	r := d.rd
	if r == nil || len(buf) == 0 {
		return nil
	}
	a := uintptr(unsafe.Pointer(&buf[0]))
	r.mu.Lock()
	s := r.bufs[a]
	r.mu.Unlock()
	if s == nil {
		return fmt.Errorf("free buffer: %w: not a buffer of AllocBuf", ErrInvalidArgument)
	}
	if err := r.dev.ShmFree(s); err != nil {
		return remoteErr("free buffer", err)
	}
	r.mu.Lock()
	delete(r.bufs, a)
	r.mu.Unlock()
	return nil
}

// segmentOf finds the AllocBuf segment holding all of buf, and buf's
// offset in it.
func (r *remoteDev) segmentOf(buf []byte) (*client.Shm, uint64, bool) {
	if len(buf) == 0 {
		return nil, 0, false
	}
	a := uint64(uintptr(unsafe.Pointer(&buf[0])))
	r.mu.Lock()
	defer r.mu.Unlock()
	for base, s := range r.bufs {
		b := uint64(base)
		if a >= b && a-b+uint64(len(buf)) <= uint64(len(s.Mem)) {
			return s, a - b, true
		}
	}
	return nil, 0, false
}

// RemoteHandle is the PD's handle in its rvtd session, or 0 for a PD of
// an embedded device.
func (pd *PD) RemoteHandle() uint32 { return pd.rh }

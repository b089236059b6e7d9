// Package client is a minimal Go client of rvtd (docs/rvtd-protocol.md):
// the control calls over the socket and the shared-memory rings of the data
// path. It is what the daemon's tests speak; rvt.Dial will build an
// *rvt.Device on it.
package client

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// Client is one session with rvtd.
type Client struct {
	conn  *proto.Conn
	mu    sync.Mutex
	next  uint32
	Hello proto.HelloReply

	omu    sync.Mutex
	closer []func() // what Close releases: mappings, doorbells, sockets

	ptracer sync.Once // prctl(PR_SET_PTRACER) before the first process_vm MR
}

// own adds f to what Close runs.
func (c *Client) own(f func()) {
	c.omu.Lock()
	c.closer = append(c.closer, f)
	c.omu.Unlock()
}

// Dial connects to the daemon at path and says hello as name.
func Dial(path, name string) (*Client, error) {
	conn, err := proto.Dial(path)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn}
	r, err := c.Call(proto.OpHello, 0, &proto.Hello{Magic: proto.Magic, Major: proto.Major, Minor: proto.Minor,
		PID: uint32(os.Getpid()), Client: name})
	if err != nil {
		conn.Close()
		var e proto.Errno
		if errors.As(err, &e) { // EMFILE: the user holds its share of the daemon's descriptors
			return nil, fmt.Errorf("rvtd at %s refused the session: %w", path, err)
		}
		return nil, fmt.Errorf("hello: %w", err)
	}
	c.Hello = *r.(*proto.HelloReply)
	return c, nil
}

// Conn is the connection (for tests that send raw messages).
func (c *Client) Conn() *proto.Conn { return c.conn }

// Close ends the session (the daemon tears down everything it owned) and
// releases this side's mappings and descriptors.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.omu.Lock()
	fs := c.closer
	c.closer = nil
	c.omu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	return err
}

// ProtocolError is the daemon's protocol_error event, received instead of
// a reply: the daemon closes the session after it.
type ProtocolError struct{ proto.ProtocolError }

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("rvtd protocol error: %v: %s", e.Errno, e.Text)
}

// Call sends one request and waits for its reply. A reply with a status is
// returned as a proto.Errno.
func (c *Client) Call(op proto.Op, handle uint32, req proto.Body) (proto.Body, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	id := c.next
	if err := c.conn.Send(proto.Header{Op: op, ReqID: id, Handle: handle}, req); err != nil {
		return nil, err
	}
	for {
		m, err := c.conn.Recv()
		if err != nil {
			return nil, err
		}
		if m.Flags&proto.FlagEvent != 0 {
			if pe, ok := m.Body.(*proto.ProtocolError); ok {
				return nil, &ProtocolError{*pe}
			}
			continue
		}
		if m.ReqID != id || m.Op != op {
			return nil, fmt.Errorf("reply %d (op %#x) to request %d (op %#x)", m.ReqID, uint16(m.Op), id, uint16(op))
		}
		if m.Status != 0 {
			return nil, m.Status
		}
		return m.Body, nil
	}
}

// Device is an opened device.
type Device struct {
	c      *Client
	Handle uint32
	Async  *os.File // the async event socket: 16-byte records
}

// OpenDevice opens the daemon's device name.
func (c *Client) OpenDevice(name string) (*Device, error) {
	r, err := c.Call(proto.OpOpenDevice, 0, &proto.OpenDevice{Name: name})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.OpenDeviceReply)
	d := &Device{c: c, Handle: o.Device, Async: os.NewFile(uintptr(o.AsyncFD), "rvtd-async")}
	c.own(func() { d.Async.Close() })
	return d, nil
}

// Client is the device's session.
func (d *Device) Client() *Client { return d.c }

// ReadAsyncEvent reads one async event record (blocking).
func (d *Device) ReadAsyncEvent() (proto.AsyncEvent, error) {
	var b [16]byte
	n, err := d.Async.Read(b[:])
	if err != nil {
		return proto.AsyncEvent{}, err
	}
	if n != 16 {
		return proto.AsyncEvent{}, fmt.Errorf("async event of %d bytes", n)
	}
	return proto.AsyncEvent{Cookie: le64(b[0:]), Element: le32(b[8:]), Type: le32(b[12:])}, nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }

// QueryGID returns GID index of port 1.
func (d *Device) QueryGID(index uint32) ([16]byte, error) {
	r, err := d.c.Call(proto.OpQueryGID, d.Handle, &proto.TableReq{Port: 1, Index: index})
	if err != nil {
		return [16]byte{}, err
	}
	return r.(*proto.GIDReply).GID, nil
}

// AllocPD allocates a protection domain and returns its handle.
func (d *Device) AllocPD() (uint32, error) {
	r, err := d.c.Call(proto.OpAllocPD, d.Handle, nil)
	if err != nil {
		return 0, err
	}
	return r.(*proto.HandleReply).Handle, nil
}

// Shm is a shared-memory segment the daemon maps too.
type Shm struct {
	Handle uint32
	Mem    []byte
	reg    *ring.Region
}

// ShmAlloc asks the daemon for a segment of size bytes and maps it.
func (d *Device) ShmAlloc(size uint64) (*Shm, error) {
	r, err := d.c.Call(proto.OpShmAlloc, d.Handle, &proto.ShmAlloc{Size: size})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.ShmAllocReply)
	reg, err := ring.Map(o.FD, int(o.Size), false)
	if err != nil {
		return nil, err
	}
	d.c.own(func() { reg.Close() })
	return &Shm{Handle: o.Shm, Mem: reg.Bytes(), reg: reg}, nil
}

// Addr is the address of the segment's first byte in this process.
func (s *Shm) Addr() uint64 {
	if len(s.Mem) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&s.Mem[0])))
}

// MR is a registered region: its keys and its address (iova = address).
type MR struct {
	Handle     uint32
	LKey, RKey uint32
	Addr       uint64
}

// RegMR registers length bytes at off in s with access (ibv_access_flags).
func (d *Device) RegMR(pd uint32, s *Shm, off, length uint64, access uint32) (*MR, error) {
	if off >= uint64(len(s.Mem)) {
		return nil, errors.New("offset outside the segment")
	}
	addr := s.Addr() + off
	r, err := d.c.Call(proto.OpRegMR, pd, &proto.RegMR{Kind: proto.MRShm, Access: access, Addr: addr, Length: length,
		IOVA: addr, Shm: s.Handle, ShmOffset: off})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.MRReply)
	return &MR{Handle: o.MR, LKey: o.LKey, RKey: o.RKey, Addr: addr}, nil
}

// AllocMW is ibv_alloc_mw (typ 1 or 2): the window's handle and rkey.
func (d *Device) AllocMW(pd uint32, typ uint8) (uint32, uint32, error) {
	r, err := d.c.Call(proto.OpAllocMW, pd, &proto.AllocMW{Type: typ})
	if err != nil {
		return 0, 0, err
	}
	o := r.(*proto.MWReply)
	return o.MW, o.RKey, nil
}

// BindMW binds a type-1 window at once and returns its new rkey.
func (d *Device) BindMW(mw uint32, mr *MR, addr, length uint64, access uint32) (uint32, error) {
	r, err := d.c.Call(proto.OpBindMW, mw, &proto.BindMW{MR: mr.Handle, Access: access, Addr: addr, Length: length})
	if err != nil {
		return 0, err
	}
	return r.(*proto.RKeyReply).RKey, nil
}

// CreateAH is ibv_create_ah (RoCE: is_global is set).
func (d *Device) CreateAH(pd uint32, av proto.AV) (uint32, error) {
	av.IsGlobal = true
	r, err := d.c.Call(proto.OpCreateAH, pd, &proto.CreateAH{AV: av})
	if err != nil {
		return 0, err
	}
	return r.(*proto.HandleReply).Handle, nil
}

// CQ is a completion queue: its ring of CQE records.
type CQ struct {
	d      *Device
	Handle uint32
	CQE    uint32 // usable entries, from the create_cq or resize_cq reply
	ring   *ring.Consumer
	reg    *ring.Region
}

// CreateCQ creates a CQ of at least cqe entries (channel 0: none).
func (d *Device) CreateCQ(cqe uint32, channel uint32) (*CQ, error) {
	return d.createCQ(&proto.CreateCQ{CQE: cqe, Channel: channel})
}

func (d *Device) createCQ(m *proto.CreateCQ) (*CQ, error) {
	r, err := d.c.Call(proto.OpCreateCQ, d.Handle, m)
	if err != nil {
		return nil, err
	}
	o := r.(*proto.CQReply)
	reg, err := ring.Map(o.FD, int(o.MapSize), false)
	if err != nil {
		return nil, err
	}
	l := ring.Layout{Offset: o.Ring.Offset, Entries: o.Ring.Entries, Stride: o.Ring.Stride}
	cons, err := ring.NewConsumer(reg.Bytes(), ring.KindCQ, l, nil, true)
	if err != nil {
		reg.Close()
		return nil, err
	}
	c := &CQ{d: d, Handle: o.CQ, CQE: o.CQE, ring: cons, reg: reg}
	d.c.own(c.close)
	return c, nil
}

func (c *CQ) close() {
	if c.reg != nil {
		c.reg.Close()
		c.reg = nil
	}
}

// Resize is ibv_resize_cq: the daemon passes a new ring holding the
// completions not yet polled; the old one is unmapped. Do not poll
// meanwhile.
func (c *CQ) Resize(cqe uint32) error {
	r, err := c.d.c.Call(proto.OpResizeCQ, c.Handle, &proto.ResizeCQ{CQE: cqe})
	if err != nil {
		return err
	}
	o := r.(*proto.CQReply)
	reg, err := ring.Map(o.FD, int(o.MapSize), false)
	if err != nil {
		return err
	}
	l := ring.Layout{Offset: o.Ring.Offset, Entries: o.Ring.Entries, Stride: o.Ring.Stride}
	cons, err := ring.NewConsumer(reg.Bytes(), ring.KindCQ, l, nil, true)
	if err != nil {
		reg.Close()
		return err
	}
	c.close()
	c.ring, c.reg, c.CQE = cons, reg, o.CQE
	return nil
}

// WC is a completion, as the CQE record has it.
type WC struct {
	WRID    uint64
	Status  uint8
	Opcode  uint8
	ByteLen uint32
	ImmData uint32
	QPNum   uint32
	SrcQP   uint32
	Flags   uint32
}

// Poll reads up to len(out) completions.
func (c *CQ) Poll(out []WC) (int, error) {
	n, err := c.ring.Available()
	if err != nil {
		return 0, err
	}
	n = min(n, len(out))
	for i := 0; i < n; i++ {
		e := ring.CQE(c.ring.Slot(i))
		out[i] = WC{WRID: e.WRID(), Status: e.Status(), Opcode: e.Opcode(), ByteLen: e.ByteLen(),
			ImmData: e.ImmData(), QPNum: e.QPNum(), SrcQP: e.SrcQP(), Flags: e.WCFlags()}
	}
	c.ring.Release(n)
	return n, nil
}

// Status is the errno with which the daemon stopped serving the ring.
func (c *CQ) Status() uint32 { return c.ring.Status() }

// QP is a queue pair: its send and receive rings and its doorbell.
type QP struct {
	d        *Device
	Handle   uint32
	QPN      uint32
	Cap      proto.Cap
	sq, rq   *ring.Producer
	sqRaw    []byte // the send ring, for tests that corrupt it
	rqRaw    []byte
	bell     *ring.Doorbell
	reg      *ring.Region
	sqLayout ring.Layout
}

// CreateQP creates an RC, UC or UD QP (typ 2, 3 or 4) in pd.
func (d *Device) CreateQP(pd uint32, typ uint8, scq, rcq *CQ, cap proto.Cap) (*QP, error) {
	return d.createQP(pd, &proto.CreateQP{Type: typ, SendCQ: scq.Handle, RecvCQ: rcq.Handle, Cap: cap})
}

func (d *Device) createQP(pd uint32, m *proto.CreateQP) (*QP, error) {
	r, err := d.c.Call(proto.OpCreateQP, pd, m)
	if err != nil {
		return nil, err
	}
	o := r.(*proto.QPReply)
	reg, err := ring.Map(o.MemFD, int(o.MapSize), false)
	if err != nil {
		unix.Close(o.Doorbell)
		return nil, err
	}
	bell, err := ring.OpenDoorbell(o.Doorbell)
	if err != nil {
		reg.Close()
		return nil, err
	}
	q := &QP{d: d, Handle: o.QP, QPN: o.QPN, Cap: o.Cap, bell: bell, reg: reg}
	q.sqLayout = ring.Layout{Offset: o.SQ.Offset, Entries: o.SQ.Entries, Stride: o.SQ.Stride}
	rl := ring.Layout{Offset: o.RQ.Offset, Entries: o.RQ.Entries, Stride: o.RQ.Stride}
	if q.sq, err = ring.NewProducer(reg.Bytes(), ring.KindSend, q.sqLayout, bell, true); err == nil && rl.Entries != 0 {
		// The receive ring shares the QP's doorbell (protocol 1.0,
		// section 7): rung when the daemon has set NEED_WAKEUP on it.
		// A QP on an SRQ has none (entries 0).
		q.rq, err = ring.NewProducer(reg.Bytes(), ring.KindRecv, rl, bell, true)
	}
	if err != nil {
		q.Close()
		return nil, err
	}
	q.sqRaw = reg.Bytes()[o.SQ.Offset : o.SQ.Offset+q.sqLayout.Size()]
	if q.rq != nil {
		q.rqRaw = reg.Bytes()[o.RQ.Offset : o.RQ.Offset+rl.Size()]
	}
	d.c.own(q.Close)
	return q, nil
}

// SendRingHeader is the send ring's header bytes (tests corrupt it).
func (q *QP) SendRingHeader() []byte { return q.sqRaw[:ring.HeaderSize] }

// RecvRingHeader is the receive ring's header bytes (tests corrupt it).
func (q *QP) RecvRingHeader() []byte { return q.rqRaw[:ring.HeaderSize] }

// RingDoorbell rings the QP's doorbell whatever the ring's flags say.
func (q *QP) RingDoorbell() error { return q.bell.Ring() }

// Close unmaps the QP's rings (after Destroy, or when the session ends).
func (q *QP) Close() {
	if q.reg != nil {
		q.reg.Close()
		q.reg = nil
	}
	if q.bell != nil {
		q.bell.Close()
		q.bell = nil
	}
}

// Modify is ibv_modify_qp.
//
// To RESET, the daemon empties both rings and restarts their indices at
// 0 (WQEs posted before are discarded, with no completion): the
// producers take the indices again from the rings.
func (q *QP) Modify(a proto.QPAttr, mask uint32) error {
	_, err := q.d.c.Call(proto.OpModifyQP, q.Handle, &proto.ModifyQP{Mask: mask, Attr: a})
	if err == nil && mask&1 != 0 && a.State == 0 { // IBV_QP_STATE, IBV_QPS_RESET
		q.sq.Resync()
		if q.rq != nil {
			q.rq.Resync()
		}
	}
	return err
}

// Query is ibv_query_qp.
func (q *QP) Query() (proto.QPAttr, error) {
	r, err := q.d.c.Call(proto.OpQueryQP, q.Handle, &proto.QueryQP{})
	if err != nil {
		return proto.QPAttr{}, err
	}
	return r.(*proto.QueryQPReply).Attr, nil
}

// Destroy is ibv_destroy_qp; the rings are unmapped.
func (q *QP) Destroy() error {
	_, err := q.d.c.Call(proto.OpDestroyQP, q.Handle, nil)
	q.Close()
	return err
}

// SGE is ibv_sge.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is the part of ibv_send_wr the client fills.
type SendWR struct {
	WRID       uint64
	Opcode     uint8 // ibv_wr_opcode
	Flags      uint32
	SGL        []SGE
	ImmData    uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // atomics; BIND_MW: the length
	Swap       uint64 // atomics; BIND_MW: the access flags
	AH         uint32 // UD: the AH handle; BIND_MW: the window's handle
	RemoteQPN  uint32 // UD; BIND_MW: the MR's handle
	RemoteQKey uint32 // UD
	Inline     []byte // with IBV_SEND_INLINE (8): the data, instead of SGL
}

// ErrFull is a post to a full ring.
var ErrFull = errors.New("ring full")

var (
	errTooManySGEs = errors.New("too many SGEs")
	errNoRecvRing  = errors.New("the QP has no receive ring: post to its SRQ")
)

// PostSend writes one send WQE record and publishes it; the producer rings
// the doorbell if the daemon sleeps.
func (q *QP) PostSend(wr SendWR) error {
	free, err := q.sq.Free()
	if err != nil {
		return err
	}
	if free == 0 {
		return ErrFull
	}
	w := ring.SendWQE(q.sq.Slot(0))
	clear(w)
	if len(wr.SGL) > w.MaxSGEs() {
		return errors.New("too many SGEs")
	}
	w.SetWRID(wr.WRID)
	w.SetOpcode(wr.Opcode)
	w.SetSendFlags(wr.Flags)
	w.SetNumSGE(uint8(len(wr.SGL)))
	w.SetImmData(wr.ImmData)
	w.SetRemoteAddr(wr.RemoteAddr)
	w.SetRKey(wr.RKey)
	w.SetCompareAdd(wr.CompareAdd)
	w.SetSwap(wr.Swap)
	w.SetAH(wr.AH)
	w.SetRemoteQPN(wr.RemoteQPN)
	w.SetRemoteQKey(wr.RemoteQKey)
	for i, s := range wr.SGL {
		w.SGE(i).Set(s.Addr, s.Length, s.LKey)
	}
	if err := putInline(w, &wr); err != nil {
		return err
	}
	_, err = q.sq.Publish(1)
	return err
}

// putInline writes wr's inline data into the record.
func putInline(w ring.SendWQE, wr *SendWR) error {
	if wr.Flags&8 == 0 {
		return nil
	}
	if len(wr.Inline) > len(w.Inline()) {
		return errors.New("inline data larger than the record")
	}
	w.SetNumSGE(0)
	w.SetInlineLen(uint16(len(wr.Inline)))
	copy(w.Inline(), wr.Inline)
	return nil
}

// PostRecv writes one receive WQE record.
func (q *QP) PostRecv(wrid uint64, sgl ...SGE) error {
	if q.rq == nil {
		return errNoRecvRing
	}
	free, err := q.rq.Free()
	if err != nil {
		return err
	}
	if free == 0 {
		return ErrFull
	}
	w := ring.RecvWQE(q.rq.Slot(0))
	clear(w)
	if len(sgl) > w.MaxSGEs() {
		return errors.New("too many SGEs")
	}
	w.SetWRID(wrid)
	w.SetNumSGE(uint8(len(sgl)))
	for i, s := range sgl {
		w.SGE(i).Set(s.Addr, s.Length, s.LKey)
	}
	_, err = q.rq.Publish(1)
	return err
}

// Channel is a completion channel: a socket of 16-byte comp_event records.
type Channel struct {
	Handle uint32
	File   *os.File
}

// CreateCompChannel is ibv_create_comp_channel.
func (d *Device) CreateCompChannel() (*Channel, error) {
	r, err := d.c.Call(proto.OpCreateCompChannel, d.Handle, nil)
	if err != nil {
		return nil, err
	}
	o := r.(*proto.ChannelReply)
	ch := &Channel{Handle: o.Channel, File: os.NewFile(uintptr(o.FD), "rvtd-channel")}
	d.c.own(func() { ch.File.Close() })
	return ch, nil
}

// GetEvent reads one completion event (ibv_get_cq_event): the CQ's handle.
func (ch *Channel) GetEvent() (uint32, error) {
	var b [16]byte
	n, err := ch.File.Read(b[:])
	if err != nil {
		return 0, err
	}
	if n != 16 {
		return 0, fmt.Errorf("completion event of %d bytes", n)
	}
	return le32(b[8:]), nil
}

// Arm is ibv_req_notify_cq: two words in the ring, no system call.
func (c *CQ) Arm(solicitedOnly bool) { c.ring.Arm(solicitedOnly) }

package rvt

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// PD is a protection domain.
type PD struct {
	*keys.PD
	d  *Device
	rh uint32 // the PD's handle in its rvtd session; 0 when embedded
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.rd != nil {
		return d.rd.allocPD(d) // no device lock held across the daemon's call
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("alloc PD: %w", ErrClosed)
	}
	if d.nPD.Load() >= maxPD {
		return nil, fmt.Errorf("alloc PD: %w: %d PDs", ErrNoResources, maxPD)
	}
	d.nextPD++
	d.nPD.Add(1)
	return &PD{PD: keys.NewPD(d.nextPD), d: d}, nil
}

// Dealloc frees the PD; ErrBusy while MRs, MWs, QPs, SRQs or AHs use it,
// ErrInvalidArgument if it was freed already. A freed PD makes nothing
// new: its creating verbs fail with ErrInvalidArgument.
func (pd *PD) Dealloc() error {
	if pd.d.rd != nil {
		return pd.d.rd.deallocPD(pd)
	}
	if err := pd.Free(); err != nil {
		return fmt.Errorf("dealloc: %w", err)
	}
	pd.d.nPD.Add(-1)
	return nil
}

// RegMR registers buf as a memory region with I/O virtual address iova
// (ibv_reg_mr; in Go the caller names the address space).
//
// On a Dial'd device buf is registered as shared memory when it lies in a
// buffer of AllocBuf (zero copy), and otherwise for the daemon's
// process_vm_readv/writev access (an error wrapping ErrNotSupported
// where the daemon does not serve that).
func (pd *PD) RegMR(buf []byte, iova uint64, access Access) (*MR, error) {
	if pd.d.rd != nil {
		return pd.d.rd.regMR(pd, buf, iova, access)
	}
	if err := pd.d.checkOpen("reg MR"); err != nil {
		return nil, err
	}
	return pd.d.keys.RegMR(pd.PD, buf, iova, access)
}

// Reg registers buf at a fresh, page-aligned I/O virtual address chosen by
// the device, so that regions never overlap. A Dial'd device uses buf's
// own address, as ibv_reg_mr does.
func (pd *PD) Reg(buf []byte, access Access) (*MR, error) {
	if pd.d.rd != nil {
		var va uint64
		if len(buf) > 0 {
			va = uint64(uintptr(unsafe.Pointer(&buf[0])))
		}
		return pd.d.rd.regMR(pd, buf, va, access)
	}
	pd.d.mu.Lock()
	va := pd.d.nextVA
	pd.d.nextVA += (uint64(len(buf)) + 0x1FFF) &^ 0xFFF
	pd.d.mu.Unlock()
	return pd.RegMR(buf, va, access)
}

// AllocMR allocates a fast-register MR for up to maxPages pages.
func (pd *PD) AllocMR(maxPages int) (*MR, error) {
	if pd.d.rd != nil {
		return pd.d.rd.allocMR(pd, maxPages)
	}
	if err := pd.d.checkOpen("alloc MR"); err != nil {
		return nil, err
	}
	return pd.d.keys.AllocMR(pd.PD, maxPages)
}

// DeregMR deregisters an MR; ErrBusy while memory windows are bound to it.
func (d *Device) DeregMR(mr *MR) error {
	if d.rd != nil {
		return d.rd.deregMR(mr)
	}
	return d.keys.DeregMR(mr)
}

// AllocMW allocates a memory window of type 1 or 2.
func (pd *PD) AllocMW(typ keys.MWType) (*MW, error) {
	if pd.d.rd != nil {
		return pd.d.rd.allocMW(pd, typ)
	}
	if err := pd.d.checkOpen("alloc MW"); err != nil {
		return nil, err
	}
	return pd.d.keys.AllocMW(pd.PD, typ)
}

// DeallocMW frees a memory window.
func (d *Device) DeallocMW(mw *MW) error {
	if d.rd != nil {
		return d.rd.deallocMW(mw)
	}
	return d.keys.DeallocMW(mw)
}

// BindMW binds a type-1 window (ibv_bind_mw) and returns its new rkey:
// each bind moves the key byte on by one, as ibv_bind_mw does with
// ibv_inc_rkey, so a key handed out for the old binding stops working.
//
// Errors: those of keys.Table.BindMWNextKey; a type-2 window is
// ErrInvalidArgument (it is bound with a BIND_MW work request).
func (d *Device) BindMW(mw *MW, mr *MR, addr, length uint64, access Access) (uint32, error) {
	if d.rd != nil {
		return d.rd.bindMW(mw, mr, addr, length, access)
	}
	return d.keys.BindMWNextKey(mw, mr, addr, length, access)
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(av AddressVector) (*AH, error) {
	if pd.d.rd != nil {
		return pd.d.rd.createAH(pd, av) // the daemon checks the GID index
	}
	if err := pd.d.checkOpen("create AH"); err != nil {
		return nil, err
	}
	if err := pd.d.limits.CheckSGID(av.SGIDIndex); err != nil {
		return nil, fmt.Errorf("create AH: %w", err)
	}
	if av.Port > 1 {
		// One port: the kernel's rdma_check_ah_attr refuses any other
		// (0 here is that port, for Go callers that leave it unset).
		return nil, fmt.Errorf("create AH: %w: port %d: the device has port 1 only", ErrInvalidArgument, av.Port)
	}
	if err := pd.TryRef(); err != nil {
		return nil, fmt.Errorf("create AH: %w", err)
	}
	ah := &qp.AH{PD: pd.PD, AV: av}
	pd.d.mu.Lock()
	pd.d.ahs[ah] = struct{}{}
	pd.d.mu.Unlock()
	return ah, nil
}

// DestroyAH releases an address handle (ibv_destroy_ah). An AH this device
// did not create, or one destroyed already, is ErrInvalidArgument.
func (d *Device) DestroyAH(ah *AH) error {
	if d.rd != nil {
		return d.rd.destroyAH(ah)
	}
	d.mu.Lock()
	_, ok := d.ahs[ah]
	delete(d.ahs, ah)
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("destroy AH: %w: not an AH of device %s, or destroyed already", ErrInvalidArgument, d.name)
	}
	ah.PD.Unref()
	return nil
}

// CreateCQ creates a completion queue of depth entries (ibv_create_cq).
// onComp, if not nil, runs when the CQ is armed and a completion arrives.
// An overflow raises EventCQErr.
//
// A Dial'd device's CQ polls the daemon's completion ring in shared
// memory; its events come through the device's completion channel.
func (d *Device) CreateCQ(depth int, onComp func(*CQ)) (*CQ, error) {
	if d.rd != nil {
		c, err := d.rd.createCQ(d, depth, onComp)
		if err == nil {
			c.SetOwner(d)
		}
		return c, err
	}
	if err := d.checkOpen("create CQ"); err != nil {
		return nil, err
	}
	c, err := cq.New(depth)
	if err != nil {
		return nil, err // "create cq: ..."
	}
	c.SetOwner(d)
	c.SetHandlers(onComp, func(c *cq.CQ) { d.dispatch(Event{Type: transport.EventCQErr, CQ: c}) })
	return c, nil
}

// DestroyCQ destroys a CQ; ErrBusy while a QP uses it.
func (d *Device) DestroyCQ(c *CQ) error { return c.Destroy() }

// SRQ is a shared receive queue.
type SRQ struct {
	*qp.SRQ
	d *Device
	r *remoteSRQ // a Dial'd device's: the daemon's SRQ ring; nil when embedded
}

// Post posts receive WRs to the SRQ (ibv_post_srq_recv), all or none.
func (s *SRQ) Post(wrs []RecvWR) error {
	if s.r != nil {
		return s.r.post(wrs)
	}
	return s.SRQ.Post(wrs)
}

// Destroy destroys the SRQ (ibv_destroy_srq); ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	if err := s.SRQ.Destroy(); err != nil || s.r == nil {
		return err // ErrBusy while QPs use it
	}
	return s.r.destroy()
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(maxWR, maxSGEs uint32) (*SRQ, error) {
	if maxWR > maxSRQWR || maxSGEs > maxSGE {
		return nil, fmt.Errorf("create SRQ: %w: max_wr %d max_sge %d", ErrInvalidArgument, maxWR, maxSGEs)
	}
	if pd.d.rd != nil {
		s, err := pd.d.rd.createSRQ(pd, maxWR, maxSGEs)
		if err == nil {
			s.d = pd.d
		}
		return s, err
	}
	if err := pd.d.checkOpen("create SRQ"); err != nil {
		return nil, err
	}
	s, err := qp.NewSRQ(pd.PD, pd.d.keys, maxWR, maxSGEs)
	if err != nil {
		return nil, err
	}
	return &SRQ{SRQ: s, d: pd.d}, nil
}

// QPInitAttr are a QP's creation attributes (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool
}

// QP is a queue pair.
type QP struct {
	*qp.QP
	conn *transport.Conn
	d    *Device

	// destroyed is guarded by d.mu, and set with d.mcMu held too, so that
	// AttachMcast, under d.mcMu, never attaches a destroyed QP.
	destroyed bool

	rhandle uint32    // the QP's handle in its rvtd session; 0 when embedded
	r       *remoteQP // a Dial'd device's QP: its rings; nil when embedded
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). A GSI
// QP is QP 1.
func (pd *PD) CreateQP(ia QPInitAttr) (*QP, error) {
	d := pd.d
	c := ia.Cap
	if c.MaxSendWR > maxQPWR || c.MaxRecvWR > maxQPWR || c.MaxSendSGE > maxSGE ||
		c.MaxRecvSGE > maxSGE || c.MaxInlineData > maxInline {
		return nil, fmt.Errorf("create QP: %w: capabilities %+v exceed the device limits", ErrInvalidArgument, c)
	}
	for _, c := range []*CQ{ia.SendCQ, ia.RecvCQ} {
		if c != nil && c.Owner() != d {
			return nil, fmt.Errorf("create QP: %w: a CQ of another device", ErrInvalidArgument)
		}
	}
	var srq *qp.SRQ
	if ia.SRQ != nil {
		if ia.SRQ.d != d {
			return nil, fmt.Errorf("create QP: %w: an SRQ of another device", ErrInvalidArgument)
		}
		srq = ia.SRQ.SRQ
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("create QP: %w", ErrClosed)
	}
	if d.rd != nil {
		d.mu.Unlock()
		return d.rd.createQP(pd, ia)
	}
	if len(d.qps) >= maxQP {
		d.mu.Unlock()
		return nil, fmt.Errorf("create QP: %w: %d QPs", ErrNoResources, maxQP)
	}
	var num uint32
	if ia.Type == qp.GSI {
		if _, used := d.qps[1]; used {
			d.mu.Unlock()
			return nil, fmt.Errorf("create QP: %w: the GSI QP exists", ErrBusy)
		}
		num = 1
	} else {
		for {
			num = d.nextQPN
			d.nextQPN++
			if d.nextQPN > 0xFFFFFE {
				d.nextQPN = 0x11
			}
			if _, used := d.qps[num]; !used {
				break
			}
		}
	}
	d.qps[num] = nil // reserved while the QP is made
	d.mu.Unlock()
	q, err := qp.New(num, qp.Config{
		Type: ia.Type, PD: pd.PD, SendCQ: ia.SendCQ, RecvCQ: ia.RecvCQ, SRQ: srq,
		Cap: c, SigAll: ia.SigAll, Keys: d.keys, Limits: &d.limits,
	})
	if err != nil {
		d.unreserveQPN(num)
		return nil, err
	}
	conn, err := d.eng.NewConn(q)
	if err != nil {
		q.Release()
		d.unreserveQPN(num)
		return nil, err
	}
	x := &QP{QP: q, conn: conn, d: d}
	d.mu.Lock()
	if d.closed { // Close dropped the reservation
		d.mu.Unlock()
		d.eng.RemoveConn(conn)
		q.Release()
		return nil, fmt.Errorf("create QP %#x: %w", num, ErrClosed)
	}
	d.qps[num] = x
	d.mu.Unlock()
	return x, nil
}

// checkOpen returns ErrClosed, for verb, once the device is closed.
func (d *Device) checkOpen(verb string) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: %w", verb, ErrClosed)
	}
	return nil
}

// unreserveQPN frees a QP number that CreateQP reserved but did not use.
func (d *Device) unreserveQPN(num uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.qps[num]; ok && q == nil {
		delete(d.qps, num)
	}
}

// Modify changes the QP's attributes and state (ibv_modify_qp).
func (q *QP) Modify(a *QPAttr, mask QPAttrMask) error {
	if q.r != nil {
		return q.r.modify(q.QP, a, mask)
	}
	return q.conn.Modify(a, mask)
}

// State returns the QP's current state (a Dial'd device's QP asks the
// daemon: query_qp).
func (q *QP) State() QPState {
	if q.r != nil {
		if a, err := q.r.query(); err == nil {
			return a.State
		}
	}
	return q.QP.State()
}

// Query returns a copy of the QP's attributes (ibv_query_qp); CurState is
// the current state. A Dial'd device's QP asks the daemon.
func (q *QP) Query() QPAttr {
	if q.r != nil {
		if a, err := q.r.query(); err == nil {
			a.CurState = a.State
			return a
		}
	}
	return q.QP.Query()
}

// PostSend posts send WRs (all or none): the error names the first bad WR.
// As in rxe, the work may run before PostSend returns, on the caller's
// goroutine: the requester if it is idle, and on the loopback path the
// peer's responder and this QP's completer after it, when idle. So CQ
// completion handlers and event subscribers may be called from inside
// PostSend, and must not wait for locks its caller holds.
//
// A Dial'd device's QP writes WQE records into its send ring in shared
// memory; the daemon checks them, and a bad one completes in error.
func (q *QP) PostSend(wrs ...SendWR) error {
	if q.r != nil {
		return q.r.postSend(wrs)
	}
	return q.conn.PostSend(wrs)
}

// PostRecv posts receive WRs (all or none).
func (q *QP) PostRecv(wrs ...RecvWR) error {
	if q.r != nil {
		return q.r.postRecv(wrs)
	}
	return q.conn.PostRecv(wrs)
}

// Counters returns the QP's counters by name.
func (q *QP) Counters() map[string]uint64 {
	if q.r != nil {
		return q.r.counters()
	}
	return q.conn.Counters().Snapshot()
}

// Conn returns the QP's transport state (for tools and tests); nil for a
// Dial'd device's QP, whose transport runs in rvtd.
func (q *QP) Conn() *transport.Conn { return q.conn }

// Destroy destroys the QP (ibv_destroy_qp): it leaves its multicast groups
// as DetachMcast does (the link leaves a group left empty) and releases its
// PD, CQs and SRQ; from then on AttachMcast refuses it. A QP destroyed
// already gives ErrInvalidArgument. After Device.Close, Destroy still
// releases the QP's PD, CQs and SRQ.
func (q *QP) Destroy() error {
	d := q.d
	if q.r != nil {
		return d.rd.destroyQP(q)
	}
	// mcMu is held from marking the QP destroyed until it is in no group,
	// so no AttachMcast can slip in between.
	d.mcMu.Lock()
	d.mu.Lock()
	if q.destroyed {
		d.mu.Unlock()
		d.mcMu.Unlock()
		return fmt.Errorf("destroy QP %#x: %w: destroyed already", q.Num(), ErrInvalidArgument)
	}
	q.destroyed = true
	d.mu.Unlock()
	q.QP.Retire(qp.GoneDestroyed)
	if q.Type().Datagram() { // only they join groups (AttachMcast)
		for _, g := range d.mc.DetachAll(q.QP) {
			d.leaveGroupLocked(GID(g))
		}
	}
	d.mcMu.Unlock()
	d.eng.RemoveConn(q.conn)
	// The number is free once the engine has let go of it.
	d.mu.Lock()
	if d.qps[q.Num()] == q {
		delete(d.qps, q.Num())
	}
	d.mu.Unlock()
	q.Release()
	return nil
}

// Drain moves the QP to ERR and waits until every posted WR has completed
// (flushed), as the kernel's ib_drain_qp.
func (q *QP) Drain(ctx context.Context) error {
	if err := q.Modify(&QPAttr{State: qp.Err}, qp.AttrState); err != nil {
		return err
	}
	if q.r != nil {
		return q.r.drain(ctx)
	}
	return q.conn.WaitFlushed(ctx)
}

// AttachMcast attaches a UD QP to a multicast group (ibv_attach_mcast).
// The first attachment to a group joins it on the link when the link needs
// to be told (IGMP/MLD reports from a Host, a socket join on the UDP link).
func (d *Device) AttachMcast(q *QP, gid GID, lid uint16) error {
	if q.d != d {
		return fmt.Errorf("attach mcast: %w: QP %#x is another device's", ErrInvalidArgument, q.Num())
	}
	if !q.Type().Datagram() {
		return fmt.Errorf("attach mcast: %w: QP %#x is %v, not UD", ErrInvalidArgument, q.Num(), q.Type())
	}
	if q.r != nil {
		if err := q.r.q.AttachMcast(gid, lid); err != nil {
			return remoteErr("attach mcast", err)
		}
		return nil
	}
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if q.destroyed {
		return fmt.Errorf("attach QP %#x to group %v: %w: QP destroyed", q.Num(), gid, ErrInvalidArgument)
	}
	if err := d.mc.Attach(mcast.GID(gid), lid, q.QP); err != nil {
		return err
	}
	if _, members, _ := d.mc.Lookup(mcast.GID(gid)); len(members) == 1 {
		if j, ok := netdev.As[netdev.GroupJoiner](d.opts.Link); ok {
			if err := j.JoinGroup(gid.IP()); err != nil {
				_ = d.mc.Detach(mcast.GID(gid), lid, q.QP)
				return fmt.Errorf("attach mcast %v: joining on the link: %w", gid, err)
			}
		}
	}
	return nil
}

// DetachMcast detaches a QP from a multicast group; the last detachment
// leaves the group on the link.
func (d *Device) DetachMcast(q *QP, gid GID, lid uint16) error {
	if q.d != d {
		return fmt.Errorf("detach mcast: %w: QP %#x is another device's", ErrInvalidArgument, q.Num())
	}
	if q.r != nil {
		if err := q.r.q.DetachMcast(gid, lid); err != nil {
			return remoteErr("detach mcast", err)
		}
		return nil
	}
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if err := d.mc.Detach(mcast.GID(gid), lid, q.QP); err != nil {
		return err
	}
	if _, _, ok := d.mc.Lookup(mcast.GID(gid)); !ok {
		d.leaveGroupLocked(gid)
	}
	return nil
}

// leaveGroupLocked leaves the group gid on the link, when the link needs to
// be told, once the group's last member is gone. d.mcMu is held.
func (d *Device) leaveGroupLocked(gid GID) {
	if j, ok := netdev.As[netdev.GroupJoiner](d.opts.Link); ok {
		_ = j.LeaveGroup(gid.IP())
	}
}

// QPInfo describes one QP for tools (rvt_qp_iter).
type QPInfo struct {
	Num   uint32
	Type  QPType
	State QPState
	transport.Snapshot

	// A Dial'd device lists every QP of the daemon's device (list_qps):
	// the owner's pid and command, and the QP's handle when it is this
	// session's (else 0). Zero for an embedded device.
	PID    uint32
	Comm   string
	Handle uint32
}

// QPs returns a snapshot of every QP, in QP-number order.
//
// A Dial'd device lists the daemon's device, every session's QPs with
// their owners (no per-QP counters).
func (d *Device) QPs() []QPInfo {
	if d.rd != nil {
		return d.rd.qpInfos()
	}
	d.mu.Lock()
	qs := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		if q != nil {
			qs = append(qs, q)
		}
	}
	d.mu.Unlock()
	out := make([]QPInfo, 0, len(qs))
	for _, q := range qs {
		out = append(out, QPInfo{Num: q.Num(), Type: q.Type(), State: q.State(), Snapshot: q.conn.Snapshot()})
	}
	slices.SortFunc(out, func(a, b QPInfo) int { return cmp.Compare(a.Num, b.Num) })
	return out
}

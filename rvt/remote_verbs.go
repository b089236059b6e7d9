package rvt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/qpconv"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// The verbs of a Dial'd device (remote.go): each is called by the verb of
// the same name in device.go and verbs.go when the device is remote.

func (r *remoteDev) allocPD(d *Device) (*PD, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("alloc PD: %w", ErrClosed)
	}
	h, err := r.dev.AllocPD()
	if err != nil {
		return nil, remoteErr("alloc PD", err)
	}
	return &PD{PD: keys.NewPD(h), d: d, rh: h}, nil
}

func (r *remoteDev) deallocPD(pd *PD) error {
	if pd.Refs() > 0 {
		return fmt.Errorf("dealloc: %w: %d QPs, SRQs or AHs use the PD", ErrBusy, pd.Refs())
	}
	if err := r.dev.DeallocPD(pd.rh); err != nil {
		return remoteErr("dealloc", err)
	}
	return pd.Free()
}

// regMR registers buf: a part of an AllocBuf segment as a shared-memory
// MR, anything else for process_vm access.
func (r *remoteDev) regMR(pd *PD, buf []byte, iova uint64, access Access) (*MR, error) {
	var (
		m   *client.MR
		err error
	)
	if s, off, ok := r.segmentOf(buf); ok {
		m, err = r.dev.RegMRAt(pd.rh, s, off, uint64(len(buf)), iova, uint32(access))
	} else {
		var addr uint64
		if len(buf) > 0 {
			addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
		}
		m, err = r.dev.RegMemAt(pd.rh, addr, uint64(len(buf)), iova, uint32(access))
		switch {
		case errors.Is(err, proto.EPERM):
			return nil, remoteErr("reg MR: rvtd may not read this process's memory (process_vm_readv refused: "+
				"see /proc/sys/kernel/yama/ptrace_scope; a buffer of AllocBuf needs no such access)", err)
		case err != nil:
			return nil, remoteErr("reg MR (memory not from AllocBuf: a process_vm registration)", err)
		}
	}
	if err != nil {
		return nil, remoteErr("reg MR", err)
	}
	mr := r.mirror.Mirror(pd.PD, buf, m.LKey, m.RKey, iova, access)
	r.mu.Lock()
	r.mrs[mr] = m.Handle
	r.mu.Unlock()
	return mr, nil
}

func (r *remoteDev) allocMR(pd *PD, maxPages int) (*MR, error) {
	if maxPages < 0 || maxPages > 1<<20 {
		return nil, fmt.Errorf("alloc MR: %w: %d pages", ErrInvalidArgument, maxPages)
	}
	m, err := r.dev.AllocMR(pd.rh, uint32(maxPages))
	if err != nil {
		return nil, remoteErr("alloc MR", err)
	}
	mr := r.mirror.Mirror(pd.PD, nil, m.LKey, m.RKey, 0, 0)
	r.mu.Lock()
	r.mrs[mr] = m.Handle
	r.mu.Unlock()
	return mr, nil
}

func (r *remoteDev) mrHandle(mr *MR) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mrs[mr]
}

func (r *remoteDev) deregMR(mr *MR) error {
	h := r.mrHandle(mr)
	if h == 0 && !mr.Valid() {
		return fmt.Errorf("dereg MR: %w: already deregistered", ErrInvalidState)
	}
	if h == 0 {
		return fmt.Errorf("dereg MR: %w: not an MR of this device", ErrInvalidArgument)
	}
	if err := r.dev.DeregMR(&client.MR{Handle: h}); err != nil {
		return remoteErr("dereg MR", err)
	}
	r.mu.Lock()
	delete(r.mrs, mr)
	r.mu.Unlock()
	r.mirror.Unmirror(mr)
	return nil
}

func (r *remoteDev) allocMW(pd *PD, typ keys.MWType) (*MW, error) {
	h, rkey, err := r.dev.AllocMW(pd.rh, uint8(typ))
	if err != nil {
		return nil, remoteErr("alloc MW", err)
	}
	mw := r.mirror.MirrorMW(pd.PD, typ, rkey)
	r.mu.Lock()
	r.mws[mw] = h
	r.mu.Unlock()
	return mw, nil
}

func (r *remoteDev) mwHandle(mw *MW) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mws[mw]
}

func (r *remoteDev) deallocMW(mw *MW) error {
	h := r.mwHandle(mw)
	if h == 0 {
		return fmt.Errorf("dealloc MW: %w: not an MW of this device, or freed", ErrInvalidArgument)
	}
	if err := r.dev.DeallocMW(h); err != nil {
		return remoteErr("dealloc MW", err)
	}
	r.mu.Lock()
	delete(r.mws, mw)
	r.mu.Unlock()
	return nil
}

func (r *remoteDev) bindMW(mw *MW, mr *MR, addr, length uint64, access Access) (uint32, error) {
	h, mh := r.mwHandle(mw), r.mrHandle(mr)
	if h == 0 || mh == 0 {
		return 0, fmt.Errorf("bind MW: %w: a window or region not of this device", ErrInvalidArgument)
	}
	rkey, err := r.dev.BindMW(h, &client.MR{Handle: mh}, addr, length, uint32(access))
	if err != nil {
		return 0, remoteErr("bind MW", err)
	}
	mw.Rkey = rkey
	return rkey, nil
}

func (r *remoteDev) createAH(pd *PD, av AddressVector) (*AH, error) {
	if err := pd.TryRef(); err != nil {
		return nil, fmt.Errorf("create AH: %w", err)
	}
	h, err := r.dev.CreateAH(pd.rh, qpconv.FromAV(av))
	if err != nil {
		pd.Unref()
		return nil, remoteErr("create AH", err)
	}
	ah := &qp.AH{PD: pd.PD, AV: av}
	r.mu.Lock()
	r.ahs[ah] = h
	r.mu.Unlock()
	return ah, nil
}

func (r *remoteDev) destroyAH(ah *AH) error {
	r.mu.Lock()
	h := r.ahs[ah]
	r.mu.Unlock()
	if h == 0 {
		return fmt.Errorf("destroy AH: %w: not an AH of this device, or destroyed already", ErrInvalidArgument)
	}
	if err := r.dev.DestroyAH(h); err != nil {
		return remoteErr("destroy AH", err)
	}
	r.mu.Lock()
	delete(r.ahs, ah)
	r.mu.Unlock()
	ah.PD.Unref()
	return nil
}

// remoteCQ is the source of a Dial'd device's CQ: its CQE ring.
type remoteCQ struct {
	r    *remoteDev
	mu   sync.Mutex // serialises the ring's consumer
	c    *client.CQ
	dead bool // guarded by mu: the ring is unmapped (destroyed, or the device closed)
}

func (r *remoteDev) createCQ(d *Device, depth int, onComp func(*CQ)) (*CQ, error) {
	if depth < 1 || depth > maxCQE {
		return nil, fmt.Errorf("create CQ: %w: depth %d not in [1, %d]", ErrInvalidArgument, depth, maxCQE)
	}
	c, err := r.dev.CreateCQ(uint32(depth), r.ch.Handle)
	if err != nil {
		return nil, remoteErr("create CQ", err)
	}
	src := &remoteCQ{r: r, c: c}
	x := cq.NewExternal(src)
	x.SetHandlers(onComp, nil)
	r.mu.Lock()
	r.cqs[c.Handle] = x
	src.dead = r.closed
	r.mu.Unlock()
	return x, nil
}

// Poll reads completions from the ring: no system call.
func (s *remoteCQ) Poll(out []WC) int {
	s.mu.Lock()
	rg := s.c.Ring()
	if s.dead {
		s.mu.Unlock()
		return 0
	}
	n, err := rg.Available()
	if err != nil {
		s.mu.Unlock()
		return 0
	}
	n = min(n, len(out))
	for i := range n {
		e := ring.CQE(rg.Slot(i))
		w := &out[i]
		*w = WC{WRID: e.WRID(), Status: cq.Status(e.Status()), Opcode: cq.Opcode(e.Opcode()),
			VendorErr: e.VendorErr(), ByteLen: e.ByteLen(), QPNum: e.QPNum(), SrcQP: e.SrcQP(),
			Flags: cq.Flags(e.WCFlags()), PkeyIndex: e.PKeyIndex(), SLID: e.SLID(), SL: e.SL(),
			DLIDPathBits: e.DLIDPathBits(), Solicited: e.Solicited()}
		switch {
		case w.Flags&cq.WithImm != 0:
			w.ImmData = e.ImmData()
		case w.Flags&cq.WithInv != 0:
			w.InvalidatedRkey = e.InvalidatedRKey()
		}
	}
	if n > 0 {
		rg.Release(n)
	}
	s.mu.Unlock()
	return n
}

func (s *remoteCQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return 0
	}
	n, _ := s.c.Ring().Available()
	return n
}

func (s *remoteCQ) Depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.c.CQE)
}

// Arm writes the arm request into the ring (no system call).
func (s *remoteCQ) Arm(solicitedOnly bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return false, fmt.Errorf("arm cq: %w", ErrClosed)
	}
	if st := s.c.Status(); st != 0 {
		return false, fmt.Errorf("arm cq: %w (%w)", cq.ErrOverflow, proto.Errno(st))
	}
	s.c.Arm(solicitedOnly)
	n, err := s.c.Ring().Available()
	return n > 0, err
}

func (s *remoteCQ) Resize(depth int) error {
	if depth < 1 || depth > maxCQE {
		return fmt.Errorf("resize cq: %w: depth %d not in [1, %d]", ErrInvalidArgument, depth, maxCQE)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return fmt.Errorf("resize cq: %w", ErrClosed)
	}
	if err := s.c.Resize(uint32(depth)); err != nil {
		return remoteErr("resize cq", err)
	}
	return nil
}

func (s *remoteCQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return fmt.Errorf("destroy cq: %w", ErrClosed)
	}
	if err := s.c.Destroy(); err != nil {
		return remoteErr("destroy cq", err)
	}
	s.dead = true
	s.r.mu.Lock()
	delete(s.r.cqs, s.c.Handle)
	s.r.mu.Unlock()
	return nil
}

// remoteCQOf is the daemon's CQ behind c, or nil for a CQ of another
// device.
func (r *remoteDev) remoteCQOf(c *CQ) *remoteCQ {
	if c == nil {
		return nil
	}
	s, ok := c.External().(*remoteCQ)
	if !ok || s.r != r {
		return nil
	}
	return s
}

// remoteSRQ is a Dial'd device's SRQ: its ring of receive WQEs.
type remoteSRQ struct {
	r    *remoteDev
	mu   sync.Mutex // the ring's producer
	s    *client.SRQ
	dead bool // guarded by mu: the ring is unmapped
}

func (r *remoteDev) createSRQ(pd *PD, maxWR, maxSGEs uint32) (*SRQ, error) {
	s, err := r.dev.CreateSRQ(pd.rh, maxWR, maxSGEs, 0, 0)
	if err != nil {
		return nil, remoteErr("create SRQ", err)
	}
	sh, err := qp.NewSRQ(pd.PD, r.mirror, max(maxWR, 1), max(maxSGEs, 1))
	if err != nil {
		_ = s.Destroy()
		return nil, err
	}
	x := &remoteSRQ{r: r, s: s}
	r.mu.Lock()
	r.srqs[x] = struct{}{}
	x.dead = r.closed
	r.mu.Unlock()
	return &SRQ{SRQ: sh, r: x}, nil
}

// remoteQP is a Dial'd device's QP: its rings.
type remoteQP struct {
	r   *remoteDev
	q   *client.QP
	smu sync.Mutex // the send ring's producer
	rmu sync.Mutex // the receive ring's producer
	srq *remoteSRQ
	// dead: the rings are unmapped (QP destroyed, device closed); set with
	// smu and rmu held, so a post never touches an unmapped ring.
	dead bool
}

func (r *remoteDev) createQP(pd *PD, ia QPInitAttr) (*QP, error) {
	d := pd.d
	scq, rcq := r.remoteCQOf(ia.SendCQ), r.remoteCQOf(ia.RecvCQ)
	if scq == nil || rcq == nil {
		return nil, fmt.Errorf("create QP: %w: CQs of another device", ErrInvalidArgument)
	}
	var (
		srq   *remoteSRQ
		srqH  uint32
		shSRQ *qp.SRQ
	)
	if ia.SRQ != nil {
		if ia.SRQ.r == nil {
			return nil, fmt.Errorf("create QP: %w: an SRQ of another device", ErrInvalidArgument)
		}
		srq, srqH, shSRQ = ia.SRQ.r, ia.SRQ.r.s.Handle, ia.SRQ.SRQ
	}
	switch ia.Type {
	case qp.RC, qp.UC, qp.UD:
	default:
		return nil, fmt.Errorf("create QP: %w: type %v through rvtd", ErrNotSupported, ia.Type)
	}
	c := ia.Cap
	cqp, err := r.dev.CreateQPWith(pd.rh, proto.CreateQP{Type: uint8(ia.Type), SigAll: ia.SigAll,
		SendCQ: scq.c.Handle, RecvCQ: rcq.c.Handle, SRQ: srqH,
		Cap: proto.Cap{MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE,
			MaxRecvSGE: c.MaxRecvSGE, MaxInlineData: c.MaxInlineData}})
	if err != nil {
		return nil, remoteErr("create QP", err)
	}
	// The local QP: its number, type and references (PD, CQs, SRQ).
	sh, err := qp.New(cqp.QPN, qp.Config{Type: ia.Type, PD: pd.PD, SendCQ: ia.SendCQ, RecvCQ: ia.RecvCQ, SRQ: shSRQ,
		Cap: c, SigAll: ia.SigAll, Keys: r.mirror, Limits: &r.limits})
	if err != nil {
		_ = cqp.Destroy()
		return nil, err
	}
	x := &QP{QP: sh, d: d, rhandle: cqp.Handle, r: &remoteQP{r: r, q: cqp, srq: srq}}
	r.mu.Lock()
	r.qps[cqp.Handle] = x
	x.r.dead = r.closed
	r.mu.Unlock()
	d.mu.Lock()
	d.qps[cqp.QPN] = x
	d.mu.Unlock()
	return x, nil
}

// modify asks the daemon, then applies the same change to the local QP,
// so that its attributes follow (a change the local checks would refuse
// moves its state only). State and Query still ask the daemon: it moves
// QPs on its own too (to ERR, SQE).
func (x *remoteQP) modify(local *qp.QP, a *QPAttr, mask QPAttrMask) error {
	if err := x.q.Modify(qpconv.FromQPAttr(*a), uint32(mask)); err != nil {
		return remoteErr("modify QP", err)
	}
	local.Lock()
	if _, _, err := local.ModifyLocked(a, mask); err != nil && mask&qp.AttrState != 0 {
		local.SetStateLocked(a.State)
	}
	local.Unlock()
	return nil
}

func (x *remoteQP) query() (QPAttr, error) {
	a, err := x.q.Query()
	if err != nil {
		return QPAttr{}, remoteErr("query QP", err)
	}
	return qpconv.ToQPAttr(&a), nil
}

// postSend writes the WQE records of wrs and publishes them together (all
// or none); Publish rings the doorbell only if the daemon sleeps.
func (x *remoteQP) postSend(wrs []SendWR) error {
	x.smu.Lock()
	defer x.smu.Unlock()
	if x.dead {
		return fmt.Errorf("post send: %w: QP destroyed or device closed", ErrInvalidState)
	}
	p := x.q.SendRing()
	free, err := p.Free()
	if err != nil {
		return fmt.Errorf("post send: %w: %v", ErrInvalidState, err)
	}
	if len(wrs) > free {
		return fmt.Errorf("post send: %w: %d WRs, %d free", qp.ErrQueueFull, len(wrs), free)
	}
	for i := range wrs {
		if err := x.sendRecord(ring.SendWQE(p.Slot(i)), &wrs[i]); err != nil {
			return fmt.Errorf("post send: WR %d (wr_id %#x): %w", i, wrs[i].WRID, err)
		}
	}
	if _, err := p.Publish(len(wrs)); err != nil {
		return fmt.Errorf("post send: doorbell: %w", err)
	}
	return nil
}

// sendRecord fills one send WQE record (protocol section 7).
func (x *remoteQP) sendRecord(w ring.SendWQE, wr *SendWR) error {
	clear(w[:ring.SendHeaderSize])
	w.SetWRID(wr.WRID)
	w.SetOpcode(uint8(wr.Opcode))
	w.SetSendFlags(uint32(wr.Flags))
	switch wr.Opcode {
	case qp.OpRDMAWriteWithImm, qp.OpSendWithImm:
		w.SetImmData(wr.ImmData)
	case qp.OpSendWithInv, qp.OpLocalInv:
		w.SetInvalidateRKey(wr.InvalidateRkey)
	case qp.OpBindMW:
		b := wr.Bind
		if b == nil {
			return fmt.Errorf("%w: BIND_MW without Bind", ErrInvalidArgument)
		}
		mw, mr := x.r.mwHandle(b.MW), x.r.mrHandle(b.MR)
		if mw == 0 || mr == 0 {
			return fmt.Errorf("%w: BIND_MW of a window or region not of this device", ErrInvalidArgument)
		}
		w.SetAH(mw)
		w.SetRemoteQPN(mr)
		w.SetRKey(uint32(b.Key))
		w.SetRemoteAddr(b.Addr)
		w.SetCompareAdd(b.Length)
		w.SetSwap(uint64(b.Access))
		return nil
	case qp.OpRegMR:
		return fmt.Errorf("%w: REG_MR work requests through rvtd", ErrNotSupported)
	}
	w.SetRemoteAddr(wr.RemoteAddr)
	w.SetRKey(wr.Rkey)
	w.SetCompareAdd(wr.CompareAdd)
	w.SetSwap(wr.Swap)
	if wr.AH != nil {
		x.r.mu.Lock()
		h := x.r.ahs[wr.AH]
		x.r.mu.Unlock()
		if h == 0 {
			return fmt.Errorf("%w: an AH not of this device, or destroyed", ErrInvalidArgument)
		}
		w.SetAH(h)
		w.SetRemoteQPN(wr.RemoteQPN)
		w.SetRemoteQKey(wr.RemoteQKey)
	}
	if wr.Flags&qp.Inline != 0 && len(wr.SGL) == 0 {
		in := w.Inline()
		if len(wr.InlineData) > len(in) {
			return fmt.Errorf("%w: %d bytes inline, the record holds %d", ErrInvalidArgument, len(wr.InlineData), len(in))
		}
		copy(in, wr.InlineData)
		w.SetInlineLen(uint16(len(wr.InlineData)))
		return nil
	}
	if wr.Flags&qp.Inline != 0 {
		w.SetSendFlags(uint32(wr.Flags &^ qp.Inline)) // an SGL: the daemon reads it
	}
	if len(wr.SGL) > w.MaxSGEs() {
		return fmt.Errorf("%w: %d SGEs, the QP takes %d", ErrInvalidArgument, len(wr.SGL), w.MaxSGEs())
	}
	w.SetNumSGE(uint8(len(wr.SGL)))
	for i, s := range wr.SGL {
		w.SGE(i).Set(s.Addr, s.Length, s.Lkey)
	}
	return nil
}

func (x *remoteQP) postRecv(wrs []RecvWR) error {
	if x.srq != nil {
		return fmt.Errorf("post recv: %w: the QP has an SRQ", ErrInvalidArgument)
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	if x.dead {
		return fmt.Errorf("post recv: %w: QP destroyed or device closed", ErrInvalidState)
	}
	return postRecvRing(x.q.RecvRing(), wrs)
}

// postRecvRing writes receive WQE records to p and publishes them.
func postRecvRing(p *ring.Producer, wrs []RecvWR) error {
	free, err := p.Free()
	if err != nil {
		return fmt.Errorf("post recv: %w: %v", ErrInvalidState, err)
	}
	if len(wrs) > free {
		return fmt.Errorf("post recv: %w: %d WRs, %d free", qp.ErrQueueFull, len(wrs), free)
	}
	for i := range wrs {
		w := ring.RecvWQE(p.Slot(i))
		if len(wrs[i].SGL) > w.MaxSGEs() {
			return fmt.Errorf("post recv: WR %d: %w: %d SGEs, the queue takes %d", i, ErrInvalidArgument, len(wrs[i].SGL), w.MaxSGEs())
		}
		clear(w[:ring.RecvHeaderSize])
		w.SetWRID(wrs[i].WRID)
		w.SetNumSGE(uint8(len(wrs[i].SGL)))
		for j, s := range wrs[i].SGL {
			w.SGE(j).Set(s.Addr, s.Length, s.Lkey)
		}
	}
	if _, err := p.Publish(len(wrs)); err != nil {
		return fmt.Errorf("post recv: doorbell: %w", err)
	}
	return nil
}

func (s *remoteSRQ) destroy() error {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return fmt.Errorf("destroy SRQ: %w", ErrClosed)
	}
	err := s.s.Destroy()
	s.dead = err == nil
	s.mu.Unlock()
	if err != nil {
		return remoteErr("destroy SRQ", err)
	}
	s.r.mu.Lock()
	delete(s.r.srqs, s)
	s.r.mu.Unlock()
	return nil
}

func (s *remoteSRQ) post(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return fmt.Errorf("post SRQ recv: %w: SRQ destroyed or device closed", ErrInvalidState)
	}
	return postRecvRing(s.s.Ring(), wrs)
}

// drain waits until the daemon has completed every WQE posted (the rings'
// consumer indices catch up with the producers': a slot is released when
// its completion is written).
func (x *remoteQP) drain(ctx context.Context) error {
	idle := func(p *ring.Producer, mu *sync.Mutex) bool {
		if p == nil {
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		if x.dead {
			return true
		}
		n, err := p.Free()
		return err != nil || n == p.Entries()
	}
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		if idle(x.q.SendRing(), &x.smu) && (x.srq != nil || idle(x.q.RecvRing(), &x.rmu)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (x *remoteQP) counters() map[string]uint64 {
	cs, err := x.r.dev.Counters(x.q.Handle)
	if err != nil {
		return nil
	}
	return counterMap(cs)
}

func counterMap(cs []proto.Counter) map[string]uint64 {
	m := make(map[string]uint64, len(cs))
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}

func (r *remoteDev) destroyQP(q *QP) error {
	d := q.d
	d.mu.Lock()
	if q.destroyed {
		d.mu.Unlock()
		return fmt.Errorf("destroy QP %#x: %w: destroyed already", q.Num(), ErrInvalidArgument)
	}
	q.destroyed = true
	d.mu.Unlock()
	x := q.r
	x.smu.Lock()
	x.rmu.Lock()
	err := x.q.Destroy() // unmaps the rings, even when the daemon refuses
	x.dead = true
	x.rmu.Unlock()
	x.smu.Unlock()
	if err != nil {
		return remoteErr("destroy QP", err)
	}
	r.mu.Lock()
	delete(r.qps, q.rhandle)
	r.mu.Unlock()
	d.mu.Lock()
	if d.qps[q.Num()] == q {
		delete(d.qps, q.Num())
	}
	d.mu.Unlock()
	q.Release()
	return nil
}

func (r *remoteDev) qpInfos() []QPInfo {
	es, err := r.dev.ListQPs()
	if err != nil {
		return nil
	}
	out := make([]QPInfo, 0, len(es))
	for _, e := range es {
		out = append(out, QPInfo{Num: e.QPN, Type: qp.Type(e.Type), State: qp.State(e.State),
			PID: e.PID, Comm: e.Comm, Handle: e.Handle,
			Snapshot: transportSnapshot(e)})
	}
	return out
}

func (r *remoteDev) queryPort(port uint8) (PortAttr, error) {
	a, err := r.dev.QueryPort(port)
	if err != nil {
		return PortAttr{}, remoteErr(fmt.Sprintf("query port %d", port), err)
	}
	state := "ACTIVE"
	if a.State != 4 {
		state = fmt.Sprintf("%d", a.State)
	}
	return PortAttr{State: state, MaxMTU: MTU(a.MaxMTU), ActiveMTU: MTU(a.ActiveMTU), GIDTblLen: int(a.GIDTblLen),
		PkeyTblLen: int(a.PKeyTblLen), LinkLayer: "Ethernet", LID: a.LID, SMLID: a.SMLID,
		ActiveSpeed: "software", ActiveWidth: "1X"}, nil
}

package rvtd

import (
	"encoding/binary"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// Registered memory beyond shared-memory segments: reg_mr kind 2 (client
// memory through process_vm_readv/writev, procmem.go), and fast-register
// MRs (alloc_mr, then REG_MR send WQEs).

// mrKey is an lkey without its key byte: the index and generation, which a
// fast-register MR keeps across REG_MR WQEs.
func mrKey(lkey uint32) uint32 { return lkey &^ 0xff }

// maxFastRegPages bounds alloc_mr's max_pages (a page list of 2 MiB).
const maxFastRegPages = 1 << 18

// regMRVM registers client memory the daemon reaches with process_vm:
// checked at once by reading its first and last byte (EPERM, EFAULT). It
// counts against the session's MR limit but not against mem_bytes, which
// bounds the shared memory the daemon maps: kind-2 memory costs the daemon
// nothing (it is neither mapped nor pinned).
func (ss *session) regMRVM(h uint32, m *proto.RegMR) (proto.Body, []int, error) {
	if m.Shm != 0 || m.ShmOffset != 0 || m.Length == 0 {
		return nil, nil, proto.EINVAL
	}
	if ss.proc == nil {
		// No access to the client's memory (logged at hello): the system
		// refused it (EPERM: ptrace rules, or the process is no longer
		// the client's user), or there is no pid to reach it by.
		return nil, nil, ss.procErr
	}
	ss.mu.Lock()
	p := lookupLocked[pdObj](ss, h)
	switch {
	case p == nil:
		ss.mu.Unlock()
		return nil, nil, proto.EINVAL
	case ss.nmr >= ss.srv.cfg.Limits.MRs:
		ss.mu.Unlock()
		return nil, nil, proto.ENOMEM
	}
	ss.mu.Unlock()
	// Outside the lock: two system calls on the client.
	if err := ss.proc.Probe(m.Addr, m.Length); err != nil {
		return nil, nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if lookupLocked[pdObj](ss, h) != p {
		return nil, nil, proto.EINVAL
	}
	if ss.nmr >= ss.srv.cfg.Limits.MRs {
		return nil, nil, proto.ENOMEM
	}
	mr, err := p.pd.RegMRAccessor(ss.proc, m.Addr, m.Length, m.IOVA, keys.Access(m.Access))
	if err != nil {
		return nil, nil, err
	}
	o := &mrObj{pd: p, mr: mr, iova: m.IOVA, length: m.Length, key: keyOf(p, mr.Lkey), vm: true}
	o.handle = ss.addLocked(o)
	ss.lkeys[o.key] = o
	ss.nmr++
	p.refs++
	return &proto.MRReply{MR: o.handle, LKey: mr.Lkey, RKey: mr.Rkey}, nil, nil
}

// allocMR allocates a fast-register MR: invalid (its keys fail) until a
// REG_MR WQE maps a page list and registers it.
func (ss *session) allocMR(h uint32, m *proto.AllocMR) (proto.Body, []int, error) {
	if m.MaxPages == 0 || m.MaxPages > maxFastRegPages {
		return nil, nil, proto.EINVAL
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p := lookupLocked[pdObj](ss, h)
	if p == nil {
		return nil, nil, proto.EINVAL
	}
	if ss.nmr >= ss.srv.cfg.Limits.MRs {
		return nil, nil, proto.ENOMEM
	}
	mr, err := p.pd.AllocMR(int(m.MaxPages))
	if err != nil {
		return nil, nil, err
	}
	o := &mrObj{pd: p, mr: mr, key: keyOf(p, mr.Lkey), fast: true, maxPages: m.MaxPages}
	o.handle = ss.addLocked(o)
	ss.lkeys[o.key] = o
	ss.nmr++
	p.refs++
	return &proto.MRReply{MR: o.handle, LKey: mr.Lkey, RKey: mr.Rkey}, nil, nil
}

// regMRWR decodes a REG_MR send WQE (docs/rvtd-protocol.md section 7): the
// MR by handle (ah), its new key byte (rkey), IOVA (remote_addr), length
// (compare_add), access (swap's low 32 bits) and log2 page size (swap bits
// 32-39), and the page list that SGE 0 locates: in the segment named by
// remote_qpn (SGE address and page entries are offsets in it), or with
// remote_qpn 0 in the client's own memory (client addresses, read and
// reached with process_vm). The page list is read once, here; the engine
// maps and registers it when the WQE's turn comes.
func (q *qpObj) regMRWR(w ring.SendWQE, wr qp.SendWR) (qp.SendWR, uint64, cq.Status) {
	ss := q.sess
	ss.mu.Lock()
	o := lookupLocked[mrObj](ss, w.AH())
	var sh *shmObj
	if w.RemoteQPN() != 0 {
		sh = lookupLocked[shmObj](ss, w.RemoteQPN())
	}
	ss.mu.Unlock()
	shift := uint(w.Swap()>>32) & 0xff
	if o == nil || !o.fast || o.pd != q.pd || (w.RemoteQPN() != 0 && sh == nil) ||
		shift < 3 || shift > 30 || w.Swap()>>40 != 0 || w.RKey()>>8 != 0 {
		return wr, w.WRID(), cq.LocQPOpErr
	}
	if w.NumSGE() != 1 || w.SendFlags()&uint32(qp.Inline) != 0 {
		return wr, w.WRID(), cq.LocLenErr
	}
	ps := uint64(1) << shift
	sge := w.SGE(0)
	if sge.Length()%8 != 0 || sge.Length()/8 > o.maxPages || sge.LKey() != 0 {
		return wr, w.WRID(), cq.LocLenErr
	}
	n := int(sge.Length() / 8)
	list := make([]byte, sge.Length())
	m := &qp.PageMap{PageSize: int(ps), IOVA: w.RemoteAddr(), Length: w.CompareAdd()}
	if sh == nil {
		if ss.proc == nil {
			return wr, w.WRID(), cq.LocProtErr
		}
		if k, _ := ss.proc.ReadAt(list, sge.Addr()); k != len(list) {
			return wr, w.WRID(), cq.LocProtErr
		}
		m.Acc = ss.proc
		m.Addrs = make([]uint64, n)
		for i := range m.Addrs {
			m.Addrs[i] = binary.LittleEndian.Uint64(list[8*i:])
		}
	} else {
		seg := sh.reg.Bytes()
		size := uint64(len(seg))
		if sge.Addr() > size || uint64(len(list)) > size-sge.Addr() {
			return wr, w.WRID(), cq.LocProtErr
		}
		copy(list, seg[sge.Addr():])
		m.Pages = make([][]byte, n)
		for i := range m.Pages {
			off := binary.LittleEndian.Uint64(list[8*i:])
			if off >= size {
				return wr, w.WRID(), cq.LocProtErr
			}
			// A page past the segment's end is short; MapPages accepts
			// that only for the last page, and only if it holds the
			// region's end.
			m.Pages[i] = seg[off:min(off+ps, size)]
		}
	}
	wr.Reg = &qp.RegWR{MR: o.mr, Key: uint8(w.RKey()), Access: keys.Access(uint32(w.Swap())), Map: m}
	// The MR keeps every segment a REG_MR WQE of it named from being freed
	// (shm_free is EBUSY) until it is deregistered: a WQE still queued in
	// the engine maps its pages when its turn comes.
	if sh != nil {
		ss.mu.Lock()
		if !o.segs[sh] {
			if o.segs == nil {
				o.segs = map[*shmObj]bool{}
			}
			o.segs[sh] = true
			sh.refs++
		}
		ss.mu.Unlock()
	}
	return wr, w.WRID(), 0
}

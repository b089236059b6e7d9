package rvt

// The invariants of sim_test.go, checked at the end of each seed.

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
)

func (s *sim) check() {
	for _, p := range s.pairs {
		switch p.typ {
		case qp.RC:
			p.checkRC()
		case qp.UC:
			p.checkUC(s.prof)
		default:
			p.checkUD(s.prof)
		}
		// A requester whose WR ended in an accepted RETRY_EXC_ERR is in
		// ERR; its responder did nothing wrong and stays in RTS (it never
		// sends requests of its own here).
		wantA := qp.RTS
		if p.failedWR >= 0 {
			wantA = qp.Err
		}
		if st := p.qa.State(); st != wantA {
			p.failf("requester QP %#x ends in %v, want %v", p.qa.Num(), st, wantA)
		}
		if st := p.qb.State(); st != qp.RTS {
			p.failf("responder QP %#x ends in %v, want RTS", p.qb.Num(), st)
		}
		if sn := p.qa.Conn().Snapshot(); sn.SQPosted != 0 {
			p.failf("requester QP %#x still holds %d send WQEs (next PSN %#x, unacked %#x)",
				p.qa.Num(), sn.SQPosted, uint32(sn.NextPSN), uint32(sn.UnackedPSN))
		}
		if len(p.errs) > 0 {
			s.failf("pair %d: %s", p.id, p.describe())
			s.failf("  pair %d: requester counters %v; responder counters %v", p.id, p.qa.Counters(), p.qb.Counters())
			for _, e := range p.errs {
				s.failf("  pair %d: %s", p.id, e)
			}
		}
	}
	if s.prof.name == "none" {
		for _, dv := range s.devs {
			c := dv.d.Counters()
			if c["timeouts"] != 0 {
				s.failf("dev%d: %d retransmit timeouts with no faults on the fabric (counters %v)", dv.idx, c["timeouts"], c)
			}
		}
	}
}

func (p *simPair) describe() string {
	late := 0
	for _, r := range p.recvs {
		if r.late {
			late++
		}
	}
	return fmt.Sprintf("%v dev%d QP %#x -> dev%d QP %#x, path MTU %v, timeout %d, min RNR %d, max rd_atomic %d, sgid %d, PSNs %#x/%#x, %d WRs, %d recvs (%d late at %v)",
		p.typ, p.req.idx, p.qa.Num(), p.rsp.idx, p.qb.Num(), p.mtu, p.timeout, p.minRNR, p.rdAtomic, p.sgid,
		p.psnA, p.psnB, len(p.ops), len(p.recvs), late, p.lateAt)
}

func (o *simOp) String() string {
	s := fmt.Sprintf("WR %d %v len %d", o.idx, o.op, o.size)
	if !o.signaled {
		s += " unsignalled"
	}
	if o.fence {
		s += " fence"
	}
	if o.inline {
		s += " inline"
	}
	return s
}

// checkSends checks that the signalled WRs completed successfully, once
// each, in posting order.
func (p *simPair) checkSends() {
	k := 0
	for i := range p.ops {
		o := &p.ops[i]
		if !o.signaled {
			continue
		}
		if k >= len(p.sendWCs) {
			p.failf("missing send completion for %v (and %d more): got %d of %d", o, p.expectSends()-k-1, len(p.sendWCs), p.expectSends())
			return
		}
		wc := p.sendWCs[k]
		k++
		if wc.WRID != uint64(o.idx) || wc.Status != cq.Success || wc.Opcode != o.op.WCOpcode() {
			p.failf("send completion %d: got wr_id %d status %v opcode %v, want %v success", k-1, wc.WRID, wc.Status, wc.Opcode, o)
			return
		}
	}
	if k < len(p.sendWCs) {
		p.failf("%d extra send completions, first %+v", len(p.sendWCs)-k, p.sendWCs[k])
	}
}

// simRetryExcLoss is the least configured loss probability under which an
// RC requester may legitimately exhaust its retries. A retry round makes no
// progress when the request or the first response is lost, probability
// 1-(1-loss)^2 (0.36 at 20%); retry_cnt 7 allows 8 transmissions, so 8
// such rounds in a row (some 3e-4 per attempt at 20%) occur in a few seeds
// per thousand. At 5% (1e-8 per attempt) it is a bug.
const simRetryExcLoss = 0.20

// retryExcAccepted decides whether a failed RC send completion is the
// spec-correct end of a WR under heavy loss (IBTA: the transport retry
// counter is exhausted, the WR completes with RETRY_EXC_ERR and the QP
// enters the error state), given the fault profile, the requester's
// retry_cnt and its QP counters. It returns nil if so, else why not.
func retryExcAccepted(prof simProfile, retryCnt uint8, wc WC, counters map[string]uint64) error {
	switch {
	case wc.Status != cq.RetryExcErr:
		return fmt.Errorf("status %v (%d), only %v (%d) is accepted", wc.Status, wc.Status, cq.RetryExcErr, cq.RetryExcErr)
	case prof.faults.Loss < simRetryExcLoss:
		return fmt.Errorf("profile %s loses %g of frames, retries may be exhausted only at %g or more", prof.name, prof.faults.Loss, simRetryExcLoss)
	case counters["retry_exceeded_err"] != 1:
		return fmt.Errorf("requester counter retry_exceeded_err is %d, want 1", counters["retry_exceeded_err"])
	case counters["timeouts"] < uint64(retryCnt)+1:
		return fmt.Errorf("requester counter timeouts is %d, fewer than retry_cnt+1 = %d", counters["timeouts"], retryCnt+1)
	}
	return nil
}

func (p *simPair) checkRC() {
	if k := p.firstSendErr(); k >= 0 {
		wc := p.sendWCs[k]
		err := retryExcAccepted(p.world.prof, p.retryCnt, wc, p.qa.Counters())
		if err == nil && wc.WRID >= uint64(len(p.ops)) {
			err = fmt.Errorf("wr_id %d was never posted", wc.WRID)
		}
		if err == nil {
			p.failedWR = int(wc.WRID)
			p.checkRCFailed()
			return
		}
		p.failf("send completion %d (wr_id %d, status %v) is not an accepted RETRY_EXC_ERR: %v", k, wc.WRID, wc.Status, err)
	}
	p.checkSends()
	p.checkRecvWCs()
	if len(p.recvWCs) < len(p.recvs) {
		p.failf("got %d of %d receive completions; first missing for %v", len(p.recvWCs), len(p.recvs), &p.ops[p.recvs[len(p.recvWCs)].msg])
	}
	p.compare("requester memory", p.lbuf, p.lwant, p.whereLocal)
	p.compare("responder receive memory", p.rbuf, p.rwant, p.whereRecv)
	p.compare("responder target memory", p.tbuf, p.twant, p.whereTarget)
}

// checkRCFailed checks an RC pair whose WR p.failedWR ended in an accepted
// RETRY_EXC_ERR: the WRs before it completed as usual, it completed once
// with RETRY_EXC_ERR, every later WR once with WR_FLUSH_ERR, all in order;
// the responder executed some prefix of the WRs (at least those before the
// failed one: it runs requests in PSN order, and may have run later ones
// whose responses were lost); memory holds exactly the effects of the
// successful WRs, and elsewhere either the old bytes or those the failed or
// flushed WRs would have written.
func (p *simPair) checkRCFailed() {
	f := p.failedWR
	k := 0
	for i := range p.ops {
		o := &p.ops[i]
		want := cq.WRFlushErr
		switch {
		case i < f && !o.signaled:
			continue
		case i < f:
			want = cq.Success
		case i == f:
			want = cq.RetryExcErr
		}
		if k >= len(p.sendWCs) {
			p.failf("missing send completion for %v, want %v (%d): got %d of %d", o, want, want, len(p.sendWCs), p.expectSendsAfterErr(f))
			return
		}
		wc := p.sendWCs[k]
		k++
		// The opcode of an error completion is undefined.
		if wc.WRID != uint64(i) || wc.Status != want || want == cq.Success && wc.Opcode != o.op.WCOpcode() {
			p.failf("send completion %d: got wr_id %d status %v (%d) opcode %v, want %v status %v (%d) (WR %d ended in RETRY_EXC_ERR)",
				k-1, wc.WRID, wc.Status, wc.Status, wc.Opcode, o, want, want, f)
			return
		}
	}
	if k < len(p.sendWCs) {
		p.failf("%d extra send completions after WR %d ended in RETRY_EXC_ERR, first %+v", len(p.sendWCs)-k, f, p.sendWCs[k])
	}

	// Receive completions: a prefix of the expected ones, each exact.
	if !p.checkRecvWCs() {
		return
	}
	r := len(p.recvWCs)
	nsucc := 0 // receives consumed by the WRs before the failed one
	for _, x := range p.recvs {
		if x.msg < f {
			nsucc++
		}
	}
	if r < nsucc {
		p.failf("got %d receive completions, but the %d WRs before the failed WR %d consume %d", r, f, f, nsucc)
		return
	}

	// The responder executed WRs 0..n-1 for some n >= f: the atomic words
	// and the receive completions must agree on one such n.
	get := func(off int) uint64 { return binary.NativeEndian.Uint64(p.tbuf[off:]) }
	fadd, cas, recvs := p.faddInit, p.casInit, 0
	prefix := -1
	for n := 0; n <= len(p.ops); n++ {
		if n >= f && fadd == get(p.faddWord) && cas == get(p.casWord) && recvs == r {
			prefix = n
			break
		}
		if n == len(p.ops) {
			break
		}
		o := &p.ops[n]
		switch {
		case o.op == qp.OpAtomicFetchAdd:
			fadd += o.add
		case o.op == qp.OpAtomicCmpSwp && o.add == cas:
			cas = o.swap
		}
		if o.consumesRecv() {
			recvs++
		}
	}
	p.failedNote = fmt.Sprintf("%d of %d receives consumed, %d by WRs before it", r, len(p.recvs), nsucc)
	if prefix < 0 {
		p.failf("no prefix of WRs %d.. explains the responder: FETCH_ADD word %#x, CMP_SWP word %#x, %d receive completions (WR %d ended in RETRY_EXC_ERR)",
			f, get(p.faddWord), get(p.casWord), r, f)
	}

	// Requester memory: sources never change; READ destinations and
	// atomic results of the failed and flushed WRs hold the old bytes or
	// the right ones.
	lalt := append([]byte(nil), p.lwant...)
	for i := f; i < len(p.ops); i++ {
		if o := &p.ops[i]; o.op == qp.OpRDMARead || o.op.Atomic() {
			for _, x := range o.local {
				copy(lalt[x.off:x.off+x.n], p.linit[x.off:x.off+x.n])
			}
		}
	}
	p.compareEither("requester memory", p.lbuf, p.lwant, lalt, p.whereLocal)

	// Responder receive memory: the completed receives hold their
	// messages; the next one may be partly written (a multi-packet SEND
	// cut short); the rest are untouched.
	rwant := append([]byte(nil), p.rinit...)
	ralt := rwant
	for k, x := range p.recvs {
		switch {
		case k < r:
			for _, pc := range x.pieces {
				copy(rwant[pc.off:pc.off+pc.n], p.rwant[pc.off:pc.off+pc.n])
			}
		case k == r:
			ralt = append([]byte(nil), rwant...)
			for _, pc := range x.pieces {
				copy(ralt[pc.off:pc.off+pc.n], p.rwant[pc.off:pc.off+pc.n])
			}
		}
	}
	p.compareEither("responder receive memory", p.rbuf, rwant, ralt, p.whereRecv)

	// Responder target memory: WRITE targets of the failed and flushed
	// WRs hold the old bytes or the written ones; the atomic words were
	// checked above.
	talt := append([]byte(nil), p.twant...)
	for i := f; i < len(p.ops); i++ {
		if o := &p.ops[i]; o.op == qp.OpRDMAWrite || o.op == qp.OpRDMAWriteWithImm {
			x := o.remote
			copy(talt[x.off:x.off+x.n], p.tinit[x.off:x.off+x.n])
		}
	}
	twant := append([]byte(nil), p.twant...)
	for _, off := range []int{p.faddWord, p.casWord} {
		copy(twant[off:off+8], p.tbuf[off:off+8])
		copy(talt[off:off+8], p.tbuf[off:off+8])
	}
	p.compareEither("responder target memory", p.tbuf, twant, talt, p.whereTarget)
}

// checkRecvWCs checks that the receive completions are, in order, the
// first of those expected, each exact. It reports whether they are.
func (p *simPair) checkRecvWCs() bool {
	for k, wc := range p.recvWCs {
		if k >= len(p.recvs) {
			p.failf("%d extra receive completions, first %+v", len(p.recvWCs)-k, wc)
			return false
		}
		o := &p.ops[p.recvs[k].msg]
		want := cq.WC{WRID: uint64(k), Status: cq.Success, Opcode: cq.Recv, ByteLen: uint32(o.size)}
		if o.op == qp.OpRDMAWriteWithImm {
			want.Opcode = cq.RecvRDMAWithImm
		}
		if o.op.HasImm() {
			want.Flags, want.ImmData = cq.WithImm, o.imm
		}
		if wc.WRID != want.WRID || wc.Status != want.Status || wc.Opcode != want.Opcode ||
			wc.ByteLen != want.ByteLen || wc.Flags&cq.WithImm != want.Flags || wc.ImmData != want.ImmData {
			p.failf("receive completion %d (for %v): got wr_id %d status %v opcode %v len %d flags %v imm %#x, want wr_id %d success %v len %d flags %v imm %#x",
				k, o, wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.Flags, wc.ImmData,
				want.WRID, want.Opcode, want.ByteLen, want.Flags, want.ImmData)
			return false
		}
	}
	return true
}

// compareEither is compare where each byte may also equal alt.
func (p *simPair) compareEither(what string, got, want, alt []byte, where func(off int) string) {
	n := 0
	first := -1
	for i := range got {
		if got[i] != want[i] && got[i] != alt[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return
	}
	p.failf("%s: %d bytes differ, first at offset %d (%s): got % x, want % x or % x (WR %d ended in RETRY_EXC_ERR)", what, n, first, where(first),
		got[first:min(first+8, len(got))], want[first:min(first+8, len(want))], alt[first:min(first+8, len(alt))], p.failedWR)
}

// compare reports the first byte of got that differs from want, and says
// what lives there.
func (p *simPair) compare(what string, got, want []byte, where func(off int) string) {
	if bytes.Equal(got, want) {
		return
	}
	n := 0
	first := -1
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	p.failf("%s: %d bytes differ, first at offset %d (%s): got % x, want % x", what, n, first, where(first),
		got[first:min(first+8, len(got))], want[first:min(first+8, len(want))])
}

func inPiece(ps []piece, off int) bool {
	for _, x := range ps {
		if off >= x.off && off < x.off+x.n {
			return true
		}
	}
	return false
}

func (p *simPair) whereLocal(off int) string {
	for i := range p.ops {
		if inPiece(p.ops[i].local, off) {
			return "local buffer of " + p.ops[i].String()
		}
	}
	return "outside every local buffer"
}

func (p *simPair) whereRecv(off int) string {
	for k, r := range p.recvs {
		if inPiece(r.pieces, off) {
			s := fmt.Sprintf("receive WQE %d", k)
			if r.msg >= 0 {
				s += " for " + p.ops[r.msg].String()
			}
			return s
		}
	}
	return "outside every receive buffer"
}

func (p *simPair) whereTarget(off int) string {
	switch {
	case off >= p.faddWord && off < p.faddWord+8:
		return "FETCH_ADD word"
	case off >= p.casWord && off < p.casWord+8:
		return "CMP_SWP word"
	}
	for i := range p.ops {
		o := &p.ops[i]
		if !o.op.Atomic() && inPiece([]piece{o.remote}, off) {
			return "remote buffer of " + o.String()
		}
	}
	return "outside every remote buffer"
}

// matchMsg finds the message a UC or UD receive completion carries,
// starting at op index from (for in-order profiles) or anywhere. It
// returns the op index or -1.
func (p *simPair) matchMsg(wc WC, data []byte, from int) int {
	for i := from; i < len(p.ops); i++ {
		o := &p.ops[i]
		if !o.consumesRecv() || wc.ByteLen != uint32(o.size) {
			continue
		}
		if (wc.Opcode == cq.RecvRDMAWithImm) != (o.op == qp.OpRDMAWriteWithImm) {
			continue
		}
		if (wc.Flags&cq.WithImm != 0) != o.op.HasImm() || o.op.HasImm() && wc.ImmData != o.imm {
			continue
		}
		if o.op.Send() && !bytes.Equal(data[:min(len(data), o.size)], simData(p.id, i, o.size)) {
			continue
		}
		return i
	}
	return -1
}

// checkUnreliable checks UC and UD receive completions: each intact and,
// if the profile keeps order, in order and at most once; if it loses
// nothing, every message arrived. grh is the bytes before the payload.
func (p *simPair) checkUnreliable(prof simProfile, grh int) {
	p.checkSends()
	next := 0
	got := 0
	for k, wc := range p.recvWCs {
		if wc.WRID != uint64(k) {
			p.failf("receive completion %d has wr_id %d: WQEs consumed out of order", k, wc.WRID)
			return
		}
		if wc.Status != cq.Success {
			p.failf("receive completion %d: status %v (%+v)", k, wc.Status, wc)
			return
		}
		if int(wc.ByteLen) < grh {
			p.failf("receive completion %d: length %d shorter than the GRH", k, wc.ByteLen)
			return
		}
		wc.ByteLen -= uint32(grh)
		data := getPieces(p.rbuf, p.recvs[k].pieces)[grh:]
		from := 0
		if prof.ordered() {
			from = next
		}
		i := p.matchMsg(wc, data, from)
		if i < 0 {
			if prof.ordered() && p.matchMsg(wc, data, 0) >= 0 {
				p.failf("receive completion %d (%+v) repeats or reorders an earlier message (next expected at WR %d)", k, wc, next)
			} else {
				p.failf("receive completion %d (%+v) matches no message sent: corrupt or misplaced data%s", k, wc, p.foreign(wc, data))
			}
			return
		}
		next = i + 1
		got++
	}
	want := 0
	anyLate := false
	for _, r := range p.recvs {
		want++
		anyLate = anyLate || r.late
	}
	if prof.exact() && !anyLate && got != want {
		p.failf("got %d of %d messages with no faults on the fabric", got, want)
	}
	// Sources never change.
	p.compare("requester memory", p.lbuf, p.lwant, p.whereLocal)
	// Targets hold, byte by byte, what they held or what was written.
	if prof.exact() && !anyLate {
		p.compare("responder target memory", p.tbuf, p.twant, p.whereTarget)
		return
	}
	for i := range p.tbuf {
		if p.tbuf[i] != p.tinit[i] && p.tbuf[i] != p.twant[i] {
			p.failf("responder target memory at %d (%s): %#x is neither the old %#x nor the written %#x",
				i, p.whereTarget(i), p.tbuf[i], p.tinit[i], p.twant[i])
			return
		}
	}
}

// foreign says which other pair's message a stray completion carries, if
// any (a packet delivered to the wrong QP).
func (p *simPair) foreign(wc WC, data []byte) string {
	for _, q := range p.world.pairs {
		if q == p {
			continue
		}
		if i := q.matchMsg(wc, data, 0); i >= 0 {
			return fmt.Sprintf("; it is %v of pair %d (%v dev%d QP %#x -> dev%d QP %#x): delivered to the wrong QP",
				&q.ops[i], q.id, q.typ, q.req.idx, q.qa.Num(), q.rsp.idx, q.qb.Num())
		}
	}
	return ""
}

func (p *simPair) checkUC(prof simProfile) { p.checkUnreliable(prof, 0) }

func (p *simPair) checkUD(prof simProfile) { p.checkUnreliable(prof, 40) }

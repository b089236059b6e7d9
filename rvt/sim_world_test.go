package rvt

// The simulated world of sim_test.go: devices on one fabric under one
// manual clock, QP pairs brought up between them, work posted by timers,
// and the run loop that polls and advances virtual time.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// simBudget is the virtual time a seed may take before it counts as hung.
const simBudget = 120 * time.Second

// simMaxSteps bounds clock steps (a livelock that keeps timers due).
const simMaxSteps = 2_000_000

// simWallBudget bounds the real time of one seed in TestSim (a seed takes
// ~2 s under the race detector, beside the other seeds running in parallel).
const simWallBudget = 3 * time.Second * raceSlowdown

// simSeedBytes is the payload budget of one seed.
const simSeedBytes = 512 << 10

// simRetryCnt is every RC requester's retry_cnt: 7 retries, 8 transmissions.
const simRetryCnt = 7

type simDev struct {
	idx   int
	d     *Device
	pd    *PD
	cq    *CQ
	byQPN map[uint32]*simPair
}

type sim struct {
	seed      uint64
	rng       *rand.Rand
	prof      simProfile
	clk       *clock.Manual
	fab       *fabric.Fabric
	ethMTU    int
	activeMTU MTU
	devs      []*simDev
	pairs     []*simPair
	errs      []string
	wcLog     hash.Hash
	skip      map[qp.Opcode]bool // SIM_SKIP_OPS: opcodes replaced by SEND (diagnosis only)
	wall      time.Duration      // real-time backstop; a seed that hits it fails either way
	pktBudget uint64             // packets the workload may send, retransmissions included
	steps     int
}

// simResult is the outcome of one seed.
type simResult struct {
	profile string
	summary string
	errs    []string
	// retryExc describes the RC pairs that ended in an accepted,
	// spec-correct RETRY_EXC_ERR (see retryExcAccepted).
	retryExc []string
	digest   [32]byte
}

func (s *sim) failf(format string, args ...any) {
	if len(s.errs) < 40 {
		s.errs = append(s.errs, fmt.Sprintf(format, args...))
	}
}

// runSim runs one seed from scratch and checks it.
func runSim(seed uint64, wallBudget time.Duration) (res simResult) {
	s := &sim{
		seed:  seed,
		rng:   rand.New(rand.NewPCG(seed, 0x73696d756c617465)),
		prof:  simProfiles[seed%uint64(len(simProfiles))],
		clk:   clock.NewManual(),
		wcLog: sha256.New(),
		wall:  wallBudget,
	}
	res.profile = s.prof.name
	s.skip = simSkipOps()
	defer func() {
		for _, dv := range s.devs {
			dv.d.Close()
		}
	}()
	if err := s.setup(); err != nil {
		res.errs = []string{"setup: " + err.Error()}
		return res
	}
	s.run()
	s.check()
	res.errs = s.errs
	res.digest = s.digest()
	nrc, nuc, nud, nops, bytes := 0, 0, 0, 0, 0
	for _, p := range s.pairs {
		switch p.typ {
		case qp.RC:
			nrc++
		case qp.UC:
			nuc++
		default:
			nud++
		}
		nops += len(p.ops)
		for _, o := range p.ops {
			bytes += o.size
		}
	}
	res.summary = fmt.Sprintf("%d devices, eth MTU %d, pairs RC/UC/UD %d/%d/%d, %d WRs, %d bytes, virtual %v, %d steps",
		len(s.devs), s.ethMTU, nrc, nuc, nud, nops, bytes, s.clk.Now().Sub(simEpoch), s.steps)
	for _, p := range s.pairs {
		if p.failedWR >= 0 {
			res.retryExc = append(res.retryExc, fmt.Sprintf("pair %d %v (%s)", p.id, &p.ops[p.failedWR], p.failedNote))
		}
	}
	if len(res.retryExc) > 0 {
		res.summary += fmt.Sprintf(", RETRY_EXC_ERR accepted on %s", strings.Join(res.retryExc, ", "))
	}
	return res
}

// simSkipOps parses SIM_SKIP_OPS, a comma-separated list of opcode names
// (RDMA_READ, ATOMIC_FETCH_AND_ADD, ...) the generator replaces by SEND. It
// is for narrowing down a failure, never for the committed run.
func simSkipOps() map[qp.Opcode]bool {
	m := map[qp.Opcode]bool{}
	for _, name := range strings.Split(os.Getenv("SIM_SKIP_OPS"), ",") {
		for op := qp.Opcode(0); op < 16; op++ {
			if name != "" && op.String() == name {
				m[op] = true
			}
		}
	}
	return m
}

var simEpoch = clock.NewManual().Now()

func (s *sim) setup() error {
	rng := s.rng
	s.fab = fabric.New(s.clk, int64(s.seed))
	s.ethMTU = []int{1500, 4096 + 200, 9000}[rng.IntN(3)]
	ndev := 2 + rng.IntN(3)
	for i := range ndev {
		mac := netdev.MAC{0x02, 0x53, 0x56, 0, 0, byte(i + 1)}
		port := s.fab.NewPort(mac, s.ethMTU)
		var link netdev.Link = port
		if s.prof.faults != (faults.Profile{}) {
			link = faults.Wrap(port, s.clk, int64(s.seed)*1000003+int64(i), s.prof.faults)
		}
		v6 := netip.AddrFrom16([16]byte{0xfe, 0x80, 15: byte(i + 1)})
		v4 := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		s.fab.AddAddr(v6, mac)
		s.fab.AddAddr(v4, mac)
		d, err := Open(Options{
			Name: fmt.Sprintf("sim%d", i), Inline: true, Clock: s.clk, Link: link, MAC: mac,
			Addrs: []netip.Addr{v6, v4}, Resolve: s.fab.Resolve, MTU: s.ethMTU,
			// Every third seed with early retries that follow the
			// measured round trip (not drawn from rng: the other seeds
			// replay as before).
			RetransmitProbeRTT: s.seed%3 == 0,
		})
		if err != nil {
			return err
		}
		dv := &simDev{idx: i, d: d, byQPN: map[uint32]*simPair{}}
		s.devs = append(s.devs, dv)
		if dv.pd, err = d.AllocPD(); err != nil {
			return err
		}
		if dv.cq, err = d.CreateCQ(1<<16, nil); err != nil {
			return err
		}
		d.Subscribe(func(ev Event) {
			switch ev.Type {
			case transport.EventCommEst, transport.EventSQDrained:
			default:
				s.failf("dev%d: async event %v on QP %#x", i, ev.Type, ev.QPN)
			}
		})
	}
	s.activeMTU = s.devs[0].d.Engine().ActiveMTU()

	npairs := 2 + rng.IntN(11)
	budget := simSeedBytes
	for id := range npairs {
		typ := qp.RC
		switch r := rng.IntN(100); {
		case r < 15:
			typ = qp.UC
		case r < 25:
			typ = qp.UD
		}
		a := s.devs[rng.IntN(ndev)]
		b := s.devs[rng.IntN(ndev)]
		if a == b && rng.IntN(3) > 0 {
			b = s.devs[(a.idx+1)%ndev]
		}
		p, used := s.genPair(id, typ, a, b, max(budget, 0))
		budget -= used
		if err := s.bringUp(p); err != nil {
			return fmt.Errorf("pair %d: %w", id, err)
		}
		s.pairs = append(s.pairs, p)
	}
	// Every packet may be sent some 30 times over (loss, retries, RNR
	// NAKs every few microseconds of virtual time for up to 30 ms) before
	// the run counts as a storm.
	for _, p := range s.pairs {
		s.schedule(p)
		for _, o := range p.ops {
			s.pktBudget += 30 * uint64(o.size/p.mtu.Bytes()+2)
		}
	}
	s.pktBudget += 200000
	return nil
}

const simAccess = keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic

func (s *sim) bringUp(p *simPair) error {
	var err error
	if p.lmr, err = p.req.pd.Reg(p.lbuf, keys.LocalWrite); err != nil {
		return err
	}
	if p.rmr, err = p.rsp.pd.Reg(p.rbuf, keys.LocalWrite); err != nil {
		return err
	}
	if p.tmr, err = p.rsp.pd.Reg(p.tbuf, simAccess); err != nil {
		return err
	}
	nsend, nrecv := uint32(len(p.ops)+1), uint32(len(p.recvs)+1)
	mk := func(dv *simDev, sq, rq uint32) (*QP, error) {
		return dv.pd.CreateQP(QPInitAttr{Type: p.typ, SendCQ: dv.cq, RecvCQ: dv.cq,
			Cap: QPCap{MaxSendWR: sq, MaxRecvWR: rq, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	}
	if p.qa, err = mk(p.req, nsend, 1); err != nil {
		return err
	}
	if p.qb, err = mk(p.rsp, 1, nrecv); err != nil {
		return err
	}
	p.req.byQPN[p.qa.Num()] = p
	p.rsp.byQPN[p.qb.Num()] = p
	gidA, err := p.req.d.QueryGID(1, int(p.sgid))
	if err != nil {
		return err
	}
	gidB, err := p.rsp.d.QueryGID(1, int(p.sgid))
	if err != nil {
		return err
	}
	if err := s.modifyUp(p, p.qa, p.qb.Num(), gidB, p.psnA, p.psnB); err != nil {
		return fmt.Errorf("requester: %w", err)
	}
	if err := s.modifyUp(p, p.qb, p.qa.Num(), gidA, p.psnB, p.psnA); err != nil {
		return fmt.Errorf("responder: %w", err)
	}
	if p.typ == qp.UD {
		if p.ah, err = p.req.pd.CreateAH(AddressVector{DGID: gidB, SGIDIndex: p.sgid, HopLimit: 64, Port: 1}); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) modifyUp(p *simPair, q *QP, dest uint32, dgid GID, sqpsn, rqpsn uint32) error {
	init := QPAttr{State: qp.Init, Port: 1, AccessFlags: simAccess &^ keys.LocalWrite, QKey: 0x1111}
	if err := q.Modify(&init, qp.RequiredAttrs(p.typ, qp.Reset, qp.Init)); err != nil {
		return err
	}
	rtr := QPAttr{State: qp.RTR, PathMTU: p.mtu, DestQPN: dest, RQPSN: rqpsn,
		MaxDestRdAtomic: 16, MinRNRTimer: p.minRNR,
		AV: AddressVector{DGID: dgid, SGIDIndex: p.sgid, HopLimit: 64, Port: 1}}
	if err := q.Modify(&rtr, qp.RequiredAttrs(p.typ, qp.Init, qp.RTR)); err != nil {
		return err
	}
	rts := QPAttr{State: qp.RTS, SQPSN: sqpsn, Timeout: p.timeout, RetryCnt: p.retryCnt, RNRRetry: 7, MaxRdAtomic: p.rdAtomic}
	return q.Modify(&rts, qp.RequiredAttrs(p.typ, qp.RTR, qp.RTS))
}

func sges(mr *MR, ps []piece) []SGE {
	out := make([]SGE, 0, len(ps))
	for _, x := range ps {
		out = append(out, SGE{Addr: mr.IOVA + uint64(x.off), Length: uint32(x.n), Lkey: mr.Lkey})
	}
	return out
}

// schedule posts the pair's receive WQEs (now, and the late ones later) and
// its send WRs in chunks, by timers on the manual clock.
func (s *sim) schedule(p *simPair) {
	var now, late []RecvWR
	for k, r := range p.recvs {
		wr := RecvWR{WRID: uint64(k), SGL: sges(p.rmr, r.pieces)}
		if r.late {
			late = append(late, wr)
		} else {
			now = append(now, wr)
		}
	}
	post := func(wrs []RecvWR) {
		if len(wrs) == 0 {
			return
		}
		if err := p.qb.PostRecv(wrs...); err != nil {
			p.failf("post recv: %v", err)
		}
	}
	post(now)
	if len(late) > 0 {
		s.clk.AfterFunc(p.lateAt, func() { post(late) })
	}
	for c, at := range p.chunks {
		var wrs []SendWR
		for i := range p.ops {
			if o := &p.ops[i]; o.chunk == c {
				wrs = append(wrs, s.sendWR(p, o))
			}
		}
		if len(wrs) == 0 {
			continue
		}
		s.clk.AfterFunc(at, func() {
			if err := p.qa.PostSend(wrs...); err != nil {
				p.failf("post send chunk %d: %v", c, err)
			}
		})
	}
}

func (s *sim) sendWR(p *simPair, o *simOp) SendWR {
	wr := SendWR{WRID: uint64(o.idx), Opcode: o.op}
	if o.signaled {
		wr.Flags |= qp.Signaled
	}
	if o.fence {
		wr.Flags |= qp.Fence
	}
	if o.op.HasImm() {
		wr.ImmData = o.imm
	}
	if o.inline {
		wr.Flags |= qp.Inline
		wr.InlineData = getPieces(p.lbuf, o.local)
	} else {
		wr.SGL = sges(p.lmr, o.local)
	}
	if o.op == qp.OpRDMAWrite || o.op == qp.OpRDMAWriteWithImm || o.op == qp.OpRDMARead || o.op.Atomic() {
		wr.RemoteAddr = p.tmr.IOVA + uint64(o.remote.off)
		wr.Rkey = p.tmr.Rkey
	}
	if o.op.Atomic() {
		wr.CompareAdd, wr.Swap = o.add, o.swap
	}
	if p.typ == qp.UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.ah, p.qb.Num(), 0x1111
	}
	return wr
}

func (p *simPair) failf(format string, args ...any) {
	if len(p.errs) < 20 {
		p.errs = append(p.errs, fmt.Sprintf(format, args...))
	}
}

// expectSends is how many send completions the pair's requester produces.
func (p *simPair) expectSends() int {
	n := 0
	for _, o := range p.ops {
		if o.signaled {
			n++
		}
	}
	return n
}

// firstSendErr is the index in sendWCs of the first unsuccessful send
// completion, or -1.
func (p *simPair) firstSendErr() int {
	for k := range p.sendWCs {
		if p.sendWCs[k].Status != cq.Success {
			return k
		}
	}
	return -1
}

// expectSendsAfterErr is how many send completions an RC requester produces
// when WR f ends in error: the signalled WRs before it, its own (error
// completions are always generated) and a flush for every later WR.
func (p *simPair) expectSendsAfterErr(f int) int {
	n := 0
	for i, o := range p.ops {
		if i >= f || o.signaled {
			n++
		}
	}
	return n
}

// done reports whether the pair has every completion it must have.
func (p *simPair) done() bool {
	if p.typ == qp.RC {
		if k := p.firstSendErr(); k >= 0 {
			// The QP is in ERR: the rest of the send queue flushes, and
			// receives for the failed and flushed WRs may stay unconsumed.
			f := min(int(p.sendWCs[k].WRID), len(p.ops))
			return len(p.sendWCs) >= p.expectSendsAfterErr(f)
		}
	}
	if len(p.sendWCs) < p.expectSends() {
		return false
	}
	return p.typ != qp.RC || len(p.recvWCs) >= len(p.recvs)
}

func (s *sim) pollAll() {
	buf := make([]WC, 256)
	for _, dv := range s.devs {
		for {
			n := dv.cq.Poll(buf)
			for i := range buf[:n] {
				s.logWC(dv, &buf[i])
				wc := buf[i]
				p := dv.byQPN[wc.QPNum]
				switch {
				case p == nil:
					s.failf("dev%d: completion for unknown QP: %+v", dv.idx, wc)
				case p.req == dv && p.qa.Num() == wc.QPNum && wc.Opcode < cq.Recv:
					p.sendWCs = append(p.sendWCs, wc)
				case p.rsp == dv && p.qb.Num() == wc.QPNum && wc.Opcode >= cq.Recv:
					p.recvWCs = append(p.recvWCs, wc)
				default:
					p.failf("completion on the wrong side: %+v", wc)
				}
			}
			if n < len(buf) {
				break
			}
		}
	}
}

func (s *sim) logWC(dv *simDev, wc *WC) {
	var b [64]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(dv.idx))
	binary.LittleEndian.PutUint64(b[8:], wc.WRID)
	b[16], b[17] = byte(wc.Status), byte(wc.Opcode)
	binary.LittleEndian.PutUint32(b[20:], wc.ByteLen)
	binary.LittleEndian.PutUint32(b[24:], wc.ImmData)
	binary.LittleEndian.PutUint32(b[28:], wc.QPNum)
	binary.LittleEndian.PutUint32(b[32:], wc.SrcQP)
	binary.LittleEndian.PutUint32(b[36:], uint32(wc.Flags))
	binary.LittleEndian.PutUint64(b[40:], uint64(s.clk.Now().Sub(simEpoch)))
	s.wcLog.Write(b[:])
}

// run advances virtual time until every pair is done and the clock has no
// pending timers, or the budget runs out.
func (s *sim) run() {
	deadline := simEpoch.Add(simBudget)
	wall := time.Now()
	for {
		if s.steps%256 == 0 && time.Since(wall) > s.wall {
			s.failf("too slow: %v of wall time, %d clock steps, virtual time %v", time.Since(wall), s.steps, s.clk.Now().Sub(simEpoch))
			for _, dv := range s.devs {
				s.failf("dev%d counters: %v", dv.idx, dv.d.Counters())
			}
			for _, p := range s.pairs {
				if !p.done() {
					sn := p.qa.Conn().Snapshot()
					s.failf("pair %d not done (%d/%d sends, %d/%d recvs): %s; requester %+v", p.id, len(p.sendWCs), p.expectSends(), len(p.recvWCs), len(p.recvs), p.describe(), sn)
				}
			}
			return
		}
		s.pollAll()
		all := true
		for _, p := range s.pairs {
			all = all && p.done()
		}
		if all && s.clk.Pending() == 0 {
			if sent, dev := s.sentPkts(), s.devSentPkts(); sent != dev || sent == 0 && len(s.pairs) > 0 {
				s.failf("the retransmission-storm check counted %d packets sent, the devices %d", sent, dev)
			}
			return
		}
		if s.clk.Now().After(deadline) {
			if all {
				s.failf("all completions arrived but %d timers are still pending after %v of virtual time", s.clk.Pending(), simBudget)
			} else {
				s.failf("hang: completions missing after %v of virtual time", simBudget)
			}
			return
		}
		if sent := s.sentPkts(); sent > s.pktBudget {
			s.failf("retransmission storm: %d packets sent, budget %d for this workload (virtual time %v)", sent, s.pktBudget, s.clk.Now().Sub(simEpoch))
			for _, dv := range s.devs {
				s.failf("dev%d counters: %v", dv.idx, dv.d.Counters())
			}
			return
		}
		if s.steps >= simMaxSteps {
			s.failf("livelock: %d clock steps, virtual time %v", s.steps, s.clk.Now().Sub(simEpoch))
			return
		}
		if !s.clk.AdvanceToNext() {
			s.pollAll()
			for _, p := range s.pairs {
				if !p.done() {
					s.failf("hang: no timer pending and completions missing (virtual time %v)", s.clk.Now().Sub(simEpoch))
					return
				}
			}
			return
		}
		s.steps++
	}
}

// sentPkts is the packets the pairs' QPs sent so far. Sent packets are
// counted per QP (the engine's own counters get them only when a QP is
// destroyed), and Device.Counters, which adds them up, builds a map: too
// slow for every clock step. run checks at the end that the sum is the
// devices' sent_pkts.
func (s *sim) sentPkts() uint64 {
	var n uint64
	for _, p := range s.pairs {
		n += p.qa.Conn().Counters().Get(transport.SentPkts) + p.qb.Conn().Counters().Get(transport.SentPkts)
	}
	return n
}

// devSentPkts is the devices' sent_pkts.
func (s *sim) devSentPkts() uint64 {
	var n uint64
	for _, dv := range s.devs {
		n += dv.d.Counters()[transport.SentPkts.String()]
	}
	return n
}

// digest hashes everything observable: completions (with their virtual
// times), device and QP counters, final memory and the clock.
func (s *sim) digest() [32]byte {
	h := sha256.New()
	h.Write(s.wcLog.Sum(nil))
	fmt.Fprintf(h, "now=%d\n", s.clk.Now().UnixNano())
	for _, dv := range s.devs {
		writeCounters(h, fmt.Sprintf("dev%d", dv.idx), dv.d.Counters())
		for _, qi := range dv.d.QPs() {
			fmt.Fprintf(h, "qp %#x %v next=%d una=%d epsn=%d msn=%d\n", qi.Num, qi.State, qi.NextPSN, qi.UnackedPSN, qi.ExpectedPSN, qi.MSN)
			writeCounters(h, "qp", qi.Counters)
		}
	}
	for _, p := range s.pairs {
		h.Write(p.lbuf)
		h.Write(p.rbuf)
		h.Write(p.tbuf)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func writeCounters(h hash.Hash, who string, m map[string]uint64) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(h, "%s %s=%d\n", who, k, m[k])
	}
}

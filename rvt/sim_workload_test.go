package rvt

// The workload generator of the deterministic simulation (sim_test.go):
// QP pairs, their work requests, receive WQEs and the memory layout, all
// drawn from the seed. Every buffer's expected final image is computed here,
// when the workload is made, for the checks at the end.

import (
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
)

// simProfile is a fault profile: what every device's link does to frames it
// sends, plus the largest message size the profile can afford.
type simProfile struct {
	name    string
	faults  faults.Profile
	maxSize int
}

// simProfiles are chosen by seed % len(simProfiles), so a seed names its
// profile.
var simProfiles = []simProfile{
	{name: "none", maxSize: 1 << 20},
	{name: "loss1%", faults: faults.Profile{Loss: 0.01}, maxSize: 1 << 20},
	{name: "loss5%", faults: faults.Profile{Loss: 0.05}, maxSize: 256 << 10},
	{name: "loss20%", faults: faults.Profile{Loss: 0.20}, maxSize: 32 << 10},
	{name: "dup5%", faults: faults.Profile{Duplicate: 0.05}, maxSize: 1 << 20},
	{name: "reorder5%", faults: faults.Profile{Reorder: 0.05}, maxSize: 1 << 20},
	{name: "delay", faults: faults.Profile{Delay: 50 * time.Microsecond}, maxSize: 1 << 20},
	{name: "delay+jitter", faults: faults.Profile{Delay: 20 * time.Microsecond, Jitter: 2 * time.Microsecond, BandwidthBps: 10e9}, maxSize: 1 << 20},
	{name: "corrupt2%", faults: faults.Profile{Corrupt: 0.02}, maxSize: 256 << 10},
	{name: "combo", faults: faults.Profile{Loss: 0.02, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01,
		Delay: 10 * time.Microsecond, Jitter: 1 * time.Microsecond, BandwidthBps: 25e9}, maxSize: 64 << 10},
}

// exact reports whether unreliable transports (UC, UD) deliver every message
// exactly once and in order under the profile: no loss, duplication,
// reordering or corruption.
func (p simProfile) exact() bool {
	f := p.faults
	return f.Loss == 0 && f.Duplicate == 0 && f.Reorder == 0 && f.Corrupt == 0 && f.Jitter == 0
}

// ordered reports whether UC and UD messages that arrive arrive in order and
// at most once (only loss, or nothing, may happen to them).
func (p simProfile) ordered() bool {
	f := p.faults
	return f.Duplicate == 0 && f.Reorder == 0 && f.Jitter == 0 && f.Corrupt == 0
}

// piece is a contiguous part of a buffer.
type piece struct{ off, n int }

// layout hands out offsets in one buffer, with random gaps between
// allocations so that a stray write lands on bytes that must not change.
type layout struct {
	size int
	rng  *rand.Rand
}

func (l *layout) alloc(n, align int) int {
	l.size += l.rng.IntN(24)
	if align > 1 {
		l.size = (l.size + align - 1) / align * align
	}
	off := l.size
	l.size += n
	return off
}

// pieces splits n bytes into 1..maxParts scattered pieces.
func (l *layout) pieces(n, maxParts int) []piece {
	parts := 1 + l.rng.IntN(maxParts)
	if n < parts {
		parts = max(1, n)
	}
	if n == 0 {
		return nil
	}
	cuts := []int{0, n}
	for len(cuts) < parts+1 {
		c := 1 + l.rng.IntN(n-1)
		dup := false
		for _, x := range cuts {
			dup = dup || x == c
		}
		if !dup {
			cuts = append(cuts, c)
		}
	}
	sortInts(cuts)
	out := make([]piece, 0, parts)
	for i := 1; i < len(cuts); i++ {
		m := cuts[i] - cuts[i-1]
		out = append(out, piece{l.alloc(m, 1), m})
	}
	return out
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// simOp is one send work request of a pair.
type simOp struct {
	idx      int
	op       qp.Opcode
	size     int
	signaled bool
	fence    bool
	inline   bool
	imm      uint32
	chunk    int // which PostSend call posts it

	local  []piece // requester: source (SEND, WRITE) or destination (READ, atomic result)
	remote piece   // responder target: WRITE target, READ source, atomic word
	recv   int     // the receive WQE it consumes, or -1

	add, swap uint64 // FETCH_ADD addend; CMP_SWP compare (add) and swap
	orig      uint64 // expected original value returned by an atomic
}

// consumesRecv reports whether the op takes a receive WQE at the responder.
func (o *simOp) consumesRecv() bool {
	return o.op.Send() || o.op == qp.OpRDMAWriteWithImm
}

// simRecv is one receive WQE of a pair's responder.
type simRecv struct {
	size   int
	pieces []piece
	msg    int // the op expected to consume it (RC), -1 if unknown
	late   bool
}

// simPair is a requester QP on one device and a responder QP on another
// (or the same) device, with the work between them.
type simPair struct {
	id       int
	typ      QPType
	req, rsp *simDev
	mtu      MTU
	timeout  uint8
	minRNR   uint8
	rdAtomic uint8
	sgid     uint8
	psnA     uint32 // requester's first PSN
	psnB     uint32
	chunks   []time.Duration // when each PostSend call happens
	lateAt   time.Duration   // when late receive WQEs are posted

	ops   []simOp
	recvs []simRecv

	// Buffers, their initial and expected final images.
	lbuf, rbuf, tbuf    []byte
	lwant, rwant, twant []byte
	linit, rinit, tinit []byte
	retryCnt            uint8 // the requester's retry_cnt (simRetryCnt)
	lmr, rmr, tmr       *MR

	faddWord, casWord int
	faddInit, casInit uint64

	qa, qb *QP
	ah     *AH
	world  *sim

	// Results.
	sendWCs []WC
	recvWCs []WC
	errs    []string
	// failedWR is the WR that ended in an accepted RETRY_EXC_ERR, or -1.
	failedWR int
	// failedNote says how far the responder got past failedWR.
	failedNote string
}

// simData is the payload of message msg of pair id: a pattern nobody else
// writes.
func simData(id, msg, n int) []byte {
	b := make([]byte, n)
	simFill(b, uint64(id)<<32|uint64(msg)<<4|1)
	return b
}

// simFill fills b with a xorshift pattern derived from key.
func simFill(b []byte, key uint64) {
	x := key*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if i+8 <= len(b) {
			binary.LittleEndian.PutUint64(b[i:], x)
			continue
		}
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
}

func putPieces(buf []byte, ps []piece, data []byte) {
	for _, p := range ps {
		n := copy(buf[p.off:p.off+p.n], data)
		data = data[n:]
	}
}

func getPieces(buf []byte, ps []piece) []byte {
	var out []byte
	for _, p := range ps {
		out = append(out, buf[p.off:p.off+p.n]...)
	}
	return out
}

// simSize draws a message size weighted towards small ones.
func simSize(rng *rand.Rand, maxSize int) int {
	var n int
	switch r := rng.IntN(100); {
	case r < 8:
		n = 0
	case r < 50:
		n = 1 + rng.IntN(64)
	case r < 75:
		n = 65 + rng.IntN(4096-64)
	case r < 92:
		n = 4097 + rng.IntN(60000)
	case r < 98:
		n = 64<<10 + rng.IntN(192<<10)
	default:
		n = 256<<10 + rng.IntN(768<<10+1)
	}
	return min(n, maxSize)
}

// weighted picks an index by weight.
func weighted(rng *rand.Rand, w []int) int {
	sum := 0
	for _, x := range w {
		sum += x
	}
	r := rng.IntN(sum)
	for i, x := range w {
		if r < x {
			return i
		}
		r -= x
	}
	return len(w) - 1
}

var (
	rcOps = []qp.Opcode{qp.OpSend, qp.OpSendWithImm, qp.OpRDMAWrite, qp.OpRDMAWriteWithImm,
		qp.OpRDMARead, qp.OpAtomicFetchAdd, qp.OpAtomicCmpSwp}
	rcWeights = []int{25, 10, 20, 10, 20, 8, 7}
	ucOps     = []qp.Opcode{qp.OpSend, qp.OpSendWithImm, qp.OpRDMAWrite, qp.OpRDMAWriteWithImm}
	ucWeights = []int{35, 15, 35, 15}
	udOps     = []qp.Opcode{qp.OpSend, qp.OpSendWithImm}
	udWeights = []int{70, 30}
)

// genPair draws the work of one pair. budget is the byte budget left for
// the seed; the pair's total is returned.
func (s *sim) genPair(id int, typ QPType, req, rsp *simDev, budget int) (*simPair, int) {
	rng := s.rng
	p := &simPair{id: id, typ: typ, req: req, rsp: rsp, world: s, retryCnt: simRetryCnt, failedWR: -1}
	active := int(s.activeMTU)
	p.mtu = qp.MTU(1 + rng.IntN(int(s.activeMTU)))
	_ = active
	p.timeout = uint8(10 + rng.IntN(5))
	p.minRNR = uint8(1 + rng.IntN(16))
	p.rdAtomic = uint8(1 + rng.IntN(16))
	p.sgid = uint8(rng.IntN(2))
	p.psnA, p.psnB = simPSN(rng), simPSN(rng)

	nops := 1 + rng.IntN(30)
	if rng.IntN(10) == 0 {
		nops = 40 + rng.IntN(60)
	}
	ops, weights := rcOps, rcWeights
	switch typ {
	case qp.UC:
		ops, weights = ucOps, ucWeights
	case qp.UD:
		ops, weights = udOps, udWeights
	}
	maxSize := s.prof.maxSize
	if typ == qp.UD {
		maxSize = min(maxSize, s.activeMTU.Bytes())
	}
	nchunks := 1 + rng.IntN(min(4, nops))
	p.chunks = make([]time.Duration, nchunks)
	for i := 1; i < nchunks; i++ {
		p.chunks[i] = p.chunks[i-1] + time.Duration(rng.IntN(3000))*time.Microsecond
	}
	late := rng.IntN(4) == 0
	p.lateAt = time.Duration(1+rng.IntN(30000)) * time.Microsecond

	ll := &layout{rng: rng}
	rl := &layout{rng: rng}
	tl := &layout{rng: rng}
	p.faddWord = tl.alloc(8, 8)
	p.casWord = tl.alloc(8, 8)
	p.faddInit, p.casInit = rng.Uint64(), rng.Uint64()>>rng.IntN(64)
	fadd, cas := p.faddInit, p.casInit
	total := 0
	maxMsg := 0
	for i := range nops {
		o := simOp{idx: i, op: ops[weighted(rng, weights)], recv: -1}
		if s.skip[o.op] {
			o.op = qp.OpSend // diagnostic only: SIM_SKIP_OPS
		}
		o.size = simSize(rng, maxSize)
		if total+o.size > budget {
			o.size = min(o.size, rng.IntN(257))
		}
		o.chunk = i * nchunks / nops
		o.signaled = rng.IntN(10) < 7 || i%8 == 7 || i == nops-1
		o.fence = rng.IntN(10) == 0
		o.imm = rng.Uint32()
		switch {
		case o.op.Atomic():
			o.size = 8
			o.local = []piece{{ll.alloc(8, 8), 8}}
			if o.op == qp.OpAtomicFetchAdd {
				o.add = rng.Uint64() >> rng.IntN(64)
				o.remote = piece{p.faddWord, 8}
				o.orig = fadd
				fadd += o.add
			} else {
				o.remote = piece{p.casWord, 8}
				o.orig = cas
				o.add = cas
				if rng.IntN(3) == 0 {
					o.add = cas ^ (1 << rng.IntN(64))
				}
				o.swap = rng.Uint64()
				if o.add == cas {
					cas = o.swap
				}
			}
		case o.op == qp.OpRDMARead:
			o.local = ll.pieces(o.size, 3)
			o.remote = piece{tl.alloc(o.size, 1), o.size}
		default:
			if o.size <= 64 && rng.IntN(3) == 0 {
				o.inline = true
				o.local = []piece{{ll.alloc(o.size, 1), o.size}}
			} else {
				o.local = ll.pieces(o.size, 3)
			}
			if o.op == qp.OpRDMAWrite || o.op == qp.OpRDMAWriteWithImm {
				o.remote = piece{tl.alloc(o.size, 1), o.size}
			}
		}
		total += o.size
		if o.consumesRecv() {
			o.recv = len(p.recvs)
			p.recvs = append(p.recvs, simRecv{msg: i})
			maxMsg = max(maxMsg, o.size)
		}
		p.ops = append(p.ops, o)
	}
	// Receive WQEs: RC gets one per consuming message, sized for it (plus
	// slack); UC and UD may see any message in any WQE (loss), so each is
	// big enough for the largest, and UD adds the 40-byte GRH.
	firstLate := len(p.recvs)
	if late {
		firstLate = rng.IntN(len(p.recvs) + 1)
	}
	for k := range p.recvs {
		r := &p.recvs[k]
		o := &p.ops[r.msg]
		switch typ {
		case qp.RC:
			r.size = o.size
			if o.op == qp.OpRDMAWriteWithImm {
				r.size = rng.IntN(16) // WRITE_WITH_IMM places no data
			}
		case qp.UC:
			r.size = maxMsg
		default:
			r.size = 40 + maxMsg
		}
		r.size += rng.IntN(3) * rng.IntN(32)
		r.pieces = rl.pieces(r.size, 3)
		r.late = k >= firstLate // receive WQEs are posted in order
		if typ != qp.RC {
			r.msg = -1
		}
	}

	// Buffers and their images.
	p.lbuf = make([]byte, ll.size+8)
	p.rbuf = make([]byte, rl.size+8)
	p.tbuf = make([]byte, tl.size+8)
	simFill(p.lbuf, uint64(id)<<32|0xA)
	simFill(p.rbuf, uint64(id)<<32|0xB)
	simFill(p.tbuf, uint64(id)<<32|0xC)
	binary.NativeEndian.PutUint64(p.tbuf[p.faddWord:], p.faddInit)
	binary.NativeEndian.PutUint64(p.tbuf[p.casWord:], p.casInit)
	for i := range p.ops {
		o := &p.ops[i]
		switch {
		case o.op == qp.OpRDMARead:
			putPieces(p.tbuf, []piece{o.remote}, simData(id, i, o.size))
		case !o.op.Atomic():
			putPieces(p.lbuf, o.local, simData(id, i, o.size))
		}
	}
	p.lwant = append([]byte(nil), p.lbuf...)
	p.rwant = append([]byte(nil), p.rbuf...)
	p.twant = append([]byte(nil), p.tbuf...)
	p.linit = append([]byte(nil), p.lbuf...)
	p.rinit = append([]byte(nil), p.rbuf...)
	p.tinit = append([]byte(nil), p.tbuf...)
	binary.NativeEndian.PutUint64(p.twant[p.faddWord:], fadd)
	binary.NativeEndian.PutUint64(p.twant[p.casWord:], cas)
	for i := range p.ops {
		o := &p.ops[i]
		d := simData(id, i, o.size)
		switch {
		case o.op == qp.OpRDMARead:
			putPieces(p.lwant, o.local, d)
		case o.op.Atomic():
			binary.NativeEndian.PutUint64(p.lwant[o.local[0].off:], o.orig)
		case o.op == qp.OpRDMAWrite || o.op == qp.OpRDMAWriteWithImm:
			putPieces(p.twant, []piece{o.remote}, d)
		}
		if o.recv >= 0 && o.op.Send() && typ == qp.RC {
			putPieces(p.rwant, p.recvs[o.recv].pieces, d)
		}
	}
	return p, total
}

// simPSN draws a starting PSN, often close to the 24-bit wrap.
func simPSN(rng *rand.Rand) uint32 {
	if rng.IntN(4) == 0 {
		return 0xFFFFFF - uint32(rng.IntN(64))
	}
	return rng.Uint32() & 0xFFFFFF
}

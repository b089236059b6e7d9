package rvt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// The loopback ACK hand-off (transport/ackdirect.go) and the loopback
// requests without a BTH (transport/bare.go) must not change what a
// program sees. Each case below runs once in each ackMode on a loopback
// device with the inline executor and a manual clock, which makes a run
// reproducible: with every ACK a packet and every request a BTH
// (SetLoopbackACKPackets, SetLoopbackRequestHeaders), the reference, and
// with the hand-off, bare requests or both. The completions (all of them,
// in the order one CQ gives them), the QPs' states and PSNs and the
// device's counters must be the same in every mode, and a mode with the
// hand-off must have used it.

// ackMode is how a loopback device carries requests and ACKs.
type ackMode struct {
	name    string
	packets bool // every ACK a packet (no hand-off)
	headers bool // every request with a BTH, parsed
}

// ackModes: the reference (packets and headers) first.
var ackModes = []ackMode{
	{"packets", true, true},
	{"hand-off", false, true},
	{"bare requests", true, false},
	{"hand-off and bare requests", false, false},
}

// ackWorld is a connected RC pair on one loopback device.
type ackWorld struct {
	n     *node
	clk   *clock.Manual
	a, b  *QP
	src   *MR
	dst   *MR
	trace []string
}

type ackCase struct {
	name    string
	credits bool
	at      func(*rcAttrs)
	run     func(t *testing.T, w *ackWorld)
}

func newAckWorld(t *testing.T, m ackMode, credits bool, at rcAttrs) *ackWorld {
	clk := clock.NewManual()
	n := newNode(t, Options{Inline: true, Clock: clk, Credits: credits})
	n.d.eng.SetLoopbackACKPackets(m.packets)
	n.d.eng.SetLoopbackRequestHeaders(m.headers)
	w := &ackWorld{n: n, clk: clk, a: n.qp(t, qp.RC), b: n.qp(t, qp.RC)}
	connect(t, w.a, n.d, w.b, n.d, at)
	w.src, w.dst = n.mr(t, 1<<16), n.mr(t, 1<<16)
	return w
}

// recv posts k receives of 64 bytes on b, WR IDs from id.
func (w *ackWorld) recv(t *testing.T, id uint64, k int) { w.recvN(t, id, k, 64) }

// recvN posts k receives of size bytes (at most 4096) on b, WR IDs from id.
func (w *ackWorld) recvN(t *testing.T, id uint64, k int, size uint32) {
	t.Helper()
	for i := range k {
		off := uint64(size) * uint64(int(id)+i) % (1 << 15)
		require.NoError(t, w.b.PostRecv(RecvWR{WRID: id + uint64(i), SGL: sge(w.dst, off, size)}))
	}
}

// sends returns k 8-byte SENDs, WR IDs from id, every third unsignaled.
func (w *ackWorld) sends(id uint64, k int) []SendWR {
	wrs := make([]SendWR, k)
	for i := range wrs {
		wrs[i] = SendWR{WRID: id + uint64(i), Opcode: qp.OpSend, SGL: sge(w.src, uint64(8*i), 8)}
		if i%3 != 2 {
			wrs[i].Flags = qp.Signaled
		}
	}
	return wrs
}

// reap takes every completion now on the CQ into the trace.
func (w *ackWorld) reap() int {
	buf := make([]WC, 64)
	got := 0
	for {
		k := w.n.cq.Poll(buf)
		if k == 0 {
			return got
		}
		for _, wc := range buf[:k] {
			w.trace = append(w.trace, fmt.Sprintf("wc %+v", wc))
		}
		got += k
	}
}

// step moves the clock to the next timer, reaping before and after.
func (w *ackWorld) step() bool {
	w.reap()
	ok := w.clk.AdvanceToNext()
	w.reap()
	return ok
}

// settle runs the clock's timers until none is left, or a bound.
func (w *ackWorld) settle() {
	for i := 0; i < 64 && w.step(); i++ {
	}
}

// final adds the QPs' states and transport state and the counters.
func (w *ackWorld) final() {
	w.reap()
	for _, q := range []*QP{w.a, w.b} {
		s := q.Conn().Snapshot()
		w.trace = append(w.trace, fmt.Sprintf("qp %#x %v next %v unacked %v expected %v msn %d sq %d rq %d counters %v",
			q.Num(), q.State(), s.NextPSN, s.UnackedPSN, s.ExpectedPSN, s.MSN, s.SQPosted, s.RQPosted, s.Counters))
	}
	w.trace = append(w.trace, fmt.Sprintf("counters %v", w.n.d.Counters()))
}

func (w *ackWorld) directACKs() uint64 {
	return w.a.Conn().Snapshot().DirectACKs + w.b.Conn().Snapshot().DirectACKs
}

var ackCases = []ackCase{
	{name: "sends in post lists", run: func(t *testing.T, w *ackWorld) {
		w.recv(t, 1000, 200)
		id := uint64(1)
		for _, k := range []int{1, 1, 3, 16, 2, 16, 1, 7, 64, 1} {
			require.NoError(t, w.a.PostSend(w.sends(id, k)...))
			id += uint64(k)
			w.reap()
		}
		w.settle()
	}},
	{name: "every operation", run: func(t *testing.T, w *ackWorld) {
		w.recvN(t, 1000, 12, 4096)
		wrs := []SendWR{
			{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(w.src, 0, 8)},
			{WRID: 2, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(w.src, 0, 3000), RemoteAddr: w.dst.IOVA + 8192, Rkey: w.dst.Rkey},
			{WRID: 3, Opcode: qp.OpSend, SGL: sge(w.src, 0, 8)},
			{WRID: 4, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge(w.src, 16384, 2500), RemoteAddr: w.dst.IOVA + 8192, Rkey: w.dst.Rkey},
			{WRID: 5, Opcode: qp.OpSendWithImm, Flags: qp.Signaled, SGL: sge(w.src, 0, 8), ImmData: 0x1234},
			{WRID: 6, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, SGL: sge(w.src, 32768, 8), RemoteAddr: w.dst.IOVA + 40000, Rkey: w.dst.Rkey, CompareAdd: 3},
			{WRID: 7, Opcode: qp.OpRDMAWriteWithImm, Flags: qp.Signaled, SGL: sge(w.src, 0, 8), RemoteAddr: w.dst.IOVA + 8192, Rkey: w.dst.Rkey, ImmData: 9},
			{WRID: 8, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(w.src, 0, 3000)},
		}
		require.NoError(t, w.a.PostSend(wrs...))
		for _, wr := range wrs {
			require.NoError(t, w.a.PostSend(wr)) // and one at a time
			w.reap()
		}
		w.settle()
	}},
	{name: "RNR NAK then receives", run: func(t *testing.T, w *ackWorld) {
		require.NoError(t, w.a.PostSend(w.sends(1, 4)...))
		w.reap()
		w.step() // the RNR wait ends: retried, NAKed again
		w.recv(t, 1000, 8)
		w.settle()
		require.NoError(t, w.a.PostSend(w.sends(10, 2)...))
		w.settle()
	}},
	{name: "RNR retries exceeded", at: func(at *rcAttrs) { at.rnr = 1 }, run: func(t *testing.T, w *ackWorld) {
		w.recv(t, 1000, 2)
		require.NoError(t, w.a.PostSend(w.sends(1, 5)...))
		w.settle()
	}},
	{name: "remote access error", run: func(t *testing.T, w *ackWorld) {
		w.recv(t, 1000, 8)
		require.NoError(t, w.a.PostSend(w.sends(1, 2)...))
		require.NoError(t, w.a.PostSend(
			SendWR{WRID: 3, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(w.src, 0, 8)},
			SendWR{WRID: 4, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(w.src, 0, 8), RemoteAddr: w.dst.IOVA, Rkey: w.dst.Rkey ^ 0x5500},
			SendWR{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(w.src, 0, 8)}))
		w.settle()
	}},
	{name: "inline, solicited, multi-packet and gathered SENDs", run: func(t *testing.T, w *ackWorld) {
		w.recvN(t, 1000, 16, 4096)
		two := append(sge(w.src, 0, 5), sge(w.src, 4096, 7)...) // not contiguous: gathered
		wrs := []SendWR{
			{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Inline, InlineData: []byte("inline, 13 B")},
			{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Solicited, SGL: sge(w.src, 0, 8)},
			{WRID: 3, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(w.src, 0, 3001)},
			{WRID: 4, Opcode: qp.OpSendWithImm, Flags: qp.Signaled | qp.Solicited, SGL: sge(w.src, 0, 2048), ImmData: 77},
			{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: two},
			{WRID: 6, Opcode: qp.OpSend, Flags: qp.Signaled},
			{WRID: 7, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Inline, InlineData: []byte{1, 2, 3}},
			{WRID: 8, Opcode: qp.OpRDMAWriteWithImm, Flags: qp.Signaled | qp.Solicited, SGL: sge(w.src, 0, 2500), RemoteAddr: w.dst.IOVA + 8192, Rkey: w.dst.Rkey, ImmData: 5},
			{WRID: 9, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, SGL: sge(w.src, 32768, 8), RemoteAddr: w.dst.IOVA + 40000, Rkey: w.dst.Rkey, CompareAdd: 0, Swap: 6},
			{WRID: 10, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge(w.src, 16384, 8), RemoteAddr: w.dst.IOVA + 40000, Rkey: w.dst.Rkey},
		}
		for _, wr := range wrs {
			require.NoError(t, w.a.PostSend(wr))
			w.reap()
		}
		require.NoError(t, w.a.PostSend(wrs...))
		w.settle()
	}},
	{name: "send with invalidate", run: func(t *testing.T, w *ackWorld) {
		// b fast-registers an MR; a's SEND_WITH_INV invalidates it; a
		// second one names a key no longer valid, a third a key that
		// never was.
		fr, err := w.n.pd.AllocMR(1)
		require.NoError(t, err)
		require.NoError(t, fr.MapPages([][]byte{make([]byte, 4096)}, 4096, 0x7000000, 4096))
		require.NoError(t, w.b.PostSend(SendWR{WRID: 1, Opcode: qp.OpRegMR, Flags: qp.Signaled,
			Reg: &qp.RegWR{MR: fr, Key: 0x42, Access: keys.LocalWrite | keys.RemoteWrite}}))
		w.reap()
		w.recv(t, 1000, 8)
		for i, rkey := range []uint32{fr.Rkey, fr.Rkey, 0x1234500} {
			require.NoError(t, w.a.PostSend(SendWR{WRID: uint64(10 + i), Opcode: qp.OpSendWithInv,
				InvalidateRkey: rkey, Flags: qp.Signaled, SGL: sge(w.src, 0, 8)}))
			w.reap()
		}
		w.settle()
	}},
	{name: "credits", credits: true, run: func(t *testing.T, w *ackWorld) {
		w.recv(t, 1000, 3)
		require.NoError(t, w.a.PostSend(w.sends(1, 8)...))
		w.reap()
		w.step()
		w.recv(t, 2000, 2)
		w.reap()
		w.step()
		w.recv(t, 3000, 8)
		w.settle()
	}},
}

func TestLoopbackACKHandOffKeepsSemantics(t *testing.T) {
	for _, c := range ackCases {
		t.Run(c.name, func(t *testing.T) {
			at := defaultAttrs()
			if c.at != nil {
				c.at(&at)
			}
			var ref []string
			for _, m := range ackModes {
				w := newAckWorld(t, m, c.credits, at)
				c.run(t, w)
				w.final()
				if m.packets {
					require.Zero(t, w.directACKs(), m.name)
				} else {
					require.NotZero(t, w.directACKs(), "%s: the hand-off was never used", m.name)
				}
				if ref == nil {
					ref = w.trace
					continue
				}
				require.Equal(t, ref, w.trace, "packets (first) against %s (second)", m.name)
			}
		})
	}
}

// TestLoopbackACKHandOffSendOrder: signaled SENDs complete in the order
// posted, each once, and every receive completes, with the hand-off.
func TestLoopbackACKHandOffSendOrder(t *testing.T) {
	for _, workers := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "workers"}[workers], func(t *testing.T) {
			n := newNode(t, Options{Workers: map[bool]int{false: 0, true: 2}[workers]})
			a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
			connect(t, a, n.d, b, n.d, defaultAttrs())
			src, dst := n.mr(t, 4096), n.mr(t, 1<<16)
			const total = 600
			var want []uint64
			posted, recvd := 0, 0
			var sends, recvs []uint64
			buf := make([]WC, 64)
			for i := 0; i < 200; i++ {
				require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(100000 + i), SGL: sge(dst, uint64(64*i), 64)}))
			}
			deadline := time.Now().Add(20 * time.Second)
			for len(sends) < len(want) || recvd < total || posted < total {
				if posted < total && posted-recvd < 100 {
					k := min(1+posted%17, total-posted)
					wrs := make([]SendWR, k)
					for i := range wrs {
						id := uint64(posted + i)
						wrs[i] = SendWR{WRID: id, Opcode: qp.OpSend, SGL: sge(src, 0, 8)}
						if id%4 != 3 {
							wrs[i].Flags = qp.Signaled
							want = append(want, id)
						}
					}
					require.NoError(t, a.PostSend(wrs...))
					posted += k
				}
				k := n.cq.Poll(buf)
				for _, wc := range buf[:k] {
					require.Equal(t, cq.Success, wc.Status, "%+v", wc)
					if wc.Opcode&0x80 != 0 {
						recvs = append(recvs, wc.WRID)
						recvd++
						require.NoError(t, b.PostRecv(RecvWR{WRID: wc.WRID, SGL: sge(dst, 64*(wc.WRID-100000), 64)}))
					} else {
						sends = append(sends, wc.WRID)
					}
				}
				require.False(t, time.Now().After(deadline), "stuck: %d posted, %d sends, %d receives", posted, len(sends), recvd)
			}
			require.Equal(t, want, sends)
			require.Len(t, recvs, total)
			require.NotZero(t, b.Conn().Snapshot().DirectACKs, "the hand-off was never used")
			c := n.d.Counters()
			require.EqualValues(t, total, c["rdma_sends"])
			require.EqualValues(t, total, c["rdma_recvs"])
			require.Equal(t, c["sent_pkts"], c["rcvd_pkts"], "%v", c)
		})
	}
}

// TestLoopbackACKHandOffDestroyMidFlight: QPs destroyed while SENDs and
// their ACKs are under way (from another goroutine, on a worker pool)
// leave no task waiting and no completion twice; the counters only grow.
func TestLoopbackACKHandOffDestroyMidFlight(t *testing.T) {
	for _, victim := range []string{"requester", "responder"} {
		t.Run(victim, func(t *testing.T) {
			for round := range 20 {
				n := newNode(t, Options{Workers: 2})
				a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
				connect(t, a, n.d, b, n.d, defaultAttrs())
				src, dst := n.mr(t, 4096), n.mr(t, 4096)
				for range 200 {
					require.NoError(t, b.PostRecv(RecvWR{SGL: sge(dst, 0, 64)}))
				}
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 200; i++ {
						if a.PostSend(SendWR{WRID: uint64(i), Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}) != nil {
							return // destroyed, or the queue is full
						}
					}
				}()
				time.Sleep(time.Duration(round*20) * time.Microsecond)
				before := n.d.Counters()
				q := map[string]*QP{"requester": a, "responder": b}[victim]
				done := make(chan error, 1)
				go func() { done <- q.Destroy() }()
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("Destroy waited for ever")
				}
				wg.Wait()
				if victim == "responder" {
					// The requester goes on alone: drain it.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					require.NoError(t, a.Drain(ctx))
					cancel()
				}
				seen := map[uint64]bool{}
				buf := make([]WC, 64)
				for k := n.cq.Poll(buf); k > 0; k = n.cq.Poll(buf) {
					for _, wc := range buf[:k] {
						if wc.Opcode&0x80 != 0 || wc.QPNum != a.Num() {
							continue
						}
						require.False(t, seen[wc.WRID], "WR %d completed twice", wc.WRID)
						seen[wc.WRID] = true
					}
				}
				after := n.d.Counters()
				for k, v := range before {
					require.GreaterOrEqual(t, after[k], v, "counter %s went down", k)
				}
			}
		})
	}
}

// TestFabricACKsArePackets: between two devices (a link between them) the
// responder's ACKs are packets on the link, never handed over.
func TestFabricACKsArePackets(t *testing.T) {
	clk := clock.NewManual()
	na, nb := fabricNodes(t, clk)
	a, b := na.qp(t, qp.RC), nb.qp(t, qp.RC)
	connect(t, a, na.d, b, nb.d, defaultAttrs())
	src, dst := na.mr(t, 4096), nb.mr(t, 4096)
	for range 8 {
		require.NoError(t, b.PostRecv(RecvWR{SGL: sge(dst, 0, 64)}))
	}
	for i := range 8 {
		require.NoError(t, a.PostSend(SendWR{WRID: uint64(i), Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 8)}))
	}
	for _, wc := range poll(t, na.cq, 8, func() { clk.AdvanceToNext() }) {
		require.Equal(t, cq.Success, wc.Status)
	}
	require.Zero(t, b.Conn().Snapshot().DirectACKs)
	// The ACKs crossed the link: device A received them as frames.
	require.NotZero(t, na.d.Counters()["rcvd_pkts"])
}

// TestLoopbackACKHandOffRandom is TestLoopbackACKHandOffKeepsSemantics
// over random workloads: post lists of random operations and sizes,
// receives posted short or late (RNR NAKs), credits on or off, now and
// then a bad R_Key, with the clock stepped between.
func TestLoopbackACKHandOffRandom(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	var used uint64
	errs := 0
	for seed := 1; seed <= seeds; seed++ {
		run := func(m ackMode) ([]string, uint64) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			at := defaultAttrs()
			at.rnr = []uint8{7, 7, 7, 3, 1, 0}[rng.IntN(6)]
			credits := rng.IntN(2) == 0
			w := newAckWorld(t, m, credits, at)
			id := uint64(1)
			for range 40 {
				switch rng.IntN(4) {
				case 0:
					w.recvN(t, 10000+id, rng.IntN(24), 4096)
					id += 24
				case 1:
					w.reap()
					w.step()
				default:
					wrs := make([]SendWR, 1+rng.IntN(12))
					for i := range wrs {
						wrs[i] = w.randomWR(rng, id)
						id++
					}
					if err := w.a.PostSend(wrs...); err != nil {
						w.trace = append(w.trace, "post: "+err.Error())
					}
					w.reap()
				}
			}
			w.settle()
			w.final()
			return w.trace, w.directACKs()
		}
		packets, _ := run(ackModes[0])
		for _, m := range ackModes[1:] {
			trace, n := run(m)
			require.Equal(t, packets, trace, "seed %d: packets (first) against %s (second)", seed, m.name)
			used += n
		}
		if strings.Contains(packets[len(packets)-3], " ERR ") {
			errs++
		}
	}
	require.NotZero(t, used, "the hand-off was never used")
	t.Logf("%d seeds, %d direct ACKs, %d ended with the requester in ERR", seeds, used, errs)
}

// randomWR is one random send WR with WR ID id.
func (w *ackWorld) randomWR(rng *rand.Rand, id uint64) SendWR {
	n := uint32(rng.IntN(4097))
	if rng.IntN(2) == 0 {
		n = 8
	}
	wr := SendWR{WRID: id, SGL: sge(w.src, 0, n), RemoteAddr: w.dst.IOVA + 40000, Rkey: w.dst.Rkey}
	if rng.IntN(4) != 0 {
		wr.Flags = qp.Signaled
	}
	if rng.IntN(8) == 0 {
		wr.Flags |= qp.Solicited
	}
	if rng.IntN(600) == 0 {
		wr.Opcode, wr.Rkey = qp.OpRDMAWrite, w.dst.Rkey^0x7700 // a remote access error
		return wr
	}
	switch k := rng.IntN(19); {
	case k < 7:
		wr.Opcode = qp.OpSend
	case k < 8:
		// Inline, or from two SGEs (gathered, never in place).
		wr.Opcode = qp.OpSend
		if n <= 64 {
			wr.Flags |= qp.Inline
			wr.SGL, wr.InlineData = nil, make([]byte, n)
		} else {
			wr.SGL = append(sge(w.src, 0, n/2), sge(w.src, 8192, n-n/2)...)
		}
	case k < 9 && rng.IntN(100) == 0:
		wr.Opcode, wr.InvalidateRkey = qp.OpSendWithInv, 0x5a5a00 // no such key: an invalid request
	case k < 9:
		wr.Opcode = qp.OpSend
	case k < 11:
		wr.Opcode, wr.ImmData = qp.OpSendWithImm, uint32(id)
	case k < 14:
		wr.Opcode = qp.OpRDMAWrite
	case k < 15:
		wr.Opcode, wr.ImmData = qp.OpRDMAWriteWithImm, uint32(id)
	case k < 17:
		wr.Opcode, wr.SGL = qp.OpRDMARead, sge(w.src, 8192, n)
	default:
		wr.Opcode, wr.SGL, wr.CompareAdd = qp.OpAtomicFetchAdd, sge(w.src, 16384, 8), 1
	}
	return wr
}

package rvt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
)

// hereNodes opens two worker-pool devices on a fabric, with
// Options.ReceiveHere as given.
func hereNodes(t *testing.T, here bool) (na, nb *node) {
	fab := fabric.New(clock.Real(), 1)
	open := func(i byte) *node {
		o := fabricOptions(fab, i)
		o.Workers, o.ReceiveHere = 2, here
		return newNode(t, o)
	}
	return open(1), open(2)
}

// goroutineID is the calling goroutine's number, from its stack trace.
func goroutineID() string {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	return f[1] // "goroutine N [running]:"
}

// With ReceiveHere, a SEND that is its run's only packet is received on
// the poster's goroutine as its run ends: the receiving CQ's completion
// handler runs there, inside PostSend (when the requester was idle, so
// that PostSend ran it: nearly always). Without, the receiver's work is
// always a worker's.
func TestReceiveHereRunsOnSender(t *testing.T) {
	for _, here := range []bool{false, true} {
		t.Run(map[bool]string{false: "workers", true: "here"}[here], func(t *testing.T) {
			na, nb := hereNodes(t, here)
			me := goroutineID()
			var onPoster atomic.Int32
			cb, err := nb.d.CreateCQ(64, func(*CQ) {
				if goroutineID() == me {
					onPoster.Add(1)
				}
			})
			require.NoError(t, err)
			a := na.qp(t, qp.RC)
			b, err := nb.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: cb, RecvCQ: cb,
				Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			connect(t, a, na.d, b, nb.d, defaultAttrs())
			src, dst := na.mr(t, 64), nb.mr(t, 64)
			const n = 100
			for i := range n {
				require.NoError(t, cb.Arm(false))
				require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(i), SGL: []SGE{{Addr: dst.IOVA, Length: 64, Lkey: dst.Lkey}}}))
				require.NoError(t, a.PostSend(SendWR{WRID: uint64(i), Opcode: qp.OpSend, Flags: qp.Signaled,
					SGL: []SGE{{Addr: src.IOVA, Length: 8, Lkey: src.Lkey}}}))
				w := poll(t, cb, 1, nil)
				require.Zero(t, w[0].Status)
				require.Equal(t, uint64(i), w[0].WRID)
				w = poll(t, na.cq, 1, nil)
				require.Zero(t, w[0].Status)
			}
			t.Logf("%d of %d receive completions handled on the posting goroutine", onPoster.Load(), n)
			if here {
				require.NotZero(t, onPoster.Load())
			} else {
				require.Zero(t, onPoster.Load())
			}
		})
	}
}

// A mixed workload on both settings: ping-pongs (single packets, handled
// at the sender) beside 64 KiB WRITEs and READs (bursts, handed to the
// workers) and atomics on several QPs from several goroutines. Every
// completion succeeds and every byte lands. Run with -race.
func TestReceiveHereTraffic(t *testing.T) {
	for _, here := range []bool{false, true} {
		t.Run(map[bool]string{false: "workers", true: "here"}[here], func(t *testing.T) {
			na, nb := hereNodes(t, here)
			const qps, rounds, size = 4, 50, 64 << 10
			errs := make(chan error, qps)
			for k := range qps {
				// Each pair has CQs of its own, so that each goroutine
				// polls only its completions.
				ca, err := na.d.CreateCQ(1024, nil)
				require.NoError(t, err)
				cb, err := nb.d.CreateCQ(1024, nil)
				require.NoError(t, err)
				mk := func(n *node, c *CQ) *QP {
					q, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: c, RecvCQ: c,
						Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
					require.NoError(t, err)
					return q
				}
				a, b := mk(na, ca), mk(nb, cb)
				at := defaultAttrs()
				at.mtu = qp.MTU4096
				connect(t, a, na.d, b, nb.d, at)
				la, lb := na.mr(t, 2*size), nb.mr(t, 2*size)
				go func() {
					if err := pingWriteRead(a, b, ca, cb, la, lb, rounds, size); err != nil {
						errs <- fmt.Errorf("qp pair %d: %w", k, err)
						return
					}
					errs <- nil
				}()
			}
			for range qps {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// pingWriteRead runs rounds of: an 8-byte SEND from a answered by one from
// b, a WRITE of size bytes from a to b, a READ of them back, and a
// fetch-and-add on b's memory; checking every completion and byte. It
// runs on a goroutine of its own: it returns what went wrong.
func pingWriteRead(a, b *QP, ca, cb *CQ, la, lb *MR, rounds, size int) error {
	pat := make([]byte, size)
	got := make([]byte, size)
	var buf [4]WC
	wait := func(c *CQ, n int) error {
		deadline := time.Now().Add(10 * time.Second)
		for n > 0 {
			k := c.Poll(buf[:min(n, len(buf))])
			for _, w := range buf[:k] {
				if w.Status != 0 {
					return fmt.Errorf("completion %+v", w)
				}
			}
			n -= k
			if k == 0 {
				if time.Now().After(deadline) {
					return fmt.Errorf("%d completions missing after 10 s", n)
				}
				runtime.Gosched()
			}
		}
		return nil
	}
	for r := range rounds {
		err := errors.Join(
			b.PostRecv(RecvWR{WRID: 1, SGL: []SGE{{Addr: lb.IOVA, Length: 8, Lkey: lb.Lkey}}}),
			a.PostRecv(RecvWR{WRID: 2, SGL: []SGE{{Addr: la.IOVA, Length: 8, Lkey: la.Lkey}}}),
			a.PostSend(SendWR{WRID: 3, Opcode: qp.OpSend, Flags: qp.Signaled,
				SGL: []SGE{{Addr: la.IOVA + 8, Length: 8, Lkey: la.Lkey}}}))
		if err == nil {
			err = wait(cb, 1)
		}
		if err == nil {
			err = b.PostSend(SendWR{WRID: 4, Opcode: qp.OpSend, Flags: qp.Signaled,
				SGL: []SGE{{Addr: lb.IOVA + 8, Length: 8, Lkey: lb.Lkey}}})
		}
		if err == nil {
			err = errors.Join(wait(ca, 2), wait(cb, 1)) // a's SEND and b's reply; b's reply
		}
		if err != nil {
			return fmt.Errorf("round %d, SENDs: %w", r, err)
		}

		for i := range pat {
			pat[i] = byte(i*7 + r)
		}
		la.WriteAt(pat, la.IOVA)
		err = errors.Join(
			a.PostSend(SendWR{WRID: 5, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
				SGL: []SGE{{Addr: la.IOVA, Length: uint32(size), Lkey: la.Lkey}}, RemoteAddr: lb.IOVA, Rkey: lb.Rkey}),
			a.PostSend(SendWR{WRID: 6, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
				SGL:        []SGE{{Addr: la.IOVA + uint64(size), Length: uint32(size), Lkey: la.Lkey}},
				RemoteAddr: lb.IOVA, Rkey: lb.Rkey}),
			a.PostSend(SendWR{WRID: 7, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled,
				SGL:        []SGE{{Addr: la.IOVA + uint64(size), Length: 8, Lkey: la.Lkey}},
				RemoteAddr: lb.IOVA + uint64(size), Rkey: lb.Rkey, CompareAdd: 1}))
		if err == nil {
			err = wait(ca, 3)
		}
		if err != nil {
			return fmt.Errorf("round %d, WRITE, READ and fetch-and-add: %w", r, err)
		}
		la.ReadAt(got, la.IOVA+uint64(size))
		// The READ came back before the atomic wrote its 8 bytes over
		// its start (completions in order): all but those must match.
		if !bytes.Equal(pat[8:], got[8:]) {
			return fmt.Errorf("round %d: READ differs from what was written", r)
		}
		var counter [8]byte
		lb.ReadAt(counter[:], lb.IOVA+uint64(size))
		if v := binary.LittleEndian.Uint64(counter[:]); v != uint64(r+1) {
			return fmt.Errorf("round %d: counter %d, want %d", r, v, r+1)
		}
	}
	return nil
}

// BenchmarkFabricSendPingPong: an 8-byte RC SEND ping-pong between two
// worker-pool devices on the fabric, each end on a goroutine of its own
// spinning on its CQ (yielding), as ibv_rc_pingpong without -e. An
// iteration is a round trip: a's SEND, b's reply, and a's send completion.
// "workers" hands every packet's work to the receiving device's workers;
// "here" is Options.ReceiveHere. Reported: half a round trip and the
// process's CPU time per round trip.
func BenchmarkFabricSendPingPong(b *testing.B) {
	for _, here := range []bool{false, true} {
		b.Run(map[bool]string{false: "workers", true: "here"}[here], func(b *testing.B) {
			fab := fabric.New(clock.Real(), 1)
			open := func(i byte) *node {
				o := fabricOptions(fab, i)
				o.ReceiveHere = here
				return benchNode(b, o, false)
			}
			na, nb := open(1), open(2)
			p := newPair(b, na, nb, 64, false)
			a, z, ma, mz := p.a, p.b, p.src, p.dst
			recv := func(q *QP, m *MR) error {
				return q.PostRecv(RecvWR{SGL: []SGE{{Addr: m.IOVA, Length: 64, Lkey: m.Lkey}}})
			}
			for range 8 {
				if recv(a, ma) != nil || recv(z, mz) != nil {
					b.Fatal("post recv")
				}
			}
			send := func(q *QP, m *MR) error {
				return q.PostSend(SendWR{Opcode: qp.OpSend, Flags: qp.Signaled,
					SGL: []SGE{{Addr: m.IOVA, Length: 8, Lkey: m.Lkey}}})
			}
			// spin polls c until it has a receive completion and a send
			// completion, reposting the receive on q.
			spin := func(c *CQ, q *QP, m *MR) error {
				var buf [8]WC
				recvs, sends := 0, 0
				for i := 0; recvs == 0 || sends == 0; i++ {
					k := c.Poll(buf[:])
					for _, w := range buf[:k] {
						if w.Status != 0 {
							return fmt.Errorf("%+v", w)
						}
						if w.Opcode.IsRecv() {
							recvs++
							if err := recv(q, m); err != nil {
								return err
							}
						} else {
							sends++
						}
					}
					if k == 0 && i%64 == 0 {
						runtime.Gosched()
					}
				}
				return nil
			}
			var stop atomic.Bool
			done := make(chan error, 1)
			go func() {
				// z answers each message, then waits for its reply's
				// send completion and the next message.
				var buf [8]WC
				for !stop.Load() {
					k := nb.cq.Poll(buf[:])
					for _, w := range buf[:k] {
						if w.Status != 0 {
							done <- fmt.Errorf("%+v", w)
							return
						}
						if w.Opcode.IsRecv() {
							if err := recv(z, mz); err != nil {
								done <- err
								return
							}
							if err := send(z, mz); err != nil {
								done <- err
								return
							}
						}
					}
					if k == 0 {
						runtime.Gosched()
					}
				}
				done <- nil
			}()
			round := func() {
				if err := send(a, ma); err != nil {
					b.Fatal(err)
				}
				if err := spin(na.cq, a, ma); err != nil {
					b.Fatal(err)
				}
			}
			for range 1000 {
				round()
			}
			b.ResetTimer()
			cpu0 := processCPU()
			for range b.N {
				round()
			}
			cpu1 := processCPU()
			b.StopTimer()
			stop.Store(true)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "half_rtt_ns")
			if cpu0 >= 0 && cpu1 >= 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu_ns/rtt")
			}
		})
	}
}

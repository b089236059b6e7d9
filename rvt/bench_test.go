package rvt

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev/fabric"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// benchPair is two connected RC QPs on one loopback device.
type benchPair struct {
	n      *node
	a, b   *QP
	src    *MR
	dst    *MR
	wcs    []WC
	inline bool
	// ev, if not nil, is signalled by the CQ's completion handler: reap
	// then arms the CQ and waits for it when the CQ is empty (the
	// event-driven consumer of ibv_req_notify_cq), where it would
	// otherwise spin.
	ev chan struct{}
}

// benchNode opens a device (worker pool or inline) with a PD and a CQ.
func benchNode(b *testing.B, o Options, inline bool) *node {
	o.Inline = inline
	if !inline {
		o.Workers = 2
	}
	return openBenchNode(b, o, nil)
}

// openBenchNode opens a device with o, a PD and a CQ with handler h.
func openBenchNode(b *testing.B, o Options, h func(*CQ)) *node {
	d, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	c, _ := d.CreateCQ(1<<14, h)
	return &node{d: d, pd: pd, cq: c}
}

func benchQP(b *testing.B, n *node) *QP {
	q, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// newPair connects an RC QP on na to one on nb (path MTU 4096) and
// registers size-byte source and destination regions.
func newPair(b *testing.B, na, nb *node, size int, inline bool) *benchPair {
	p := &benchPair{n: na, a: benchQP(b, na), b: benchQP(b, nb), wcs: make([]WC, 256), inline: inline}
	at := defaultAttrs()
	at.mtu = qp.MTU4096
	connect(b, p.a, na.d, p.b, nb.d, at)
	access := keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead
	p.src, _ = na.pd.Reg(make([]byte, size), access)
	p.dst, _ = nb.pd.Reg(make([]byte, size), access)
	return p
}

// newBenchPair is two connected RC QPs on one loopback device.
func newBenchPair(b *testing.B, size int, inline bool) *benchPair {
	n := benchNode(b, Options{}, inline)
	return newPair(b, n, n, size, inline)
}

// reap polls until at least want completions arrived and returns how many
// it took; it fails on an error status.
func (p *benchPair) reap(want int) (int, error) {
	got := 0
	for got < want {
		k := p.n.cq.Poll(p.wcs[:min(len(p.wcs), 64)])
		if k == 0 {
			if p.ev != nil {
				queued, err := p.n.cq.ArmAndCheck(false)
				if err != nil {
					return got, err
				}
				if !queued {
					<-p.ev
				}
				continue
			}
			runtime.Gosched() // let the workers run (2 cores)
			continue
		}
		for _, w := range p.wcs[:k] {
			if w.Status != 0 {
				return got, fmt.Errorf("completion %+v", w)
			}
		}
		got += k
	}
	return got, nil
}

// memcpyGBps measures copy() of size bytes in this run.
func memcpyGBps(size int) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	n := max(1, (256<<20)/size)
	start := time.Now()
	for i := 0; i < n; i++ {
		copy(dst, src)
	}
	return float64(n*size) / time.Since(start).Seconds() / 1e9
}

// BenchmarkLoopbackWrite measures RC RDMA WRITE goodput through the
// loopback path (the same engines, no framing), against memcpy.
func BenchmarkLoopbackWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, mode := range []string{"workers", "inline"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				p := newBenchPair(b, size, mode == "inline")
				base := memcpyGBps(size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				gbps := p.writeGBps(b, size, b.N)
				b.StopTimer()
				b.ReportMetric(gbps, "GB/s")
				b.ReportMetric(gbps/base, "x_memcpy")
			})
		}
	}
}

// chanPingPong measures messages per second between two goroutines over
// unbuffered channels (each send is one message).
func chanPingPong(n int) float64 {
	ping, pong := make(chan uint64), make(chan uint64)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		ping <- uint64(i)
		<-pong
	}
	el := time.Since(start).Seconds()
	close(ping)
	return float64(2*n) / el
}

// BenchmarkLoopbackSend8B measures 8-byte RC SENDs, each with its receive
// completion, against a channel ping-pong in the same run. post=N posts
// lists of N WRs per PostSend call (ib_send_bw's post list).
func BenchmarkLoopbackSend8B(b *testing.B) {
	for _, mode := range []string{"workers", "inline"} {
		for _, post := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/post=%d", mode, post), func(b *testing.B) {
				benchSend8B(b, mode == "inline", post)
			})
		}
	}
}

func benchSend8B(b *testing.B, inline bool, post int) { benchSends(b, inline, 1, post) }

// BenchmarkLoopbackSendQPs is BenchmarkLoopbackSend8B over several QP
// pairs of one device at once, each pair (with its own CQ) driven by its
// own goroutine: what a scheduling policy that helps one pair must not
// cost many. It reports the aggregate rate over the channel ping-pong.
func BenchmarkLoopbackSendQPs(b *testing.B) {
	for _, mode := range []string{"workers", "inline"} {
		for _, post := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/qps=8/post=%d", mode, post), func(b *testing.B) {
				benchSends(b, mode == "inline", 8, post)
			})
		}
	}
}

// benchSends drives qps QP pairs of one device at once, b.N SENDs in all,
// and reports their aggregate rate against the channel ping-pong. One
// pair uses the device's CQ and the benchmark's goroutine; more have a CQ
// and a goroutine each.
func benchSends(b *testing.B, inline bool, qps, post int) {
	pairs := []*benchPair{newBenchPair(b, 4096, inline)}
	for len(pairs) < qps {
		n := pairs[0].n
		c, err := n.d.CreateCQ(1<<12, nil)
		if err != nil {
			b.Fatal(err)
		}
		own := &node{d: n.d, pd: n.pd, cq: c}
		pairs = append(pairs, newPair(b, own, own, 4096, inline))
	}
	for _, p := range pairs {
		p.primeRecvs(b)
	}
	base := chanPingPong(200000)
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	errs := make(chan error, qps)
	for i, p := range pairs[1:] {
		go func() { errs <- p.sends((b.N+qps-2-i)/qps, post) }()
	}
	if err := pairs[0].sends((b.N+qps-1)/qps, post); err != nil {
		b.Fatal(err)
	}
	for range qps - 1 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start).Seconds()
	cpu1 := processCPU()
	b.StopTimer()
	rate := float64(b.N) / el
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(rate/base, "x_chan")
	if cpu0 >= 0 && cpu1 >= 0 {
		// The process's CPU time per message (every goroutine's): on a
		// shared machine wall time moves with the load, this much less.
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu_ns/op")
	}
}

// recvWR is the receive WR sends posts: 64 bytes of the destination.
func (p *benchPair) recvWR() RecvWR {
	return RecvWR{SGL: []SGE{{Addr: p.dst.IOVA, Length: 64, Lkey: p.dst.Lkey}}}
}

// primeRecvs posts the receives sends starts with, before the timer runs.
func (p *benchPair) primeRecvs(b *testing.B) {
	for range 512 {
		if err := p.b.PostRecv(p.recvWR()); err != nil {
			b.Fatal(err)
		}
	}
}

// sends sends n 8-byte SENDs in lists of post WRs, 64 in flight, and
// returns when their receive completions are in; primeRecvs went first.
func (p *benchPair) sends(n, post int) error {
	const window = 64
	recv := p.recvWR()
	sends := make([]SendWR, post)
	for i := range sends {
		sends[i] = SendWR{Opcode: qp.OpSend, Flags: qp.Signaled,
			SGL: []SGE{{Addr: p.src.IOVA, Length: 8, Lkey: p.src.Lkey}}}
	}
	recvs := make([]RecvWR, 0, 64)
	inflight, got := 0, 0
	for i := 0; i < n || inflight > 0; {
		k := p.n.cq.Poll(p.wcs)
		if k == 0 && inflight >= window {
			runtime.Gosched()
		}
		recvs = recvs[:0]
		for _, w := range p.wcs[:k] {
			if w.Status != 0 {
				return fmt.Errorf("completion %+v", w)
			}
			if w.Opcode&0x80 != 0 {
				got++
				recvs = append(recvs, recv)
			} else {
				inflight--
			}
		}
		if len(recvs) > 0 {
			if err := p.b.PostRecv(recvs...); err != nil {
				return err
			}
		}
		for i < n && inflight+post <= window {
			k := min(post, n-i)
			if err := p.a.PostSend(sends[:k]...); err != nil {
				return err
			}
			inflight += k
			i += k
		}
	}
	// Every send has completed: what is left are receive completions.
	_, err := p.reap(n - got)
	return err
}

// newFabricPair is two devices on the in-memory fabric, one RC QP each.
func newFabricPair(b *testing.B, size int, inline bool) *benchPair {
	mode := "workers"
	if inline {
		mode = "inline"
	}
	return newFabricPairMode(b, size, mode)
}

// newFabricPairMode is newFabricPair in a FabricWrite mode: "inline",
// "workers", or "workers-event" (worker pools, and a poster that waits
// for a completion event instead of spinning).
func newFabricPairMode(b *testing.B, size int, mode string) *benchPair {
	fab := fabric.New(clock.Real(), 1)
	var ev chan struct{}
	open := func(i byte) *node {
		o := fabricOptions(fab, i)
		if mode == "workers-event" && i == 1 {
			var n *node
			n, ev = benchNodeEvent(b, o)
			return n
		}
		return benchNode(b, o, mode == "inline")
	}
	p := newPair(b, open(1), open(2), size, mode == "inline")
	p.ev = ev
	return p
}

// benchNodeEvent is benchNode with worker pools and a CQ whose completion
// handler signals the returned channel.
func benchNodeEvent(b *testing.B, o Options) (*node, chan struct{}) {
	o.Workers = 2
	ev := make(chan struct{}, 1)
	return openBenchNode(b, o, func(*CQ) {
		select {
		case ev <- struct{}{}:
		default:
		}
	}), ev
}

// writeGBps streams size-byte RC WRITEs with 16 in flight and returns the
// goodput of n of them.
func (p *benchPair) writeGBps(b *testing.B, size, n int) float64 {
	const window = 16
	wr := SendWR{Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL:        []SGE{{Addr: p.src.IOVA, Length: uint32(size), Lkey: p.src.Lkey}},
		RemoteAddr: p.dst.IOVA, Rkey: p.dst.Rkey}
	start := time.Now()
	inflight := 0
	for i := 0; i < n; i++ {
		if inflight == window {
			k, err := p.reap(1)
			if err != nil {
				b.Fatal(err)
			}
			inflight -= k
		}
		if err := p.a.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	if _, err := p.reap(inflight); err != nil {
		b.Fatal(err)
	}
	return float64(n*size) / time.Since(start).Seconds() / 1e9
}

// BenchmarkFabricWrite measures RC WRITE goodput between two devices on
// the in-memory fabric (MTU 4096, Ethernet/IP/UDP framing, ICRC computed
// and checked, no faults) against the loopback WRITE of the same size
// measured in the same run (x_loopback), and against the unavoidable work
// per packet for the same bytes (limitGBps, also in the same run: x_limit).
//
// The process's CPU time per WRITE (every goroutine's) is reported beside
// the wall clock (cpu_ns/op), and cpu_x_limit is the limit's CPU time for
// the same bytes over it: on a shared machine the wall clock moves with
// the load, CPU time much less.
//
// x_limit_aligned and cpu_x_limit_aligned are the same against the limit
// loop with its payload on 64 bytes, as the fabric's buffers place the
// payload of most packets (netdev/fabric's newFrameBuf): the aligned
// copies are faster, for the limit loop too. x_limit_fused is against the
// limit loop with each copy done in its ICRC's pass, as the engine does
// them: what is left of the engine's own cost beside the unavoidable work
// done its best way.
//
// Modes: inline (one goroutine does everything), workers (worker pools;
// the poster spins on its CQ with runtime.Gosched, taking a CPU from the
// two workers on a 2-CPU machine, and its spinning is counted in the CPU
// time), workers-event (worker pools; the poster arms its CQ and sleeps
// until a completion event when the CQ is empty, as an event-driven
// application, perftest's -e, does).
func BenchmarkFabricWrite(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, mode := range []string{"workers", "workers-event", "inline"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				inline := mode == "inline"
				lim, limCPU := limitRates(size, false)
				limAl, limAlCPU := limitRates(size, true)
				limFu, _ := limitFusedRates(size)
				loop := newBenchPair(b, size, inline)
				base := loop.writeGBps(b, size, max(64, (64<<20)/size))
				p := newFabricPairMode(b, size, mode)
				b.SetBytes(int64(size))
				b.ResetTimer()
				cpu0 := processCPU()
				gbps := p.writeGBps(b, size, b.N)
				cpu1 := processCPU()
				b.StopTimer()
				b.ReportMetric(gbps, "GB/s")
				b.ReportMetric(gbps/base, "x_loopback")
				b.ReportMetric(lim, "limit_GB/s")
				b.ReportMetric(gbps/lim, "x_limit")
				if cpu0 >= 0 && cpu1 >= 0 && limCPU > 0 {
					perOp := float64(cpu1-cpu0) / float64(b.N)
					b.ReportMetric(perOp, "cpu_ns/op")
					// limCPU is bytes per CPU nanosecond.
					b.ReportMetric(float64(size)/limCPU/perOp, "cpu_x_limit")
					if limAlCPU > 0 {
						b.ReportMetric(float64(size)/limAlCPU/perOp, "cpu_x_limit_aligned")
					}
				}
				// The limit loop with its payload aligned as the fabric's
				// buffers align the engine's (the tougher baseline).
				b.ReportMetric(gbps/limAl, "x_limit_aligned")
				b.ReportMetric(gbps/limFu, "x_limit_fused")
			})
		}
	}
}

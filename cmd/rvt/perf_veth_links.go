package main

// The softverbs side of `rvt perf`: a device per namespace on the chosen
// link kind, RC WRITE goodput and RC SEND ping-pong latency between them.

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Link kinds of `rvt perf --link`, in run order. TAP comes last: it puts
// the veth ends into bridges, which the others must not see.
var perfLinkKinds = []string{"xdp", "udp", "tap"}

// perfPeer is one device of a link run and the link it sits on, which
// also closes the device.
type perfPeer struct {
	*node
	link *devopen.Link
	ip   netip.Addr // the address its peer resolves
}

// openPerfPeer opens the link of kind in namespace i of net and a device
// on it. On error it closes what it opened.
func openPerfPeer(net *perfNet, i int, kind string) (_ *perfPeer, err error) {
	p := &perfPeer{ip: net.ip[i]} // not the named result: "return nil, err" must not clear it
	defer func() {
		if err != nil && p.link != nil {
			p.link.Close()
		}
	}()
	var (
		open func() (*devopen.Link, error)
		tap  string // the TAP to bridge with the veth end
	)
	switch kind {
	case "udp":
		open = func() (*devopen.Link, error) { return devopen.OpenUDP(netip.AddrPortFrom(p.ip, netdev.RoCEv2Port), 0) }
	case "xdp":
		open = func() (*devopen.Link, error) { return devopen.OpenXDP(net.veth[i], p.ip) }
	case "tap":
		tap, p.ip = net.name(fmt.Sprintf("t%d", i)), perfTAPAddrs[i]
		mac := netdev.MAC{0x02, 0x73, 0x76, 0x70, 0x00, byte(i + 1)}
		open = func() (*devopen.Link, error) {
			l, _, err := devopen.OpenTAP(tap, net.mtu, mac, p.ip)
			return l, err
		}
	default:
		return nil, fmt.Errorf("unknown link %q", kind)
	}
	if err := net.ns[i].do(func() (err error) {
		p.link, err = open()
		return err
	}); err != nil {
		return nil, err
	}
	if tap != "" {
		del, err := net.bridge(i, tap)
		if err != nil {
			return nil, err
		}
		p.link.OnClose(del)
	}
	l := p.link
	n, err := openNode(rvt.Options{Name: fmt.Sprintf("%s%d", kind, i), Workers: 2,
		Link: l.Link, MAC: l.MAC, Addrs: l.Addrs, Resolve: l.Resolve})
	if err != nil {
		return nil, err
	}
	l.OnClose(func() { _ = n.dev.Close() })
	p.node = n
	return p, nil
}

// perfLinkResult is what one link kind measured.
type perfLinkResult struct {
	write runResult
	lat   latency
	busy  latency // busy-polling ping-pong, on links with a ring to poll
}

// runPerfLink opens a device in each namespace on link kind, connects RC
// QPs with path MTU mtu, and measures SEND ping-pong latency for latDur
// and WRITE goodput of size-byte messages for dur.
func runPerfLink(ctx context.Context, net *perfNet, kind string, mtu rvt.MTU, size int, dur, latDur time.Duration) (perfLinkResult, error) {
	var res perfLinkResult
	var peers [2]*perfPeer
	defer func() {
		for _, p := range peers {
			if p != nil {
				p.link.Close()
			}
		}
	}()
	for i := range peers {
		p, err := openPerfPeer(net, i, kind)
		if err != nil {
			return res, err
		}
		peers[i] = p
	}
	// Resolve each peer's MAC (ARP through the kernel or softverbs' own
	// host) before the runs, so they do not start with a lost packet and
	// a retransmission timeout.
	for i, p := range peers {
		if ip := peers[1-i].ip; !p.link.AwaitNeighbour(ip) {
			return res, fmt.Errorf("%v: no neighbour entry for %v after %v", p.dev.Name(), ip, devopen.WarmTimeout)
		}
	}
	if port, err := peers[0].dev.QueryPort(1); err != nil {
		return res, err
	} else if port.ActiveMTU < mtu {
		return res, fmt.Errorf("link MTU %d carries path MTU %v at most, not %v", net.mtu, port.ActiveMTU, mtu)
	}

	// Latency first: it also warms both directions.
	var w [2]*cqWaiter
	var ep [2]*endpoint
	for i, p := range peers {
		w[i] = newCQWaiter()
		e, err := p.newEndpoint(qp.RC, qpOpts{sendWR: 64, recvWR: 64, onComp: w[i].notify})
		if err != nil {
			return res, err
		}
		ep[i] = e
	}
	if err := connect(ep[0], ep[1], mtu); err != nil {
		return res, err
	}
	lat, err := sendPingpong(ctx, ep[0], ep[1], w[0], w[1], latDur)
	if err != nil {
		return res, fmt.Errorf("SEND ping-pong: %w", err)
	}
	res.lat = lat
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if kind == "xdp" {
		// The same ping-pong with both sides spinning on their CQ and
		// draining the AF_XDP ring themselves (rvt.Device.PollLink), as
		// ib_send_lat polls.
		busy, err := sendPingpong(ctx, ep[0], ep[1], busyWaiter{peers[0].dev}, busyWaiter{peers[1].dev}, latDur)
		if err != nil {
			return res, fmt.Errorf("busy-polling SEND ping-pong: %w", err)
		}
		res.busy = busy
	}

	a, err := peers[0].newEndpoint(qp.RC, qpOpts{sendWR: 256, recvWR: 16})
	if err != nil {
		return res, err
	}
	b, err := peers[1].newEndpoint(qp.RC, qpOpts{sendWR: 16, recvWR: 16})
	if err != nil {
		return res, err
	}
	if err := connect(a, b, mtu); err != nil {
		return res, err
	}
	wr, err := writeRun(a, b, size, dur)
	if err != nil {
		return res, fmt.Errorf("RDMA WRITE: %w", err)
	}
	res.write = wr
	return res, nil
}

// cqPoller waits for completions of a CQ.
type cqPoller interface {
	poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error)
}

// busyWaiter waits by spinning: it polls the CQ and, while it is empty,
// drains the device's link itself (PollLink), yielding the processor now
// and then.
type busyWaiter struct{ dev *rvt.Device }

func (w busyWaiter) poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error) {
	for i := 1; ; i++ {
		if k := c.Poll(buf); k > 0 {
			return k, nil
		}
		if w.dev.PollLink() {
			continue
		}
		if i%256 == 0 {
			// Both peers spin in this one process, on two CPUs, beside
			// the links' goroutines and timers: yield now and then.
			runtime.Gosched()
			if time.Now().After(deadline) {
				return 0, errTimeout
			}
			select {
			case <-stop:
				return 0, context.Canceled
			default:
			}
		}
	}
}

// cqWaiter turns a CQ's completion handler into something to wait on.
// One goroutine at a time waits on it (poll or wait).
type cqWaiter struct {
	ch chan struct{}
	// timer bounds a wait with a deadline: made by the first such wait,
	// re-armed by the next and stopped when each returns. Since Go 1.23
	// Reset and Stop leave no stale tick in timer.C, so it needs no
	// draining.
	timer *time.Timer
}

func newCQWaiter() *cqWaiter { return &cqWaiter{ch: make(chan struct{}, 1)} }

// notify is the CQ's completion handler: it must not block.
func (w *cqWaiter) notify(*rvt.CQ) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// wait sleeps until the completion handler runs (or has run since the
// last wait), until deadline (the zero Time: no deadline) or until stop
// closes (nil: never). It returns errTimeout at the deadline, and
// context.Canceled on stop.
func (w *cqWaiter) wait(deadline time.Time, stop <-chan struct{}) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return errTimeout
		}
		if w.timer == nil {
			w.timer = time.NewTimer(left)
		} else {
			w.timer.Reset(left)
		}
		defer w.timer.Stop()
		expired = w.timer.C
	}
	select {
	case <-w.ch:
		return nil
	case <-expired:
		return errTimeout
	case <-stop:
		return context.Canceled
	}
}

// poll returns at least one completion of c in buf, event-driven like
// ibv_rc_pingpong -e: it polls, arms the CQ and sleeps until the completion
// handler wakes it, until deadline (the zero Time: none) or stop. It does not spin: a goroutine
// that spins with runtime.Gosched keeps its P from ever checking the
// netpoller, which on two CPUs delays the links' receive goroutines by
// as long as the spinning lasts.
func (w *cqWaiter) poll(c *rvt.CQ, buf []rvt.WC, deadline time.Time, stop <-chan struct{}) (int, error) {
	for {
		if k := c.Poll(buf); k > 0 {
			return k, nil
		}
		queued, err := c.ArmAndCheck(false)
		if err != nil {
			return 0, err
		}
		if queued {
			continue
		}
		switch err := w.wait(deadline, stop); err {
		case nil:
		case errTimeout: // a completion may have come with the deadline
			if k := c.Poll(buf); k > 0 {
				return k, nil
			}
			return 0, errTimeout
		default:
			return 0, err
		}
	}
}

// latency is a set of round-trip times, reported as half round trips.
type latency struct {
	rtts []time.Duration // sorted once the run is over (see sorted)
}

// sorted sorts the round trips in place and returns l. A run calls it once
// when it ends, so that each quantile is an index rather than a sort.
func (l latency) sorted() latency {
	slices.Sort(l.rtts)
	return l
}

// quantile returns the q quantile of the round trips, which must be sorted.
func (l latency) quantile(q float64) time.Duration {
	if len(l.rtts) == 0 {
		return 0
	}
	return l.rtts[min(len(l.rtts)-1, int(q*float64(len(l.rtts))))]
}

// halfMicros returns the q quantile of the half round trip, in µs.
func (l latency) halfMicros(q float64) float64 {
	return float64(l.quantile(q)) / 2 / float64(time.Microsecond)
}

// Ping-pong parameters shared by softverbs and the kernel UDP baseline.
const (
	pingSize   = 8
	pingWarmup = 100
	// pingMinSamples round trips are recorded however long they take
	// (until the hard timeout): a short run on a busy machine still
	// measures something.
	pingMinSamples = 50
	pingMaxIter    = 1 << 20
	pingRecvs      = 16
)

// pingMore reports whether a ping-pong goes on to iteration it: always
// through the warm-up and the minimum samples, then until deadline or
// cancellation, and never past pingMaxIter.
func pingMore(ctx context.Context, it int, deadline time.Time) bool {
	if it >= pingMaxIter {
		return false
	}
	return it < pingWarmup+pingMinSamples || (time.Now().Before(deadline) && ctx.Err() == nil)
}

// sendPingpong bounces an 8-byte RC SEND between a and b, like
// ibv_rc_pingpong: a sends, b's receive completion triggers b's reply, and
// an iteration ends when a has both its send completion and the reply.
// Each iteration's round trip (post to reply received) is recorded, after
// pingWarmup unrecorded ones, for dur.
func sendPingpong(ctx context.Context, a, b *endpoint, wa, wb cqPoller, dur time.Duration) (latency, error) {
	var lat latency
	// Each side's receive slots, one SGE each, made once: the QP copies
	// the SGL it is given, so reposting a slot allocates nothing.
	var slots [2][]rvt.SGE
	for i, e := range []*endpoint{a, b} {
		mr, _, err := e.n.buffer(pingSize*pingRecvs, 0)
		if err != nil {
			return lat, err
		}
		slots[i] = slotSGEs(mr, pingRecvs, pingSize)
		for s := range uint64(pingRecvs) {
			if err := e.PostRecv(rvt.RecvWR{WRID: s, SGL: slotSGL(slots[i], s)}); err != nil {
				return lat, err
			}
		}
	}
	repost := func(e *endpoint, slots []rvt.SGE, slot uint64) error {
		return e.PostRecv(rvt.RecvWR{WRID: slot, SGL: slotSGL(slots, slot)})
	}
	msg := make([]byte, pingSize)
	hard := time.Now().Add(dur + waitTimeout)

	// b answers every message until stopped.
	stop := make(chan struct{})
	srvErr := make(chan error, 1)
	go func() {
		buf := make([]rvt.WC, 16)
		reply := make([]byte, pingSize)
		for {
			k, err := wb.poll(b.cq, buf, hard, stop)
			if err != nil {
				if err == context.Canceled {
					err = nil
				}
				srvErr <- err
				return
			}
			for _, wc := range buf[:k] {
				if wc.Status != cq.Success {
					srvErr <- fmt.Errorf("responder wr_id %d: %v", wc.WRID, wc.Status)
					return
				}
				if !wc.Opcode.IsRecv() {
					continue
				}
				if err := repost(b, slots[1], wc.WRID); err != nil {
					srvErr <- err
					return
				}
				if err := b.PostSend(rvt.SendWR{WRID: wc.WRID, Opcode: qp.OpSend,
					Flags: qp.Signaled | qp.Inline, InlineData: reply}); err != nil {
					srvErr <- err
					return
				}
			}
		}
	}()
	finish := func(err error) (latency, error) {
		close(stop)
		if serr := <-srvErr; err == nil {
			err = serr
		}
		return lat.sorted(), err
	}

	buf := make([]rvt.WC, 16)
	deadline := time.Now().Add(dur)
	for it := 0; pingMore(ctx, it, deadline); it++ {
		msg[0] = byte(it)
		start := time.Now()
		if err := a.PostSend(rvt.SendWR{WRID: uint64(it), Opcode: qp.OpSend,
			Flags: qp.Signaled | qp.Inline, InlineData: msg}); err != nil {
			return finish(err)
		}
		var rtt time.Duration
		for sent, got := false, false; !sent || !got; {
			k, err := wa.poll(a.cq, buf, hard, nil)
			if err != nil {
				return finish(fmt.Errorf("iteration %d: %w", it, err))
			}
			for _, wc := range buf[:k] {
				if wc.Status != cq.Success {
					return finish(fmt.Errorf("requester wr_id %d: %v", wc.WRID, wc.Status))
				}
				if !wc.Opcode.IsRecv() {
					sent = true
					continue
				}
				if wc.ByteLen != pingSize {
					return finish(fmt.Errorf("reply of %d bytes", wc.ByteLen))
				}
				rtt, got = time.Since(start), true
				if err := repost(a, slots[0], wc.WRID); err != nil {
					return finish(err)
				}
			}
		}
		if it >= pingWarmup {
			lat.rtts = append(lat.rtts, rtt)
		}
	}
	return finish(nil)
}

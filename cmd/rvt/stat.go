package main

import (
	"fmt"
	"io"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// statConfig are the flags of `rvt stat`.
type statConfig struct {
	Messages int // SENDs and WRITEs on the RC pair
}

func defaultStatConfig() statConfig { return statConfig{Messages: 100} }

// runStat opens the demo pair, runs a little RC and UD traffic and prints
// every QP (Device.QPs) and the counters, like `rdma resource show qp` and
// `rdma statistic`.
func runStat(w io.Writer, cfg statConfig) error {
	if cfg.Messages < 1 {
		return usagef("--messages %d: want at least 1", cfg.Messages)
	}
	p, err := openPair(pairConfig{Seed: 1})
	if err != nil {
		return fmt.Errorf("open devices: %w", err)
	}
	defer p.Close()
	a, err := p.n[0].newEndpoint(qp.RC, qpOpts{})
	if err != nil {
		return err
	}
	b, err := p.n[1].newEndpoint(qp.RC, qpOpts{})
	if err != nil {
		return err
	}
	if err := connect(a, b, qp.MTU4096); err != nil {
		return err
	}
	u, err := p.n[0].newEndpoint(qp.UD, qpOpts{})
	if err != nil {
		return err
	}
	if err := bringUp(u, nil, qp.MTU4096); err != nil {
		return err
	}
	if err := statTraffic(a, b, cfg.Messages); err != nil {
		return err
	}

	for _, n := range p.n {
		for _, q := range n.dev.QPs() {
			fmt.Fprintf(w, "link %s/1 lqpn %d type %v state %v sq-psn %d unacked-psn %d rq-psn %d msn %d sq-posted %d rq-posted %d\n",
				n.dev.Name(), q.Num, q.Type, q.State, uint32(q.NextPSN), uint32(q.UnackedPSN), uint32(q.ExpectedPSN),
				q.MSN, q.SQPosted, q.RQPosted)
		}
	}
	fmt.Fprintln(w)
	for _, n := range p.n {
		printCounters(w, "link "+n.dev.Name()+"/1", n.dev.Counters())
	}
	for _, n := range p.n {
		for _, q := range n.dev.QPs() {
			if len(q.Counters) > 0 {
				printCounters(w, fmt.Sprintf("link %s/1 lqpn %d", n.dev.Name(), q.Num), q.Counters)
			}
		}
	}
	return nil
}

// statTraffic sends n 1 KiB SENDs and n 4 KiB WRITEs from a to b, then
// leaves a few receives posted on b so the RQ column shows them.
func statTraffic(a, b *endpoint, n int) error {
	src, _, err := a.n.buffer(4096, 1)
	if err != nil {
		return err
	}
	dst, _, err := b.n.buffer(4096, 0)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := b.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: sge(dst, 0, 1024)}); err != nil {
			return err
		}
		if err := a.PostSend(
			rvt.SendWR{WRID: uint64(2 * i), Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 1024)},
			rvt.SendWR{WRID: uint64(2*i + 1), Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(src, 0, 4096),
				RemoteAddr: dst.IOVA, Rkey: dst.Rkey}); err != nil {
			return err
		}
		if err := waitOK(a.cq, 2); err != nil {
			return err
		}
		if err := waitOK(b.cq, 1); err != nil {
			return err
		}
	}
	for i := 0; i < 4; i++ {
		if err := b.PostRecv(rvt.RecvWR{WRID: uint64(n + i), SGL: sge(dst, 0, 1024)}); err != nil {
			return err
		}
	}
	return nil
}

// waitOK waits for n completions and checks that all succeeded.
func waitOK(c *rvt.CQ, n int) error {
	wcs, err := wait(c, n)
	if err != nil {
		return err
	}
	for _, wc := range wcs {
		if wc.Status != cq.Success {
			return fmt.Errorf("wr_id %d: %v", wc.WRID, wc.Status)
		}
	}
	return nil
}

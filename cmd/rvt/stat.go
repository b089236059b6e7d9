package main

import (
	"fmt"
	"io"

	"github.com/softverbs/softverbs/internal/demo"
)

// statConfig are the flags of `rvt stat`.
type statConfig struct {
	Messages int    // SENDs and WRITEs on the RC pair
	RVTD     string // list the QPs of this daemon instead
	Device   string // with RVTD: one device ("": all)
}

func defaultStatConfig() statConfig { return statConfig{Messages: 100} }

// runStat opens the demo pair, runs a little RC and UD traffic
// (demo.OpenStat) and prints every QP (Device.QPs) and the counters,
// like `rdma resource show qp` and `rdma statistic`.
func runStat(w io.Writer, cfg statConfig) error {
	if cfg.Messages < 1 {
		return usagef("--messages %d: want at least 1", cfg.Messages)
	}
	if cfg.RVTD != "" {
		return runStatRVTD(w, cfg.RVTD, cfg.Device)
	}
	if cfg.Device != "" {
		return usagef("-d %s: needs --rvtd (the demo pair is rvt0 and rvt1)", cfg.Device)
	}
	p, err := demo.OpenStat(cfg.Messages)
	if err != nil {
		return err
	}
	defer p.Close()
	for _, n := range p.N {
		for _, q := range n.Dev.QPs() {
			fmt.Fprintf(w, "link %s/1 lqpn %d type %v state %v sq-psn %d unacked-psn %d rq-psn %d msn %d sq-posted %d rq-posted %d\n",
				n.Dev.Name(), q.Num, q.Type, q.State, uint32(q.NextPSN), uint32(q.UnackedPSN), uint32(q.ExpectedPSN),
				q.MSN, q.SQPosted, q.RQPosted)
		}
	}
	fmt.Fprintln(w)
	for _, n := range p.N {
		demo.PrintCounters(w, "link "+n.Dev.Name()+"/1", n.Dev.Counters())
	}
	for _, n := range p.N {
		for _, q := range n.Dev.QPs() {
			if len(q.Counters) > 0 {
				demo.PrintCounters(w, fmt.Sprintf("link %s/1 lqpn %d", n.Dev.Name(), q.Num), q.Counters)
			}
		}
	}
	return nil
}

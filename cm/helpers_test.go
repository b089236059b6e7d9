package cm

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// world is n devices on one in-memory fabric, each with a CM agent.
type world struct {
	clk    clock.Clock
	manual *clock.Manual
	fab    *fabric.Fabric
	nodes  []*node
}

type node struct {
	ip    netip.Addr
	dev   *rvt.Device
	agent *Agent
	pd    *rvt.PD
	cq    *rvt.CQ
}

type worldOpts struct {
	n       int
	manual  bool // manual clock and Inline devices (deterministic)
	faults  *faults.Profile
	seed    int64
	agent   Options
	workers int
	// routes, if set, gives node i a routing table (rvt.Options.Route),
	// and its Resolve resolves through the next hop.
	routes func(i int) netdev.RouteFunc
}

func newWorld(tb testing.TB, o worldOpts) *world {
	tb.Helper()
	if o.n == 0 {
		o.n = 2
	}
	w := &world{}
	if o.manual {
		w.manual = clock.NewManual()
		w.clk = w.manual
	} else {
		w.clk = clock.Real()
	}
	w.fab = fabric.New(w.clk, o.seed)
	for i := range o.n {
		mac := netdev.MAC{2, 0, 0, 0, 0, byte(i + 1)}
		ip := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		w.fab.AddAddr(ip, mac)
		var link netdev.Link
		if o.faults != nil {
			_, fl, err := w.fab.NewFaultyPort(mac, 1500, *o.faults)
			require.NoError(tb, err)
			link = fl
		} else {
			link = w.fab.NewPort(mac, 1500)
		}
		ro := rvt.Options{Name: fmt.Sprintf("rvt%d", i), Link: link, MAC: mac,
			Addrs: []netip.Addr{ip}, Resolve: w.fab.Resolve, Clock: w.clk, Inline: o.manual, Workers: o.workers}
		if o.routes != nil {
			route := o.routes(i)
			ro.Route = route
			ro.Resolve = func(ip netip.Addr) (netdev.MAC, bool) {
				next, err := route(ip)
				if err != nil {
					return netdev.MAC{}, false
				}
				return w.fab.Resolve(next)
			}
		}
		dev, err := rvt.Open(ro)
		require.NoError(tb, err)
		ao := o.agent
		if ao.Seed == 0 {
			ao.Seed = uint64(o.seed)*7919 + uint64(i) + 1
		}
		ag, err := NewAgent(dev, ao)
		require.NoError(tb, err)
		pd, err := dev.AllocPD()
		require.NoError(tb, err)
		cq, err := dev.CreateCQ(4096, nil)
		require.NoError(tb, err)
		w.nodes = append(w.nodes, &node{ip: ip, dev: dev, agent: ag, pd: pd, cq: cq})
	}
	tb.Cleanup(w.close)
	return w
}

func (w *world) close() {
	for _, n := range w.nodes {
		n.agent.Close()
		n.dev.Close()
	}
}

func (n *node) newQP(tb testing.TB, typ qp.Type) *rvt.QP {
	tb.Helper()
	q, err := n.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: rvt.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	require.NoError(tb, err)
	return q
}

// step advances a manual clock by d (firing timers), or sleeps a little
// on the real one.
func (w *world) step(d time.Duration) {
	if w.manual != nil {
		w.manual.Advance(d)
		return
	}
	time.Sleep(time.Millisecond)
}

// waitEvent polls ch until an event arrives, stepping the clock.
func (w *world) waitEvent(tb testing.TB, ch *EventChannel) Event {
	tb.Helper()
	for i := 0; i < 20000; i++ {
		if ev, ok := ch.Poll(); ok {
			return ev
		}
		w.step(time.Millisecond)
	}
	tb.Fatalf("no event")
	return Event{}
}

func (w *world) expect(tb testing.TB, ch *EventChannel, typ EventType) Event {
	tb.Helper()
	ev := w.waitEvent(tb, ch)
	require.Equal(tb, typ, ev.Type, "event %v (err %v), want %v", ev.Type, ev.Err, typ)
	return ev
}

// settle runs the clock until the agents hold nothing but listeners.
func (w *world) settle(tb testing.TB, d time.Duration) {
	for t := time.Duration(0); t < d; t += time.Millisecond {
		w.step(time.Millisecond)
	}
}

package vethperf

// The softverbs side of `rvt perf`: a device per namespace on the chosen
// link kind, RC WRITE goodput and RC SEND ping-pong latency between them.

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Link kinds of `rvt perf --link`, in run order. TAP comes last: it puts
// the veth ends into bridges, which the others must not see.
var LinkKinds = []string{"xdp", "udp", "tap"}

// perfPeer is one device of a link run and the link it sits on, which
// also closes the device.
type perfPeer struct {
	*devopen.Node
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
	n, err := devopen.OpenNode(rvt.Options{Name: fmt.Sprintf("%s%d", kind, i), Workers: 2,
		Link: l.Link, MAC: l.MAC, Addrs: l.Addrs, Resolve: l.Resolve})
	if err != nil {
		return nil, err
	}
	l.OnClose(func() { _ = n.Dev.Close() })
	p.Node = n
	return p, nil
}

// perfLinkResult is what one link kind measured.
type perfLinkResult struct {
	write traffic.Result
	lat   traffic.Latency
	busy  traffic.Latency // busy-polling ping-pong, on links with a ring to poll
	// The process's CPU time over each run (both ends; cpu.go).
	writeCPU, latCPU, busyCPU time.Duration
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
			return res, fmt.Errorf("%v: no neighbour entry for %v after %v", p.Dev.Name(), ip, devopen.WarmTimeout)
		}
	}
	if port, err := peers[0].Dev.QueryPort(1); err != nil {
		return res, err
	} else if port.ActiveMTU < mtu {
		return res, fmt.Errorf("link MTU %d carries path MTU %v at most, not %v", net.mtu, port.ActiveMTU, mtu)
	}

	// Latency first: it also warms both directions.
	var w [2]*traffic.CQWaiter
	var ep [2]*traffic.Endpoint
	for i, p := range peers {
		w[i] = traffic.NewCQWaiter()
		e, err := traffic.NewEndpoint(p.Node, qp.RC, traffic.QPOpts{SendWR: 64, RecvWR: 64, OnComp: w[i].Notify})
		if err != nil {
			return res, err
		}
		ep[i] = e
	}
	if err := traffic.Connect(ep[0], ep[1], mtu); err != nil {
		return res, err
	}
	t0 := traffic.ProcessCPU()
	lat, err := traffic.SendPingpong(ctx, ep[0], ep[1], w[0], w[1], latDur)
	res.latCPU = cpuSince(t0)
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
		t0 := traffic.ProcessCPU()
		busy, err := traffic.SendPingpong(ctx, ep[0], ep[1], traffic.BusyWaiter{Dev: peers[0].Dev}, traffic.BusyWaiter{Dev: peers[1].Dev}, latDur)
		res.busyCPU = cpuSince(t0)
		if err != nil {
			return res, fmt.Errorf("busy-polling SEND ping-pong: %w", err)
		}
		res.busy = busy
	}

	a, err := traffic.NewEndpoint(peers[0].Node, qp.RC, traffic.QPOpts{SendWR: 256, RecvWR: 16})
	if err != nil {
		return res, err
	}
	b, err := traffic.NewEndpoint(peers[1].Node, qp.RC, traffic.QPOpts{SendWR: 16, RecvWR: 16})
	if err != nil {
		return res, err
	}
	if err := traffic.Connect(a, b, mtu); err != nil {
		return res, err
	}
	t0 = traffic.ProcessCPU()
	wr, err := traffic.WriteRun(a, b, size, dur)
	res.writeCPU = cpuSince(t0)
	if err != nil {
		return res, fmt.Errorf("RDMA WRITE: %w", err)
	}
	res.write = wr
	return res, nil
}

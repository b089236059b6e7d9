package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// allAccess is the access a demo buffer gets: everything a peer may do.
const allAccess = keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic | keys.MWBind

// defaultLinkMTU is the Ethernet MTU of the demo ports: a jumbo frame, so
// the active path MTU is 4096.
const defaultLinkMTU = 9000

// qkey is the Q_Key every demo UD QP uses.
const qkey = 0x11111111

// pairConfig says how to build two devices on one in-memory fabric.
type pairConfig struct {
	LinkMTU int       // Ethernet MTU of both ports (0: defaultLinkMTU)
	Loss    float64   // RC frame loss on both ports (0: no fault layer)
	Seed    int64     // fabric and fault seed
	Capture io.Writer // pcap of device 0's port, or nil
}

// node is one device of the pair with its PD.
type node struct {
	dev   *rvt.Device
	pd    *rvt.PD
	mac   netdev.MAC
	addrs []netip.Addr
	port  *fabric.Port
}

// pair is two devices on one in-memory fabric.
type pair struct {
	fab     *fabric.Fabric
	n       [2]*node
	faults  []*faults.Link
	capture *capture.Link
	cleanup []func()
}

// nodeAddrs returns the MAC and GID sources of demo device i (0 or 1).
func nodeAddrs(i int) (netdev.MAC, []netip.Addr) {
	mac := netdev.MAC{0x02, 0x00, 0x5e, 0x00, 0x00, byte(i + 1)}
	return mac, netdev.GIDOrder(mac, []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})})
}

// openPair opens two devices, rvt0 and rvt1, on a fresh fabric with a real
// clock.
func openPair(pc pairConfig) (p *pair, err error) {
	if pc.LinkMTU == 0 {
		pc.LinkMTU = defaultLinkMTU
	}
	clk := clock.Real()
	p = &pair{fab: fabric.New(clk, pc.Seed)}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for i := range p.n {
		mac, addrs := nodeAddrs(i)
		port := p.fab.NewPort(mac, pc.LinkMTU)
		p.cleanup = append(p.cleanup, func() { _ = port.Close() })
		for _, a := range addrs {
			p.fab.AddAddr(a, mac)
		}
		var link netdev.Link = port
		if i == 0 && pc.Capture != nil {
			c, err := capture.New(link, clk, pc.Capture)
			if err != nil {
				return nil, err
			}
			p.capture = c
			link = c
		}
		if pc.Loss > 0 {
			fl, err := faults.New(link, clk, pc.Seed+int64(i)+1, faults.Profile{Loss: pc.Loss})
			if err != nil {
				return nil, fmt.Errorf("fault profile: %w", err)
			}
			p.faults = append(p.faults, fl)
			link = &rcFaults{Link: link, faulty: fl}
		}
		n, err := openNode(rvt.Options{
			Name: fmt.Sprintf("rvt%d", i), Link: link, MAC: mac, Addrs: addrs,
			Resolve: p.fab.Resolve,
		})
		if err != nil {
			return nil, err
		}
		p.cleanup = append(p.cleanup, func() { _ = n.dev.Close() })
		n.port = port
		p.n[i] = n
	}
	return p, nil
}

// openNode opens a device with o and allocates its PD. An error from
// rvt.Open is returned as it is; one from the PD says so. On error
// nothing is left open.
func openNode(o rvt.Options) (*node, error) {
	dev, err := rvt.Open(o)
	if err != nil {
		return nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("allocating PD: %w", err)
	}
	return &node{dev: dev, pd: pd, mac: o.MAC, addrs: o.Addrs}, nil
}

// Close closes the devices and the ports, last opened first.
func (p *pair) Close() {
	for i := len(p.cleanup) - 1; i >= 0; i-- {
		p.cleanup[i]()
	}
	p.cleanup = nil
}

// rcFaults sends RC frames through a fault link and everything else
// straight to the link below: RC retransmits what is lost, while UC and UD
// are unreliable by definition and would only lose messages.
type rcFaults struct {
	netdev.Link
	faulty netdev.Link
}

func (l *rcFaults) Send(frame []byte) error {
	fi, err := netdev.ParseFrame(frame)
	if err == nil && fi.DstPort == netdev.RoCEv2Port && fi.PayloadLen > 0 && frame[fi.PayloadOff]>>5 == 0 {
		return l.faulty.Send(frame) // BTH opcode class 0: RC
	}
	return l.Link.Send(frame)
}

// endpoint is a QP with its own CQ (send and receive completions both).
type endpoint struct {
	*rvt.QP
	cq *rvt.CQ
	n  *node
}

// qpOpts tune newEndpoint.
type qpOpts struct {
	sendWR, recvWR uint32
	onComp         func(*rvt.CQ)
}

func (n *node) newEndpoint(typ rvt.QPType, o qpOpts) (*endpoint, error) {
	if o.sendWR == 0 {
		o.sendWR = 256
	}
	if o.recvWR == 0 {
		o.recvWR = 256
	}
	c, err := n.dev.CreateCQ(int(2*(o.sendWR+o.recvWR)), o.onComp)
	if err != nil {
		return nil, err
	}
	q, err := n.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c,
		Cap: rvt.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		return nil, err
	}
	return &endpoint{QP: q, cq: c, n: n}, nil
}

// connect moves a and b to RTS, each addressed to the other through GID
// index 1 (the IPv4 address). UD QPs get the demo Q_Key and no peer.
func connect(a, b *endpoint, mtu rvt.MTU) error {
	if err := bringUp(a, b, mtu); err != nil {
		return fmt.Errorf("QP %#x: %w", a.Num(), err)
	}
	if err := bringUp(b, a, mtu); err != nil {
		return fmt.Errorf("QP %#x: %w", b.Num(), err)
	}
	return nil
}

func bringUp(q, peer *endpoint, mtu rvt.MTU) error {
	typ := q.Type()
	init := rvt.QPAttr{State: qp.Init, Port: 1, QKey: qkey,
		AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic}
	if err := q.Modify(&init, qp.RequiredAttrs(typ, qp.Reset, qp.Init)); err != nil {
		return err
	}
	rtr := rvt.QPAttr{State: qp.RTR, MaxDestRdAtomic: 16, MinRNRTimer: 1}
	if !typ.Datagram() {
		gid, err := peer.n.dev.QueryGID(1, 1)
		if err != nil {
			return err
		}
		rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = mtu, peer.Num(), 0x100
		rtr.AV = rvt.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1}
	}
	if err := q.Modify(&rtr, qp.RequiredAttrs(typ, qp.Init, qp.RTR)); err != nil {
		return err
	}
	// Timeout 12 is 4.096 µs * 2^12 = 16.8 ms; RNR retry 7 is infinite.
	rts := rvt.QPAttr{State: qp.RTS, SQPSN: 0x100, Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	return q.Modify(&rts, qp.RequiredAttrs(typ, qp.RTR, qp.RTS))
}

// errTimeout is returned when completions do not arrive in time.
var errTimeout = errors.New("timed out waiting for completions")

// waitTimeout bounds every wait for a completion in the demo.
const waitTimeout = 5 * time.Second

// wait polls c until n completions arrived or waitTimeout passed.
func wait(c *rvt.CQ, n int) ([]rvt.WC, error) {
	return waitFor(c, n, waitTimeout)
}

func waitFor(c *rvt.CQ, n int, d time.Duration) ([]rvt.WC, error) {
	out := make([]rvt.WC, 0, n)
	buf := make([]rvt.WC, 16)
	deadline := time.Now().Add(d)
	for idle := 0; len(out) < n; {
		k := c.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			idle = 0
			continue
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%w: got %d of %d", errTimeout, len(out), n)
		}
		idle++
		backoff(idle)
	}
	return out, nil
}

// backoff yields to the device's workers while a poll loop finds nothing.
func backoff(idle int) {
	if idle < 64 {
		runtime.Gosched()
		return
	}
	time.Sleep(20 * time.Microsecond)
}

// buffer registers a fresh buffer of size bytes on n, filled with a pattern
// derived from seed (seed 0: zeros).
func (n *node) buffer(size int, seed byte) (*rvt.MR, []byte, error) {
	b := make([]byte, size)
	fill(b, seed)
	mr, err := n.pd.Reg(b, allAccess)
	if err != nil {
		return nil, nil, err
	}
	return mr, b, nil
}

// fill writes a recognisable pattern (zeros for seed 0).
func fill(b []byte, seed byte) {
	if seed == 0 {
		clear(b)
		return
	}
	x := uint32(seed) * 2654435761
	for i := range b {
		x = x*1103515245 + 12345
		b[i] = byte(x >> 16)
	}
}

package devopen

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/rvt"
)

// DefaultLinkMTU is the Ethernet MTU of the demo ports: a jumbo frame, so
// the active path MTU is 4096.
const DefaultLinkMTU = 9000

// PairConfig says how to build two devices on one in-memory fabric.
type PairConfig struct {
	LinkMTU int       // Ethernet MTU of both ports (0: DefaultLinkMTU)
	Loss    float64   // RC frame loss on both ports (0: no fault layer)
	Seed    int64     // fabric and fault seed
	Capture io.Writer // pcap of device 0's port, or nil
	// ReceiveHere: both devices have rvt.Options.ReceiveHere (shorter
	// round trips; it has no effect on a port with Capture or Loss).
	ReceiveHere bool
}

// Node is a device with its PD.
type Node struct {
	Dev   *rvt.Device
	PD    *rvt.PD
	MAC   netdev.MAC
	Addrs []netip.Addr // the device's GID sources
}

// Pair is two devices, rvt0 and rvt1, on one in-memory fabric.
type Pair struct {
	Fabric  *fabric.Fabric
	N       [2]*Node
	Faults  []*faults.Link // the RC fault layer of each port, if Loss > 0
	Capture *capture.Link  // device 0's capture, if any
	cleanup []func()
}

// NodeAddrs returns the MAC and GID sources of demo device i (0 or 1):
// GID index 1 is ::ffff:198.18.0.(i+1).
func NodeAddrs(i int) (netdev.MAC, []netip.Addr) {
	mac := netdev.MAC{0x02, 0x00, 0x5e, 0x00, 0x00, byte(i + 1)}
	return mac, netdev.GIDOrder(mac, []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})})
}

// OpenPair opens two devices, rvt0 and rvt1, on a fresh fabric with a real
// clock.
func OpenPair(pc PairConfig) (_ *Pair, err error) {
	if pc.LinkMTU == 0 {
		pc.LinkMTU = DefaultLinkMTU
	}
	clk := clock.Real()
	p := &Pair{Fabric: fabric.New(clk, pc.Seed)}
	defer func() {
		// Not a named result: `return nil, err` would set it to nil
		// before this runs.
		if err != nil {
			p.Close()
		}
	}()
	for i := range p.N {
		mac, addrs := NodeAddrs(i)
		port := p.Fabric.NewPort(mac, pc.LinkMTU)
		p.cleanup = append(p.cleanup, func() { _ = port.Close() })
		for _, a := range addrs {
			p.Fabric.AddAddr(a, mac)
		}
		var link netdev.Link = port
		if i == 0 && pc.Capture != nil {
			c, err := capture.New(link, clk, pc.Capture)
			if err != nil {
				return nil, err
			}
			p.Capture = c
			link = c
		}
		if pc.Loss > 0 {
			fl, err := faults.New(link, clk, pc.Seed+int64(i)+1, faults.Profile{Loss: pc.Loss})
			if err != nil {
				return nil, fmt.Errorf("fault profile: %w", err)
			}
			p.Faults = append(p.Faults, fl)
			link = newRCFaults(link, fl)
		}
		n, err := OpenNode(rvt.Options{
			Name: fmt.Sprintf("rvt%d", i), Link: link, MAC: mac, Addrs: addrs,
			Resolve: p.Fabric.Resolve, RetransmitProbeRTT: true, ReceiveHere: pc.ReceiveHere,
		})
		if err != nil {
			return nil, err
		}
		p.cleanup = append(p.cleanup, func() { _ = n.Dev.Close() })
		p.N[i] = n
	}
	return p, nil
}

// OpenNode opens a device with o and allocates its PD. An error from
// rvt.Open is returned as it is; one from the PD says so. On error
// nothing is left open.
func OpenNode(o rvt.Options) (*Node, error) {
	dev, err := rvt.Open(o)
	if err != nil {
		return nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("allocating PD: %w", err)
	}
	return &Node{Dev: dev, PD: pd, MAC: o.MAC, Addrs: o.Addrs}, nil
}

// Close closes the devices and the ports, last opened first.
func (p *Pair) Close() {
	for i := len(p.cleanup) - 1; i >= 0; i-- {
		p.cleanup[i]()
	}
	p.cleanup = nil
}

// rcFaults sends RC frames through a fault link and everything else
// straight to the link below: RC retransmits what is lost, while UC and UD
// are unreliable by definition and would only lose messages.
//
// When both lend buffers (the fabric port, and the fault link with a
// loss-only profile over it) rcFaults lends too, and takes received frames
// back: without that the engine built every frame in a buffer of its own,
// the fabric copied it, and the receiving engine could not give the
// fabric's buffer back, so that a lossy pair paid a copy and an allocation
// a frame that the lossless pair it is compared with does not
// (`rvt demo --loss 0.05` ran at 2.4-3.0 Gbit/s; lending, 6.7-7.0).
type rcFaults struct {
	netdev.Link
	faulty netdev.Link
	// lend and faultyLend are the lending interfaces of the link below
	// and of the fault link; nil unless both lend.
	lend, faultyLend netdev.FrameLender
}

var _ netdev.FrameLender = (*rcFaults)(nil)

func newRCFaults(l netdev.Link, faulty netdev.Link) *rcFaults {
	r := &rcFaults{Link: l, faulty: faulty}
	lend, ok1 := l.(netdev.FrameLender)
	flend, ok2 := faulty.(netdev.FrameLender)
	if ok1 && ok2 && lend.Lender() == l && flend.Lender() == faulty {
		r.lend, r.faultyLend = lend, flend
	}
	return r
}

// isRC reports whether frame is a RoCEv2 RC packet (BTH opcode class 0).
func isRC(frame []byte) bool {
	fi, err := netdev.ParseFrame(frame)
	return err == nil && fi.DstPort == netdev.RoCEv2Port && fi.PayloadLen > 0 && frame[fi.PayloadOff]>>5 == 0
}

func (l *rcFaults) Send(frame []byte) error {
	if isRC(frame) {
		return l.faulty.Send(frame)
	}
	return l.Link.Send(frame)
}

// Lender returns l when it lends (both links below do), else nil.
func (l *rcFaults) Lender() netdev.Link {
	if l.lend == nil {
		return nil
	}
	return l
}

// TxFrame returns a buffer of the link below (the fault link lends the
// same link's buffers), or nil when l does not lend.
func (l *rcFaults) TxFrame(n int) []byte {
	if l.lend == nil {
		return nil
	}
	return l.lend.TxFrame(n)
}

// RecyclesFrames reports whether the link below recycles frames
// (netdev.FrameRecycler) and l lends its buffers.
func (l *rcFaults) RecyclesFrames() bool {
	r, ok := l.lend.(netdev.FrameRecycler)
	return ok && r.RecyclesFrames()
}

// SendOwned is Send for a frame in a buffer from TxFrame.
func (l *rcFaults) SendOwned(frame []byte) error {
	switch {
	case l.lend == nil:
		return l.Send(frame)
	case isRC(frame):
		return l.faultyLend.SendOwned(frame)
	}
	return l.lend.SendOwned(frame)
}

// Release gives a received frame back to the link below, if it takes
// frames back.
func (l *rcFaults) Release(frame []byte) {
	if r, ok := l.Link.(netdev.Releaser); ok {
		r.Release(frame)
	}
}

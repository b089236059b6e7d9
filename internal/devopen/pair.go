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
func OpenPair(pc PairConfig) (p *Pair, err error) {
	if pc.LinkMTU == 0 {
		pc.LinkMTU = DefaultLinkMTU
	}
	clk := clock.Real()
	p = &Pair{Fabric: fabric.New(clk, pc.Seed)}
	defer func() {
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
			link = &rcFaults{Link: link, faulty: fl}
		}
		n, err := OpenNode(rvt.Options{
			Name: fmt.Sprintf("rvt%d", i), Link: link, MAC: mac, Addrs: addrs,
			Resolve: p.Fabric.Resolve, RetransmitProbeRTT: true,
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

// Package devopen opens softverbs devices on the links the command-line
// tools (and, later, rvtd) choose: a port of an in-memory fabric, a TAP
// with softverbs as its own host, AF_XDP on an interface the kernel keeps,
// or the unprivileged UDP socket, each optionally wrapped in a pcap capture
// and a seeded fault profile (Config, Open); and the demo's two devices on
// one fabric (OpenPair). A Link carries what a device needs to know about
// its port (MAC, GID sources, neighbour resolution), so that opening the
// device is rvt.Open(l.Options(name)).
//
// The errors of Open name the flags of rvt's link options (--tap, --xdp,
// --udp, --ip, --mac), which every tool that takes a link shares.
package devopen

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/rvt"
)

// Config selects a link and how to wrap it: at most one of Fabric, TAP,
// XDP and UDP (none: the UDP link on IP).
type Config struct {
	// Fabric, if set, gives the device a port of this in-memory fabric,
	// with MAC (default: random) and IP; its addresses are added to the
	// fabric for resolution.
	Fabric *fabric.Fabric

	TAP string // TAP device to create and own, softverbs its own host on it
	XDP string // interface to attach AF_XDP to
	UDP string // local UDP address (IP or IP:port, port 4791 by default) of the UDP link
	IP  string // our address (ADDR/PFX, or a bare ADDR) on a TAP, XDP or fabric link
	// Gateway is the default gateway of a TAP link (softverbs is the host
	// there, with its own routing table: IP's subnet on-link, everything
	// else through Gateway; without one, a destination off the subnet is
	// unreachable). A fabric has no router, and on XDP and UDP links the
	// kernel's routing table applies.
	Gateway string
	MAC     string // our MAC on a TAP or fabric link (default: random, locally administered)

	// LinkMTU is the Ethernet MTU of the link: 0 keeps an interface's
	// (XDP, UDP); a TAP then gets enough for PathMTU and at least 1500,
	// a fabric port 1500.
	LinkMTU int
	PathMTU int // path MTU in bytes a TAP with LinkMTU 0 must carry

	PCAP string // write the frames we send and receive to this pcap file

	// The fault profile on the link's send side, seeded with Seed.
	Loss, Dup, Reorder float64
	Delay              time.Duration
	Seed               int64

	// RVTD, when set, is the socket of an rvtd daemon: the device is the
	// daemon's (Link.OpenDevice dials it), and no link is opened here;
	// the link flags are refused with it.
	RVTD string
}

// Link is the port a device sits on: the link and what the device needs
// to know about it. Close undoes its setup.
type Link struct {
	Link    netdev.Link
	MAC     netdev.MAC
	Addrs   []netip.Addr // GID table sources: link-local first, then ours
	Resolve func(netip.Addr) (netdev.MAC, bool)
	// Route is the port's routing table (rvt.Options.Route): Resolve
	// resolves through it.
	Route netdev.RouteFunc

	// RVTD is the daemon's socket when the device is rvtd's (Config.RVTD);
	// then the fields above are zero.
	RVTD string

	closers []func()
}

// OnClose adds f to what Close runs; Close runs the last added first.
func (l *Link) OnClose(f func()) { l.closers = append(l.closers, f) }

// Close undoes the link's setup, last step first.
func (l *Link) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
	l.closers = nil
}

// Options are the rvt.Options of a device named name on l.
func (l *Link) Options(name string) rvt.Options {
	return rvt.Options{Name: name, Link: l.Link, MAC: l.MAC, Addrs: l.Addrs, Resolve: l.Resolve, Route: l.Route}
}

// WarmTimeout bounds how long AwaitNeighbour waits.
const WarmTimeout = 3 * time.Second

// AwaitNeighbour asks the link's resolver for ip until it answers or
// WarmTimeout passes, and reports whether it answered. Links whose
// resolver learns asynchronously (ARP, ND) answer false until the reply
// is in; a destination the link has no route to, at once.
func (l *Link) AwaitNeighbour(ip netip.Addr) bool {
	if l.Route != nil {
		if _, err := l.Route(ip); err != nil {
			return false
		}
	}
	deadline := time.Now().Add(WarmTimeout)
	for {
		if _, ok := l.Resolve(ip); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Warm resolves the peer's MAC ahead of the first packet; if that takes
// longer than WarmTimeout, the transport is left to find out on its own.
func (l *Link) Warm(g netdev.GID) {
	if l.Resolve == nil || g.IsZero() {
		return
	}
	l.AwaitNeighbour(g.IP())
}

// Open opens the link cfg selects, wrapped with the capture and the fault
// profile.
func Open(cfg Config) (_ *Link, err error) {
	if cfg.RVTD != "" {
		return openRVTD(cfg)
	}
	n := 0
	for _, s := range []string{cfg.TAP, cfg.XDP, cfg.UDP} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("choose one of --tap, --xdp and --udp")
	}
	var l *Link
	switch {
	case cfg.Fabric != nil && n > 0:
		return nil, errors.New("a fabric port excludes --tap, --xdp and --udp")
	case cfg.Gateway != "" && cfg.TAP == "":
		return nil, errors.New("a gateway is for a TAP link (a fabric has no router; XDP and UDP links use the kernel's routes)")
	case cfg.Fabric != nil:
		l, err = openFabric(cfg)
	case cfg.TAP != "":
		l, err = openTAP(cfg)
	case cfg.XDP != "":
		l, err = openXDP(cfg)
	case cfg.UDP != "" || cfg.IP != "":
		l, err = openUDP(cfg)
	default:
		return nil, errors.New("no link: give --tap NAME --ip ADDR/PFX, --xdp IFACE --ip ADDR/PFX, or --udp ADDR " +
			"(an in-memory fabric cannot reach another process)")
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if cfg.PCAP != "" {
		f, err := os.Create(cfg.PCAP)
		if err != nil {
			return nil, err
		}
		l.OnClose(func() { _ = f.Close() })
		c, err := capture.New(l.Link, clock.Real(), f)
		if err != nil {
			return nil, err
		}
		l.Link = c
	}
	fl := faults.Profile{Loss: cfg.Loss, Duplicate: cfg.Dup, Reorder: cfg.Reorder, Delay: cfg.Delay}
	if fl != (faults.Profile{}) {
		f, err := faults.New(l.Link, clock.Real(), cfg.Seed, fl)
		if err != nil {
			return nil, fmt.Errorf("fault profile: %w", err)
		}
		l.Link = f
	}
	return l, nil
}

// openFabric gives the device a port of cfg.Fabric with its own MAC and
// cfg.IP, added to the fabric's address table.
func openFabric(cfg Config) (*Link, error) {
	pfx, err := ParsePrefix(cfg.IP)
	if err != nil {
		return nil, err
	}
	mac, err := HostMAC(cfg.MAC)
	if err != nil {
		return nil, err
	}
	mtu := cfg.LinkMTU
	if mtu == 0 {
		mtu = 1500
	}
	l := FabricPort(cfg.Fabric, mac, netdev.GIDOrder(mac, []netip.Addr{pfx.Addr()}), mtu)
	l.Route = netdev.StaticRoutes{OnLink: []netip.Prefix{pfx}}.Route
	return l, nil
}

// FabricPort opens a port of fab with mac and Ethernet MTU mtu, and adds
// addrs (the GID sources) to the fabric's address table for mac.
func FabricPort(fab *fabric.Fabric, mac netdev.MAC, addrs []netip.Addr, mtu int) *Link {
	for _, a := range addrs {
		fab.AddAddr(a, mac)
	}
	port := fab.NewPort(mac, mtu)
	return &Link{Link: port, MAC: mac, Addrs: addrs, Resolve: fab.Resolve,
		closers: []func(){func() { _ = port.Close() }}}
}

// ParsePrefix parses --ip: an address with a prefix length, or a bare
// address (taken as a /24 for IPv4, a /64 for IPv6).
func ParsePrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("--ip ADDR/PFX is required with this link")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("--ip %q: %w", s, err)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--ip %q: %w", s, err)
	}
	bits := 24
	if a.Is6() {
		bits = 64
	}
	return netip.PrefixFrom(a, bits), nil
}

// HostMAC is --mac, or a random locally administered unicast MAC.
func HostMAC(s string) (netdev.MAC, error) {
	if s != "" {
		m, err := netdev.ParseMAC(s)
		if err != nil {
			return m, fmt.Errorf("--mac %q: %w", s, err)
		}
		return m, nil
	}
	var m netdev.MAC
	if _, err := rand.Read(m[:]); err != nil {
		return m, err
	}
	m[0] = m[0]&^1 | 2
	return m, nil
}

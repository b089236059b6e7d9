package devopen

import (
	"fmt"
	"net/netip"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/tap"
	"github.com/softverbs/softverbs/netdev/udp"
	"github.com/softverbs/softverbs/netdev/xdp"
	"github.com/softverbs/softverbs/transport"
)

// tapMTU is the MTU of a TAP we create: cfg.LinkMTU, or enough for the
// path MTU (RoCEv2 over IPv6 adds 80 bytes), and at least 1500.
func (cfg Config) tapMTU() int {
	if cfg.LinkMTU > 0 {
		return cfg.LinkMTU
	}
	return max(1500, cfg.PathMTU+128)
}

// openTAP creates the TAP and makes softverbs a host on it with its own
// MAC and cfg.IP: it answers ARP and neighbour solicitations and resolves
// peers itself. The kernel side of the TAP has no address; put it in a
// bridge to reach other hosts.
func openTAP(cfg Config) (*Link, error) {
	pfx, err := ParsePrefix(cfg.IP)
	if err != nil {
		return nil, err
	}
	mac, err := HostMAC(cfg.MAC)
	if err != nil {
		return nil, err
	}
	routes, err := cfg.tapRoutes(pfx)
	if err != nil {
		return nil, err
	}
	l, h, err := OpenTAP(cfg.TAP, cfg.tapMTU(), mac, pfx.Addr())
	if err != nil {
		return nil, err
	}
	h.SetRoute(routes.Route)
	l.Route = h.Route
	h.Announce(pfx.Addr())
	return l, nil
}

// tapRoutes is the routing table of softverbs as the host on a TAP: the
// subnet of --ip on-link, and the default gateway if given.
func (cfg Config) tapRoutes(pfx netip.Prefix) (netdev.StaticRoutes, error) {
	r := netdev.StaticRoutes{OnLink: []netip.Prefix{pfx}}
	if cfg.Gateway == "" {
		return r, nil
	}
	gw, err := netip.ParseAddr(cfg.Gateway)
	if err != nil {
		return r, fmt.Errorf("--gateway %q: %w", cfg.Gateway, err)
	}
	if gw = gw.Unmap(); gw.Is4() {
		r.Gateway4 = gw
	} else {
		r.Gateway6 = gw
	}
	if err := r.Check(); err != nil {
		return r, fmt.Errorf("--gateway: %w", err)
	}
	return r, nil
}

// OpenTAP creates TAP name with Ethernet MTU mtu and makes softverbs a
// host on it with mac and ip. It also returns the host, for callers that
// announce the address.
func OpenTAP(name string, mtu int, mac netdev.MAC, ip netip.Addr) (*Link, *host.Host, error) {
	tap, err := tap.Open(name, mtu)
	if err != nil {
		return nil, nil, err
	}
	addrs := netdev.GIDOrder(mac, []netip.Addr{ip})
	h := host.New(tap, mac, addrs, clock.Real())
	return &Link{Link: h, MAC: mac, Addrs: addrs, Resolve: h.Resolve,
		closers: []func(){func() { _ = h.Close() }}}, h, nil
}

// openXDP attaches AF_XDP to an interface the kernel keeps: the GIDs are
// the interface's addresses (or cfg.IP alone), the MAC is its MAC, and
// peers are resolved through the kernel's neighbour table.
func openXDP(cfg Config) (*Link, error) {
	var ip netip.Addr
	if cfg.IP != "" {
		pfx, err := ParsePrefix(cfg.IP)
		if err != nil {
			return nil, err
		}
		ip = pfx.Addr()
	}
	return OpenXDP(cfg.XDP, ip)
}

// OpenXDP attaches AF_XDP to iface, with ip as the GID source or, if ip
// is the zero Addr, the interface's addresses.
func OpenXDP(iface string, ip netip.Addr) (*Link, error) {
	x, err := xdp.Open(iface, xdp.Options{})
	if err != nil {
		return nil, err
	}
	mac := x.HardwareAddr()
	var addrs []netip.Addr
	if ip.IsValid() {
		addrs = netdev.GIDOrder(mac, []netip.Addr{ip})
	} else if addrs, err = netdev.GIDsFromInterface(iface); err != nil {
		_ = x.Close()
		return nil, err
	}
	// The kernel keeps the interface, and its routing table: a peer off
	// the interface's subnets is resolved through its gateway.
	nb := x.Neighbours()
	resolve := func(ip netip.Addr) (netdev.MAC, bool) {
		if m, ok := netdev.MulticastMAC(ip.Unmap()); ok {
			return m, true
		}
		next, err := nb.Route(ip)
		if err != nil {
			return netdev.MAC{}, false
		}
		return nb.Resolve(next)
	}
	return &Link{Link: x, MAC: mac, Addrs: addrs, Resolve: resolve, Route: nb.Route,
		closers: []func(){func() { _ = x.Close() }}}, nil
}

// openUDP opens the unprivileged UDP-socket link on cfg.UDP (IP or
// IP:port, port 4791 by default), or on the address of cfg.IP, parsed as
// the other links parse it.
func openUDP(cfg Config) (*Link, error) {
	if cfg.UDP == "" {
		pfx, err := ParsePrefix(cfg.IP)
		if err != nil {
			return nil, err
		}
		return OpenUDP(netip.AddrPortFrom(pfx.Addr(), 0), cfg.LinkMTU)
	}
	ap, err := ParseUDP(cfg.UDP)
	if err != nil {
		return nil, err
	}
	return OpenUDP(ap, cfg.LinkMTU)
}

// ParseUDP parses --udp: IP or IP:port (port 0: RoCEv2's).
func ParseUDP(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		a, err2 := netip.ParseAddr(s)
		if err2 != nil {
			return ap, fmt.Errorf("--udp %q: want IP or IP:port", s)
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	return ap, nil
}

// CheckAddrs reports what Open would refuse in cfg's addresses and MTU,
// without opening anything (rvtd's --check-config): the IP, the MAC and
// the UDP address as Open parses them, a unicast address, the RoCEv2
// port, and a link MTU that holds a 256-byte path MTU.
func (cfg Config) CheckAddrs() error {
	if cfg.IP != "" {
		pfx, err := ParsePrefix(cfg.IP)
		if err != nil {
			return err
		}
		if a := pfx.Addr(); a.IsMulticast() || a.IsUnspecified() {
			return fmt.Errorf("--ip %q: not a unicast address", cfg.IP)
		}
	}
	if cfg.Gateway != "" {
		pfx, err := ParsePrefix(cfg.IP)
		if err != nil {
			return err
		}
		if _, err := cfg.tapRoutes(pfx); err != nil {
			return err
		}
	}
	if cfg.MAC != "" {
		if _, err := HostMAC(cfg.MAC); err != nil {
			return err
		}
	}
	if cfg.UDP != "" {
		ap, err := ParseUDP(cfg.UDP)
		if err != nil {
			return err
		}
		if err := udp.CheckAddr(ap); err != nil {
			return err
		}
	}
	if cfg.LinkMTU != 0 && cfg.LinkMTU < transport.MinLinkMTU {
		return fmt.Errorf("link MTU %d too small for RoCEv2 (at least %d, as a port takes it)", cfg.LinkMTU, transport.MinLinkMTU)
	}
	return nil
}

// OpenUDP opens the UDP-socket link on ap with Ethernet MTU mtu (0: the
// interface's). The kernel does IP and ARP; the GID table is a link-local
// GID derived from the link's made-up MAC, then ap's address, so GID
// index 1 is the address as on rxe.
func OpenUDP(ap netip.AddrPort, mtu int) (*Link, error) {
	u, err := udp.OpenConfig(udp.Config{Addr: ap, MTU: mtu})
	if err != nil {
		return nil, err
	}
	mac := u.HardwareAddr()
	addrs := netdev.GIDOrder(mac, []netip.Addr{ap.Addr()})
	l := &Link{Link: u, MAC: mac, Addrs: addrs, Resolve: u.Resolve,
		closers: []func(){func() { _ = u.Close() }}}
	// The kernel sends the datagrams, by its routing table: a destination
	// it has no route to is unreachable (any interface: the socket is
	// bound to an address, not to one).
	if nb, err := netdev.OpenKernelNeighboursIndex(0, nil); err == nil {
		l.Route = nb.Route
		l.OnClose(func() { _ = nb.Close() })
	}
	return l, nil
}

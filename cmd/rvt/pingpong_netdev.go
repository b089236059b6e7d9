package main

import (
	"fmt"
	"net/netip"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/tap"
	"github.com/softverbs/softverbs/netdev/udp"
	"github.com/softverbs/softverbs/netdev/xdp"
)

// openTAPLink creates the TAP and makes softverbs a host on it with its
// own MAC and --ip: it answers ARP and neighbour solicitations and resolves
// peers itself. The kernel side of the TAP has no address; put it in a
// bridge to reach other hosts.
func openTAPLink(cfg *pingpongConfig) (*ppLink, error) {
	pfx, err := parsePrefix(cfg.IP)
	if err != nil {
		return nil, err
	}
	mac, err := hostMAC(cfg.MAC)
	if err != nil {
		return nil, err
	}
	l, h, err := openTAPPort(cfg.TAP, cfg.tapMTU(), mac, pfx.Addr())
	if err != nil {
		return nil, err
	}
	h.Announce(pfx.Addr())
	return l, nil
}

// openTAPPort creates TAP name with Ethernet MTU mtu and makes softverbs
// a host on it with mac and ip. It also returns the host, for callers
// that announce the address.
func openTAPPort(name string, mtu int, mac netdev.MAC, ip netip.Addr) (*ppLink, *host.Host, error) {
	tap, err := tap.Open(name, mtu)
	if err != nil {
		return nil, nil, err
	}
	addrs := netdev.GIDOrder(mac, []netip.Addr{ip})
	h := host.New(tap, mac, addrs, clock.Real())
	return &ppLink{link: h, mac: mac, addrs: addrs, resolve: h.Resolve,
		closers: []func(){func() { _ = h.Close() }}}, h, nil
}

// openXDPLink attaches AF_XDP to an interface the kernel keeps: the GIDs
// are the interface's addresses (or --ip alone), the MAC is its MAC, and
// peers are resolved through the kernel's neighbour table.
func openXDPLink(cfg *pingpongConfig) (*ppLink, error) {
	var ip netip.Addr
	if cfg.IP != "" {
		pfx, err := parsePrefix(cfg.IP)
		if err != nil {
			return nil, err
		}
		ip = pfx.Addr()
	}
	return openXDPPort(cfg.XDP, ip)
}

// openXDPPort attaches AF_XDP to iface, with ip as the GID source or, if
// ip is the zero Addr, the interface's addresses.
func openXDPPort(iface string, ip netip.Addr) (*ppLink, error) {
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
	return &ppLink{link: x, mac: mac, addrs: addrs, resolve: x.Neighbours().Resolve,
		closers: []func(){func() { _ = x.Close() }}}, nil
}

// openUDPLink opens the unprivileged UDP-socket link on --udp (IP or
// IP:port, port 4791 by default), or on the address of --ip, parsed as the
// other links parse it.
func openUDPLink(cfg *pingpongConfig) (*ppLink, error) {
	if cfg.UDP == "" {
		pfx, err := parsePrefix(cfg.IP)
		if err != nil {
			return nil, err
		}
		return openUDPPort(netip.AddrPortFrom(pfx.Addr(), 0), cfg.LinkMTU)
	}
	ap, err := netip.ParseAddrPort(cfg.UDP)
	if err != nil {
		a, err2 := netip.ParseAddr(cfg.UDP)
		if err2 != nil {
			return nil, fmt.Errorf("--udp %q: want IP or IP:port", cfg.UDP)
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	return openUDPPort(ap, cfg.LinkMTU)
}

// openUDPPort opens the UDP-socket link on ap with Ethernet MTU mtu (0:
// the interface's). The kernel does IP and ARP; the GID table is a
// link-local GID derived from the link's made-up MAC, then ap's address,
// so GID index 1 is the address as on rxe.
func openUDPPort(ap netip.AddrPort, mtu int) (*ppLink, error) {
	u, err := udp.OpenConfig(udp.Config{Addr: ap, MTU: mtu})
	if err != nil {
		return nil, err
	}
	mac := u.HardwareAddr()
	addrs := netdev.GIDOrder(mac, []netip.Addr{ap.Addr()})
	return &ppLink{link: u, mac: mac, addrs: addrs, resolve: u.Resolve,
		closers: []func(){func() { _ = u.Close() }}}, nil
}

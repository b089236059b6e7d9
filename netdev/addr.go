package netdev

// Addresses every link kind shares: the GID table order, the EUI-64
// link-local address and the solicited-node multicast address.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// SolicitedNodeAddr returns ff02::1:ffXX:XXXX for ip (RFC 4291 2.7.1).
func SolicitedNodeAddr(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// LinkLocalFromMAC returns the IPv6 link-local address fe80::/64 with the
// modified EUI-64 interface identifier of mac (RFC 4291 appendix A), the
// address Linux gives an Ethernet interface and rxe puts at GID index 0.
func LinkLocalFromMAC(mac MAC) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff,
		12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]})
}

// GIDOrder returns the GID table of a port with MAC mac and the given
// addresses, in softverbs' documented index order, which follows Linux
// rxe's on a freshly configured interface:
//
//	index 0       fe80::/64 link-local with the EUI-64 of mac (always present)
//	then          the IPv4 addresses, in the order given (IPv4-mapped GIDs;
//	              returned here as plain IPv4, which GIDFromIP maps)
//	then          the other IPv6 addresses, in the order given
//
// Duplicates, invalid, unspecified, loopback-IPv6 and multicast addresses
// are left out.
func GIDOrder(mac MAC, addrs []netip.Addr) []netip.Addr {
	ll := LinkLocalFromMAC(mac)
	out := []netip.Addr{ll}
	add := func(a netip.Addr) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && !a.IsUnspecified() && !a.IsMulticast() {
			add(a)
		}
	}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is6() && a.IsValid() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() {
			add(a.WithZone(""))
		}
	}
	return out
}

// GIDsFromInterface returns the GID table sources of a kernel interface in
// GIDOrder: the EUI-64 link-local address of its MAC, its IPv4 addresses,
// its other IPv6 addresses. Use it where the kernel owns the addresses
// (AF_XDP and the UDP link). On a TAP, softverbs is a host of its own whose
// addresses come from its configuration, not from the kernel side of the
// TAP: use GIDOrder with those.
func GIDsFromInterface(name string) ([]netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("gids from %s: %w", name, err)
	}
	mac, ok := MACFrom(ifi.HardwareAddr)
	if !ok {
		return nil, fmt.Errorf("gids from %s: no ethernet address", name)
	}
	as, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("gids from %s: %w", name, err)
	}
	addrs := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	return GIDOrder(mac, addrs), nil
}

package netdev

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrNetUnreachable: no route covers the destination (Linux's route lookup
// answers ENETUNREACH, and rdma_resolve_addr fails with it at once).
var ErrNetUnreachable = errors.New("network is unreachable")

// RouteFunc returns the next hop of a packet to dst: dst itself when it is
// on a directly attached subnet, a gateway otherwise, or an error wrapping
// ErrNetUnreachable when no route covers dst. It is what a device's
// address resolution asks before it resolves a MAC (the neighbour to ask
// for is the next hop), as Linux's rdma_resolve_addr asks the routing
// table (ip_route_output_key) before it asks the neighbour table.
type RouteFunc func(dst netip.Addr) (next netip.Addr, err error)

// StaticRoutes is the routing table of a host of our own (a fabric port, a
// TAP): the subnets of its addresses, on-link, and at most one default
// gateway per family. The IPv6 link-local prefix fe80::/64 and multicast
// destinations are always on-link.
type StaticRoutes struct {
	OnLink   []netip.Prefix
	Gateway4 netip.Addr // default route for IPv4, if valid
	Gateway6 netip.Addr // default route for IPv6, if valid
}

var linkLocal6 = netip.MustParsePrefix("fe80::/64")

// Route is a RouteFunc: dst if an OnLink prefix holds it, else the
// gateway of its family, else ErrNetUnreachable.
func (s StaticRoutes) Route(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap().WithZone("")
	if !dst.IsValid() {
		return netip.Addr{}, fmt.Errorf("route %v: %w", dst, ErrNetUnreachable)
	}
	if dst.IsMulticast() || linkLocal6.Contains(dst) || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return dst, nil
	}
	for _, p := range s.OnLink {
		if p.Masked().Contains(dst) {
			return dst, nil
		}
	}
	gw := s.Gateway6
	if dst.Is4() {
		gw = s.Gateway4
	}
	if gw.IsValid() {
		return gw, nil
	}
	return netip.Addr{}, fmt.Errorf("route %v: %w", dst, ErrNetUnreachable)
}

// Check reports a gateway that no OnLink prefix holds (Linux refuses such
// a route: "Nexthop has invalid gateway").
func (s StaticRoutes) Check() error {
	for _, gw := range []netip.Addr{s.Gateway4, s.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		ok := false
		for _, p := range s.OnLink {
			if p.Masked().Contains(gw) {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("gateway %v is on none of the subnets %v", gw, s.OnLink)
		}
	}
	return nil
}

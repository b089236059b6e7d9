package cm

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Route is a resolved path on RoCE (rdma_cm's addr and route resolution:
// no SA query): our source GID, the peer's GID, its MAC when the device's
// resolver knows it, the path MTU of the link, hop limit and traffic
// class.
type Route struct {
	Src, Dst   netip.Addr
	SGIDIndex  uint8
	SGID, DGID netdev.GID
	// DstMAC is the peer's MAC when the device's resolver knows it
	// (rvt.Device.ResolveNeighbour), zero otherwise: the transport
	// resolves it again for each packet, and a host link holds packets
	// until the neighbour answers.
	DstMAC       netdev.MAC
	PathMTU      qp.MTU
	HopLimit     uint8
	TrafficClass uint8
}

// AV returns the address vector of the route (for a QP or an AH).
func (r Route) AV() rvt.AddressVector {
	return rvt.AddressVector{DGID: r.DGID, SGIDIndex: r.SGIDIndex, HopLimit: r.HopLimit,
		TrafficClass: r.TrafficClass, Port: 1}
}

type routeKey struct {
	src, dst netip.Addr
	tc       uint8
}

type routeEntry struct {
	r       Route
	expires time.Time
}

// ResolveRoute resolves dst (from src, or from the device's first GID of
// dst's family when src is not valid), through the agent's cache.
func (a *Agent) ResolveRoute(src, dst netip.Addr, tc uint8) (Route, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resolveLocked(src, dst, tc)
}

// FlushRoutes empties the route cache (a neighbour changed).
func (a *Agent) FlushRoutes() {
	a.mu.Lock()
	clear(a.routes)
	a.mu.Unlock()
}

func (a *Agent) resolveLocked(src, dst netip.Addr, tc uint8) (Route, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if !dst.IsValid() || dst.IsUnspecified() {
		return Route{}, fmt.Errorf("resolve %v: %w", dst, ErrInvalidArgument)
	}
	k := routeKey{src, dst, tc}
	now := a.clk.Now()
	if e, ok := a.routes[k]; ok && now.Before(e.expires) {
		a.countLocked("route_cache_hit")
		return e.r, nil
	}
	r := Route{Dst: dst, DGID: netdev.GIDFromIP(dst), PathMTU: a.mtu, HopLimit: 64, TrafficClass: tc}
	found := false
	for i := 0; ; i++ {
		g, err := a.dev.QueryGID(1, i)
		if err != nil {
			break
		}
		ip := g.IP()
		if src.IsValid() && !src.IsUnspecified() {
			if ip == src {
				r.Src, r.SGIDIndex, r.SGID, found = ip, uint8(i), g, true
				break
			}
			continue
		}
		if ip.Is4() == dst.Is4() && ip.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			r.Src, r.SGIDIndex, r.SGID, found = ip, uint8(i), g, true
			break
		}
	}
	if !found {
		return Route{}, fmt.Errorf("resolve %v from %v: %w", dst, src, ErrNoRoute)
	}
	if r.Src == dst {
		r.HopLimit = 1 // loopback
	}
	if r.Src != dst {
		// The routing table first, as rdma_resolve_addr asks it before
		// the neighbour table: a destination off the device's subnets
		// with no gateway fails here, at once (ENETUNREACH).
		if _, err := a.dev.Route(dst); err != nil {
			if !src.IsValid() || src.IsUnspecified() {
				a.countLocked("route_unreachable")
				return Route{}, fmt.Errorf("resolve %v: %w", dst, ErrNetUnreachable)
			}
			// From a given source address Linux looks the route up on
			// that address's interface, and the kernel takes a
			// destination it has no route for as on-link there: it asks
			// for the destination's MAC, and the resolution ends in
			// ADDR_ERROR (ETIMEDOUT) at its timeout (measured: rping -I,
			// udaddy -b). So does this one (the device's resolver
			// knows no MAC for it; unlike Linux, nothing is asked on
			// the wire).
			a.countLocked("route_assumed_onlink")
		}
		// Asking starts resolution on the wire (an ARP request for the
		// next hop: the destination, or the gateway) if the neighbour is
		// unknown, as rdma_resolve_addr does; the route does not wait for
		// the answer.
		r.DstMAC, _ = a.dev.ResolveNeighbour(dst)
	}
	a.routes[k] = routeEntry{r, now.Add(a.opts.RouteTTL)}
	a.countLocked("route_resolved")
	return r, nil
}

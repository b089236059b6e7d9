package cm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// TestResolveAddrNetUnreachable: a destination off the device's subnet
// with no gateway, resolved with no source address, fails at once, as Linux's rdma_resolve_addr fails with
// ENETUNREACH from the call itself (measured: rping to 10.60.0.1 from
// 10.50.0.2/24 with no default route, "rdma_resolve_addr: Network is
// unreachable", no event): ResolveAddr returns ErrNetUnreachable, no
// event follows, nothing is asked on the wire, and the ID resolves
// another address afterwards; Dial returns the error too. Before, the
// resolution asked for the destination's MAC and ended in ADDR_ERROR
// (ETIMEDOUT) after the timeout.
func TestResolveAddrNetUnreachable(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 51,
		routes: func(int) netdev.RouteFunc {
			return netdev.StaticRoutes{OnLink: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}.Route
		}})
	a, b := w.nodes[0], w.nodes[1]
	off := netip.MustParseAddr("10.60.0.1")
	w.fab.AddAddr(off, netdev.MAC{2, 0, 0, 0, 0, 0x60}) // the fabric could reach it: the route says no
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	err := id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(off, 7175), 2*time.Second)
	require.ErrorIs(t, err, ErrNetUnreachable)
	require.ErrorIs(t, err, netdev.ErrNetUnreachable)
	w.noEvent(t, ch, 3*time.Second)
	require.Equal(t, uint64(1), a.agent.Counters()["route_unreachable"])
	require.Zero(t, a.agent.Counters()["addr_wait_neighbour"])
	require.Equal(t, StateIdle, id.State())
	_, err = a.agent.ResolveRoute(netip.Addr{}, off, 0)
	require.ErrorIs(t, err, ErrNetUnreachable)

	// The same ID then resolves an address on the subnet.
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(b.ip, 7175), time.Second))
	w.expect(t, ch, EventAddrResolved)
	id.Destroy()

	// From a given source address (rping -I, udaddy -b: an ID bound to an
	// address) Linux takes the destination as on-link and asks for its
	// MAC (measured: three ARP requests for 10.60.0.1, then ADDR_ERROR
	// -110 at the 2 s timeout): ADDR_ERROR with ErrAddrTimeout.
	for _, bind := range []bool{false, true} {
		id := a.agent.NewID(ch, PSTCP, nil)
		src := a.ip
		if bind {
			require.NoError(t, id.BindAddr(netip.AddrPortFrom(a.ip, 0)))
			src = netip.Addr{}
		}
		start := w.clk.Now()
		require.NoError(t, id.ResolveAddrTimeout(src, netip.AddrPortFrom(off, 7175), 2*time.Second))
		ev := w.expect(t, ch, EventAddrError)
		require.ErrorIs(t, ev.Err, ErrAddrTimeout)
		require.InDelta(t, float64(2*time.Second), float64(w.clk.Now().Sub(start)), float64(15*time.Millisecond))
		id.Destroy()
	}

	// The net form: Dial fails with it, at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, a.dev, netip.AddrPortFrom(off, 7175), a.newQP(t, qp.RC), nil)
	require.ErrorIs(t, err, ErrNetUnreachable)
	requireClean(t, w, 0)
}

// TestResolveAddrViaGateway: with a default gateway, a destination off the
// subnet resolves as Linux resolves it (measured: rping to 10.60.0.1 with
// a default route via 10.50.0.254 gets ADDR_RESOLVED, and its REQ goes to
// the gateway's MAC with the destination's IP): the route's MAC is the
// gateway's, its DGID the destination's; a gateway that does not answer
// ends in ADDR_ERROR (ETIMEDOUT) at the timeout, as an absent neighbour.
func TestResolveAddrViaGateway(t *testing.T) {
	gw := netip.MustParseAddr("198.18.0.254")
	gwMAC := netdev.MAC{2, 0, 0, 0, 0, 0xfe}
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 52,
		routes: func(int) netdev.RouteFunc {
			return netdev.StaticRoutes{OnLink: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, Gateway4: gw}.Route
		}})
	a := w.nodes[0]
	off := netip.MustParseAddr("10.60.0.1")
	w.fab.AddAddr(off, netdev.MAC{2, 0, 0, 0, 0, 0x60})
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	// The gateway is not there yet: its MAC is unknown.
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(off, 7176), 500*time.Millisecond))
	ev := w.expect(t, ch, EventAddrError)
	require.ErrorIs(t, ev.Err, ErrAddrTimeout)
	a.agent.FlushRoutes()

	w.fab.AddAddr(gw, gwMAC)
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(off, 7176), 500*time.Millisecond))
	w.expect(t, ch, EventAddrResolved)
	r := id.Route()
	require.Equal(t, gwMAC, r.DstMAC, "the gateway's MAC")
	require.Equal(t, netdev.GIDFromIP(off), r.DGID)
	require.Equal(t, uint8(64), r.HopLimit)
	id.Destroy()
	requireClean(t, w, 0)
}

package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
)

// noEvent steps the manual clock by d, 1 ms at a time, and fails if an
// event arrives on ch meanwhile.
func (w *world) noEvent(t *testing.T, ch *EventChannel, d time.Duration) {
	t.Helper()
	for s := time.Duration(0); s < d; s += time.Millisecond {
		if ev, ok := ch.Poll(); ok {
			t.Fatalf("after %v: event %v (err %v), want none yet", s, ev.Type, ev.Err)
		}
		w.step(time.Millisecond)
	}
}

// TestResolveAddrNeighbourTimeout: as over Linux (ARP fails: ADDR_ERROR,
// -ETIMEDOUT), an address no neighbour answers for ends the resolution
// with ADDR_ERROR at the caller's timeout, not ADDR_RESOLVED and then a
// minute of REQ retries.
func TestResolveAddrNeighbourTimeout(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 41})
	a := w.nodes[0]
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	nobody := netip.MustParseAddr("198.18.0.77")
	start := w.clk.Now()
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(nobody, 7174), 500*time.Millisecond))
	w.noEvent(t, ch, 450*time.Millisecond)
	ev := w.expect(t, ch, EventAddrError)
	require.ErrorIs(t, ev.Err, ErrAddrTimeout)
	require.InDelta(t, float64(500*time.Millisecond), float64(w.clk.Now().Sub(start)), float64(15*time.Millisecond))
	require.Equal(t, uint64(1), a.agent.Counters()["addr_timeout"])
	require.ErrorIs(t, id.Connect(a.newQP(t, qp.RC), nil), ErrInvalidState, "connect after ADDR_ERROR")
	require.Zero(t, a.agent.Counters()["tx_REQ"])
	// Like the kernel, the ID keeps its source port: resolving again works.
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 7174), time.Second))
	w.expect(t, ch, EventAddrResolved)
	require.NoError(t, id.Connect(a.newQP(t, qp.RC), nil))
	w.expect(t, ch, EventRejected) // nobody listens there
	require.Equal(t, uint64(1), a.agent.Counters()["tx_REQ"])
	id.Destroy()
	requireClean(t, w, 0)
}

// TestResolveAddrWaitsForNeighbour: ADDR_RESOLVED comes when the
// neighbour becomes known (on a host link: the ARP answer), with its MAC
// in the route.
func TestResolveAddrWaitsForNeighbour(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 42})
	a := w.nodes[0]
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	late := netip.MustParseAddr("198.18.0.9")
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(late, 7174)))
	w.noEvent(t, ch, 300*time.Millisecond)
	// A second resolution while the first waits is refused (the kernel's
	// ID is in ADDR_QUERY).
	require.ErrorIs(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(late, 7174)), ErrInvalidState)
	mac := netdev.MAC{2, 0, 0, 0, 0, 9}
	w.fab.AddAddr(late, mac)
	at := w.clk.Now()
	w.expect(t, ch, EventAddrResolved)
	require.Less(t, w.clk.Now().Sub(at), 20*time.Millisecond)
	require.Equal(t, mac, id.route.DstMAC)
	require.Equal(t, late, id.remote.Addr())
	require.Equal(t, uint64(1), a.agent.Counters()["addr_wait_neighbour"])
	id.Destroy()
	requireClean(t, w, 0)
}

// TestResolveAddrKnownNeighbour: a neighbour the resolver knows, and our
// own address, resolve at once, without waiting.
func TestResolveAddrKnownNeighbour(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 43})
	a := w.nodes[0]
	ch := NewEventChannel()
	for _, dst := range []netip.Addr{w.nodes[1].ip, a.ip} {
		id := a.agent.NewID(ch, PSTCP, nil)
		require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(dst, 7174)))
		ev, ok := ch.Poll()
		require.True(t, ok, "%v: no event before the clock moves", dst)
		require.Equal(t, EventAddrResolved, ev.Type)
		id.Destroy()
	}
	require.Zero(t, a.agent.Counters()["addr_wait_neighbour"])
	requireClean(t, w, 0)
}

// TestResolveAddrDestroyWhileWaiting: destroying an ID whose resolution
// waits stops its timer and no event follows.
func TestResolveAddrDestroyWhileWaiting(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 44})
	a := w.nodes[0]
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	require.NoError(t, id.ResolveAddrTimeout(netip.Addr{}, netip.AddrPortFrom(netip.MustParseAddr("198.18.0.77"), 1), time.Second))
	w.noEvent(t, ch, 50*time.Millisecond)
	id.Destroy()
	requireClean(t, w, 0)
	w.noEvent(t, ch, 2*time.Second)
	require.Zero(t, a.agent.Counters()["addr_timeout"])
}

package netdev_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/linktest"
)

// wrapAll wraps l in a capture and a fault link, as rvt pingpong --pcap
// --loss does.
func wrapAll(t *testing.T, l netdev.Link) netdev.Link {
	t.Helper()
	c, err := netdev.WithCapture(l, nil, io.Discard)
	require.NoError(t, err)
	return netdev.WithFaults(c, nil, 1, netdev.Faults{})
}

func TestAsThroughWrappers(t *testing.T) {
	fab := netdev.NewFabric(nil, 1)
	base := &linktest.CapLink{FabricPort: fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 1}, 1500)}
	host := netdev.NewHost(base, base.HardwareAddr(), nil, nil)
	top := wrapAll(t, host)

	h, ok := netdev.As[netdev.Holder](top)
	require.True(t, ok, "Holder through fault link, capture and host")
	require.Same(t, base, h)
	p, ok := netdev.As[netdev.Poller](top)
	require.True(t, ok, "Poller through the wrappers")
	require.Same(t, base, p)
	j, ok := netdev.As[netdev.GroupJoiner](top)
	require.True(t, ok, "GroupJoiner through the wrappers")
	require.Same(t, host, j, "the host answers for the link below it")
	o, ok := netdev.As[netdev.OwnReceiver](top)
	require.True(t, ok)
	require.Same(t, host, o)
	hh, ok := netdev.As[*netdev.Host](top)
	require.True(t, ok, "concrete types too")
	require.Same(t, host, hh)

	_, ok = netdev.As[netdev.Holder](wrapAll(t, fab.NewPort(netdev.MAC{}, 1500)))
	require.False(t, ok, "a fabric port does not batch, wrapped or not")
	_, ok = netdev.As[netdev.Holder](nil)
	require.False(t, ok)
}

package netdev_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/linktest"
)

// wrapAll wraps l in a capture and a fault link, as rvt pingpong --pcap
// --loss does.
func wrapAll(t *testing.T, l netdev.Link) netdev.Link {
	t.Helper()
	c, err := capture.Wrap(l, nil, io.Discard)
	require.NoError(t, err)
	return faults.Wrap(c, nil, 1, faults.Profile{})
}

func TestAsThroughWrappers(t *testing.T) {
	fab := fabric.New(nil, 1)
	base := &linktest.CapLink{Port: fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 1}, 1500)}
	hst := host.New(base, base.HardwareAddr(), nil, nil)
	top := wrapAll(t, hst)

	h, ok := netdev.As[netdev.Holder](top)
	require.True(t, ok, "Holder through fault link, capture and host")
	require.Same(t, base, h)
	p, ok := netdev.As[netdev.Poller](top)
	require.True(t, ok, "Poller through the wrappers")
	require.Same(t, base, p)
	j, ok := netdev.As[netdev.GroupJoiner](top)
	require.True(t, ok, "GroupJoiner through the wrappers")
	require.Same(t, hst, j, "the host answers for the link below it")
	o, ok := netdev.As[netdev.OwnReceiver](top)
	require.True(t, ok)
	require.Same(t, hst, o)
	hh, ok := netdev.As[*host.Host](top)
	require.True(t, ok, "concrete types too")
	require.Same(t, hst, hh)

	port := fab.NewPort(netdev.MAC{}, 1500)
	h, ok = netdev.As[netdev.Holder](wrapAll(t, port))
	require.True(t, ok, "a fabric port holds frames for Flush (netdev.HereReceiver), wrapped or not")
	require.Same(t, port, h)
	_, ok = netdev.As[netdev.Holder](nil)
	require.False(t, ok)
}

package cm

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvt"
)

// The agent is the device's service: AgentFor finds the one NewAgent
// opened, a second NewAgent is refused, Agent.Close lets the device get a
// new one, and the device closes its agent when it closes.
func TestAgentIsDeviceService(t *testing.T) {
	dev, err := rvt.Open(rvt.Options{Inline: true})
	require.NoError(t, err)
	a, err := NewAgent(dev, FastOptions())
	require.NoError(t, err)
	got, err := AgentFor(dev)
	require.NoError(t, err)
	require.Same(t, a, got)
	_, err = NewAgent(dev, Options{})
	require.ErrorIs(t, err, ErrInvalidState)

	require.NoError(t, a.Close())
	b, err := AgentFor(dev)
	require.NoError(t, err)
	require.NotSame(t, a, b, "a closed agent is forgotten")

	other, err := rvt.Open(rvt.Options{Name: "other", Inline: true})
	require.NoError(t, err)
	defer other.Close()
	c, err := AgentFor(other)
	require.NoError(t, err)
	require.NotSame(t, b, c, "one agent per device")

	require.NoError(t, dev.Close())
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	require.True(t, closed, "the device closed its agent")
	_, err = AgentFor(dev)
	require.ErrorIs(t, err, rvt.ErrClosed)
}

// Route resolution takes the peer's MAC from the device's resolver, with
// no resolver in the agent's options.
func TestRouteMACFromDevice(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 9})
	r, err := w.nodes[0].agent.ResolveRoute(netip.Addr{}, w.nodes[1].ip, 0)
	require.NoError(t, err)
	require.Equal(t, netdev.MAC{2, 0, 0, 0, 0, 2}, r.DstMAC)
	r, err = w.nodes[0].agent.ResolveRoute(netip.Addr{}, netip.MustParseAddr("198.18.0.99"), 0)
	require.NoError(t, err, "an unknown neighbour is the transport's to resolve")
	require.True(t, r.DstMAC.IsZero())
}

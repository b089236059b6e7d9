//go:build linux

package rvt

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/transport"
)

// TestInterfaceFollowsAddrs: a device opened with Options.Interface on a
// veth end (its link is an in-memory fabric port, independent of the
// addresses) takes its GID table from the interface and follows address
// changes, raising EventGIDChange for each.
func TestInterfaceFollowsAddrs(t *testing.T) {
	nettest.RequireRoot(t)
	a, b := nettest.New(t), nettest.New(t)
	require.NoError(t, a.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0)
	}))
	ea, _ := nettest.Veth(t, a, b)
	a.Run("ip", "addr", "add", "10.204.1.1/24", "dev", ea)
	// Even without DAD the link-local address is tentative until the
	// kernel's DAD work runs; wait for it so the initial table is exact.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out := a.Run("ip", "-6", "addr", "show", "dev", ea, "scope", "link")
		if strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative") {
			break
		}
		require.True(t, time.Now().Before(deadline), "no usable link-local address on %s: %s", ea, out)
	}

	fab := fabric.New(nil, 1)
	mac := netdev.MAC{0x02, 0x5f, 0, 0, 0, 0x41}
	port := fab.NewPort(mac, 4096)
	t.Cleanup(func() { port.Close() })

	var (
		dev    *Device
		ifmac  netdev.MAC
		events = make(chan Event, 64)
	)
	require.NoError(t, a.Do(func() error {
		ifi, err := net.InterfaceByName(ea)
		if err != nil {
			return err
		}
		ifmac, _ = netdev.MACFrom(ifi.HardwareAddr)
		dev, err = Open(Options{Name: "iface", Workers: 1, Link: port, MAC: mac, Resolve: fab.Resolve, Interface: ea})
		return err
	}))
	t.Cleanup(func() { dev.Close() })
	dev.Subscribe(func(ev Event) {
		if ev.Type == transport.EventGIDChange {
			events <- ev
		}
	})

	gids := func() []GID {
		p, err := dev.QueryPort(1)
		require.NoError(t, err)
		out := make([]GID, p.GIDTblLen)
		for i := range out {
			out[i], err = dev.QueryGID(1, i)
			require.NoError(t, err)
		}
		return out
	}
	table := func(addrs ...netip.Addr) []GID {
		out := make([]GID, len(addrs))
		for i, a := range addrs {
			out[i] = netdev.GIDFromIP(a)
		}
		return out
	}
	// waitTable waits (bounded) for the table to become want, with at
	// least one EventGIDChange on the way.
	waitTable := func(want []GID) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				require.Equal(t, uint8(1), ev.Port)
				if slices.Equal(gids(), want) {
					return
				}
			case <-deadline:
				t.Fatalf("GID table %v, want %v", gids(), want)
			}
		}
	}

	ll := netdev.LinkLocalFromMAC(ifmac)
	v4 := netip.MustParseAddr("10.204.1.1")
	require.Equal(t, table(ll, v4), gids(), "initial table from the interface")

	a.Run("ip", "-6", "addr", "add", "fd00:204:1::1/64", "dev", ea, "nodad")
	v6 := netip.MustParseAddr("fd00:204:1::1")
	waitTable(table(ll, v4, v6))

	a.Run("ip", "addr", "del", "10.204.1.1/24", "dev", ea)
	waitTable(table(ll, v6))

	// Close stops following: later changes raise nothing.
	require.NoError(t, dev.Close())
	for len(events) > 0 {
		<-events
	}
	a.Run("ip", "addr", "add", "10.204.1.2/24", "dev", ea)
	select {
	case ev := <-events:
		t.Fatalf("event after Close: %v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestInterfaceMissing: Open fails when the interface does not exist.
func TestInterfaceMissing(t *testing.T) {
	_, err := Open(Options{Name: "iface", Workers: 1, Interface: "sv-no-such-if"})
	require.ErrorContains(t, err, "sv-no-such-if", "the error names the interface")
}

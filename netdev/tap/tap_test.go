//go:build linux

package tap

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// TestTAPHost runs a Host on a TAP in a fresh namespace: the kernel, with
// its own address on the TAP, and softverbs, with another address and MAC,
// resolve each other and exchange UDP.
func TestTAPHost(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	name := nettest.Name("t")
	var tap *Link
	var conn *net.UDPConn
	require.NoError(t, ns.Do(func() error {
		var err error
		tap, err = Open(name, 1500)
		return err
	}))
	defer tap.Close()
	require.True(t, tap.Created())
	require.Equal(t, 1500, tap.MTU())
	ns.Run("ip", "addr", "add", "10.77.0.1/24", "dev", name)
	require.NoError(t, ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 9999})
		return err
	}))
	defer conn.Close()

	mac := netdev.MAC{0x02, 0x50, 0, 0, 0, 0x02}
	me := netip.MustParseAddr("10.77.0.2")
	kernel := netip.MustParseAddr("10.77.0.1")
	h := host.New(tap, mac, []netip.Addr{netdev.LinkLocalFromMAC(mac), me}, clock.Real())
	got := make(frametest.Chan, 16)
	h.SetHandler(func(f []byte) {
		if fi, err := netdev.ParseFrame(f); err == nil && fi.DstPort == netdev.RoCEv2Port {
			got.Handler(f)
		}
	})

	// softverbs resolves the kernel.
	var kmac netdev.MAC
	require.Eventually(t, func() bool {
		var ok bool
		kmac, ok = h.Resolve(kernel)
		return ok
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, tap.HardwareAddr(), kmac)

	// The kernel resolves softverbs (ARP answered by the Host) and sends.
	_, err := conn.WriteToUDP([]byte("from the kernel"), &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: netdev.RoCEv2Port})
	require.NoError(t, err)
	f := got.Next(t)
	fi, err := netdev.ParseFrame(f)
	require.NoError(t, err)
	require.Equal(t, "from the kernel", string(f[fi.PayloadOff:fi.End()]))
	require.Equal(t, mac, fi.DstMAC)
	require.Contains(t, ns.Run("ip", "neigh", "show", "10.77.0.2"), mac.String())

	// softverbs sends to the kernel's socket.
	b := make([]byte, 64)
	payload := []byte("from softverbs")
	copy(b[netdev.HeaderLen(false):], payload)
	n := netdev.EncodeRoCEv2(b, netdev.Endpoint{MAC: mac, IP: me, Port: 0xC001}, netdev.Endpoint{MAC: kmac, IP: kernel, Port: 9999}, 64, 0, len(payload))
	require.NoError(t, h.Send(b[:n+len(payload)]))
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	rb := make([]byte, 100)
	k, from, err := conn.ReadFromUDP(rb)
	require.NoError(t, err)
	require.Equal(t, "from softverbs", string(rb[:k]))
	require.Equal(t, "10.77.0.2:49153", from.String())

	// Closing removes the interface Open created.
	require.NoError(t, tap.Close())
	require.ErrorIs(t, tap.Send(b), netdev.ErrClosed)
	out := ns.Run("ip", "-o", "link", "show")
	require.False(t, strings.Contains(out, name), "the TAP is gone: %s", out)
}

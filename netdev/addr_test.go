package netdev

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGIDOrder(t *testing.T) {
	mac := MAC{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	ll := netip.MustParseAddr("fe80::5054:ff:fe12:3456")
	require.Equal(t, ll, LinkLocalFromMAC(mac))
	got := GIDOrder(mac, []netip.Addr{
		netip.MustParseAddr("fd00::7"),
		netip.MustParseAddr("10.0.0.1"),
		ll,
		netip.MustParseAddr("::ffff:10.0.0.2"),
		netip.MustParseAddr("fe80::99"),
		netip.MustParseAddr("10.0.0.1"),
		netip.MustParseAddr("::1"),
		netip.MustParseAddr("239.1.1.1"),
	})
	require.Equal(t, []netip.Addr{ll, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("fd00::7"), netip.MustParseAddr("fe80::99")}, got)
	require.Equal(t, GIDFromIP(netip.MustParseAddr("10.0.0.1")).String(), "::ffff:10.0.0.1")
}

func TestGIDsFromInterface(t *testing.T) {
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	for _, ifi := range ifs {
		mac, ok := MACFrom(ifi.HardwareAddr)
		if !ok {
			continue
		}
		gids, err := GIDsFromInterface(ifi.Name)
		require.NoError(t, err)
		require.Equal(t, LinkLocalFromMAC(mac), gids[0])
		return
	}
	_, err = GIDsFromInterface("lo")
	require.Error(t, err, "loopback has no ethernet address")
}

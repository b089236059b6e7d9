//go:build linux

package udp

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnerMTU(t *testing.T) {
	pfx := netip.MustParsePrefix
	ifs := []ifaceAddrs{
		{mtu: 65536, prefixes: []netip.Prefix{pfx("127.0.0.1/8"), pfx("::1/128")}},        // lo
		{mtu: 1500, prefixes: []netip.Prefix{pfx("10.0.0.5/16"), pfx("fe80::1/64")}},      // eth0
		{mtu: 9000, prefixes: []netip.Prefix{pfx("10.0.1.1/24"), pfx("fd00::2/64")}},      // eth1
		{mtu: 4000, prefixes: []netip.Prefix{pfx("10.0.1.77/16"), pfx("192.0.2.200/32")}}, // its address inside eth1's /24
	}
	for _, tc := range []struct {
		name, ip string
		want     int
	}{
		{"lo's own address", "127.0.0.1", 65536},
		{"the rest of 127/8 is lo's too", "127.0.0.2", 65536},
		{"the top of 127/8", "127.255.255.254", 65536},
		{"IPv4-mapped", "::ffff:127.0.0.2", 65536},
		{"IPv6 loopback", "::1", 65536},
		{"an address itself", "10.0.0.5", 1500},
		{"in a prefix only", "10.0.200.9", 1500},
		{"the narrower prefix wins", "10.0.1.9", 9000},
		{"an address wins over a narrower prefix", "10.0.1.77", 4000},
		{"a tie goes to the first interface", "10.0.200.9", 1500},
		{"IPv6 in a prefix", "fd00::77", 9000},
		{"a /32 holds only itself", "192.0.2.201", 1500},
		{"nobody's", "198.51.100.1", 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ownerMTU(netip.MustParseAddr(tc.ip), ifs))
		})
	}
	require.Equal(t, 1500, ownerMTU(netip.MustParseAddr("127.0.0.2"), nil), "no interfaces")
}

func TestPrefixOf(t *testing.T) {
	for _, tc := range []struct {
		n    net.IPNet
		want string
	}{
		{net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}, "127.0.0.1/8"},
		{net.IPNet{IP: net.IPv4(127, 0, 0, 1).To4(), Mask: net.CIDRMask(8, 32)}, "127.0.0.1/8"},
		{net.IPNet{IP: net.IPv4(10, 1, 2, 3), Mask: net.CIDRMask(96+24, 128)}, "10.1.2.3/24"},
		{net.IPNet{IP: net.ParseIP("fd00::2"), Mask: net.CIDRMask(64, 128)}, "fd00::2/64"},
	} {
		p, ok := prefixOf(&tc.n)
		require.True(t, ok, tc.want)
		require.Equal(t, netip.MustParsePrefix(tc.want), p)
	}
	_, ok := prefixOf(&net.IPNet{IP: net.IPv4(10, 0, 0, 1), Mask: net.IPMask{255, 0, 255, 0}})
	require.False(t, ok, "a non-canonical mask")
}

// TestInterfaceMTULoopback: every address of 127.0.0.0/8 is lo's, so a
// link on 127.0.0.2 gets lo's MTU, as one on 127.0.0.1 does.
func TestInterfaceMTULoopback(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo here: %v", err)
	}
	as, err := lo.Addrs()
	require.NoError(t, err)
	has127 := false
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && n.Contains(net.IPv4(127, 0, 0, 2)) {
			has127 = true
		}
	}
	if !has127 {
		t.Skip("lo does not hold 127.0.0.0/8 in this namespace")
	}
	for _, ip := range []string{"127.0.0.1", "127.0.0.2", "127.1.2.3"} {
		require.Equal(t, lo.MTU, interfaceMTU(netip.MustParseAddr(ip)), ip)
	}
}

package devopen

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// openUDP's errors name the flag the address came from (--udp wins
// over --ip) and quote its whole value.
func TestOpenUDPLinkErrors(t *testing.T) {
	for _, tc := range []struct {
		udp, ip string
		err     string
		reason  bool // err is followed by the parser's reason
	}{
		{udp: "1.2.3", err: `--udp "1.2.3": want IP or IP:port`},
		{udp: "10.0.0.1:x", ip: "10.0.0.1/24", err: `--udp "10.0.0.1:x": want IP or IP:port`},
		// --ip is parsed by ParsePrefix, as for the other links; after
		// the value comes net/netip's text, which Go may reword.
		{ip: "1.2.3/24", err: `--ip "1.2.3/24": netip.ParsePrefix("1.2.3/24"): `, reason: true},
		{ip: "1.2.3", err: `--ip "1.2.3": ParseAddr("1.2.3"): `, reason: true},
		{ip: "/24", err: `--ip "/24": netip.ParsePrefix("/24"): `, reason: true},
		{ip: "10.0.0.1:5000", err: `--ip "10.0.0.1:5000": ParseAddr("10.0.0.1:5000"): `, reason: true},
		{ip: "10.0.0.1/99", err: `--ip "10.0.0.1/99": netip.ParsePrefix("10.0.0.1/99"): `, reason: true},
	} {
		l, err := openUDP(Config{UDP: tc.udp, IP: tc.ip})
		require.Nil(t, l, "--udp %q --ip %q", tc.udp, tc.ip)
		require.Error(t, err, "--udp %q --ip %q", tc.udp, tc.ip)
		if tc.reason {
			require.True(t, strings.HasPrefix(err.Error(), tc.err) && len(err.Error()) > len(tc.err),
				"--udp %q --ip %q: %q, want %q and the parser's reason", tc.udp, tc.ip, err, tc.err)
		} else {
			require.EqualError(t, err, tc.err, "--udp %q --ip %q", tc.udp, tc.ip)
		}
	}
}

// TestTAPRoutes: softverbs as the host on a TAP routes by its --ip subnet
// and its --gateway: off the subnet through the gateway, or unreachable
// without one; a gateway off the subnet is refused, and a gateway is for
// TAP links only.
func TestTAPRoutes(t *testing.T) {
	pfx := netip.MustParsePrefix("10.50.0.200/24")
	r, err := Config{TAP: "x", IP: pfx.String()}.tapRoutes(pfx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(netip.MustParseAddr("10.60.0.1")); !errors.Is(err, netdev.ErrNetUnreachable) {
		t.Fatalf("no gateway: %v, want ErrNetUnreachable", err)
	}
	r, err = Config{TAP: "x", IP: pfx.String(), Gateway: "10.50.0.254"}.tapRoutes(pfx)
	if err != nil {
		t.Fatal(err)
	}
	if next, err := r.Route(netip.MustParseAddr("10.60.0.1")); err != nil || next != netip.MustParseAddr("10.50.0.254") {
		t.Fatalf("via gateway: %v, %v", next, err)
	}
	if next, err := r.Route(netip.MustParseAddr("10.50.0.2")); err != nil || next != netip.MustParseAddr("10.50.0.2") {
		t.Fatalf("on-link: %v, %v", next, err)
	}
	if err := (Config{TAP: "x", IP: pfx.String(), Gateway: "10.9.0.1"}).CheckAddrs(); err == nil {
		t.Fatal("a gateway off the subnet passed")
	}
	if _, err := Open(Config{UDP: "127.0.0.1", Gateway: "10.50.0.254"}); err == nil {
		t.Fatal("a gateway on a UDP link was accepted")
	}
}

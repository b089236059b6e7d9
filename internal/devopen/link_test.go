package devopen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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

//go:build linux

package udp

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenRefusesOtherPorts: RoCEv2 peers always send to port 4791, so a
// link on any other port could never receive; Open refuses it before it
// opens a socket, naming the port and why.
func TestOpenRefusesOtherPorts(t *testing.T) {
	for _, ap := range []string{"127.0.0.1:4792", "127.0.0.1:1", "[::1]:65535", "127.0.0.2:4790"} {
		t.Run(ap, func(t *testing.T) {
			addr := netip.MustParseAddrPort(ap)
			l, err := Open(addr)
			require.Nil(t, l)
			require.ErrorIs(t, err, ErrPort)
			require.ErrorContains(t, err, "port "+strconv.Itoa(int(addr.Port()))+":")
			require.ErrorContains(t, err, "4791")

			l, err = OpenConfig(Config{Addr: addr, MTU: 1500})
			require.Nil(t, l)
			require.ErrorIs(t, err, ErrPort, "OpenConfig too")
		})
	}
}

package udaddy

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/cmtool/cmtooltest"
	"github.com/softverbs/softverbs/rvt"
)

// The lines of the real tools (testdata/captures/udaddy.txt).
var (
	serverLines = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	clientLines = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
)

func sides(srv, cli Config) (cmtool.Side, func(context.Context, *rvt.Device, cmtool.Out) error) {
	server := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, listening func()) error {
		srv.OnListen = func(netip.AddrPort) { listening() }
		return Run(ctx, dev, srv, out)
	}
	client := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		return Run(ctx, dev, cli, out)
	}
	return server, client
}

func TestUdaddy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		devs        func(*testing.T) cmtooltest.Devices
		conns, size int
	}{
		{"fabric-1", cmtooltest.Fabric, 1, 100},
		{"fabric-3", cmtooltest.Fabric, 3, 1024},
		{"rvtd-3", cmtooltest.RVTD, 3, 1024},
		{"udp-2", cmtooltest.UDP, 2, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.devs(t)
			srv, cli := DefaultConfig(), DefaultConfig()
			srv.Connections, srv.Size = tc.conns, tc.size
			cli.Dst, cli.Connections, cli.Size = d.ServerAddr, tc.conns, tc.size
			server, client := sides(srv, cli)
			s, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
			require.NoError(t, s.Err)
			require.NoError(t, c.Err)
			require.Equal(t, serverLines, cmtooltest.Lines(s.Stdout))
			require.Equal(t, clientLines, cmtooltest.Lines(c.Stdout))
		})
	}
}

// A datagram larger than the active MTU is refused with udaddy's line.
func TestUdaddyTooBig(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	cli.Dst, cli.Size = d.ServerAddr, 2000
	server, client := sides(srv, cli)
	_, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, c.Err)
	require.Equal(t, []string{"udaddy: starting client", "udaddy: connecting",
		"udaddy: message_size 2000 is larger than active mtu 1024", "test complete", "return status -22"}, cmtooltest.Lines(c.Stdout))
}

// Nobody listens: SIDR answers UNSUPPORTED, which librdmacm reports as
// UNREACHABLE with status 1.
func TestUdaddyNoListener(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	cli.Dst, cli.Port = d.ServerAddr, 7175
	server, client := sides(srv, cli)
	_, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, c.Err)
	require.Equal(t, []string{"udaddy: starting client", "udaddy: connecting", "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1",
		"test complete", "return status 1"}, cmtooltest.Lines(c.Stdout))
}

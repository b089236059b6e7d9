package ucmatose

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/cmtool/cmtooltest"
	"github.com/softverbs/softverbs/rvt"
)

// The lines of the real tools (testdata/captures/ucmatose.txt).
var (
	serverLines = []string{"cmatose: starting server", "initiating data transfers", "completing sends",
		"receiving data transfers", "data transfers complete", "cmatose: disconnecting", "disconnected",
		"test complete", "return status 0"}
	clientLines = []string{"cmatose: starting client", "cmatose: connecting", "receiving data transfers",
		"sending replies", "data transfers complete", "test complete", "return status 0"}
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

func TestUcmatose(t *testing.T) {
	for _, tc := range []struct {
		name        string
		devs        func(*testing.T) cmtooltest.Devices
		conns, size int
	}{
		{"fabric-1", cmtooltest.Fabric, 1, 100},
		{"fabric-8", cmtooltest.Fabric, 8, 4000},
		// More requests at once than the 128 a listener once queued:
		// rdma_listen(id, 0) queues 1024 over Linux.
		{"fabric-300", cmtooltest.Fabric, 300, 100},
		{"rvtd-8", cmtooltest.RVTD, 8, 4000},
		{"udp-4", cmtooltest.UDP, 4, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.devs(t)
			srv, cli := DefaultConfig(), DefaultConfig()
			srv.Connections, srv.Size = tc.conns, tc.size
			cli.Dst, cli.Connections, cli.Size, cli.AckTimeout = d.ServerAddr, tc.conns, tc.size, 16
			server, client := sides(srv, cli)
			s, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
			require.NoError(t, s.Err)
			require.NoError(t, c.Err)
			require.Equal(t, serverLines, cmtooltest.Lines(s.Stdout))
			require.Equal(t, clientLines, cmtooltest.Lines(c.Stdout))
		})
	}
}

// Nobody listens: the client prints the REJECTED event and returns its
// status, as cmatose does.
func TestUcmatoseRejected(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	cli.Dst, cli.Port = d.ServerAddr, 7472
	server, client := sides(srv, cli)
	_, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, c.Err)
	require.Equal(t, []string{"cmatose: starting client", "cmatose: connecting", "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8",
		"test complete", "return status 8"}, cmtooltest.Lines(c.Stdout))
}

// A connection whose resources cannot be made (more receives than a QP
// may hold): cmatose prints the failure, "test complete" and its status,
// and ends; the connections never made are not torn down (a nil node
// panicked here).
func TestUcmatoseResourcesFail(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	cli.Dst, cli.Connections, cli.Count = d.ServerAddr, 2, 20000
	server, client := sides(srv, cli)
	_, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, c.Err)
	lines := cmtooltest.Lines(c.Stdout)
	require.Contains(t, lines, "test complete")
	require.Regexp(t, `^return status -?[1-9]`, lines[len(lines)-1])
}

// The server cannot make a connection's resources: as cmatose, it rejects
// the request, stops and returns its status, not 0 after transfers with
// no connection.
func TestUcmatoseServerResourcesFail(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	srv.Count = 20000
	cli.Dst = d.ServerAddr
	server, client := sides(srv, cli)
	s, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, s.Err)
	lines := cmtooltest.Lines(s.Stdout)
	require.Len(t, lines, 5, s.Stdout)
	require.Equal(t, "cmatose: starting server", lines[0])
	require.True(t, strings.HasPrefix(lines[1], "cmatose: unable to create QP: "), lines[1])
	require.Equal(t, []string{"cmatose: failing connection request", "test complete", "return status -1"}, lines[2:])
	require.Error(t, c.Err)
}

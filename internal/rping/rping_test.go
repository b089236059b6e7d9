package rping

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/cmtool/cmtooltest"
	"github.com/softverbs/softverbs/rvt"
)

// The ping data of the real tools (testdata/captures/rping.txt, rping -v
// -C 3 -S 64 between two rxe guests) is ours byte for byte.
func TestDataMatchesCapture(t *testing.T) {
	f, err := os.Open("../../testdata/captures/rping.txt")
	require.NoError(t, err)
	defer f.Close()
	var client, server []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "server ping data: "); ok {
			server = append(server, s)
		} else if s, ok := strings.CutPrefix(sc.Text(), "ping data: "); ok {
			client = append(client, s)
		}
	}
	require.Len(t, client, 3)
	require.Equal(t, client, server)
	for i, s := range client {
		require.Equal(t, s, string(cstr(Data(i, 64))), "ping %d", i)
	}
	// The rotation wraps from 'z' back to 'A'; the number is cut at size-1.
	require.Equal(t, "rdma-ping-57: z", string(cstr(Data(57, 16))))
	require.Equal(t, "rdma-ping-58: A", string(cstr(Data(58, 16))))
	require.Equal(t, "rdma-ping-1", string(cstr(Data(1, 12))))
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Size = 25 }, "Invalid size 25 (valid range is 26 to 65536)"},
		{func(c *Config) { c.Size = 65536 }, "Invalid size 65536 (valid range is 26 to 65536)"},
		{func(c *Config) { c.Count = -1 }, "Invalid count -1"},
		{func(c *Config) { c.Addr = netip.Addr{} }, "needs the server's address"},
	} {
		c := DefaultConfig()
		c.Addr = netip.MustParseAddr("10.0.0.1")
		tc.mod(&c)
		require.ErrorContains(t, c.Check(), tc.want)
	}
	c := DefaultConfig()
	c.Server, c.Size = true, 65535
	require.NoError(t, c.Check())
}

func sides(srv, cli Config) (cmtool.Side, func(context.Context, *rvt.Device, cmtool.Out) error) {
	srv.Server = true
	server := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, listening func()) error {
		srv.OnListen = func(netip.AddrPort) { listening() }
		return Run(ctx, dev, srv, out)
	}
	client := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		return Run(ctx, dev, cli, out)
	}
	return server, client
}

// checkRun checks both sides' lines against rping's for count pings of size.
func checkRun(t *testing.T, s, c cmtooltest.Output, count, size int) {
	t.Helper()
	require.NoError(t, s.Err)
	require.NoError(t, c.Err)
	var wantC, wantS []string
	for i := range count {
		d := string(cstr(Data(i, size)))
		wantC = append(wantC, "ping data: "+d)
		wantS = append(wantS, "server ping data: "+d)
	}
	require.Equal(t, wantC, cmtooltest.Lines(c.Stdout))
	require.Equal(t, wantS, cmtooltest.Lines(s.Stdout))
	require.Equal(t, []string{"client DISCONNECT EVENT..."}, cmtooltest.Lines(c.Stderr))
	require.Equal(t, []string{"server DISCONNECT EVENT...", "wait for RDMA_READ_ADV state 10"}, cmtooltest.Lines(s.Stderr))
}

func TestRpingFabric(t *testing.T) {
	for _, size := range []int{MinSize, 64, 4096, BufSize - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			d := cmtooltest.Fabric(t)
			srv, cli := DefaultConfig(), DefaultConfig()
			srv.Verbose, srv.Size = true, size
			cli.Addr, cli.Verbose, cli.Validate, cli.Count, cli.Size = d.ServerAddr, true, true, 5, size
			server, client := sides(srv, cli)
			s, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
			checkRun(t, s, c, 5, size)
		})
	}
}

// TestRpingRVTD runs rping on two devices served by rvtd: its connection
// manager is the daemon's (cm on an rvt.Dial device).
func TestRpingRVTD(t *testing.T) {
	d := cmtooltest.RVTD(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	srv.Verbose, srv.Size = true, 1000
	cli.Addr, cli.Verbose, cli.Validate, cli.Count, cli.Size = d.ServerAddr, true, true, 10, 1000
	server, client := sides(srv, cli)
	s, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	checkRun(t, s, c, 10, 1000)
}

func TestRpingUDP(t *testing.T) {
	d := cmtooltest.UDP(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	srv.Verbose, srv.Size, srv.Addr = true, 1000, d.ServerAddr
	cli.Addr, cli.Verbose, cli.Validate, cli.Count, cli.Size, cli.TOS = d.ServerAddr, true, true, 20, 1000, 0x20
	server, client := sides(srv, cli)
	s, c := cmtooltest.Run(t, d, 60*time.Second, server, client)
	checkRun(t, s, c, 20, 1000)
}

// Nobody listens on the port: the client prints rping's line for the
// REJECTED event (reason 8, invalid service ID).
func TestRpingNoListener(t *testing.T) {
	d := cmtooltest.Fabric(t)
	srv, cli := DefaultConfig(), DefaultConfig()
	cli.Addr, cli.Count, cli.Port = d.ServerAddr, 1, 7175
	server, client := sides(srv, cli)
	_, c := cmtooltest.Run(t, d, 30*time.Second, server, client)
	require.Error(t, c.Err)
	require.Equal(t, []string{"cma event RDMA_CM_EVENT_REJECTED, error 8", "connect error -1"}, cmtooltest.Lines(c.Stderr))
}

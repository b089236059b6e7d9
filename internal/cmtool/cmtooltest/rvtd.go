package cmtooltest

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd"
)

// RVTD runs an in-process rvtd with its default devices and opens rvt0
// (198.18.0.1, the server) and rvt1 through it (rvt.Dial): the tools then
// run their connection manager in the daemon.
func RVTD(t *testing.T) Devices {
	t.Helper()
	srv, err := rvtd.New(nil, rvtd.Options{})
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	require.NoError(t, srv.Listen(sock))
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		require.NoError(t, <-done)
	})
	var d Devices
	for i, name := range []string{"rvt0", "rvt1"} {
		dev, err := rvt.Dial(sock, name)
		require.NoError(t, err)
		t.Cleanup(func() { _ = dev.Close() })
		if i == 0 {
			d.Server = dev
		} else {
			d.Client = dev
		}
	}
	d.ServerAddr = netip.MustParseAddr("198.18.0.1")
	return d
}

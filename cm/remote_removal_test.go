package cm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/rvtd"
)

// TestRemoteDeviceRemoval: on a device served by rvtd, the IDs are told
// of the removal once, whether the program closes its device or the
// daemon shuts down first (its DEVICE_REMOVAL) and the device closes
// after: a blocked Listener.Accept returns ErrDeviceRemoved, an event-form
// ID gets one DEVICE_REMOVAL.
func TestRemoteDeviceRemoval(t *testing.T) {
	tests := []struct {
		name   string
		remove func(srv *rvtd.Server, n *remoteNode) error
	}{
		{"Device.Close", func(_ *rvtd.Server, n *remoteNode) error { return n.dev.Close() }},
		{"daemon shutdown", func(srv *rvtd.Server, n *remoteNode) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, sock := startRVTD(t)
			n := newRemoteNode(t, sock, "rvt0")
			l, err := cm.Listen(n.dev, netip.MustParseAddrPort("198.18.0.1:7174"), nil)
			require.NoError(t, err)
			ag, err := cm.AgentFor(n.dev)
			require.NoError(t, err)
			ch := cm.NewEventChannel()
			id := ag.NewID(ch, cm.PSTCP, "ev")
			require.NoError(t, id.BindAddr(netip.MustParseAddrPort("198.18.0.1:7175")))
			require.NoError(t, id.Listen())
			accepted := make(chan error, 1)
			go func() {
				_, err := l.Accept(context.Background())
				accepted <- err
			}()

			require.NoError(t, tt.remove(srv, n))
			select {
			case err := <-accepted:
				require.ErrorIs(t, err, cm.ErrDeviceRemoved)
			case <-time.After(10 * time.Second):
				t.Fatal("Listener.Accept still blocked")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ev, err := ch.Get(ctx)
			require.NoError(t, err)
			require.Equal(t, cm.EventDeviceRemoval, ev.Type)
			require.Equal(t, id, ev.ID)
			require.ErrorIs(t, ev.Err, cm.ErrDeviceRemoved)
			require.NoError(t, n.dev.Close())
			time.Sleep(50 * time.Millisecond)
			ev, more := ch.Poll()
			require.False(t, more, "a second event %v", ev.Type)
			id.Destroy()
			require.NoError(t, l.Close())
		})
	}
}

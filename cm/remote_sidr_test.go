package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cm"
)

// TestRemoteSIDRNoListener: a SIDR request nobody listens for is answered
// with status UNSUPPORTED. rvtd reports it to librdmacm as Linux does
// (UNREACHABLE with the SIDR status 1), and an ID of a device served by
// rvtd (rvt.Dial) still gets the same error as an in-process one: a
// RejectError with reason 8 and the SIDR status, which is ErrNoListener.
func TestRemoteSIDRNoListener(t *testing.T) {
	_, sock := startRVTD(t)
	a, b := newRemoteNode(t, sock, "rvt0"), newRemoteNode(t, sock, "rvt1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := cm.ResolveUD(ctx, b.dev, b.pd, netip.MustParseAddrPort("198.18.0.1:7174"), nil)
	require.ErrorIs(t, err, cm.RejInvalidServiceID)
	require.ErrorIs(t, err, cm.ErrNoListener)
	var rej *cm.RejectError
	require.True(t, errors.As(err, &rej), "%v", err)
	require.Equal(t, cm.SIDRUnsupported, rej.SIDR)
	require.NoError(t, a.dev.Close())
	require.NoError(t, b.dev.Close())
}

package cm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// TestRemoteNetUnreachable: through rvtd, Dial to a destination off the
// devices' subnet (198.18.0.0/24, no gateway). The remote agent resolves
// from its device's own address (the protocol chooses the device by the
// source address), so the daemon resolves it as Linux resolves from a
// bound source: on-link, ADDR_ERROR -ETIMEDOUT at the 2 s timeout, so
// Dial fails with ErrAddrTimeout (an embedded device, which needs no
// source address to choose itself, fails at once with
// ErrNetUnreachable). Dial with an explicit source does the same.
func TestRemoteNetUnreachable(t *testing.T) {
	_, sock := startRVTD(t)
	n := newRemoteNode(t, sock, "rvt1")
	q, err := n.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: rvt.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = cm.Dial(ctx, n.dev, netip.MustParseAddrPort("10.60.0.1:7178"), q, nil)
	require.ErrorIs(t, err, cm.ErrAddrTimeout)
	require.InDelta(t, float64(2*time.Second), float64(time.Since(start)), float64(time.Second))
}

package rvtd_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestCMResolveNetUnreachable: cm_resolve_addr to a destination off every
// device's subnet (198.18.0.0/24; no gateway on a fabric) fails at once
// with ENETUNREACH, as rdma_resolve_addr does on Linux with no route; no
// event follows, when no source address is given (the device chosen by
// route); from a source address the destination is taken as on-link, as
// Linux takes it, and the resolution ends in ADDR_ERROR -ETIMEDOUT. An
// address on the subnet still resolves afterwards.
func TestCMResolveNetUnreachable(t *testing.T) {
	_, sock := startDaemon(t)
	c, err := newCMNode(sock, "rvt1", 2)
	require.NoError(t, err)
	off := netip.AddrPortFrom(netip.MustParseAddr("10.60.0.1"), 7177)
	for _, src := range []netip.Addr{{}, ip1} {
		id, err := c.ch.CreateID(9, proto.PSTCP, 2)
		require.NoError(t, err)
		err = id.ResolveAddr(src, off, 500)
		if src.IsValid() {
			// From a source address: on-link, as Linux takes it, so
			// ADDR_ERROR -ETIMEDOUT at the timeout.
			require.NoError(t, err)
			ev, err := waitEvent(c.ch, evAddrError)
			require.NoError(t, err)
			require.Equal(t, -int32(unix.ETIMEDOUT), ev.Status)
		} else {
			require.True(t, errors.Is(err, proto.ENETUNREACH), "%v, want ENETUNREACH", err)
			_, err = c.ch.GetEvent(700 * time.Millisecond)
			require.Error(t, err, "no event after a failed cm_resolve_addr")
		}
		require.NoError(t, id.ResolveAddr(src, netip.AddrPortFrom(ip0, 7177), 2000))
		_, err = waitEvent(c.ch, evAddrResolved)
		require.NoError(t, err)
		_, err = id.Destroy()
		require.NoError(t, err)
	}
}

//go:build linux

package netdev

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// TestKernelRoute: KernelNeighbours.Route answers as `ip route get`: the
// destination on a subnet of the interface, the gateway off it, and
// ErrNetUnreachable with no route (what rdma_resolve_addr fails with).
func TestKernelRoute(t *testing.T) {
	nettest.RequireRoot(t)
	n := nettest.New(t)
	n.Run("ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	n.Run("ip", "link", "set", "d1", "up")
	n.Run("ip", "addr", "add", "10.77.0.1/24", "dev", "d0")
	n.Run("ip", "link", "set", "d0", "up")
	clk := clock.NewManual()
	var k *KernelNeighbours
	require := func(dst, want string) {
		t.Helper()
		next, err := k.Route(netip.MustParseAddr(dst))
		if want == "" {
			if !errors.Is(err, ErrNetUnreachable) {
				t.Fatalf("Route(%s) = %v, %v; want ErrNetUnreachable", dst, next, err)
			}
			return
		}
		if err != nil || next != netip.MustParseAddr(want) {
			t.Fatalf("Route(%s) = %v, %v; want %s", dst, next, err, want)
		}
	}
	if err := n.Do(func() (err error) {
		k, err = OpenKernelNeighbours("d0", clk)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	require("10.77.0.9", "10.77.0.9")
	require("10.77.0.1", "10.77.0.1") // our own: local
	require("10.88.0.1", "")
	n.Run("ip", "route", "add", "default", "via", "10.77.0.254")
	require("10.88.0.1", "") // cached for a second
	clk.Advance(2 * time.Second)
	require("10.88.0.1", "10.77.0.254")
}

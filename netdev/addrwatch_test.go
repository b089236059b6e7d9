//go:build linux

package netdev

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev/nettest"
)

// addrMsg builds one netlink message of type typ carrying an ifaddrmsg for
// ifindex.
func addrMsg(typ uint16, ifindex int) []byte {
	b := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfAddrmsg)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint32(b[unix.SizeofNlMsghdr+4:], uint32(ifindex))
	return b
}

func TestAddrWatchEventFilter(t *testing.T) {
	require.True(t, addrEventFor(addrMsg(unix.RTM_NEWADDR, 7), 7))
	require.True(t, addrEventFor(addrMsg(unix.RTM_DELADDR, 7), 7))
	require.False(t, addrEventFor(addrMsg(unix.RTM_NEWADDR, 8), 7), "another interface")
	require.False(t, addrEventFor(addrMsg(unix.RTM_NEWLINK, 7), 7), "not an address message")
	two := append(addrMsg(unix.RTM_NEWADDR, 8), addrMsg(unix.RTM_DELADDR, 7)...)
	require.True(t, addrEventFor(two, 7), "second message of a datagram")
	require.True(t, addrEventFor([]byte{1, 2, 3}, 7), "unparsable: re-read to be safe")
}

// addrUpdates collects what a watcher passes to fn.
type addrUpdates struct {
	ch   chan []netip.Addr
	last []netip.Addr
}

func newAddrUpdates() *addrUpdates { return &addrUpdates{ch: make(chan []netip.Addr, 256)} }

func (u *addrUpdates) fn(a []netip.Addr) { u.ch <- a }

// waitFor waits (bounded) until an update equal to want arrives.
func (u *addrUpdates) waitFor(t *testing.T, want []netip.Addr) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	if slices.Equal(u.last, want) {
		return
	}
	for {
		select {
		case a := <-u.ch:
			u.last = a
			if slices.Equal(a, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no update %v within 10s; last %v", want, u.last)
		}
	}
}

// TestAddrWatch: a watcher on a veth end in a fresh namespace sees
// addresses added and removed, in GID order, and sees a tentative address
// only once DAD has succeeded.
func TestAddrWatch(t *testing.T) {
	nettest.RequireRoot(t)
	a, b := nettest.New(t), nettest.New(t)
	// No DAD in a by default, so the link-local address is usable as soon
	// as the interface is up and the test is quick and exact.
	require.NoError(t, a.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0)
	}))
	ea, _ := nettest.Veth(t, a, b)

	var mac MAC
	u := newAddrUpdates()
	var stop func()
	require.NoError(t, a.Do(func() error {
		ifi, err := net.InterfaceByName(ea)
		if err != nil {
			return err
		}
		mac, _ = MACFrom(ifi.HardwareAddr)
		stop, err = WatchAddrs(ea, nil, u.fn)
		return err
	}))
	t.Cleanup(func() { stop() })
	select {
	case u.last = <-u.ch:
	default:
		t.Fatal("fn was not called with the initial list before WatchAddrs returned")
	}
	ll := LinkLocalFromMAC(mac)
	v4 := netip.MustParseAddr("10.204.0.1")
	v6 := netip.MustParseAddr("fd00:204::1")
	u.waitFor(t, []netip.Addr{ll})

	a.Run("ip", "addr", "add", "10.204.0.1/24", "dev", ea)
	a.Run("ip", "-6", "addr", "add", "fd00:204::1/64", "dev", ea, "nodad")
	u.waitFor(t, []netip.Addr{ll, v4, v6})

	a.Run("ip", "addr", "del", "10.204.0.1/24", "dev", ea)
	u.waitFor(t, []netip.Addr{ll, v6})

	// An address on another interface changes nothing here: the next
	// update is the one for ea.
	a.Run("ip", "addr", "add", "10.205.0.1/32", "dev", "lo")
	a.Run("ip", "addr", "add", "10.204.0.2/24", "dev", ea)
	v4b := netip.MustParseAddr("10.204.0.2")
	select {
	case got := <-u.ch:
		require.Equal(t, []netip.Addr{ll, v4b, v6}, got)
		u.last = got
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10s")
	}

	// With DAD on, a new address is tentative for about a second (one
	// probe, RetransTimer 1 s) and is left out until DAD succeeds.
	a.Run("sh", "-c", fmt.Sprintf("echo 1 > /proc/sys/net/ipv6/conf/%s/accept_dad", ea))
	a.Run("ip", "-6", "addr", "add", "fd00:205::1/64", "dev", ea)
	tentative := strings.Contains(a.Run("ip", "-6", "addr", "show", "dev", ea, "to", "fd00:205::1"), "tentative")
	select {
	case got := <-u.ch:
		require.Contains(t, got, netip.MustParseAddr("fd00:205::1"), "the update comes when DAD is done")
		require.Len(t, got, 4)
		require.Equal(t, []netip.Addr{ll, v4b}, got[:2], "link-local, then IPv4, then the other IPv6: %v", got)
		require.ElementsMatch(t, []netip.Addr{v6, netip.MustParseAddr("fd00:205::1")}, got[2:])
		require.True(t, tentative, "the address was tentative after ip addr add, and no update said otherwise")
	case <-time.After(10 * time.Second):
		t.Fatal("the address did not appear within 10s of DAD")
	}

	// After stop, fn is not called again.
	stop()
	a.Run("ip", "addr", "del", "10.204.0.2/24", "dev", ea)
	select {
	case got := <-u.ch:
		t.Fatalf("update after stop: %v", got)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestAddrWatchNoInterface: a missing interface is an error, not a watcher.
func TestAddrWatchNoInterface(t *testing.T) {
	_, err := WatchAddrs("sv-no-such-if", nil, func([]netip.Addr) {})
	require.Error(t, err)
}

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
	"sync/atomic"
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

// rereads records, through addrWatchHooks.handled, whether the watcher
// re-read the addresses for each notification it handled.
type rereads chan bool

func newRereads() rereads { return make(rereads, 1024) }

func (r rereads) handled(reread bool) {
	select {
	case r <- reread:
	default: // the test reads far fewer
	}
}

// drain forgets what was recorded so far.
func (r rereads) drain() {
	for {
		select {
		case <-r:
		default:
			return
		}
	}
}

// waitFor waits (bounded) for a notification handled with a re-read
// (reread true) or without one, skipping the others.
func (r rereads) waitFor(t *testing.T, reread bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-r:
			if got == reread {
				return
			}
		case <-deadline:
			t.Fatalf("no notification handled with reread=%v within 10s", reread)
		}
	}
}

// next returns the next record, failing after 10s.
func (r rereads) next(t *testing.T) bool {
	t.Helper()
	select {
	case got := <-r:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("no notification handled within 10s")
		return false
	}
}

// dadlessVeth makes a veth pair between two fresh namespaces and returns
// the first and its end there. DAD is off in that namespace, so the
// link-local address is usable as soon as the interface is up and the
// tests are quick and exact.
func dadlessVeth(t *testing.T) (*nettest.Netns, string) {
	nettest.RequireRoot(t)
	a, b := nettest.New(t), nettest.New(t)
	require.NoError(t, a.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0)
	}))
	ea, _ := nettest.Veth(t, a, b)
	return a, ea
}

// watchIn starts a watcher with hooks on interface ea in namespace a and
// returns its updates, ea's MAC and its stop (also called when the test
// ends).
func watchIn(t *testing.T, a *nettest.Netns, ea string, hooks addrWatchHooks) (*addrUpdates, MAC, func()) {
	t.Helper()
	var mac MAC
	u := newAddrUpdates()
	var stop func()
	require.NoError(t, a.Do(func() error {
		ifi, err := net.InterfaceByName(ea)
		if err != nil {
			return err
		}
		mac, _ = MACFrom(ifi.HardwareAddr)
		stop, err = watchAddrs(ea, u.fn, hooks)
		return err
	}))
	t.Cleanup(func() { stop() })
	return u, mac, stop
}

// TestAddrWatch: a watcher on a veth end in a fresh namespace sees
// addresses added and removed, in GID order, and sees a tentative address
// only once DAD has succeeded.
func TestAddrWatch(t *testing.T) {
	a, ea := dadlessVeth(t)

	rr := newRereads()
	u, mac, stop := watchIn(t, a, ea, addrWatchHooks{handled: rr.handled})
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

	// An address on another interface is not re-read (the notification
	// is filtered by interface), and the next update is the one for ea.
	rr.drain()
	a.Run("ip", "addr", "add", "10.205.0.1/32", "dev", "lo")
	rr.waitFor(t, false)
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

// TestAddrWatchRetry: a re-read that fails is retried at the next
// notification, even one for another interface, so the change it missed
// still reaches fn.
func TestAddrWatchRetry(t *testing.T) {
	a, ea := dadlessVeth(t)

	var failNext atomic.Bool
	rr := newRereads()
	u, mac, _ := watchIn(t, a, ea, addrWatchHooks{failDump: func() bool { return failNext.Swap(false) }, handled: rr.handled})
	ll := LinkLocalFromMAC(mac)
	u.waitFor(t, []netip.Addr{ll})
	rr.drain()

	// The re-read for this change fails: no update.
	failNext.Store(true)
	a.Run("ip", "addr", "add", "10.206.0.1/24", "dev", ea)
	require.Eventually(t, func() bool { return !failNext.Load() }, 10*time.Second, time.Millisecond, "no re-read")
	rr.waitFor(t, true) // the failed re-read
	select {
	case got := <-u.ch:
		t.Fatalf("update after a failed re-read: %v", got)
	default:
	}

	// A notification for another interface makes the watcher re-read,
	// and the change arrives.
	a.Run("ip", "addr", "add", "10.207.0.1/32", "dev", "lo")
	select {
	case got := <-u.ch:
		require.Equal(t, []netip.Addr{ll, netip.MustParseAddr("10.206.0.1")}, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the missed change did not arrive within 10s of the next notification")
	}
	require.True(t, rr.next(t), "the lo notification was re-read")
}

// TestAddrWatchNoInterface: a missing interface is an error naming it, not
// a watcher.
func TestAddrWatchNoInterface(t *testing.T) {
	stop, err := WatchAddrs("sv-no-such-if", func([]netip.Addr) {})
	require.ErrorIs(t, err, unix.ENODEV)
	require.ErrorContains(t, err, "sv-no-such-if")
	require.Nil(t, stop)
}

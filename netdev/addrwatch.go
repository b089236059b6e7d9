//go:build linux

package netdev

// Following an interface's addresses: the kernel announces every address
// added to or removed from an interface (and every change of its flags, such
// as the end of duplicate address detection) as RTM_NEWADDR / RTM_DELADDR on
// the rtnetlink groups RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR. WatchAddrs
// listens on those groups and, on any message for the interface, dumps the
// interface's addresses again rather than applying the message itself: a
// dump is always the whole truth, also after the socket overflowed (ENOBUFS)
// and lost notifications.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// WatchAddrs follows the addresses of interface ifname in the network
// namespace of the calling thread (both netlink sockets are opened there, so
// the watcher keeps working whichever thread later runs it).
//
// fn receives the interface's addresses in GID index order, as
// KernelNeighbours.Addrs lists them: IPv6 link-local first, then IPv4
// (unmapped), then the other IPv6 addresses; tentative (DAD in progress)
// and DAD-failed addresses are left out, and appear once DAD succeeds. fn
// is called once with the current list before WatchAddrs returns, then from
// the watcher's goroutine, one call at a time, whenever the list differs from
// the one last passed. The list may be empty (no usable address). fn must not
// call stop.
//
// The watcher reports no errors once started. If re-reading the addresses
// fails, it tries again at the next notification of any interface (not
// only ifname's), so a change is late rather than lost. A receive error
// other than a lost notification (ENOBUFS, followed by a re-read) ends the
// watcher: fn is not called again, and stop still has to be called.
//
// stop closes the sockets and waits for the goroutine to end; after it
// returns fn is not called again. stop may be called more than once.
func WatchAddrs(ifname string, fn func([]netip.Addr)) (stop func(), err error) {
	return watchAddrs(ifname, fn, addrWatchHooks{})
}

// addrWatchHooks let tests see and steer the watcher's goroutine; the zero
// value is what WatchAddrs uses.
type addrWatchHooks struct {
	// failDump, if set, is asked before each re-read; true makes the
	// re-read fail.
	failDump func() bool
	// handled, if set, is called after each notification is handled
	// (after fn, if fn was called), saying whether the addresses were
	// re-read.
	handled func(reread bool)
}

func watchAddrs(ifname string, fn func([]netip.Addr), hooks addrWatchHooks) (stop func(), err error) {
	if fn == nil {
		return nil, fmt.Errorf("watch addresses of %s: nil callback", ifname)
	}
	idx, err := ifIndex(ifname)
	if err != nil {
		return nil, fmt.Errorf("watch addresses of %s: %w", ifname, err)
	}
	// Subscribe before the first dump, so that no change falls between them.
	f, err := openAddrEvents()
	if err != nil {
		return nil, fmt.Errorf("watch addresses of %s: %w", ifname, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watch addresses of %s: %w", ifname, err)
	}
	dump, err := OpenKernelNeighboursIndex(idx, nil) // only Addrs, which reads no clock
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watch addresses of %s: %w", ifname, err)
	}
	cur, err := dump.Addrs()
	if err != nil {
		f.Close()
		dump.Close()
		return nil, fmt.Errorf("watch addresses of %s: %w", ifname, err)
	}
	fn(slices.Clone(cur))

	reread := func() ([]netip.Addr, error) {
		if hooks.failDump != nil && hooks.failDump() {
			return nil, errors.New("re-read failed (test)")
		}
		return dump.Addrs()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer dump.Close()
		buf := make([]byte, 1<<16)
		stale := false // the last re-read failed: re-read at the next notification
		for {
			var (
				n    int
				rerr error
			)
			err := rc.Read(func(fd uintptr) bool {
				n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
				return rerr != unix.EAGAIN && rerr != unix.EWOULDBLOCK
			})
			if err != nil {
				return // closed by stop
			}
			switch {
			case rerr == unix.ENOBUFS:
				// Notifications were lost; the re-read below catches up.
			case rerr == unix.EINTR:
				continue
			case rerr != nil:
				return
			case !stale && !addrEventFor(buf[:n], idx):
				if hooks.handled != nil {
					hooks.handled(false)
				}
				continue
			}
			next, err := reread()
			stale = err != nil
			if !stale && !slices.Equal(next, cur) {
				cur = next
				fn(slices.Clone(cur))
			}
			if hooks.handled != nil {
				hooks.handled(true) // last, so a test that saw it has seen fn's call too
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.Close() // wakes the reader out of the netpoller
			<-done
		})
	}, nil
}

// openAddrEvents opens a non-blocking NETLINK_ROUTE socket subscribed to
// the IPv4 and IPv6 address groups and wraps it in an os.File, which puts it
// on the runtime's netpoller.
func openAddrEvents() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	for _, g := range []int{unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("netlink join group %d: %w", g, err)
		}
	}
	f := os.NewFile(uintptr(fd), "rtnetlink-addr")
	if f == nil {
		unix.Close(fd)
		return nil, errors.New("netlink: bad file descriptor")
	}
	return f, nil
}

// addrEventFor reports whether a datagram read from the address groups
// holds an RTM_NEWADDR or RTM_DELADDR for interface ifindex. A datagram
// that does not parse counts as one (the caller re-reads the addresses,
// which is always safe).
func addrEventFor(b []byte, ifindex int) bool {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil || len(msgs) == 0 {
		return true
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWADDR && m.Header.Type != unix.RTM_DELADDR {
			continue
		}
		// struct ifaddrmsg: family, prefixlen, flags, scope, index.
		if len(m.Data) < unix.SizeofIfAddrmsg || int(binary.NativeEndian.Uint32(m.Data[4:])) == ifindex {
			return true
		}
	}
	return false
}

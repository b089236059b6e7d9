//go:build linux

// Package tap is the link over a Linux TAP device. softverbs is then its
// own host on the segment: wrap the link in a host.Host, which answers
// ARP and neighbour discovery.
package tap

// TAP is written over golang.org/x/sys/unix rather than songgao/water:
// water opens /dev/net/tun blocking (os.OpenFile, without O_NONBLOCK), so
// whether reads park on the Go netpoller and whether Close wakes a pending
// Read depends on os internals; it neither sets the MTU nor brings the
// interface up. The whole job is one open, one TUNSETIFF and three ioctls.
// Interface configuration uses SIOCSIFMTU/SIOCSIFFLAGS ioctls, not netlink:
// they are all a TAP needs, and they keep the module free of a netlink
// dependency.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev"
)

// Stats counts a TAP link's traffic.
type Stats struct {
	TxFrames, TxBytes, TxErrors  uint64
	RxFrames, RxBytes, RxDropped uint64 // dropped: shorter than a header, or no handler set
}

// TAP is a Link over a Linux TAP device: frames written to it appear on the
// kernel interface as received, and frames the kernel sends on the interface
// (for example as a bridge port) are read from it. Softverbs is a host of
// its own behind the TAP: its MAC and addresses are its own (wrap the TAP in
// a Host), not the kernel interface's.
type Link struct {
	f       *os.File
	name    string
	mac     netdev.MAC // the kernel interface's
	mtu     int
	created bool
	pool    *netdev.FramePool

	netdev.Receiver
	closed atomic.Bool
	done   chan struct{}
	once   sync.Once

	tx       netdev.FrameCount
	txErrors atomic.Uint64
}

var (
	_ netdev.Link     = (*Link)(nil)
	_ netdev.Releaser = (*Link)(nil)
)

// Open creates the TAP interface name (or attaches to it if it exists
// as a persistent TAP), sets its MTU (if mtu > 0; else keeps the
// interface's) and brings it up. The interface lives in the network
// namespace of the calling thread. An interface Open created is not
// persistent: the kernel removes it when the TAP is closed; one that
// existed before is left as it was (up, with the MTU set).
//
// Requires CAP_NET_ADMIN (or a persistent TAP owned by the caller).
func Open(name string, mtu int) (*Link, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("open tap %q: bad interface name", name)
	}
	_, lookupErr := net.InterfaceByName(name) // nil: the interface exists
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open tap %s: /dev/net/tun: %w", name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open tap %s: TUNSETIFF: %w", name, err)
	}
	// The file is non-blocking, so os registers it with the netpoller:
	// Read parks the goroutine, and Close wakes it.
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
	t := &Link{f: f, name: name, created: lookupErr != nil, done: make(chan struct{})}
	if err := t.configure(mtu); err != nil {
		f.Close()
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	t.pool = netdev.NewFramePool(netdev.MaxFrameLen(t.mtu))
	go t.readLoop()
	return t, nil
}

// configure sets the MTU, brings the interface up and reads back its MAC
// and MTU.
func (t *Link) configure(mtu int) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return err
	}
	if mtu > 0 {
		ifr.SetUint32(uint32(mtu))
		if err := unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr); err != nil {
			return fmt.Errorf("set mtu %d: %w", mtu, err)
		}
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	ifi, err := net.InterfaceByName(t.name)
	if err != nil {
		return err
	}
	t.mtu = ifi.MTU
	t.mac, _ = netdev.MACFrom(ifi.HardwareAddr)
	return nil
}

func (t *Link) readLoop() {
	defer close(t.done)
	for {
		b := t.pool.Get()
		n, err := t.f.Read(b)
		if err != nil {
			t.pool.Put(b)
			if errors.Is(err, os.ErrClosed) || t.closed.Load() {
				return
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			// The interface went away (EBADFD, EIO): nothing more to read.
			return
		}
		if n < netdev.EthernetHeaderLen {
			t.CountDropped()
			t.pool.Put(b)
			continue
		}
		t.Deliver(b[:n], n, t)
	}
}

// Name returns the interface name.
func (t *Link) Name() string { return t.name }

// Created reports whether Open created the interface (and closing the
// TAP removes it).
func (t *Link) Created() bool { return t.created }

// Send writes frame to the TAP: the kernel receives it on the interface.
// ErrFrameTooLong for a frame over the MTU; ErrClosed after Close.
func (t *Link) Send(frame []byte) error {
	if t.closed.Load() {
		return netdev.ErrClosed
	}
	if len(frame) < netdev.EthernetHeaderLen {
		t.txErrors.Add(1)
		return netdev.ErrTruncated
	}
	if netdev.FrameTooLong(frame, t.mtu) {
		t.txErrors.Add(1)
		return netdev.ErrFrameTooLong
	}
	if _, err := t.f.Write(frame); err != nil {
		t.txErrors.Add(1)
		if t.closed.Load() {
			return netdev.ErrClosed
		}
		return fmt.Errorf("tap %s: write: %w", t.name, err)
	}
	t.tx.Add(1, uint64(len(frame)))
	return nil
}

// ReceivesOnOwnGoroutine reports true: the handler runs on the link's
// receive goroutine.
func (t *Link) ReceivesOnOwnGoroutine() bool { return true }

// HardwareAddr returns the kernel interface's MAC. Softverbs should use a
// MAC of its own on the segment (see Host).
func (t *Link) HardwareAddr() netdev.MAC { return t.mac }

// MTU returns the interface MTU.
func (t *Link) MTU() int { return t.mtu }

// Release returns a received frame's buffer to the pool.
func (t *Link) Release(frame []byte) { t.pool.Put(frame) }

// Close stops the reader and closes the file. An interface Open created
// disappears with it; an existing persistent one stays. Idempotent.
func (t *Link) Close() error {
	var err error
	t.once.Do(func() {
		t.closed.Store(true)
		err = t.f.Close()
		<-t.done
	})
	return err
}

// Stats returns a snapshot of the counters.
func (t *Link) Stats() Stats {
	rxFrames, rxBytes, rxDropped := t.RxCounts()
	txFrames, txBytes := t.tx.Load()
	return Stats{
		TxFrames: txFrames, TxBytes: txBytes, TxErrors: t.txErrors.Load(),
		RxFrames: rxFrames, RxBytes: rxBytes, RxDropped: rxDropped,
	}
}

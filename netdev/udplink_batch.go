//go:build linux

package netdev

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transmit batching for the UDP link (Holder): between Hold and the last
// Flush, Send copies each datagram into a buffer of its own and queues it;
// Flush hands the queue to the kernel with sendmmsg, one call per run of
// datagrams from the same source-port socket, instead of one sendto each.

// udpBatchMax bounds the datagrams queued under a hold: a fuller queue is
// sent at once.
const udpBatchMax = 64

type udpQueued struct {
	c   *net.UDPConn
	to  netip.AddrPort
	buf []byte // a pool buffer holding the payload
}

type udpBatch struct {
	active atomic.Int32 // holders, for Send's check without the lock

	mu      sync.Mutex
	holders int32
	q       []udpQueued

	sendMu sync.Mutex // guards the scratch below, used while sending
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	names  []unix.RawSockaddrInet6 // big enough for IPv4 too
}

// mmsghdr is struct mmsghdr: a msghdr and the byte count the kernel fills.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

var _ Holder = (*UDPLink)(nil)

// Hold makes Send queue datagrams until the matching Flush.
func (l *UDPLink) Hold() {
	b := &l.batch
	b.mu.Lock()
	b.holders++
	b.active.Store(b.holders)
	b.mu.Unlock()
}

// Flush ends a Hold; the last one sends what is queued.
func (l *UDPLink) Flush() {
	b := &l.batch
	b.mu.Lock()
	b.holders--
	b.active.Store(b.holders)
	var q []udpQueued
	if b.holders == 0 && len(b.q) > 0 {
		q, b.q = b.q, make([]udpQueued, 0, udpBatchMax)
	}
	b.mu.Unlock()
	if q != nil {
		l.sendQueued(q)
	}
}

// FlushLazy is Flush: the UDP link sends at once.
func (l *UDPLink) FlushLazy() { l.Flush() }

// queue copies payload for a later sendmmsg if a hold is open; it reports
// false if none is (the caller sends at once).
func (l *UDPLink) queue(c *net.UDPConn, to netip.AddrPort, payload []byte) bool {
	b := &l.batch
	buf := l.pool.Get()
	if len(payload) > len(buf) {
		l.pool.Put(buf)
		return false
	}
	buf = buf[:copy(buf, payload)]
	b.mu.Lock()
	if b.holders == 0 {
		b.mu.Unlock()
		l.pool.Put(buf)
		return false
	}
	b.q = append(b.q, udpQueued{c: c, to: to, buf: buf})
	var q []udpQueued
	if len(b.q) >= udpBatchMax {
		q, b.q = b.q, make([]udpQueued, 0, udpBatchMax)
	}
	b.mu.Unlock()
	if q != nil {
		l.sendQueued(q)
	}
	return true
}

// sendQueued sends q in order, one sendmmsg per run of one socket's
// datagrams, and returns the buffers to the pool.
func (l *UDPLink) sendQueued(q []udpQueued) {
	b := &l.batch
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	for i := 0; i < len(q); {
		j := i + 1
		for j < len(q) && q[j].c == q[i].c {
			j++
		}
		l.sendRun(q[i:j])
		i = j
	}
	for i := range q {
		l.pool.Put(q[i].buf)
		q[i] = udpQueued{}
	}
}

// sendRun sends datagrams that share a socket. A datagram the kernel
// refuses (other than for a full buffer, which waits) is counted as an
// error and skipped, as Send would report it.
func (l *UDPLink) sendRun(q []udpQueued) {
	b := &l.batch
	n := len(q)
	if cap(b.hdrs) < n {
		b.hdrs = make([]mmsghdr, n)
		b.iovs = make([]unix.Iovec, n)
		b.names = make([]unix.RawSockaddrInet6, n)
	}
	hdrs, iovs, names := b.hdrs[:n], b.iovs[:n], b.names[:n]
	for i := range q {
		iovs[i] = unix.Iovec{Base: &q[i].buf[0]}
		iovs[i].SetLen(len(q[i].buf))
		nl := putSockaddr(&names[i], q[i].to)
		hdrs[i] = mmsghdr{hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&names[i])), Namelen: nl, Iov: &iovs[i]}}
		hdrs[i].hdr.SetIovlen(1)
	}
	rc, err := q[0].c.SyscallConn()
	if err != nil {
		l.txErrors.Add(uint64(n))
		return
	}
	for done := 0; done < n; {
		var sent int
		var errno error
		werr := rc.Write(func(fd uintptr) bool {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[done])), uintptr(n-done), 0, 0, 0)
			if e == unix.EAGAIN {
				return false // wait until the socket is writable
			}
			if e != 0 {
				errno = e
				return true
			}
			sent = int(r)
			return true
		})
		l.txBatches.Add(1)
		if werr != nil || (errno != nil && !errors.Is(errno, unix.EINTR)) {
			if werr != nil {
				// The socket is closed: nothing more goes out.
				l.txErrors.Add(uint64(n - done))
				return
			}
			l.txErrors.Add(1)
			done++
			continue
		}
		for _, d := range q[done : done+sent] {
			l.txPackets.Add(1)
			l.txBytes.Add(uint64(len(d.buf)))
		}
		done += sent
	}
}

// putSockaddr writes ap as a raw socket address into sa and returns its
// length. Addresses with zones never reach here (Send sends them itself).
func putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) uint32 {
	port := ap.Port()
	if a := ap.Addr(); a.Is4() {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*s4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	return unix.SizeofSockaddrInet6
}

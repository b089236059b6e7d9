//go:build linux

package udp

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/rearm"
)

// Transmit batching for the UDP link (Holder): between Hold and the last
// Flush, Send copies each datagram into a buffer of its own and queues it;
// Flush hands the queue to the kernel with sendmmsg, one call per run of
// datagrams from the same source-port socket, instead of one sendto each.
// FlushLazy leaves the queue (acknowledgements) for whatever is sent next,
// or for a timer after netdev.LazyFlushDelay: the ACK of a SEND then goes
// with the reply the SEND's completion prompts, in one sendmmsg, instead
// of costing a system call of its own before the reply.

// udpBatchMax bounds the datagrams queued under a hold: a fuller queue is
// sent at once.
const udpBatchMax = 64

type udpQueued struct {
	c   *net.UDPConn
	to  netip.AddrPort
	buf []byte // a pool buffer holding the payload
}

type udpBatch struct {
	mu      sync.Mutex
	holders atomic.Int32  // written under mu; Send reads it without
	lazy    atomic.Bool   // written under mu: q holds what FlushLazy left; Send reads it without
	eager   bool          // guarded by mu: a Flush ended a hold while others held
	q       []udpQueued   // guarded by mu
	free    [][]udpQueued // guarded by mu: emptied queues, for reuse

	lazyTimer rearm.Timer // sends what FlushLazy left (lazyFlush)

	sendMu sync.Mutex // guards the scratch below, used while sending
	hdrs   []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []unix.RawSockaddrInet6 // big enough for IPv4 too
}

var _ netdev.Holder = (*Link)(nil)

// Hold makes Send queue datagrams until the matching Flush.
func (l *Link) Hold() {
	b := &l.batch
	b.mu.Lock()
	b.holders.Add(1)
	b.mu.Unlock()
}

// Flush ends a Hold; the last one sends what is queued.
func (l *Link) Flush() {
	b := &l.batch
	b.mu.Lock()
	var q []udpQueued
	if b.holders.Add(-1) == 0 {
		q = b.takeLocked()
	} else {
		b.eager = true
	}
	b.mu.Unlock()
	l.sendQueued(q)
}

// FlushLazy ends a Hold; if it is the last, what is queued goes with the
// next datagram sent, or after netdev.LazyFlushDelay at the latest;
// unless another holder ended with Flush meanwhile (an application's
// reply posted while the receive goroutine ended its batch with an ACK):
// then it is sent now.
func (l *Link) FlushLazy() {
	b := &l.batch
	b.mu.Lock()
	var q []udpQueued
	arm := false
	if b.holders.Add(-1) == 0 {
		if b.eager {
			q = b.takeLocked()
		} else if len(b.q) > 0 {
			b.lazy.Store(true)
			arm = true
		}
	}
	b.mu.Unlock()
	l.sendQueued(q)
	if arm {
		b.lazyTimer.ArmOnce(netdev.LazyFlushDelay)
	}
}

// lazyFlush sends what FlushLazy left, unless a hold is open again (its
// last flush will); it is FlushLazy's timer and Close's.
func (l *Link) lazyFlush() {
	b := &l.batch
	b.mu.Lock()
	var q []udpQueued
	if b.holders.Load() == 0 {
		q = b.takeLocked()
	}
	b.mu.Unlock()
	l.sendQueued(q)
}

// takeLocked returns the queue, if not empty, and starts an empty one.
func (b *udpBatch) takeLocked() []udpQueued {
	b.eager = false
	b.lazy.Store(false)
	q := b.q
	if len(q) == 0 {
		return nil
	}
	if n := len(b.free); n > 0 {
		b.q, b.free = b.free[n-1], b.free[:n-1]
	} else {
		b.q = make([]udpQueued, 0, udpBatchMax)
	}
	return q
}

// queue copies payload for a later sendmmsg if a hold is open; it reports
// false if none is (the caller sends at once). With none open but frames
// that FlushLazy left queued, it sends them and payload now, in order.
func (l *Link) queue(c *net.UDPConn, to netip.AddrPort, payload []byte) bool {
	b := &l.batch
	buf := l.pool.Get()
	if len(payload) > len(buf) {
		l.pool.Put(buf)
		return false
	}
	buf = buf[:copy(buf, payload)]
	b.mu.Lock()
	held := b.holders.Load() != 0
	if !held && !b.lazy.Load() {
		b.mu.Unlock()
		l.pool.Put(buf)
		return false
	}
	b.q = append(b.q, udpQueued{c: c, to: to, buf: buf})
	var q []udpQueued
	if !held || len(b.q) >= udpBatchMax {
		q = b.takeLocked()
	}
	b.mu.Unlock()
	l.sendQueued(q)
	return true
}

// sendQueued sends q in order, one sendmmsg per run of one socket's
// datagrams, and returns the buffers to the pool and q to the free list.
func (l *Link) sendQueued(q []udpQueued) {
	if len(q) == 0 {
		return
	}
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
	b.mu.Lock()
	b.free = append(b.free, q[:0])
	b.mu.Unlock()
}

// sendRun sends datagrams that share a socket. A datagram the kernel
// refuses (other than for a full buffer, which waits) is counted as an
// error and skipped, as Send would report it.
func (l *Link) sendRun(q []udpQueued) {
	b := &l.batch
	n := len(q)
	if cap(b.hdrs) < n {
		b.hdrs = make([]unix.Mmsghdr, n)
		b.iovs = make([]unix.Iovec, n)
		b.names = make([]unix.RawSockaddrInet6, n)
	}
	hdrs, iovs, names := b.hdrs[:n], b.iovs[:n], b.names[:n]
	for i := range q {
		iovs[i] = unix.Iovec{Base: &q[i].buf[0]}
		iovs[i].SetLen(len(q[i].buf))
		nl := putSockaddr(&names[i], q[i].to)
		hdrs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&names[i])), Namelen: nl, Iov: &iovs[i]}}
		hdrs[i].Hdr.SetIovlen(1)
	}
	rc, err := q[0].c.SyscallConn()
	if err != nil {
		l.txErrors.Add(uint64(n))
		return
	}
	var done, sent int
	var errno unix.Errno
	send := func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[done])), uintptr(n-done), 0, 0, 0)
		sent, errno = int(r), e
		return e != unix.EAGAIN // on EAGAIN, wait until the socket is writable
	}
	for done < n {
		werr := rc.Write(send)
		l.txBatches.Add(1)
		switch {
		case werr != nil: // the socket is closed: nothing more goes out
			l.txErrors.Add(uint64(n - done))
			return
		case errno == unix.EINTR:
		case errno != 0: // the kernel refused the first datagram: skip it
			l.txErrors.Add(1)
			done++
		default:
			var bytes uint64
			for _, d := range q[done : done+sent] {
				bytes += uint64(len(d.buf))
			}
			l.txCount.Add(uint64(sent), bytes)
			done += sent
		}
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

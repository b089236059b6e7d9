// Package cmtool holds what rvt's rdma_cm tools (internal/rping,
// internal/ucmatose, internal/udaddy) share: their two output streams,
// address parsing as getaddrinfo does it, the rdma_cm event and status an
// error of package cm stands for (the tools print them), waiting for
// completions, and the address vector of a reply to a received datagram
// (ibv_create_ah_from_wc).
package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvt"
)

// Out are a tool's standard output and standard error: the rdma-core
// tools print some lines on each (rping's "DISCONNECT EVENT" lines go to
// stderr, its ping data to stdout).
type Out struct {
	Stdout, Stderr io.Writer
}

// Printf writes to standard output.
func (o Out) Printf(format string, a ...any) { fmt.Fprintf(o.Stdout, format, a...) }

// Errorf writes to standard error.
func (o Out) Errorf(format string, a ...any) { fmt.Fprintf(o.Stderr, format, a...) }

// ParseAddr resolves a host as getaddrinfo does for the tools: a numeric
// IPv4 or IPv6 address, or a name looked up (IPv4 first).
func ParseAddr(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo %q: invalid hostname or IP address", host)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), nil
		}
	}
	return ips[0], nil
}

// Negative errno values of rdma_cm event statuses.
const (
	ETIMEDOUT = 110
	ENODEV    = 19
)

// EventOf returns the rdma_cm event and status with which librdmacm would
// report err of a connection or SIDR resolution (REJECTED with the REJ
// reason, UNREACHABLE with -ETIMEDOUT or the SIDR status, ADDR_ERROR), and
// false for errors that are not events (a cancelled context, a local
// failure).
func EventOf(err error) (cm.EventType, int, bool) {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej) && rej.SIDR != 0:
		return cm.EventUnreachable, int(rej.SIDR), true
	case errors.As(err, &rej):
		return cm.EventRejected, int(rej.Reason), true
	case errors.Is(err, cm.ErrNoListener):
		return cm.EventUnreachable, 1, true // SIDR status UNSUPPORTED
	case errors.Is(err, cm.ErrUnreachable):
		return cm.EventUnreachable, -ETIMEDOUT, true
	case errors.Is(err, cm.ErrNoRoute):
		return cm.EventAddrError, -ENODEV, true
	}
	return 0, 0, false
}

// Deadline is now plus d, or the zero Time (no deadline) for d <= 0.
func Deadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// Context is ctx bounded by d (d <= 0: not bounded).
func Context(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// CQ is a completion queue with a waiter: NewCQ's handler wakes Poll.
type CQ struct {
	*rvt.CQ
	w *traffic.CQWaiter
}

// NewCQ creates a CQ of depth entries on dev.
func NewCQ(dev *rvt.Device, depth int) (*CQ, error) {
	w := traffic.NewCQWaiter()
	c, err := dev.CreateCQ(depth, w.Notify)
	if err != nil {
		return nil, err
	}
	return &CQ{CQ: c, w: w}, nil
}

// Poll returns at least one completion in buf, sleeping until one comes,
// ctx ends (ctx.Err()) or stop closes (context.Canceled). Completions
// already queued are returned even after ctx ended or stop closed.
func (c *CQ) Poll(ctx context.Context, buf []rvt.WC, stop <-chan struct{}) (int, error) {
	if n := c.CQ.Poll(buf); n > 0 {
		return n, nil
	}
	dl, _ := ctx.Deadline()
	done := ctx.Done()
	merged := stop
	if done != nil {
		m := make(chan struct{})
		quit := make(chan struct{})
		defer close(quit)
		go func() {
			select {
			case <-done:
			case <-stop:
			case <-quit:
				return
			}
			close(m)
		}()
		merged = m
	}
	n, err := c.w.Poll(c.CQ, buf, dl, merged)
	if err != nil && ctx.Err() != nil {
		return n, ctx.Err()
	}
	if errors.Is(err, traffic.ErrTimeout) {
		return n, context.DeadlineExceeded
	}
	return n, err
}

// ReplyAV is the address vector that answers a datagram received on dev
// whose receive buffer began with grh (40 bytes; rxe and softverbs put an
// IPv4 header in its last 20 bytes), as ibv_create_ah_from_wc makes it:
// the sender's GID, our GID the datagram was sent to, its traffic class.
func ReplyAV(dev *rvt.Device, grh []byte) (rvt.AddressVector, error) {
	if len(grh) < 40 {
		return rvt.AddressVector{}, errors.New("reply AV: no GRH")
	}
	var src, dst netip.Addr
	var tc uint8
	switch {
	case grh[0]>>4 == 6:
		src, dst = netip.AddrFrom16([16]byte(grh[8:24])), netip.AddrFrom16([16]byte(grh[24:40]))
		tc = grh[0]<<4 | grh[1]>>4
	case grh[20]>>4 == 4:
		h := grh[20:]
		src, dst = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		tc = h[1]
	default:
		return rvt.AddressVector{}, errors.New("reply AV: the GRH holds no IPv4 or IPv6 header")
	}
	idx, ok := GIDIndex(dev, dst)
	if !ok {
		return rvt.AddressVector{}, fmt.Errorf("reply AV: %v is none of our GIDs", dst)
	}
	return rvt.AddressVector{DGID: netdev.GIDFromIP(src), SGIDIndex: idx, HopLimit: 64, TrafficClass: tc, Port: 1}, nil
}

// GIDIndex returns the index of ip's GID on port 1 of dev.
func GIDIndex(dev *rvt.Device, ip netip.Addr) (uint8, bool) {
	ip = ip.Unmap()
	for i := 0; i < 256; i++ {
		g, err := dev.QueryGID(1, i)
		if err != nil {
			return 0, false
		}
		if g.IP().Unmap() == ip {
			return uint8(i), true
		}
	}
	return 0, false
}

// Listen listens as the rdma-core tools' servers do: on src, or on every
// address when src is not set, at port in port space ps; onListen, if not
// nil, learns the listener's address (the in-memory pair starts its client
// then). The caller prints the tool's own failure line.
func Listen(dev *rvt.Device, src netip.Addr, port uint16, ps cm.PortSpace, onListen func(netip.AddrPort)) (*cm.Listener, error) {
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
	}
	l, err := cm.Listen(dev, netip.AddrPortFrom(src, port), &cm.ListenOptions{PortSpace: ps})
	if err != nil {
		return nil, err
	}
	if onListen != nil {
		onListen(l.Addr())
	}
	return l, nil
}

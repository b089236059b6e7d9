package vethperf

// The kernel baselines of `rvt perf`, over the same veth as the softverbs
// links: raw UDP datagram throughput (one sender goroutine, one receiver)
// and UDP ping-pong latency, with plain sockets in the two namespaces.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/netdev/udp"
)

// Ports of the baselines (not 4791: the RoCEv2 links own that one).
const (
	perfUDPStreamPort = 18601
	perfUDPPingPort   = 18602
)

// udpPair opens a socket bound to port in namespace 1 and one in namespace
// 0 connected to it.
func udpPair(net_ *perfNet, port uint16) (tx, rx *net.UDPConn, err error) {
	dst := netip.AddrPortFrom(net_.ip[1], port)
	if err := net_.ns[1].do(func() (err error) {
		rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return nil, nil, err
	}
	// The baseline receiver gets the socket buffer the UDP link asks for.
	if err := setRcvBuf(rx, udp.RcvBuf); err != nil {
		rx.Close()
		return nil, nil, err
	}
	if err := net_.ns[0].do(func() (err error) {
		tx, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(net_.ip[0], 0)),
			net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		rx.Close()
		return nil, nil, err
	}
	return tx, rx, nil
}

// setRcvBuf sets the receive buffer beyond net.core.rmem_max (we are root),
// or as far as the limit allows, falling back as netdev's UDP link does.
func setRcvBuf(c *net.UDPConn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	if serr != nil {
		return c.SetReadBuffer(n)
	}
	return nil
}

// udpStream sends size-byte datagrams from namespace 0 to namespace 1 for
// dur and returns what arrived, over the time from the first send to the
// last datagram received.
func udpStream(ctx context.Context, n *perfNet, size int, dur time.Duration) (traffic.Result, error) {
	var r traffic.Result
	tx, rx, err := udpPair(n, perfUDPStreamPort)
	if err != nil {
		return r, err
	}
	defer tx.Close()
	defer rx.Close()

	// The receiver counts until its deadline, which the sender moves to
	// "now" once the queue has drained (no progress for a while), so the
	// receive loop sets no deadline per datagram.
	var count atomic.Int64
	var last atomic.Int64 // UnixNano of the last datagram
	done := make(chan int64, 1)
	_ = rx.SetReadDeadline(time.Now().Add(dur + traffic.WaitTimeout))
	go func() {
		var bytes int64
		buf := make([]byte, 65536)
		for {
			k, err := rx.Read(buf)
			if err != nil {
				done <- bytes
				return
			}
			bytes += int64(k)
			last.Store(time.Now().UnixNano())
			count.Add(1)
		}
	}()

	msg := make([]byte, size)
	traffic.Fill(msg, 7)
	start := time.Now()
	deadline := start.Add(dur)
	var sendErr error
	for i := 0; ; i++ {
		if i&63 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
			break
		}
		if _, err := tx.Write(msg); err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ECONNREFUSED) {
			sendErr = err
			break
		}
	}
	for prev := int64(-1); ; {
		time.Sleep(20 * time.Millisecond)
		cur := count.Load()
		if cur == prev || time.Since(start) > dur+traffic.WaitTimeout {
			break
		}
		prev = cur
	}
	_ = rx.SetReadDeadline(time.Now())
	bytes := <-done
	if sendErr != nil {
		return r, fmt.Errorf("udp send: %w", sendErr)
	}
	if count.Load() == 0 {
		return r, errors.New("udp stream: nothing arrived")
	}
	r.Ops, r.Bytes, r.Elapsed = count.Load(), bytes, time.Unix(0, last.Load()).Sub(start)
	return r, nil
}

// udpPingpong bounces an 8-byte datagram between the namespaces for dur,
// after traffic.PingWarmup unrecorded round trips, like traffic.SendPingpong.
//
// With busy set both sides read by spinning on non-blocking recv calls
// instead of sleeping in the netpoller: the socket counterpart of a
// busy-polling RDMA ping-pong.
func udpPingpong(ctx context.Context, n *perfNet, dur time.Duration, busy bool) (traffic.Latency, error) {
	var lat traffic.Latency
	tx, rx, err := udpPair(n, perfUDPPingPort)
	if err != nil {
		return lat, err
	}
	defer tx.Close()
	hard := time.Now().Add(dur + traffic.WaitTimeout)

	srvDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		_ = rx.SetReadDeadline(hard)
		for {
			k, from, err := readUDP(rx, buf, busy, hard)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					err = nil
				}
				srvDone <- err
				return
			}
			if _, err := rx.WriteToUDPAddrPort(buf[:k], from); err != nil {
				srvDone <- err
				return
			}
		}
	}()
	finish := func(err error) (traffic.Latency, error) {
		rx.Close()
		if serr := <-srvDone; err == nil {
			err = serr
		}
		return lat.Sorted(), err
	}

	if err := tx.SetReadDeadline(hard); err != nil {
		return finish(err)
	}
	msg := make([]byte, traffic.PingSize)
	buf := make([]byte, 2048)
	deadline := time.Now().Add(dur)
	for it := 0; traffic.PingMore(ctx, it, deadline); it++ {
		msg[0] = byte(it)
		start := time.Now()
		if _, err := tx.Write(msg); err != nil {
			return finish(fmt.Errorf("udp ping-pong: %w", err))
		}
		k, _, err := readUDP(tx, buf, busy, hard)
		if err != nil {
			return finish(fmt.Errorf("udp ping-pong iteration %d: %w", it, err))
		}
		if k != traffic.PingSize || buf[0] != byte(it) {
			return finish(fmt.Errorf("udp ping-pong: reply of %d bytes, number %d, want %d", k, buf[0], byte(it)))
		}
		if it >= traffic.PingWarmup {
			lat.RTTs = append(lat.RTTs, time.Since(start))
		}
	}
	return finish(nil)
}

// readUDP reads one datagram: from the netpoller, or with busy set by
// spinning on non-blocking recvfrom (yielding now and then) until deadline.
func readUDP(c *net.UDPConn, buf []byte, busy bool, deadline time.Time) (int, netip.AddrPort, error) {
	if !busy {
		return c.ReadFromUDPAddrPort(buf)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	for i := 1; ; i++ {
		var n int
		var from syscall.Sockaddr
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			return true // never park: spin
		}); err != nil {
			return 0, netip.AddrPort{}, err
		}
		if rerr == nil {
			var ap netip.AddrPort
			if sa, ok := from.(*syscall.SockaddrInet4); ok {
				ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
			}
			return n, ap, nil
		}
		if !errors.Is(rerr, syscall.EAGAIN) {
			return 0, netip.AddrPort{}, rerr
		}
		if i%256 == 0 {
			// Both peers spin in this one process, on two CPUs, beside
			// the links' goroutines and timers: yield now and then.
			runtime.Gosched()
			if time.Now().After(deadline) {
				return 0, netip.AddrPort{}, os.ErrDeadlineExceeded
			}
		}
	}
}

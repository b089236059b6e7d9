//go:build linux

package xdp_test

// BenchmarkXDPFloor measures what the AF_XDP link alone can do over a veth
// pair, with no transport above it, beside the kernel's UDP over the same
// veth in the same run: the floor under any RoCEv2 stack on this link
// (issue 19's AF_XDP targets: RC WRITE goodput 1.5 x kernel UDP, 8-byte
// SEND half round trip at or below UDP ping-pong's). Each run measures the
// kernel first, with no XDP program attached, then opens the links.
//
//   - stream/<mtu>: frames carrying a path-MTU packet's UDP payload (BTH,
//     mtu bytes, ICRC) from A's link to B's, in bursts of 32 a kick; B's
//     handler only counts and releases them. goodput_MB/s counts mtu bytes
//     per frame B received; x_udp divides it by a kernel UDP stream of
//     mtu-byte datagrams, one send(2) each. Neither has flow control; both
//     count what arrived (delivered: the frames' share).
//   - pingpong/<wait>: minimum-size RoCEv2 frames bounced between A and
//     B, sent from inside the receive handler (no hop to another
//     goroutine: less than any verbs application does). event: each
//     link's receive goroutine, woken by the netpoller, runs the handler;
//     busy: a goroutine per side spins in PollReceive. half_rtt_ns bounces
//     one frame each way; 2frames_half_rtt_ns two in one kick, the
//     traffic of an RC SEND ping-pong (each way, the reply and the ACK of
//     the other side's SEND, which ibv_rc_pingpong waits for). Beside
//     them, an 8-byte UDP ping-pong blocking in recv, or spinning on
//     non-blocking recv; and softverbs' own 8-byte SEND ping-pong (rvt
//     perf's) on the same links, over RC and over UC (no ACKs).
//
// Run (root): go test ./netdev/xdp -run '^$' -bench XDPFloor -benchtime 20000x

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/netdev/xdp"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

func BenchmarkXDPFloor(b *testing.B) {
	nettest.RequireRoot(b)
	for _, m := range []struct{ mtu, veth int }{{4096, 9000}, {1024, 1500}} {
		p := xdpNewPair(b, m.veth)
		// Each run measures the kernel first, with no XDP program on the
		// veth (in driver mode one changes the veth's receive path for
		// all traffic), then opens the links.
		b.Run(fmt.Sprintf("stream/%d", m.mtu), func(b *testing.B) {
			udp := kernelUDPStream(b, p, m.mtu, b.N)
			r := openRaw(b, p)
			defer r.close()
			xdpRawStream(b, r, m.mtu, udp)
		})
		if m.mtu != 4096 {
			continue // an 8-byte frame's latency does not depend on the MTU
		}
		for _, busy := range []bool{false, true} {
			b.Run("pingpong/"+map[bool]string{false: "event", true: "busy"}[busy], func(b *testing.B) {
				udp := kernelUDPPingpong(b, p, b.N, busy)
				r := openRaw(b, p)
				defer r.close()
				b.ResetTimer()
				half, cpu := rawPingpong(b, r, b.N, 1, busy)
				b.StopTimer()
				half2, _ := rawPingpong(b, r, b.N, 2, busy)
				b.ReportMetric(float64(half.Nanoseconds()), "half_rtt_ns")
				b.ReportMetric(float64(udp.half.Nanoseconds()), "udp_half_rtt_ns")
				b.ReportMetric(float64(half)/float64(udp.half), "lat_x")
				b.ReportMetric(float64(cpu.Nanoseconds()), "cpu_ns/rtt")
				b.ReportMetric(float64(half2.Nanoseconds()), "2frames_half_rtt_ns")
				b.ReportMetric(float64(half2)/float64(udp.half), "2frames_lat_x")
				for _, typ := range []rvt.QPType{qp.RC, qp.UC} {
					lat := verbsPingpong(b, r, typ, busy)
					name := strings.ToLower(typ.String())
					b.ReportMetric(float64(lat.Nanoseconds()), name+"_half_rtt_ns")
					b.ReportMetric(float64(lat)/float64(half), name+"_x_raw")
					b.ReportMetric(float64(lat)/float64(udp.half), name+"_lat_x")
				}
			})
		}
	}
}

// rawPair is an AF_XDP link in each namespace and the endpoints of a
// RoCEv2 frame from a (on la) to z (on lb).
type rawPair struct {
	la, lb *xdp.Link
	a, z   netdev.Endpoint
}

func openRaw(b *testing.B, p *xdpPair) *rawPair { return openRawT(b, p) }

func openRawT(b testing.TB, p *xdpPair) *rawPair {
	r := &rawPair{}
	for _, s := range []struct {
		l  **xdp.Link
		ns xdpNetns
	}{{&r.la, p.a}, {&r.lb, p.b}} {
		xdpInNetns(b, s.ns, func() (err error) {
			*s.l, err = xdp.Open(s.ns.ifname, xdp.Options{})
			return err
		})
	}
	r.a = netdev.Endpoint{MAC: xdpResolve(b, r.lb, p.a.v4), IP: p.a.v4, Port: 0xc001}
	r.z = netdev.Endpoint{MAC: xdpResolve(b, r.la, p.b.v4), IP: p.b.v4, Port: netdev.RoCEv2Port}
	return r
}

func (r *rawPair) close() {
	r.la.Close()
	r.lb.Close()
}

// udpResult is a kernel UDP measurement.
type udpResult struct {
	goodput   float64 // bytes a second, streams
	delivered float64 // the share of the stream's datagrams received
	half      time.Duration
}

// kernelUDPStream sends n datagrams of size bytes from p.a to p.b with
// send(2) and returns the receiver's goodput.
func kernelUDPStream(b *testing.B, p *xdpPair, size, n int) udpResult {
	rx, tx := udpSockets(b, p)
	defer unix.Close(rx)
	defer unix.Close(tx)
	var got atomic.Int64
	var sent atomic.Bool
	var last time.Time // when the last datagram came
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			k, _, err := unix.Recvfrom(rx, buf, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if sent.Load() {
					return // idle after the sender finished
				}
				continue
			}
			got.Add(int64(k))
			last = time.Now()
		}
	}()
	msg := make([]byte, size)
	start := time.Now()
	for range n {
		if err := unix.Send(tx, msg, 0); err != nil && err != unix.ENOBUFS && err != unix.ECONNREFUSED {
			b.Fatal(err)
		}
	}
	sent.Store(true)
	<-done
	return udpResult{goodput: float64(got.Load()) / last.Sub(start).Seconds(),
		delivered: float64(got.Load()) / float64(n*size)}
}

// udpIdle is how long a UDP receiver waits for more before it ends.
const udpIdle = 200 * time.Millisecond

// udpSockets returns a bound receiver in p.b and a sender in p.a bound
// and connected to it, both with receive timeout udpIdle, on a port not
// used before (a socket closed while a goroutine waits in its recv stays
// bound until the wait ends).
func udpSockets(b *testing.B, p *xdpPair) (rx, tx int) {
	port := int(udpPort.Add(1))
	open := func(ns xdpNetns) (fd int) {
		xdpInNetns(b, ns, func() (err error) {
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
			tv := unix.NsecToTimeval(int64(udpIdle))
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			return unix.Bind(fd, &unix.SockaddrInet4{Addr: ns.v4.As4(), Port: port})
		})
		return fd
	}
	rx, tx = open(p.b), open(p.a)
	if err := unix.Connect(tx, &unix.SockaddrInet4{Addr: p.b.v4.As4(), Port: port}); err != nil {
		b.Fatal(err)
	}
	return rx, tx
}

var udpPort atomic.Int32

func init() { udpPort.Store(20000) }

// rawFrame returns a RoCEv2 frame from src to dst whose UDP payload is n
// bytes.
func rawFrame(src, dst netdev.Endpoint, n int) []byte {
	return roceFrame(src, dst, make([]byte, n))
}

// xdpRawStream sends b.N frames, each carrying an MTU-sized packet's
// payload, from la to lb in bursts of 32 (one kick each) and reports
// lb's goodput against udp's.
func xdpRawStream(b *testing.B, r *rawPair, mtu int, udp udpResult) {
	la, lb := r.la, r.lb
	const bthICRC = 12 + 4
	frame := rawFrame(r.a, r.z, bthICRC+mtu)
	var got atomic.Int64
	lb.SetHandler(func(f []byte) {
		got.Add(1)
		lb.Release(f)
	})
	defer lb.SetHandler(nil)
	b.SetBytes(int64(mtu))
	b.ResetTimer()
	start, cpu0 := time.Now(), traffic.ProcessCPU()
	for i := 0; i < b.N; i += 32 {
		la.Hold()
		for j := i; j < min(i+32, b.N); j++ {
			if err := la.Send(frame); err != nil {
				b.Fatal(err)
			}
		}
		la.Flush()
	}
	// Until the last frame arrived, or nothing came for 50 ms.
	for last, idle := got.Load(), time.Now(); got.Load() < int64(b.N); {
		if n := got.Load(); n != last {
			last, idle = n, time.Now()
		} else if time.Since(idle) > 50*time.Millisecond {
			break
		}
		runtime.Gosched()
	}
	el, cpu := time.Since(start), traffic.ProcessCPU()-cpu0
	b.StopTimer()
	goodput := float64(got.Load()) * float64(mtu) / el.Seconds()
	b.ReportMetric(goodput/1e6, "goodput_MB/s")
	b.ReportMetric(udp.goodput/1e6, "udp_MB/s")
	b.ReportMetric(goodput/udp.goodput, "x_udp")
	b.ReportMetric(float64(got.Load())/float64(b.N), "delivered")
	b.ReportMetric(float64(cpu.Nanoseconds())/max(float64(got.Load()), 1), "cpu_ns/frame")
}

// kernelUDPPingpong bounces an 8-byte datagram n times between p.a and
// p.b and returns the median half round trip; busy spins on non-blocking
// recv on both sides.
func kernelUDPPingpong(b *testing.B, p *xdpPair, n int, busy bool) udpResult {
	srv, cli := udpSockets(b, p)
	defer unix.Close(srv)
	defer unix.Close(cli)
	var stop atomic.Bool
	defer stop.Store(true)
	recv := func(fd int, buf []byte) (int, unix.Sockaddr, error) {
		for !stop.Load() {
			flags := 0
			if busy {
				flags = unix.MSG_DONTWAIT
			}
			k, from, err := unix.Recvfrom(fd, buf, flags)
			if busy && err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			return k, from, err
		}
		return 0, nil, unix.EBADF
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := recv(srv, buf)
			if err != nil {
				return // closed or idle: the client is done
			}
			_ = unix.Sendto(srv, buf[:k], 0, from)
		}
	}()
	msg, buf := make([]byte, 8), make([]byte, 2048)
	rtts := make([]time.Duration, 0, n)
	for i := range n + 100 {
		binary.LittleEndian.PutUint64(msg, uint64(i))
		t0 := time.Now()
		if err := unix.Send(cli, msg, 0); err != nil {
			b.Fatal(err)
		}
		if _, _, err := recv(cli, buf); err != nil {
			b.Fatalf("udp ping-pong %d: %v", i, err)
		}
		if i >= 100 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return udpResult{half: traffic.Latency{RTTs: rtts}.Sorted().Quantile(0.5) / 2}
}

// rawPingpong bounces minimum-size RoCEv2 frames between r's links n
// times (after 100 unrecorded round trips) and returns the median half
// round trip and the CPU time per round trip. Each side, once it has
// received frames frames, sends frames frames back in one kick: with 2,
// the traffic of an RC SEND ping-pong, where each way carries the reply
// and the ACK of the other side's SEND (which the other side waits for:
// ibv_rc_pingpong's iteration ends at both completions).
func rawPingpong(b *testing.B, r *rawPair, n, frames int, busy bool) (half, cpu time.Duration) {
	const warm = 100
	la, lb := r.la, r.lb
	back := r.a
	back.Port = netdev.RoCEv2Port // the XDP program redirects only RoCEv2
	ping, pong := rawFrame(r.a, r.z, 12+8+4), rawFrame(r.z, back, 12+8+4)
	burst := func(l *xdp.Link, f []byte) {
		l.Hold()
		for range frames {
			if err := l.Send(f); err != nil {
				panic(err)
			}
		}
		l.Flush()
	}
	rtts := make([]time.Duration, 0, n)
	done := make(chan struct{})
	var t0 time.Time
	sent, gotA, gotB := 0, 0, 0
	send := func() {
		t0 = time.Now()
		sent++
		burst(la, ping)
	}
	lb.SetHandler(func(f []byte) {
		lb.Release(f)
		if gotB++; gotB%frames == 0 {
			burst(lb, pong)
		}
	})
	la.SetHandler(func(f []byte) {
		la.Release(f)
		if gotA++; gotA%frames != 0 {
			return
		}
		if sent > warm {
			rtts = append(rtts, time.Since(t0))
		}
		if sent == n+warm {
			close(done)
			return
		}
		send()
	})
	defer la.SetHandler(nil)
	defer lb.SetHandler(nil)
	var stop atomic.Bool
	defer stop.Store(true)
	if busy {
		for _, l := range []*xdp.Link{la, lb} {
			go func() {
				// Yield now and then, as traffic.BusyWaiter does: two
				// spinners on two CPUs would leave a link's receive
				// goroutine, if it took the ring, no processor for a
				// preemption period (10 ms).
				for i := 1; !stop.Load(); i++ {
					if !l.PollReceive() && i%256 == 0 {
						runtime.Gosched()
					}
				}
			}()
		}
	}
	cpu0 := traffic.ProcessCPU()
	send() // la's handler sends the rest
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("ping-pong stalled after %d round trips", sent)
	}
	return traffic.Latency{RTTs: rtts}.Sorted().Quantile(0.5) / 2, (traffic.ProcessCPU() - cpu0) / time.Duration(n+warm)
}

// verbsPingpong runs `rvt perf`'s 8-byte SEND ping-pong for a second
// between devices on r's links over QPs of typ (UC: no ACKs) and returns
// its median half round trip.
func verbsPingpong(b *testing.B, r *rawPair, typ rvt.QPType, busy bool) time.Duration {
	var ep [2]*traffic.Endpoint
	var w [2]traffic.Poller
	for i, l := range []*xdp.Link{r.la, r.lb} {
		addrs, err := l.Neighbours().Addrs()
		if err != nil {
			b.Fatal(err)
		}
		n, err := devopen.OpenNode(rvt.Options{Name: fmt.Sprintf("floor%d", i), Link: l, MAC: l.HardwareAddr(),
			Addrs: addrs, Resolve: l.Neighbours().Resolve, Workers: 2})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Dev.Close()
		o := traffic.QPOpts{SendWR: 64, RecvWR: 64}
		if busy {
			w[i] = traffic.BusyWaiter{Dev: n.Dev}
		} else {
			cw := traffic.NewCQWaiter()
			o.OnComp, w[i] = cw.Notify, cw
		}
		if ep[i], err = traffic.NewEndpoint(n, typ, o); err != nil {
			b.Fatal(err)
		}
	}
	if err := traffic.Connect(ep[0], ep[1], qp.MTU4096); err != nil {
		b.Fatal(err)
	}
	lat, err := traffic.SendPingpong(context.Background(), ep[0], ep[1], w[0], w[1], time.Second)
	if err != nil {
		b.Fatal(err)
	}
	return lat.Quantile(0.5) / 2
}

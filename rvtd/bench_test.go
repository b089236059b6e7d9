package rvtd_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/client"
)

const (
	benchDur   = 2 * time.Second
	benchWrite = 64 << 10
	pingIters  = 20000
)

// writeBench streams 64 KiB RDMA WRITEs, 16 outstanding, for benchDur and
// prints the bytes and nanoseconds.
func writeBench(n *node, peer endpoint) error {
	if _, err := readLine("GO"); err != nil {
		return err
	}
	buf := make([]client.WC, 16)
	outstanding, done := 0, 0
	start := time.Now()
	for time.Since(start) < benchDur || outstanding > 0 {
		for outstanding < 16 && time.Since(start) < benchDur {
			wr := client.SendWR{WRID: uint64(done + outstanding), Opcode: 0, Flags: 2,
				SGL:        []client.SGE{{Addr: n.mr.Addr, Length: benchWrite, LKey: n.mr.LKey}},
				RemoteAddr: peer.Addr, RKey: peer.RKey}
			if err := n.qp.PostSend(wr); err != nil {
				return err
			}
			outstanding++
		}
		k, err := n.cq.Poll(buf)
		if err != nil {
			return err
		}
		if k == 0 {
			schedYield()
		}
		for _, wc := range buf[:k] {
			if wc.Status != 0 {
				return fmt.Errorf("write completion %+v", wc)
			}
			outstanding--
			done++
		}
	}
	fmt.Println("RATE", int64(done)*benchWrite, time.Since(start).Nanoseconds())
	return nil
}

// pingPong bounces 8-byte SENDs, busy-polling; the pinger prints the
// median half round trip.
func pingPong(n *node, ping bool) error {
	if ping {
		if _, err := readLine("GO"); err != nil && os.Getenv("RVTD_TEST_ROLE") != "" {
			return err
		}
	}
	buf := make([]client.WC, 16)
	rtts := make([]time.Duration, 0, pingIters)
	sends, recvs := 0, 0 // completions seen and not yet waited for
	// wait polls until a receive completion has come (sends counts the
	// send completions seen meanwhile, in whatever order).
	wait := func() error {
		since := time.Now()
		for spins := 0; recvs == 0; spins++ {
			k, err := n.cq.Poll(buf)
			if err != nil {
				return err
			}
			if k == 0 {
				schedYield()
				if spins%1024 == 0 && time.Since(since) > 5*time.Second {
					return fmt.Errorf("no message for 5 s: %s", ringState(n))
				}
			}
			for _, wc := range buf[:k] {
				if wc.Status != 0 {
					return fmt.Errorf("completion %+v", wc)
				}
				if wc.Opcode >= 128 {
					recvs++
				} else {
					sends++
				}
			}
		}
		recvs--
		return nil
	}
	send := func() error {
		return n.qp.PostSend(client.SendWR{Opcode: 2, Flags: 2,
			SGL: []client.SGE{{Addr: n.mr.Addr + 4096, Length: 8, LKey: n.mr.LKey}}})
	}
	repost := func(i int) error {
		return n.qp.PostRecv(uint64(i), client.SGE{Addr: n.mr.Addr + uint64(i%16*64), Length: 64, LKey: n.mr.LKey})
	}
	for i := 0; i < pingIters; i++ {
		t0 := time.Now()
		if ping {
			if err := send(); err != nil {
				return err
			}
		}
		if err := wait(); err != nil {
			return err
		}
		if err := repost(i); err != nil {
			return err
		}
		if !ping {
			if err := send(); err != nil {
				return err
			}
		}
		rtts = append(rtts, time.Since(t0))
	}
	if ping {
		slices.Sort(rtts)
		fmt.Println("LAT", (rtts[len(rtts)/2] / 2).Nanoseconds())
		return nil
	}
	// The pong's last reply must leave before the process (and with it
	// the session, QP and all) goes.
	for since := time.Now(); sends < pingIters; {
		k, err := n.cq.Poll(buf)
		if err != nil {
			return err
		}
		for _, wc := range buf[:k] {
			if wc.Opcode < 128 {
				sends++
			}
		}
		if k == 0 {
			schedYield()
			if time.Since(since) > 5*time.Second {
				return fmt.Errorf("%d of %d replies completed", sends, pingIters)
			}
		}
	}
	return nil
}

var stdinLines = newStdin()

// TestBenchmarkAgainstEmbedded measures, in one run, RC WRITE 64 KiB
// goodput and the 8-byte SEND half round trip between two client
// processes through rvtd, and the same between two embedded devices in
// this process. Set RVTD_BENCH=1 to run it.
func TestBenchmarkAgainstEmbedded(t *testing.T) {
	if os.Getenv("RVTD_BENCH") == "" {
		t.Skip("set RVTD_BENCH=1 to measure")
	}
	sock := startDaemonOpts(t, benchOptions(t))

	sink, w := pairUp(t, sock, "sink", "writebench")
	w.send("GO")
	f := w.expect("RATE")
	bytes, _ := strconv.ParseFloat(f[1], 64)
	ns, _ := strconv.ParseFloat(f[2], 64)
	rvtdGBps := bytes / ns
	_ = sink.cmd.Process.Kill()

	pong, ping := pairUp(t, sock, "pong", "ping")
	ping.send("GO")
	f = ping.expect("LAT")
	lat, _ := strconv.ParseFloat(f[1], 64)
	_ = pong

	p, err := devopen.OpenPair(devopen.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, err := traffic.NewEndpoint(p.N[0], rvt.QPType(2), traffic.QPOpts{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := traffic.NewEndpoint(p.N[1], rvt.QPType(2), traffic.QPOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if err := traffic.Connect(a, b, rvt.MTU(5)); err != nil {
		t.Fatal(err)
	}
	r, err := traffic.WriteRun(a, b, benchWrite, benchDur)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := traffic.NewEndpoint(p.N[0], rvt.QPType(2), traffic.QPOpts{})
	b2, _ := traffic.NewEndpoint(p.N[1], rvt.QPType(2), traffic.QPOpts{})
	if err := traffic.Connect(a2, b2, rvt.MTU(5)); err != nil {
		t.Fatal(err)
	}
	l, err := traffic.SendPingpong(context.Background(), a2, b2,
		traffic.BusyWaiter{Dev: p.N[0].Dev}, traffic.BusyWaiter{Dev: p.N[1].Dev}, benchDur)
	if err != nil {
		t.Fatal(err)
	}
	embHalf := l.Sorted().HalfMicros(0.5)
	t.Logf("RC WRITE 64 KiB: rvtd %.2f GB/s, embedded %.2f GB/s (%.2fx)", rvtdGBps, r.GBps(), rvtdGBps/r.GBps())
	t.Logf("8-byte SEND half round trip, busy polling: rvtd %.1f us, embedded %.1f us (%.2fx)", lat/1000, embHalf, lat/1000/embHalf)
}

// schedYield gives the processor to another runnable thread, of this
// process or another (sched_yield(2)).
func schedYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// ringState describes n's QP rings, for a report of a stall.
func ringState(n *node) string {
	u := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	h, r := n.qp.SendRingHeader(), n.qp.RecvRingHeader()
	return fmt.Sprintf("send ring p=%d c=%d flags=%d, recv ring p=%d c=%d flags=%d",
		u(h), u(h[64:]), u(h[128:]), u(r), u(r[64:]), u(r[128:]))
}

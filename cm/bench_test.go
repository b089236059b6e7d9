package cm

import (
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// BenchmarkConnect measures connection setup on the in-memory fabric
// (connect, accept, REP, RTU, then disconnect and TIMEWAIT on a manual
// clock) in conns/s, beside TCP connect/accept on the loopback interface
// measured in the same run (x_tcp: our rate / TCP's). Both sides' QPs
// are reused (RESET after TIMEWAIT), so the CM is what is measured.
func BenchmarkConnect(b *testing.B) {
	w := newWorld(b, worldOpts{manual: true, agent: FastOptions(), seed: 1})
	na, nb := w.nodes[0], w.nodes[1]
	ch := NewEventChannel()
	l := nb.agent.NewID(ch, PSTCP, nil)
	_ = l.BindAddr(netip.AddrPortFrom(nb.ip, 7174))
	_ = l.Listen()
	next := func(want EventType) Event {
		for {
			if ev, ok := ch.Poll(); ok {
				if ev.Type == want {
					return ev
				}
				continue
			}
			w.manual.Advance(time.Millisecond)
		}
	}
	// The QPs are reused: back to RESET after each TIMEWAIT, as a server
	// that keeps a pool of QPs does.
	qa, qb := na.newQP(b, qp.RC), nb.newQP(b, qp.RC)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		c := na.agent.NewID(ch, PSTCP, nil)
		_ = c.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(nb.ip, 7174))
		_ = c.Connect(qa, nil)
		req := next(EventConnectRequest)
		_ = req.ID.Accept(qb, nil)
		next(EventEstablished)
		next(EventEstablished)
		c.Destroy() // DREQ
		req.ID.Destroy()
		w.manual.Advance(20 * time.Millisecond)
		for _, q := range []*rvt.QP{qa, qb} {
			if err := q.Modify(&rvt.QPAttr{State: qp.Reset}, qp.AttrState); err != nil {
				b.Fatal(err)
			}
		}
	}
	ours := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	n := max(b.N, 100)
	t0 := time.Now()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	tcp := float64(n) / time.Since(t0).Seconds()
	b.ReportMetric(ours, "conns/s")
	b.ReportMetric(ours/tcp, "x_tcp")
}

// BenchmarkConnections10k establishes 10,000 RC connections at once
// between two devices on the in-memory fabric (every Connect is issued
// before any is answered), and reports the memory they hold once
// established: cm_B/conn, the connection manager's (both sides' IDs, their
// maps, timers and events), beside qp_B/conn, the two QPs' own (created
// before, measured the same way), the setup rate in conns/s, and the CM
// MADs resent on the way (retx: QP 1's receive queue overflowing shows
// there).
func BenchmarkConnections10k(b *testing.B) {
	const n = 10000
	var cmPer, qpPer, rate, retx float64
	for range b.N {
		b.StopTimer()
		w := newWorld(b, worldOpts{manual: true, agent: FastOptions(), seed: 2})
		na, nb := w.nodes[0], w.nodes[1]
		srvCh, cliCh := NewEventChannel(), NewEventChannel()
		l := nb.agent.NewID(srvCh, PSTCP, nil)
		if err := l.BindAddr(netip.AddrPortFrom(nb.ip, 7174)); err != nil {
			b.Fatal(err)
		}
		if err := l.Listen(); err != nil {
			b.Fatal(err)
		}
		m0 := heapInUse()
		qas, qbs := make([]*rvt.QP, n), make([]*rvt.QP, n)
		for i := range n {
			qas[i], qbs[i] = na.newQP(b, qp.RC), nb.newQP(b, qp.RC)
		}
		m1 := heapInUse()

		b.StartTimer()
		start := time.Now()
		ids := make([]*ID, 0, 2*n)
		for i := range n {
			c := na.agent.NewID(cliCh, PSTCP, nil)
			if err := c.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(nb.ip, 7174)); err != nil {
				b.Fatal(err)
			}
			if err := c.Connect(qas[i], nil); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, c)
		}
		accepted, established := 0, 0
		for established < 2*n {
			progress := false
			for {
				ev, ok := srvCh.Poll()
				if !ok {
					break
				}
				progress = true
				switch ev.Type {
				case EventConnectRequest:
					if err := ev.ID.Accept(qbs[accepted], nil); err != nil {
						b.Fatal(err)
					}
					accepted++
					ids = append(ids, ev.ID)
				case EventEstablished:
					established++
				default:
					b.Fatalf("server: %v", ev.Type)
				}
			}
			for {
				ev, ok := cliCh.Poll()
				if !ok {
					break
				}
				progress = true
				switch ev.Type {
				case EventAddrResolved, EventRouteResolved:
				case EventEstablished:
					established++
				default:
					b.Fatalf("client: %v", ev.Type)
				}
			}
			if !progress {
				w.manual.Advance(time.Millisecond)
			}
		}
		rate = n / time.Since(start).Seconds()
		b.StopTimer()
		m2 := heapInUse()
		cmPer = float64(m2-m1) / n
		qpPer = float64(m1-m0) / n
		retx = 0
		for _, nd := range w.nodes {
			for k, v := range nd.agent.Counters() {
				if strings.HasPrefix(k, "retransmit_") {
					retx += float64(v)
				}
			}
		}
		runtime.KeepAlive(ids)
		runtime.KeepAlive(qas)
		runtime.KeepAlive(qbs)
		for _, id := range ids {
			id.Destroy()
		}
		w.close()
		b.StartTimer()
	}
	b.ReportMetric(cmPer, "cm_B/conn")
	b.ReportMetric(qpPer, "qp_B/conn")
	b.ReportMetric(rate, "conns/s")
	b.ReportMetric(retx, "retx")
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

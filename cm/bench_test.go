package cm

import (
	"net"
	"net/netip"
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

//go:build linux

package xdp_test

// BenchmarkXDPGoodput compares, over one veth pair between two namespaces
// and in one run:
//
//   - udp_kernel: raw kernel UDP datagrams with a 4096-byte payload (the
//     payload of a path-MTU-4096 RoCEv2 packet), one sender and one
//     receiver socket, no XDP program attached; goodput is what the
//     receiver got.
//   - xdp_rc_write: softverbs RC RDMA WRITE over AF_XDP links, path MTU
//     4096, 64 KiB messages with up to 16 outstanding.
//
// Run: go test ./netdev -run '^$' -bench XDPGoodput -benchtime 2s (root).

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/netdev/xdp"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

func BenchmarkXDPGoodput(b *testing.B) {
	nettest.RequireRoot(b)
	p := xdpNewPair(b, 9000)

	b.Run("udp_kernel", func(b *testing.B) {
		r := kernelUDPStream(b, p, 4096, b.N)
		b.ReportMetric(r.goodput/1e6, "goodput_MB/s")
		b.ReportMetric(r.delivered, "delivered")
	})
	w := newXDPWriteBench(b, p, 64<<10)
	b.Run("xdp_rc_write", func(b *testing.B) { w.run(b, 16) })
}

type xdpWriteBench struct {
	la       *xdp.Link
	na       *xdpNode
	qa       *rvt.QP
	src, dst *rvt.MR
	size     int
}

// newXDPWriteBench opens the links and devices and connects an RC pair.
func newXDPWriteBench(b *testing.B, p *xdpPair, size int) *xdpWriteBench {
	la := xdpOpen(b, p.a, xdp.Options{})
	lb := xdpOpen(b, p.b, xdp.Options{})
	na, nb := xdpNewNode(b, "benchA", la), xdpNewNode(b, "benchB", lb)
	qa, qb := na.newQP(b, qp.RC), nb.newQP(b, qp.RC)
	xdpBringUp(b, qa, qb, nb, 1)
	xdpBringUp(b, qb, qa, na, 1)
	xdpResolve(b, la, p.b.v4)
	xdpResolve(b, lb, p.a.v4)
	return &xdpWriteBench{la: la, na: na, qa: qa, src: na.newMR(b, size), dst: nb.newMR(b, size), size: size}
}

// run does b.N RDMA WRITEs, keeping depth in flight.
func (w *xdpWriteBench) run(b *testing.B, depth int) {
	post := func(id int) {
		require.NoError(b, w.qa.PostSend(rvt.SendWR{WRID: uint64(id), Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
			SGL:        []rvt.SGE{{Addr: w.src.IOVA, Length: uint32(w.size), Lkey: w.src.Lkey}},
			RemoteAddr: w.dst.IOVA, Rkey: w.dst.Rkey}))
	}
	wcs := make([]rvt.WC, 64)
	b.SetBytes(int64(w.size))
	b.ResetTimer()
	start := time.Now()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			post(posted)
			posted++
		}
		n := w.na.cq.Poll(wcs)
		for _, c := range wcs[:n] {
			if c.Status != 0 {
				b.Fatalf("completion %+v", c)
			}
		}
		done += n
		if n == 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*w.size)/el.Seconds()/1e6, "goodput_MB/s")
	b.Logf("A %+v", w.la.Stats())
	b.Logf("A counters %v", w.na.dev.Counters())
}

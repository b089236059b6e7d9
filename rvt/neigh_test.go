package rvt

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// gateLink passes frames only while open: a peer that neither answers nor
// asks yet.
type gateLink struct {
	netdev.Link
	open atomic.Bool
}

func (g *gateLink) Send(f []byte) error {
	if !g.open.Load() {
		return nil
	}
	return g.Link.Send(f)
}

func (g *gateLink) SetHandler(h netdev.Handler) {
	g.Link.SetHandler(func(f []byte) {
		if g.open.Load() {
			h(f)
		}
	})
}

// A packet to a neighbour the host link has not resolved waits in the
// host's queue and arrives once the neighbour answers the host's next
// request, instead of being dropped: a UD datagram (which nothing would
// resend) and the first packet of an RC SEND (which arrives without a
// retransmission).
func TestSendToUnresolvedNeighbourArrives(t *testing.T) {
	for _, typ := range []QPType{qp.UD, qp.RC} {
		t.Run(typ.String(), func(t *testing.T) {
			clk := clock.NewManual()
			fab := fabric.New(clk, 1)
			macA, macB := netdev.MAC{2, 0, 0, 0, 0, 0xa}, netdev.MAC{2, 0, 0, 0, 0, 0xb}
			ipA, ipB := netip.MustParseAddr("10.7.0.1"), netip.MustParseAddr("10.7.0.2")
			portA, portB := fab.NewPort(macA, 1500), fab.NewPort(macB, 1500)
			t.Cleanup(func() { portA.Close(); portB.Close() })
			addrsA, addrsB := netdev.GIDOrder(macA, []netip.Addr{ipA}), netdev.GIDOrder(macB, []netip.Addr{ipB})
			hA := host.New(portA, macA, addrsA, clk)
			gate := &gateLink{Link: portB}
			hB := host.New(gate, macB, addrsB, clk)
			a := newNode(t, Options{Name: "a", Clock: clk, Inline: true, Link: hA, MAC: macA,
				Addrs: addrsA, Resolve: hA.Resolve})
			b := newNode(t, Options{Name: "b", Clock: clk, Inline: true, Link: hB, MAC: macB,
				Addrs: addrsB, Resolve: hB.Resolve})

			qa, qb := a.qp(t, typ), b.qp(t, typ)
			src, dst := a.mr(t, 64), b.mr(t, 64+40)
			src.WriteAt([]byte("waited for ARP"), src.IOVA)
			wr := SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 14)}
			if typ == qp.UD {
				for _, q := range []*QP{qa, qb} {
					require.NoError(t, q.Modify(&QPAttr{State: qp.Init, Port: 1, QKey: 0x1111},
						qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrQKey))
					require.NoError(t, q.Modify(&QPAttr{State: qp.RTR}, qp.AttrState))
					require.NoError(t, q.Modify(&QPAttr{State: qp.RTS}, qp.AttrState|qp.AttrSQPSN))
				}
				ah, err := a.pd.CreateAH(AddressVector{DGID: netdev.GIDFromIP(ipB), SGIDIndex: 1, HopLimit: 64, Port: 1})
				require.NoError(t, err)
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, qb.Num(), 0x1111
			} else {
				at := defaultAttrs()
				at.timeout = 20 // 4 s: no retransmission before the answer
				bringUp(t, qa, qb, b.d, at)
				bringUp(t, qb, qa, a.d, at)
			}
			require.NoError(t, qb.PostRecv(RecvWR{WRID: 2, SGL: sge(dst, 0, 64+40)}))

			require.NoError(t, qa.PostSend(wr))
			require.Zero(t, b.cq.Poll(make([]WC, 1)), "no answer yet, nothing arrived")
			require.Equal(t, host.Stats{UnresQueued: 1}, unresOf(hA.Stats()))
			require.EqualValues(t, 1, a.d.Counters()[transport.SentUnresolved.String()])

			gate.open.Store(true)
			clk.Advance(host.RetransTime) // the host asks again; B answers
			wcs := poll(t, b.cq, 1, nil)
			require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
			off := 0
			if typ == qp.UD {
				off = 40 // the GRH
			}
			got := make([]byte, 14)
			dst.ReadAt(got, dst.IOVA+uint64(off))
			require.Equal(t, "waited for ARP", string(got))
			require.Equal(t, host.Stats{UnresQueued: 1, UnresSent: 1}, unresOf(hA.Stats()))
			wcs = poll(t, a.cq, 1, nil)
			require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
			require.Zero(t, a.d.Counters()[transport.Retransmits.String()], "no retransmission needed")
		})
	}
}

func unresOf(s host.Stats) host.Stats {
	return host.Stats{UnresQueued: s.UnresQueued, UnresSent: s.UnresSent, UnresOverflow: s.UnresOverflow, UnresFailed: s.UnresFailed}
}

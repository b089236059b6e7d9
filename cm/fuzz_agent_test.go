package cm

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softverbs/softverbs/qp"
)

// FuzzAgent feeds random sequences of CM MADs (mutated from Linux's and
// from the comm IDs live in the agents) to an agent in the middle of real
// exchanges. The agent must not panic, and once every ID is destroyed and
// the timers have run out it must hold nothing: no comm ID, port, QP or
// timer leaks whatever arrived.
func FuzzAgent(f *testing.F) {
	golden := loadCMMADs(f, "rping.pcap", "ucmatose.pcap", "udaddy.pcap")
	f.Add([]byte{0, 0, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 3, 3, 2, 7, 7, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{10, 1, 3, 1, 0, 30, 40, 50, 60, 70, 80, 90, 100, 11, 5, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 99})
		a, b := w.nodes[0], w.nodes[1]
		ch := NewEventChannel()
		var ids []*ID
		l := b.agent.NewID(ch, PSTCP, nil)
		_ = l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174))
		_ = l.Listen()
		lu := b.agent.NewID(ch, PSUDP, nil)
		_ = lu.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174))
		_ = lu.Listen()
		ids = append(ids, l, lu)
		c := a.agent.NewID(ch, PSTCP, nil)
		ids = append(ids, c)
		_ = c.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7174))
		_ = c.Connect(a.newQP(t, qp.RC), nil)
		drain := func() {
			for {
				ev, ok := ch.Poll()
				if !ok {
					return
				}
				ids = append(ids, ev.ID)
				if ev.Type == EventConnectRequest && len(ids)%2 == 0 {
					_ = ev.ID.Accept(b.newQP(t, qp.RC), nil)
				}
			}
		}
		drain()
		// Comm IDs the agents know, so that mutated MADs hit live states.
		commIDs := func() []uint32 {
			out := []uint32{0, 1}
			for _, n := range w.nodes {
				n.agent.mu.Lock()
				for id := range n.agent.byComm {
					out = append(out, id)
				}
				for k := range n.agent.byRemote {
					out = append(out, k.id)
				}
				n.agent.mu.Unlock()
			}
			return out
		}
		grh := func(from, to netip.Addr) []byte {
			g := make([]byte, grhLen)
			g[20] = 0x45
			s, d := from.As4(), to.As4()
			copy(g[32:36], s[:])
			copy(g[36:40], d[:])
			return g
		}
		attrIDs := []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP,
			AttrSIDRREQ, AttrSIDRREP, AttrLAP, AttrAPR, AttrClassPortInfo, 0x42}
		methods := []Method{MethodSend, MethodSend, MethodSend, MethodGet, MethodSet, MethodGetResp, 0x7F}
		for len(in) >= 4 {
			tmpl, attr, meth, n := in[0], in[1], in[2], int(in[3]%8)
			in = in[4:]
			m := append(MAD(nil), golden[int(tmpl)%len(golden)].mad...)
			hdrAttrID.Set(m, uint64(attrIDs[int(attr)%len(attrIDs)]))
			m.SetMethod(methods[int(meth)%len(methods)])
			ids := commIDs()
			binary.BigEndian.PutUint32(m[24:], ids[int(tmpl)%len(ids)])
			binary.BigEndian.PutUint32(m[28:], ids[int(attr)%len(ids)])
			for i := 0; i < n && len(in) >= 2; i++ {
				m[MADHeaderLen+int(in[0])%MADDataLen] ^= in[1]
				in = in[2:]
			}
			to, from := b, a
			if meth&0x80 != 0 {
				to, from = a, b
			}
			to.agent.mu.Lock()
			to.agent.receiveLocked(grh(from.ip, to.ip), 1, m)
			to.agent.mu.Unlock()
			to.agent.kick()
			w.manual.Advance(1)
			drain()
		}
		// Tear everything down and let every timer run out.
		for range 3 {
			for _, id := range ids {
				id.Destroy()
			}
			for i := 0; i < 100000 && w.manual.AdvanceToNext(); i++ {
				drain()
			}
			drain()
		}
		for i, n := range w.nodes {
			if s := n.agent.Stats(); s != (Stats{}) {
				t.Fatalf("node %d leaks %+v", i, s)
			}
		}
	})
}

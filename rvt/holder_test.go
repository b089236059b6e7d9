package rvt

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// holdLink is a fabric port that records how the engine batches its
// transmits (netdev.Holder): the packets sent during each hold and whether
// the hold ended with Flush or FlushLazy. It transmits at once.
type holdLink struct {
	*fabric.Port
	mu    sync.Mutex
	depth int
	cur   []holdPkt
	runs  []holdRun
}

type holdPkt struct {
	op  transport.Opcode
	syn transport.Syndrome // for ACKs
}

type holdRun struct {
	pkts []holdPkt
	lazy bool
}

var _ netdev.Holder = (*holdLink)(nil)

func (h *holdLink) Hold() {
	h.mu.Lock()
	h.depth++
	h.mu.Unlock()
}

func (h *holdLink) Flush()     { h.end(false) }
func (h *holdLink) FlushLazy() { h.end(true) }

func (h *holdLink) end(lazy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.depth--; h.depth == 0 && len(h.cur) > 0 {
		h.runs = append(h.runs, holdRun{pkts: h.cur, lazy: lazy})
		h.cur = nil
	}
}

func (h *holdLink) Send(frame []byte) error {
	fi, err := netdev.ParseFrame(frame)
	if err == nil {
		var p transport.Packet
		if transport.Parse(frame[fi.PayloadOff:fi.End()-transport.ICRCLen], &p) == nil {
			hp := holdPkt{op: p.Opcode}
			if p.Opcode == transport.RCAck {
				hp.syn = p.AETH().Syndrome()
			}
			h.mu.Lock()
			if h.depth > 0 {
				h.cur = append(h.cur, hp)
			}
			h.mu.Unlock()
		}
	}
	return h.Port.Send(frame) // delivers at once: never under h.mu
}

func (h *holdLink) takeRuns() []holdRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.runs
	h.runs = nil
	return r
}

// TestTransmitBatchingFlushes checks the engine's use of a batching link:
// every packet is sent inside a hold; a responder run that sent nothing
// but ACKs ends lazily (its ACK may wait for the reply it prompts), and a
// run that sent a READ response, an atomic response or a NAK ends with an
// immediate flush.
func TestTransmitBatchingFlushes(t *testing.T) {
	fab := fabric.New(clock.Real(), 3)
	links := [2]*holdLink{}
	nodes := [2]*node{}
	for i := range nodes {
		o := fabricOptions(fab, byte(i+1))
		links[i] = &holdLink{Port: o.Link.(*fabric.Port)}
		o.Link = links[i]
		nodes[i] = newNode(t, o)
	}
	na, nb := nodes[0], nodes[1]
	a, b := na.qp(t, qp.RC), nb.qp(t, qp.RC)
	connect(t, a, na.d, b, nb.d, defaultAttrs())
	src, dst := na.mr(t, 1<<16), nb.mr(t, 1<<16)
	sge := []SGE{{Addr: src.IOVA, Length: 8, Lkey: src.Lkey}}
	links[0].takeRuns()
	links[1].takeRuns()

	// Each step: post, wait for its completions, then judge b's runs.
	step := func(name string, wantUrgent func(holdPkt) bool, wcs int, needLazy, needUrgent bool, post func()) {
		t.Helper()
		post()
		for _, w := range poll(t, na.cq, wcs, nil) {
			require.Equal(t, cq.Success, w.Status, "%s: %+v", name, w)
		}
		sawUrgent, sawLazy := false, false
		for _, r := range links[1].takeRuns() {
			urgent := false
			for _, p := range r.pkts {
				urgent = urgent || wantUrgent(p)
			}
			require.Equal(t, !urgent, r.lazy, "%s: run %+v", name, r)
			sawUrgent, sawLazy = sawUrgent || urgent, sawLazy || !urgent
		}
		for _, r := range links[0].takeRuns() {
			require.False(t, r.lazy, "%s: requester run %+v ends lazily", name, r)
		}
		require.True(t, sawUrgent || !needUrgent, "%s: no run with more than ACKs", name)
		require.True(t, sawLazy || !needLazy, "%s: no ACK-only run", name)
	}
	isAck := func(p holdPkt) bool { return p.op == transport.RCAck && p.syn.Type() == transport.AckTypeACK }
	notAck := func(p holdPkt) bool { return !isAck(p) }

	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: []SGE{{Addr: dst.IOVA, Length: 64, Lkey: dst.Lkey}}}))
	step("SEND", notAck, 1, true, false, func() {
		require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge}))
	})
	poll(t, nb.cq, 1, nil)
	step("READ", notAck, 1, false, true, func() {
		require.NoError(t, a.PostSend(SendWR{WRID: 3, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge,
			RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	})
	step("atomic", notAck, 1, false, true, func() {
		require.NoError(t, a.PostSend(SendWR{WRID: 4, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, SGL: sge,
			RemoteAddr: dst.IOVA + 64, Rkey: dst.Rkey, CompareAdd: 1}))
	})
	// No receive posted: b answers with an RNR NAK, then ACKs once a
	// receive arrives.
	step("RNR", notAck, 1, true, true, func() {
		require.NoError(t, a.PostSend(SendWR{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge}))
		require.NoError(t, b.PostRecv(RecvWR{WRID: 6, SGL: []SGE{{Addr: dst.IOVA, Length: 64, Lkey: dst.Lkey}}}))
	})
}

package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// pair is a listener on node 1 and a client ID on node 0 with resolved
// addresses, for the engine tests.
type pair struct {
	w        *world
	lch, cch *EventChannel
	lid, cid *ID
	port     uint16
}

func newPair(t *testing.T, w *world, ps PortSpace, port uint16) *pair {
	t.Helper()
	p := &pair{w: w, lch: NewEventChannel(), cch: NewEventChannel(), port: port}
	b, a := w.nodes[1], w.nodes[0]
	p.lid = b.agent.NewID(p.lch, ps, nil)
	require.NoError(t, p.lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	require.NoError(t, p.lid.Listen())
	p.cid = a.agent.NewID(p.cch, ps, nil)
	require.NoError(t, p.cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, port)))
	w.expect(t, p.cch, EventAddrResolved)
	return p
}

// establish connects p's client on qa to its listener, which accepts on
// qb, and waits for both ESTABLISHED events; it returns the passive ID's
// CONNECT_REQUEST.
func (p *pair) establish(t *testing.T, qa, qb *rvt.QP) Event {
	t.Helper()
	require.NoError(t, p.cid.Connect(qa, nil))
	req := p.w.expect(t, p.lch, EventConnectRequest)
	require.NoError(t, req.ID.Accept(qb, nil))
	p.w.expect(t, p.cch, EventEstablished)
	p.w.expect(t, p.lch, EventEstablished)
	return req
}

func requireClean(t *testing.T, w *world, listeners int) {
	t.Helper()
	for i, n := range w.nodes {
		s := n.agent.Stats()
		want := Stats{}
		if i == 1 && listeners > 0 {
			want = Stats{IDs: listeners, Ports: listeners, Listeners: listeners}
		}
		require.Equal(t, want, s, "node %d", i)
	}
}

func TestRejectWithPrivateData(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 2})
	p := newPair(t, w, PSTCP, 7471)
	qa := w.nodes[0].newQP(t, qp.RC)
	require.NoError(t, p.cid.Connect(qa, nil))
	req := w.expect(t, p.lch, EventConnectRequest)
	require.NoError(t, req.ID.Reject([]byte("go away")))
	ev := w.expect(t, p.cch, EventRejected)
	var re *RejectError
	require.ErrorAs(t, ev.Err, &re)
	require.Equal(t, RejConsumerDefined, re.Reason)
	require.Equal(t, "go away", string(re.PrivateData[:7]))
	require.ErrorIs(t, ev.Err, ErrRejected)
	require.Equal(t, StateIdle, p.cid.State())
	req.ID.Destroy()
	p.cid.Destroy()
	requireClean(t, w, 1)
}

func TestNoListenerREJ8(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 3})
	p := newPair(t, w, PSTCP, 1000)
	cid := w.nodes[0].agent.NewID(p.cch, PSTCP, nil)
	require.NoError(t, cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 1001)))
	w.expect(t, p.cch, EventAddrResolved)
	require.NoError(t, cid.Connect(w.nodes[0].newQP(t, qp.RC), nil))
	ev := w.expect(t, p.cch, EventRejected)
	require.ErrorIs(t, ev.Err, RejInvalidServiceID)
	require.Equal(t, uint64(1), w.nodes[1].agent.Counters()["rej_no_listener"])
	cid.Destroy()
	p.cid.Destroy()
	requireClean(t, w, 1)
}

// TestIPoIBPortSpaceRefused: an ID of the IPoIB port space cannot bind
// or resolve on a RoCE device (Linux's cma: EINVAL); a UDP one can.
func TestIPoIBPortSpaceRefused(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 9})
	a := w.nodes[0]
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSIPoIB, nil)
	require.ErrorIs(t, id.BindAddr(netip.AddrPortFrom(a.ip, 0)), ErrInvalidArgument)
	require.ErrorIs(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 5)), ErrInvalidArgument)
	id.Destroy()
	id = a.agent.NewID(ch, PSUDP, nil)
	require.NoError(t, id.BindAddr(netip.AddrPortFrom(a.ip, 0)))
	id.Destroy()
}

func TestUnreachableAfterRetries(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 4})
	a := w.nodes[0]
	ch := NewEventChannel()
	id := a.agent.NewID(ch, PSTCP, nil)
	// 198.18.0.2 exists on the fabric, but its agent is gone: nobody answers.
	w.nodes[1].agent.Close()
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 5)))
	w.expect(t, ch, EventAddrResolved)
	start := w.clk.Now()
	require.NoError(t, id.Connect(a.newQP(t, qp.RC), nil))
	ev := w.expect(t, ch, EventUnreachable)
	require.ErrorIs(t, ev.Err, ErrUnreachable)
	// 16 transmissions, 15 retries of 2*1 ms + 4 ms.
	require.Equal(t, uint64(15), a.agent.Counters()["retransmit_REQ"])
	require.InDelta(t, float64(16*6*time.Millisecond), float64(w.clk.Now().Sub(start)), float64(3*time.Millisecond))
	id.Destroy()
	require.Equal(t, Stats{}, a.agent.Stats())
}

// TestSlowAcceptMRA: a passive side that has not accepted when the REQ
// comes again sends an MRA; the active side then waits instead of failing.
func TestSlowAcceptMRA(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 5})
	p := newPair(t, w, PSTCP, 9)
	qa, qb := w.nodes[0].newQP(t, qp.RC), w.nodes[1].newQP(t, qp.RC)
	require.NoError(t, p.cid.Connect(qa, nil))
	req := w.expect(t, p.lch, EventConnectRequest)
	w.settle(t, 7*time.Millisecond) // the REQ is resent once
	require.Equal(t, StateMRAREQSent, req.ID.State())
	require.Equal(t, StateMRAREQRcvd, p.cid.State())
	require.Equal(t, uint64(1), w.nodes[1].agent.Counters()["tx_MRA"])
	// Longer than all the REQ retries would take, shorter than the MRA's time.
	w.settle(t, 12*time.Millisecond)
	require.NoError(t, req.ID.Accept(qb, nil))
	w.expect(t, p.cch, EventEstablished)
	w.expect(t, p.lch, EventEstablished)
}

func TestStaleConnection(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 6})
	p := newPair(t, w, PSTCP, 10)
	qa, qb := w.nodes[0].newQP(t, qp.RC), w.nodes[1].newQP(t, qp.RC)
	p.establish(t, qa, qb)
	b := w.nodes[1].agent
	// A REQ from the same QP with a new comm ID: REJ 10 (stale) and the old
	// connection is torn down with a DREQ.
	cid2 := w.nodes[0].agent.NewID(p.cch, PSTCP, nil)
	require.NoError(t, cid2.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 10)))
	w.expect(t, p.cch, EventAddrResolved)
	w.nodes[0].agent.mu.Lock()
	delete(w.nodes[0].agent.qpUsers, qa.Num()) // pretend the QP was free
	w.nodes[0].agent.mu.Unlock()
	require.NoError(t, cid2.Connect(qa, nil))
	var types []EventType
	for range 2 {
		ev := w.waitEvent(t, p.cch)
		types = append(types, ev.Type)
		if ev.Type == EventRejected {
			require.ErrorIs(t, ev.Err, RejStaleConn)
			require.Equal(t, cid2, ev.ID)
		}
	}
	require.ElementsMatch(t, []EventType{EventRejected, EventDisconnected}, types)
	require.Equal(t, uint64(1), b.Counters()["rej_stale"])
}

// TestReconnectDuringTimeWait: a REQ from the QP number of a connection
// that is over (both ends in TIMEWAIT) is a new connection, not a stale
// one: a new process given the same QP number (each rvt process starts at
// the same one) connects at once, as over Linux (cm_enter_timewait drops
// the remote QPN).
func TestReconnectDuringTimeWait(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 8})
	p := newPair(t, w, PSTCP, 14)
	a, b := w.nodes[0], w.nodes[1]
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	req := p.establish(t, qa, qb)
	require.NoError(t, p.cid.Disconnect())
	w.expect(t, p.lch, EventDisconnected)
	require.NoError(t, req.ID.Disconnect()) // the DREP, as rdma_disconnect sends it
	w.expect(t, p.cch, EventDisconnected)
	require.Equal(t, StateTimeWait, req.ID.State())

	// The same QP number from a new ID, as a new process would send it.
	id2 := a.agent.NewID(p.cch, PSTCP, nil)
	require.NoError(t, id2.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 14)))
	w.expect(t, p.cch, EventAddrResolved)
	a.agent.mu.Lock()
	delete(a.agent.qpUsers, qa.Num()) // pretend the QP was free
	a.agent.mu.Unlock()
	for _, q := range []*rvt.QP{qa} {
		require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Reset}, qp.AttrState))
	}
	require.NoError(t, id2.Connect(qa, nil))
	req2 := w.expect(t, p.lch, EventConnectRequest)
	qb2 := b.newQP(t, qp.RC)
	require.NoError(t, req2.ID.Accept(qb2, nil))
	w.expect(t, p.cch, EventEstablished)
	w.expect(t, p.lch, EventEstablished)
	require.Zero(t, b.agent.Counters()["rej_stale"])
	require.Equal(t, StateTimeWait, req.ID.State(), "the old connection keeps its TIMEWAIT")
}

func TestUnknownDREQGetsDREP(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 7})
	a, b := w.nodes[0].agent, w.nodes[1].agent
	m := make(MAD, MADLen)
	m.InitHeader(MethodSend, AttrDREQ, 0x1234)
	DREQ(m).SetLocalCommID(0xabc)
	DREQ(m).SetRemoteCommID(0xdef)
	r, err := a.ResolveRoute(netip.Addr{}, w.nodes[1].ip, 0)
	require.NoError(t, err)
	a.mu.Lock()
	a.sendLocked(peer{gid: r.DGID, sgid: r.SGIDIndex}, m)
	a.mu.Unlock()
	a.kick()
	require.Equal(t, uint64(1), b.Counters()["dreq_unknown"])
	require.Equal(t, uint64(1), a.Counters()["rx_DREP"])
}

func TestClassPortInfoGet(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 8})
	a, b := w.nodes[0].agent, w.nodes[1].agent
	r, err := a.ResolveRoute(netip.Addr{}, w.nodes[1].ip, 0)
	require.NoError(t, err)
	for _, id := range []AttrID{AttrClassPortInfo, AttrREQ} {
		m := make(MAD, MADLen)
		m.InitHeader(MethodGet, id, 0x55)
		a.mu.Lock()
		a.sendLocked(peer{gid: r.DGID, sgid: r.SGIDIndex}, m)
		a.mu.Unlock()
		a.kick()
	}
	require.Equal(t, uint64(1), b.Counters()["rx_ClassPortInfo_GET"])
	require.Equal(t, uint64(1), b.Counters()["rx_unsupported_GET_SET"])
	require.Equal(t, uint64(2), a.Counters()["drop_response"])
}

func TestSIDR(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 9})
	p := newPair(t, w, PSUDP, 7174)
	ub := w.nodes[1].newQP(t, qp.UD)
	require.NoError(t, PrepareUD(ub, PSUDP))
	require.NoError(t, p.cid.Connect(nil, &ConnParam{PrivateData: []byte("who are you")}))
	req := w.expect(t, p.lch, EventConnectRequest)
	require.NotNil(t, req.UD)
	require.Equal(t, "who are you", string(req.Param.PrivateData[:11]))
	require.Len(t, req.Param.PrivateData, MaxUDPrivateData)
	require.NoError(t, req.ID.Accept(ub, &ConnParam{PrivateData: []byte("me")}))
	ev := w.expect(t, p.cch, EventEstablished)
	require.Equal(t, ub.Num(), ev.UD.QPN)
	require.Equal(t, uint32(UDPQKey), ev.UD.QKey)
	require.Equal(t, w.nodes[1].ip, netdev.GID(ev.UD.AV.DGID).IP())
	require.Equal(t, "me", string(ev.Param.PrivateData[:2]))

	// No listener on the port: SIDR status UNSUPPORTED.
	id := w.nodes[0].agent.NewID(p.cch, PSUDP, nil)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[1].ip, 1)))
	w.expect(t, p.cch, EventAddrResolved)
	require.NoError(t, id.Connect(nil, nil))
	ev = w.expect(t, p.cch, EventRejected)
	require.ErrorIs(t, ev.Err, RejInvalidServiceID)
	id.Destroy()
	p.cid.Destroy()
	w.settle(t, 5*time.Millisecond)
	requireClean(t, w, 1)
}

// TestDisconnectRace: both sides disconnect at the same instant; both
// learn DISCONNECTED, both pass TIMEWAIT, nothing leaks.
func TestDisconnectRace(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 10})
	p := newPair(t, w, PSTCP, 11)
	qa, qb := w.nodes[0].newQP(t, qp.RC), w.nodes[1].newQP(t, qp.RC)
	req := p.establish(t, qa, qb)
	// Queue both DREQs before either is sent: hold the agents' tasks by
	// disconnecting from inside a timer callback of the manual clock.
	w.manual.AfterFunc(time.Millisecond, func() {
		require.NoError(t, p.cid.Disconnect())
		require.NoError(t, req.ID.Disconnect())
	})
	w.expect(t, p.cch, EventDisconnected)
	w.expect(t, p.lch, EventDisconnected)
	w.expect(t, p.cch, EventTimewaitExit)
	w.expect(t, p.lch, EventTimewaitExit)
	require.Equal(t, qp.Err, qa.State())
	require.Equal(t, qp.Err, qb.State())
	p.cid.Destroy()
	req.ID.Destroy()
	requireClean(t, w, 1)
}

// TestStateTable: every state names itself, and the table lists what each
// handles as cm.c's handlers do.
func TestStateTable(t *testing.T) {
	for s := State(0); s < numStates; s++ {
		require.NotContains(t, s.String(), "State(")
	}
	tests := []struct {
		s    State
		attr AttrID
		want bool
	}{
		{StateREQSent, AttrREP, true}, {StateREQSent, AttrRTU, false}, {StateREQSent, AttrMRA, true},
		{StateREPSent, AttrRTU, true}, {StateREPSent, AttrDREQ, true}, {StateEstablished, AttrREP, true},
		{StateEstablished, AttrDREP, false}, {StateDREQSent, AttrDREP, true}, {StateTimeWait, AttrREQ, true},
		{StateTimeWait, AttrDREQ, true}, {StateIdle, AttrREP, false}, {StateSIDRREQSent, AttrSIDRREP, true},
		{StateListen, AttrREQ, false}, {StateMRAREQRcvd, AttrREP, true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.s.Handles(tt.attr), "%v handles %v", tt.s, tt.attr)
	}
	require.Equal(t, time.Millisecond<<12, convTime(20))
	require.Equal(t, time.Millisecond<<10, convTime(18))
}

// TestLostRTU: the first RTU is lost; the passive side resends its REP,
// the active side answers the duplicate with the RTU again.
func TestLostRTU(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 15})
	dropped := 0
	w.nodes[0].agent.testDropTx = func(m MAD) bool {
		if m.AttrID() == AttrRTU && dropped == 0 {
			dropped++
			return true
		}
		return false
	}
	p := newPair(t, w, PSTCP, 12)
	a, b := w.nodes[0], w.nodes[1]
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	require.NoError(t, p.cid.Connect(qa, nil))
	req := w.expect(t, p.lch, EventConnectRequest)
	require.NoError(t, req.ID.Accept(qb, nil))
	w.expect(t, p.cch, EventEstablished)
	require.Equal(t, StateREPSent, req.ID.State())
	w.expect(t, p.lch, EventEstablished)
	require.Equal(t, uint64(1), b.agent.Counters()["retransmit_REP"])
	require.Equal(t, uint64(1), a.agent.Counters()["rx_dup_REP"])

	// Data flows both ways on the connection.
	buf := make([]byte, 64)
	mr, err := b.pd.Reg(buf, keys.LocalWrite)
	require.NoError(t, err)
	require.NoError(t, qb.PostRecv(rvt.RecvWR{SGL: []rvt.SGE{{Addr: mr.IOVA, Length: 64, Lkey: mr.Lkey}}}))
	require.NoError(t, qa.PostSend(rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Inline, InlineData: []byte("first")}))
	require.Equal(t, "first", string(buf[:5]))
}

// TestQPReuseAfterTimeWait: a QP belongs to its connection until TIMEWAIT
// ends; then, reset, it connects again. Also covers UC.
func TestQPReuseAfterTimeWait(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 16})
	p := newPair(t, w, PSTCP, 13)
	a, b := w.nodes[0], w.nodes[1]
	qa, qb := a.newQP(t, qp.UC), b.newQP(t, qp.UC)
	connect := func(id *ID) *ID {
		require.NoError(t, id.Connect(qa, nil))
		req := w.expect(t, p.lch, EventConnectRequest)
		require.NoError(t, req.ID.Accept(qb, nil))
		w.expect(t, p.cch, EventEstablished)
		w.expect(t, p.lch, EventEstablished)
		require.Equal(t, qp.RTS, qa.State())
		require.Equal(t, qp.RTS, qb.State())
		return req.ID
	}
	sid := connect(p.cid)
	require.NoError(t, p.cid.Disconnect())
	w.expect(t, p.lch, EventDisconnected)
	require.NoError(t, sid.Disconnect())
	w.expect(t, p.cch, EventDisconnected)

	id2 := a.agent.NewID(p.cch, PSTCP, nil)
	require.NoError(t, id2.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 13)))
	w.expect(t, p.cch, EventAddrResolved)
	require.ErrorIs(t, id2.Connect(qa, nil), ErrInvalidState, "the QP is in TIMEWAIT")
	w.expect(t, p.lch, EventTimewaitExit)
	w.expect(t, p.cch, EventTimewaitExit)
	for _, q := range []*rvt.QP{qa, qb} {
		require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Reset}, qp.AttrState))
	}
	sid.Destroy()
	p.cid.Destroy()
	sid2 := connect(id2)
	id2.Destroy()
	sid2.Destroy()
	// The active side's TIMEWAIT follows the REP's target ACK delay (15):
	// conv(ackTimeout(15, 8)) = 128 ms (timers.go).
	w.settle(t, convTime(ackTimeout(0x0F, FastOptions().PacketLifetime))+time.Millisecond)
	requireClean(t, w, 1)
}

// TestFailedAcceptRejects: an Accept that fails past its state check (here
// 197 bytes of private data, one more than a REP carries; and a QP another
// connection uses) rejects the request at once with REJ 28, as Linux's
// rdma_accept does, instead of leaving the peer to time out, and a Reject
// afterwards fails.
func TestFailedAcceptRejects(t *testing.T) {
	for _, tc := range []string{"private data", "QP in use"} {
		t.Run(tc, func(t *testing.T) {
			w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 11})
			p := newPair(t, w, PSTCP, 7481)
			b := w.nodes[1]
			require.NoError(t, p.cid.Connect(w.nodes[0].newQP(t, qp.RC), nil))
			req := w.expect(t, p.lch, EventConnectRequest)
			qb := b.newQP(t, qp.RC)
			param := &ConnParam{PrivateData: make([]byte, REPPrivateDataLen+1)}
			if tc == "QP in use" {
				// Another request, accepted on qb first.
				other := w.nodes[0].agent.NewID(p.cch, PSTCP, nil)
				require.NoError(t, other.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, p.port)))
				w.expect(t, p.cch, EventAddrResolved)
				require.NoError(t, other.Connect(w.nodes[0].newQP(t, qp.RC), nil))
				req2 := w.expect(t, p.lch, EventConnectRequest)
				require.NoError(t, req2.ID.Accept(qb, nil))
				param = nil
				defer other.Destroy()
				defer req2.ID.Destroy()
			}
			start := w.clk.Now()
			err := req.ID.Accept(qb, param)
			require.Error(t, err)
			if tc == "private data" {
				require.ErrorIs(t, err, ErrInvalidArgument)
				// It was never modified: RESET->ERR is no transition
				// (IBTA; Linux's cma_modify_qp_err fails the same way).
				require.Equal(t, qp.Reset, qb.State())
			} else {
				require.ErrorIs(t, err, ErrInvalidState)
				require.NotEqual(t, qp.Err, qb.State(), "the other connection's QP is not touched")
			}
			ev := w.waitEvent(t, p.cch)
			for ev.ID != p.cid { // the other connection's ESTABLISHED
				ev = w.waitEvent(t, p.cch)
			}
			require.Equal(t, EventRejected, ev.Type, "%v", ev.Err)
			var re *RejectError
			require.ErrorAs(t, ev.Err, &re)
			require.Equal(t, RejConsumerDefined, re.Reason)
			require.Less(t, w.clk.Now().Sub(start), 100*time.Millisecond, "at once, not after the REP's retries")
			require.ErrorIs(t, req.ID.Reject(nil), ErrInvalidState)
			req.ID.Destroy()
			p.cid.Destroy()
		})
	}
}

// TestDisconnectAfterEnd: rdma_disconnect on an ID whose connection has
// ended (TIMEWAIT over, the ID idle) returns 0 and sends nothing, as over
// Linux (the ID keeps its IB CM ID); on an ID that never connected it is
// EINVAL.
func TestDisconnectAfterEnd(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 12})
	p := newPair(t, w, PSTCP, 15)
	require.ErrorIs(t, p.cid.Disconnect(), ErrInvalidState, "never connected")
	qa, qb := w.nodes[0].newQP(t, qp.RC), w.nodes[1].newQP(t, qp.RC)
	req := p.establish(t, qa, qb)
	require.NoError(t, p.cid.Disconnect())
	w.expect(t, p.lch, EventDisconnected)
	require.NoError(t, req.ID.Disconnect())
	w.expect(t, p.cch, EventDisconnected)
	w.expect(t, p.cch, EventTimewaitExit)
	w.expect(t, p.lch, EventTimewaitExit)
	require.Equal(t, StateIdle, p.cid.State())
	sent := func() uint64 {
		return w.nodes[0].dev.Counters()["sent_pkts"] + w.nodes[1].dev.Counters()["sent_pkts"]
	}
	before := sent()
	require.NotZero(t, before)
	require.NoError(t, p.cid.Disconnect(), "again, after the end")
	require.NoError(t, req.ID.Disconnect(), "again, after the end")
	w.step(10 * time.Millisecond)
	require.Equal(t, before, sent(), "nothing sent")
	req.ID.Destroy()
	p.cid.Destroy()
}

// TestDestroyReleasesPort: destroying an ID gives its port back at once,
// as Linux's rdma_destroy_id does (cma_release_port), while the CM's
// DREQ and TIMEWAIT run on: a program may bind the same address and port
// again at once (rstream -b, a server restarted on its port).
func TestDestroyReleasesPort(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 17})
	p := newPair(t, w, PSTCP, 14)
	a, b := w.nodes[0], w.nodes[1]
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	req := p.establish(t, qa, qb)
	src := p.cid.LocalAddr()
	require.NotZero(t, src.Port())

	p.cid.Destroy() // a DREQ, then TIMEWAIT
	again := a.agent.NewID(p.cch, PSTCP, nil)
	require.NoError(t, again.BindAddr(src), "the client's address and port, right after its destroy")
	w.expect(t, p.lch, EventDisconnected)
	req.ID.Destroy()
	p.lid.Destroy()
	l2 := b.agent.NewID(p.lch, PSTCP, nil)
	require.NoError(t, l2.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 14)), "the listener's port, right after its destroy")
	require.NoError(t, l2.Listen())
	again.Destroy()
	l2.Destroy()
	w.settle(t, time.Second)
	requireClean(t, w, 0)
}

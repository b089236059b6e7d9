package cm

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestPSIBCarriesCMAHeader: a connection in port space IB with IP
// addresses carries the rdma_cm header in its REQ, as Linux's does (a
// Linux listener rejects a PS_IB REQ without one with reason 28: seen
// with Debian's ucmatose -P ib against the rxe guest), at most 56 bytes
// of the caller's private data follow it, and the listener gets them
// without the header.
func TestPSIBCarriesCMAHeader(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 51})
	var reqs []MAD
	w.nodes[0].agent.testDropTx = func(m MAD) bool {
		if m.AttrID() == AttrREQ {
			reqs = append(reqs, append(MAD(nil), m...))
		}
		return false
	}
	p := newPair(t, w, PSIB, 7471)
	a, b := w.nodes[0], w.nodes[1]
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	require.ErrorIs(t, p.cid.Connect(qa, &ConnParam{PrivateData: make([]byte, MaxConnPrivateData+1)}), ErrInvalidArgument)
	user := bytes.Repeat([]byte("ib"), MaxConnPrivateData/2)
	require.NoError(t, p.cid.Connect(qa, &ConnParam{ResponderResources: 1, InitiatorDepth: 1, PrivateData: user}))
	req := w.expect(t, p.lch, EventConnectRequest)
	require.Len(t, reqs, 1)
	r := REQ(reqs[0])
	require.Equal(t, MakeServiceID(PSIB, 7471), r.ServiceID())
	h := CMAHeader(r.PrivateData()[:CMAHeaderLen])
	require.NoError(t, h.Check())
	require.Equal(t, a.ip, h.SrcAddr())
	require.Equal(t, b.ip, h.DstAddr())
	require.Equal(t, p.cid.local.Port(), h.SrcPort())
	require.Equal(t, user, r.PrivateData()[CMAHeaderLen:CMAHeaderLen+len(user)])
	require.Equal(t, user, req.Param.PrivateData[:len(user)])
	require.Equal(t, netip.AddrPortFrom(a.ip, p.cid.local.Port()), req.ID.remote)
	require.NoError(t, req.ID.Accept(qb, nil))
	w.expect(t, p.cch, EventEstablished)
	w.expect(t, p.lch, EventEstablished)
}

// TestPSIBWithoutHeader: a PS_IB REQ whose private data has no rdma_cm
// header (an AF_IB peer's) still finds the listener, and its private
// data reaches the listener whole.
func TestPSIBWithoutHeader(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 52})
	// Strip the header the active side puts in, as an AF_IB peer sends.
	w.nodes[0].agent.testDropTx = func(m MAD) bool {
		if m.AttrID() == AttrREQ {
			pd := REQ(m).PrivateData()
			copy(pd, pd[CMAHeaderLen:])
			clear(pd[len(pd)-CMAHeaderLen:])
		}
		return false
	}
	p := newPair(t, w, PSIB, 7472)
	user := []byte("no header here")
	require.NoError(t, p.cid.Connect(w.nodes[0].newQP(t, qp.RC), &ConnParam{PrivateData: user}))
	req := w.expect(t, p.lch, EventConnectRequest)
	require.Equal(t, user, req.Param.PrivateData[:len(user)])
	require.NoError(t, req.ID.Reject(nil))
	w.expect(t, p.cch, EventRejected)
}

package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

func TestEventConnectDisconnect(t *testing.T) {
	w := newWorld(t, worldOpts{manual: true, agent: FastOptions(), seed: 1})
	a, b := w.nodes[0], w.nodes[1]
	lch, cch := NewEventChannel(), NewEventChannel()

	lid := b.agent.NewID(lch, PSTCP, "listener")
	require.NoError(t, lid.BindAddr(netip.AddrPortFrom(b.ip, 7174)))
	require.NoError(t, lid.Listen())

	cid := a.agent.NewID(cch, PSTCP, "client")
	require.NoError(t, cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7174)))
	w.expect(t, cch, EventAddrResolved)
	require.NoError(t, cid.ResolveRoute())
	w.expect(t, cch, EventRouteResolved)
	require.Equal(t, qp.MTU1024, cid.Route().PathMTU)

	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	require.NoError(t, cid.Connect(qa, &ConnParam{PrivateData: []byte("hello"), ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}))

	req := w.expect(t, lch, EventConnectRequest)
	require.Equal(t, lid, req.ID.Listener())
	require.Equal(t, "hello", string(req.Param.PrivateData[:5]))
	require.Len(t, req.Param.PrivateData, MaxConnPrivateData)
	require.Equal(t, qa.Num(), req.Param.QPN)
	require.Equal(t, a.ip, req.ID.RemoteAddr().Addr())
	require.Equal(t, cid.LocalAddr(), req.ID.RemoteAddr())
	require.NoError(t, req.ID.Accept(qb, &ConnParam{PrivateData: []byte("welcome"), ResponderResources: 2, InitiatorDepth: 2, RNRRetryCount: 7}))

	est := w.expect(t, cch, EventEstablished)
	require.Equal(t, "welcome", string(est.Param.PrivateData[:7]))
	w.expect(t, lch, EventEstablished)
	require.Equal(t, qp.RTS, qa.State())
	require.Equal(t, qp.RTS, qb.State())
	require.Equal(t, StateEstablished, cid.State())
	attr := qa.Query()
	require.Equal(t, qb.Num(), attr.DestQPN)
	require.Equal(t, uint8(2), attr.MaxRdAtomic)

	require.NoError(t, cid.Disconnect())
	w.expect(t, lch, EventDisconnected)
	require.NoError(t, req.ID.Disconnect())
	w.expect(t, cch, EventDisconnected)
	w.expect(t, cch, EventTimewaitExit)
	w.expect(t, lch, EventTimewaitExit)
	cid.Destroy()
	req.ID.Destroy()
	lid.Destroy()
	for _, n := range w.nodes {
		require.Equal(t, Stats{}, n.agent.Stats())
	}
	_ = time.Second
}

package cm

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestREQLikeLinux: the REQ our agent sends for an rping-like connect
// (port 7174, resources 1/1, retry 7, RNR 7, MTU 1024 on a 1500-byte
// link) has, field by field, the values Linux's had in rping.pcap, except
// the fields that name this connection (comm ID, QPN, PSN, GUID, GIDs,
// flow label, the rdma_cm header's addresses and port).
func TestREQLikeLinux(t *testing.T) {
	linux := REQ(loadCMMADs(t, "rping.pcap")[0].mad)
	w := newWorld(t, worldOpts{manual: true, seed: 21}) // Linux's timings
	a, b := w.nodes[0], w.nodes[1]
	ch := NewEventChannel()
	l := b.agent.NewID(ch, PSTCP, nil)
	require.NoError(t, l.BindAddr(netip.AddrPortFrom(b.ip, 7174)))
	require.NoError(t, l.Listen())
	id := a.agent.NewID(ch, PSTCP, nil)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7174)))
	require.NoError(t, id.Connect(a.newQP(t, qp.RC), nil))
	a.agent.mu.Lock()
	ours := REQ(append(MAD(nil), id.last...))
	a.agent.mu.Unlock()
	differ := map[string]bool{"TID": true, "LocalCommID": true, "LocalCAGUID": true, "LocalQPN": true,
		"StartingPSN": true, "PrimaryLocalGID": true, "PrimaryRemoteGID": true, "PrimaryFlowLabel": true,
		"PrivateData": true}
	lf, of := MAD(linux).Fields(), MAD(ours).Fields()
	require.Equal(t, len(lf), len(of))
	for i := range lf {
		if differ[lf[i].Name] {
			continue
		}
		require.Equal(t, lf[i].Value, of[i].Value, "field %s", lf[i].Name)
		require.Equal(t, lf[i].Bytes, of[i].Bytes, "field %s", lf[i].Name)
	}
	lh, oh := CMAHeader(linux.PrivateData()), CMAHeader(ours.PrivateData())
	require.Equal(t, lh.Version(), oh.Version())
	require.Equal(t, lh.IPVersion(), oh.IPVersion())
	require.Equal(t, id.LocalAddr(), oh.Src())
	require.Equal(t, b.ip, oh.DstAddr())
	require.Equal(t, make([]byte, REQPrivateDataLen-CMAHeaderLen), []byte(ours.PrivateData()[CMAHeaderLen:]))

	// The REP of rdma_accept(id, NULL) for that REQ, against Linux's.
	var ev Event
	for ev.Type != EventConnectRequest {
		var ok bool
		ev, ok = ch.Poll()
		require.True(t, ok)
	}
	require.NoError(t, ev.ID.Accept(b.newQP(t, qp.RC), nil))
	linuxREP := REP(loadCMMADs(t, "rping.pcap")[1].mad)
	b.agent.mu.Lock()
	rep := REP(append(MAD(nil), ev.ID.last...))
	b.agent.mu.Unlock()
	differ = map[string]bool{"TID": true, "LocalCommID": true, "RemoteCommID": true, "LocalCAGUID": true,
		"LocalQPN": true, "StartingPSN": true}
	lf, of = MAD(linuxREP).Fields(), MAD(rep).Fields()
	for i := range lf {
		if !differ[lf[i].Name] {
			require.Equal(t, lf[i].Value, of[i].Value, "REP field %s", lf[i].Name)
			require.Equal(t, lf[i].Bytes, of[i].Bytes, "REP field %s", lf[i].Name)
		}
	}
	id.Destroy()
	ev.ID.Destroy()
}

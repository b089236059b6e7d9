package cm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd"
)

// getEvent waits for ch's next event.
func getEvent(t *testing.T, ch *cm.EventChannel, want cm.EventType) cm.Event {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ev, ok := ch.Poll(); ok {
			require.Equal(t, want, ev.Type, "event %v (%v)", ev.Type, ev.Err)
			return ev
		}
	}
	t.Fatalf("no %v event", want)
	return cm.Event{}
}

// TestRemoteMulticast: JoinMulticast on devices served by rvtd (the
// daemon's cm_join_multicast): the same MULTICAST_JOIN as embedded, the
// receiver's QP attached, a datagram to the group arrives; LeaveMulticast
// detaches; IDs and joins are gone from the daemon at the end.
func TestRemoteMulticast(t *testing.T) {
	srv, sock := startRVTD(t)
	a, b := newRemoteNode(t, sock, "rvt0"), newRemoteNode(t, sock, "rvt1")
	group := netip.MustParseAddr("239.1.2.5")
	member := func(n *remoteNode, src string) (*cm.ID, *cm.EventChannel, *rvt.QP) {
		ag, err := cm.AgentFor(n.dev)
		require.NoError(t, err)
		ch := cm.NewEventChannel()
		id := ag.NewID(ch, cm.PSUDP, nil)
		require.NoError(t, id.ResolveAddr(netip.MustParseAddr(src), netip.AddrPortFrom(group, 0)))
		getEvent(t, ch, cm.EventAddrResolved)
		q := n.qp(t, qp.UD)
		require.NoError(t, cm.PrepareUD(q, cm.PSUDP))
		return id, ch, q
	}
	rid, rch, rq := member(a, "198.18.0.1")
	tid, tch, tq := member(b, "198.18.0.2")
	for i := range 4 {
		require.NoError(t, rq.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: []rvt.SGE{{Addr: a.mr.IOVA + uint64(i)*4096, Length: 4096, Lkey: a.mr.Lkey}}}))
	}
	require.NoError(t, rid.JoinMulticast(group, rq, false))
	ev := getEvent(t, rch, cm.EventMulticastJoin)
	require.NotNil(t, ev.UD)
	require.Equal(t, uint32(cm.MulticastQPN), ev.UD.QPN)
	require.Equal(t, uint32(cm.UDPQKey), ev.UD.QKey)
	require.Equal(t, netip.AddrFrom4(group.As4()).As16(), ev.UD.AV.DGID)
	require.Equal(t, uint8(cm.MulticastHopLimit), ev.UD.AV.HopLimit)

	require.NoError(t, tid.JoinMulticast(group, nil, true))
	tev := getEvent(t, tch, cm.EventMulticastJoin)
	ah, err := b.pd.CreateAH(tev.UD.AV)
	require.NoError(t, err)
	copy(b.buf, "to the group")
	require.NoError(t, tq.PostSend(rvt.SendWR{WRID: 7, Opcode: qp.OpSend, Flags: qp.Signaled, AH: ah, RemoteQPN: tev.UD.QPN,
		RemoteQKey: tev.UD.QKey, SGL: []rvt.SGE{{Addr: b.mr.IOVA, Length: 12, Lkey: b.mr.Lkey}}}))
	got := poll(t, 2, a.cq, b.cq)
	for _, w := range got {
		if w.WRID != 7 {
			require.Equal(t, []byte("to the group"), a.buf[w.WRID*4096+40:][:12])
		}
	}
	require.NoError(t, rid.LeaveMulticast(group))
	require.Error(t, rid.LeaveMulticast(group))
	rid.Destroy()
	tid.Destroy()
	require.NoError(t, a.dev.Close())
	require.NoError(t, b.dev.Close())
	deadline := time.Now().Add(10 * time.Second)
	for srv.CMStats() != (rvtd.CMStats{}) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, rvtd.CMStats{}, srv.CMStats())
}

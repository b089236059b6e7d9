package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// mcastMember is an ID of node n resolved to group, with a UD QP ready
// (PrepareUD) and, for a receiver, receives posted.
func mcastMember(t *testing.T, w *world, n *node, ch *EventChannel, group netip.Addr, recv bool) (*ID, *rvt.QP, *rvt.MR, []byte) {
	t.Helper()
	id := n.agent.NewID(ch, PSUDP, nil)
	require.NoError(t, id.ResolveAddr(n.ip, netip.AddrPortFrom(group, 0)))
	w.expect(t, ch, EventAddrResolved)
	q := n.newQP(t, qp.UD)
	require.NoError(t, PrepareUD(q, PSUDP))
	buf := make([]byte, 8*4096)
	mr, err := n.pd.Reg(buf, 1) // local write
	require.NoError(t, err)
	if recv {
		for i := range 8 {
			require.NoError(t, q.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: []rvt.SGE{{Addr: mr.IOVA + uint64(i)*4096, Length: 4096, Lkey: mr.Lkey}}}))
		}
	}
	return id, q, mr, buf
}

// TestMulticastJoin: two devices join 239.1.2.3 through their agents; the
// receiver's QP, attached by JoinMulticast, gets a datagram sent to
// MulticastQPN with the event's AV and Q_Key; none after LeaveMulticast.
// The errors of a join as the kernel's.
func TestMulticastJoin(t *testing.T) {
	w := newWorld(t, worldOpts{})
	rx, tx := w.nodes[0], w.nodes[1]
	group := netip.MustParseAddr("239.1.2.3")
	rch, tch := NewEventChannel(), NewEventChannel()
	rid, rq, _, rbuf := mcastMember(t, w, rx, rch, group, true)
	tid, tq, tmr, tbuf := mcastMember(t, w, tx, tch, group, false)

	require.NoError(t, rid.JoinMulticast(group, rq, false))
	ev := w.expect(t, rch, EventMulticastJoin)
	mgid := netip.AddrFrom4(group.As4()).As16()
	require.NotNil(t, ev.UD)
	require.Equal(t, UDParam{QPN: MulticastQPN, QKey: UDPQKey, AV: rvt.AddressVector{DGID: mgid, SGIDIndex: ev.UD.AV.SGIDIndex,
		HopLimit: MulticastHopLimit, Port: 1}}, *ev.UD)
	require.ErrorIs(t, rid.JoinMulticast(group, rq, false), ErrAddrInUse)

	require.NoError(t, tid.JoinMulticast(group, tq, true)) // send-only: not attached
	tev := w.expect(t, tch, EventMulticastJoin)
	ah, err := tx.pd.CreateAH(tev.UD.AV)
	require.NoError(t, err)
	msg := []byte("to 239.1.2.3")
	copy(tbuf, msg)
	send := func() {
		require.NoError(t, tq.PostSend(rvt.SendWR{WRID: 9, Opcode: qp.OpSend, Flags: qp.Signaled, AH: ah,
			RemoteQPN: tev.UD.QPN, RemoteQKey: tev.UD.QKey, SGL: []rvt.SGE{{Addr: tmr.IOVA, Length: uint32(len(msg)), Lkey: tmr.Lkey}}}))
	}
	send()
	wc := make([]rvt.WC, 4)
	var rgot, tgot []rvt.WC // the devices' QP numbers may be equal: by CQ
	for deadline := time.Now().Add(5 * time.Second); (len(rgot) < 1 || len(tgot) < 1) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		rgot = append(rgot, wc[:rx.cq.Poll(wc)]...)
		tgot = append(tgot, wc[:tx.cq.Poll(wc)]...)
	}
	require.Len(t, rgot, 1)
	require.Len(t, tgot, 1)
	require.Equal(t, rvt.WC{}.Status, tgot[0].Status, "%+v", tgot[0])
	recv := rgot[0]
	require.Equal(t, rvt.WC{}.Status, recv.Status, "%+v", recv)
	require.Equal(t, uint32(40+len(msg)), recv.ByteLen)
	require.Equal(t, msg, rbuf[recv.WRID*4096+40:][:len(msg)])

	require.NoError(t, rid.LeaveMulticast(group))
	require.ErrorIs(t, rid.LeaveMulticast(group), ErrInvalidArgument)
	send()
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 1, tx.cq.Poll(wc)) // the send completes
	require.Zero(t, rx.cq.Poll(wc), "a datagram after leaving")

	// Errors.
	for _, c := range []struct {
		g    string
		want error
	}{{"ff0e::1", ErrNotSupported}, {"198.18.0.9", ErrInvalidArgument}, {"0.0.0.0", ErrInvalidArgument}} {
		require.ErrorIs(t, rid.JoinMulticast(netip.MustParseAddr(c.g), nil, false), c.want, c.g)
	}
	require.ErrorIs(t, rx.agent.NewID(rch, PSUDP, nil).JoinMulticast(group, nil, false), ErrInvalidState)
	require.ErrorIs(t, rx.agent.NewID(rch, PSTCP, nil).JoinMulticast(group, nil, false), ErrInvalidArgument)

	// Destroy detaches: the QP can join the group again on another ID.
	require.NoError(t, rid.JoinMulticast(group, rq, false))
	w.expect(t, rch, EventMulticastJoin)
	rid.Destroy()
	require.NoError(t, rx.dev.AttachMcast(rq, rvt.GID(mgid), 0))
	tid.Destroy()
}

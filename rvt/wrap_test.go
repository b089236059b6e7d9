package rvt

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/netdev/host"
	"github.com/softverbs/softverbs/netdev/linktest"
	"github.com/softverbs/softverbs/qp"
)

// TestWrappedLinkCapabilities opens a device on a link wrapped as rvt
// pingpong --pcap --loss wraps one (capture, then faults), and checks that
// what the link below offers still reaches the transport and the verbs:
// multicast joins (GroupJoiner, on the host), transmit batching (Holder)
// and busy polling (Poller).
func TestWrappedLinkCapabilities(t *testing.T) {
	fab := fabric.New(nil, 1)
	mac, peerMAC := netdev.MAC{2, 0, 0, 0, 0, 1}, netdev.MAC{2, 0, 0, 0, 0, 2}
	ip, peerIP := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	fab.AddAddr(ip, mac)
	fab.AddAddr(peerIP, peerMAC)
	base := &linktest.CapLink{Port: fab.NewPort(mac, 1500)}
	t.Cleanup(func() { _ = base.Close() })
	hst := host.New(base, mac, []netip.Addr{ip}, nil)
	peer := fab.NewPort(peerMAC, 1500)
	t.Cleanup(func() { _ = peer.Close() })
	var igmp atomic.Int64
	peer.SetHandler(func(f []byte) {
		if len(f) > netdev.EthernetHeaderLen+9 && netdev.Ethernet(f).EtherType() == netdev.EtherTypeIPv4 &&
			f[netdev.EthernetHeaderLen+9] == netdev.ProtocolIGMP {
			igmp.Add(1)
		}
		peer.Release(f)
	})
	capt, err := capture.Wrap(hst, nil, io.Discard)
	require.NoError(t, err)
	link := faults.Wrap(capt, nil, 1, faults.Profile{})

	n := newNode(t, Options{Name: "wrapped", Inline: true, Link: link, MAC: mac,
		Addrs: []netip.Addr{ip}, Resolve: fab.Resolve})
	q := n.qp(t, qp.UD)
	require.NoError(t, q.Modify(&QPAttr{State: qp.Init, Port: 1, QKey: 0x1111},
		qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrQKey))
	require.NoError(t, q.Modify(&QPAttr{State: qp.RTR}, qp.AttrState))
	require.NoError(t, q.Modify(&QPAttr{State: qp.RTS}, qp.AttrState|qp.AttrSQPSN))

	// GroupJoiner: attaching joins the group on the host, which reports
	// it (IGMP); the last detach leaves it.
	group := netip.MustParseAddr("239.1.2.3")
	require.NoError(t, n.d.AttachMcast(q, netdev.GIDFromIP(group), 0))
	require.Equal(t, []netip.Addr{group}, hst.Groups(), "joined through the wrappers")
	require.EqualValues(t, 1, igmp.Load(), "membership report sent")
	require.NoError(t, n.d.DetachMcast(q, netdev.GIDFromIP(group), 0))
	require.Empty(t, hst.Groups())
	require.EqualValues(t, 2, igmp.Load(), "leave sent")

	// Holder: a send runs under a hold of the link below.
	mr := n.mr(t, 64)
	ah, err := n.pd.CreateAH(AddressVector{DGID: netdev.GIDFromIP(peerIP), HopLimit: 64, Port: 1})
	require.NoError(t, err)
	require.NoError(t, q.PostSend(SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []SGE{{Addr: mr.IOVA, Length: 64, Lkey: mr.Lkey}}, AH: ah, RemoteQPN: 2, RemoteQKey: 0x1111}))
	wc := make([]WC, 1)
	require.Equal(t, 1, n.cq.Poll(wc))
	require.Equal(t, cq.Success, wc[0].Status, "%+v", wc[0])
	require.Positive(t, base.Holds.Load(), "the transport holds the link below the wrappers")
	require.Equal(t, base.Holds.Load(), base.Flushes.Load(), "every hold flushed")

	// Poller: PollLink drives the link below.
	require.False(t, n.d.PollLink())
	require.EqualValues(t, 1, base.Polls.Load())
}

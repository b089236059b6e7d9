package netdev_test

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// capLink is a fabric port with the optional interfaces of a real link
// (Holder, Poller, OwnReceiver), counting the calls it gets.
type capLink struct {
	*netdev.FabricPort
	holds, flushes, polls atomic.Int64
}

func (c *capLink) Hold()                        { c.holds.Add(1) }
func (c *capLink) Flush()                       { c.flushes.Add(1) }
func (c *capLink) FlushLazy()                   { c.flushes.Add(1) }
func (c *capLink) PollReceive() bool            { c.polls.Add(1); return false }
func (c *capLink) ReceivesOnOwnGoroutine() bool { return false }

// wrapAll wraps l in a capture and a fault link, as rvt pingpong --pcap
// --loss does.
func wrapAll(t *testing.T, l netdev.Link) netdev.Link {
	t.Helper()
	c, err := netdev.WithCapture(l, nil, io.Discard)
	require.NoError(t, err)
	return netdev.WithFaults(c, nil, 1, netdev.Faults{})
}

func TestAsThroughWrappers(t *testing.T) {
	fab := netdev.NewFabric(nil, 1)
	base := &capLink{FabricPort: fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 1}, 1500)}
	host := netdev.NewHost(base, base.HardwareAddr(), nil, nil)
	top := wrapAll(t, host)

	h, ok := netdev.As[netdev.Holder](top)
	require.True(t, ok, "Holder through fault link, capture and host")
	require.Same(t, base, h)
	p, ok := netdev.As[netdev.Poller](top)
	require.True(t, ok, "Poller through the wrappers")
	require.Same(t, base, p)
	j, ok := netdev.As[netdev.GroupJoiner](top)
	require.True(t, ok, "GroupJoiner through the wrappers")
	require.Same(t, host, j, "the host answers for the link below it")
	o, ok := netdev.As[netdev.OwnReceiver](top)
	require.True(t, ok)
	require.Same(t, host, o)
	hh, ok := netdev.As[*netdev.Host](top)
	require.True(t, ok, "concrete types too")
	require.Same(t, host, hh)

	_, ok = netdev.As[netdev.Holder](wrapAll(t, fab.NewPort(netdev.MAC{}, 1500)))
	require.False(t, ok, "a fabric port does not batch, wrapped or not")
	_, ok = netdev.As[netdev.Holder](nil)
	require.False(t, ok)
}

// TestWrappedLinkCapabilities opens a device on a link wrapped as rvt
// pingpong --pcap --loss wraps one, and checks that what the link below
// offers still reaches the transport and the verbs: multicast joins
// (GroupJoiner, on the host), transmit batching (Holder) and busy
// polling (Poller).
func TestWrappedLinkCapabilities(t *testing.T) {
	fab := netdev.NewFabric(nil, 1)
	mac, peerMAC := netdev.MAC{2, 0, 0, 0, 0, 1}, netdev.MAC{2, 0, 0, 0, 0, 2}
	ip, peerIP := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	fab.AddAddr(ip, mac)
	fab.AddAddr(peerIP, peerMAC)
	base := &capLink{FabricPort: fab.NewPort(mac, 1500)}
	t.Cleanup(func() { _ = base.Close() })
	host := netdev.NewHost(base, mac, []netip.Addr{ip}, nil)
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

	dev, err := rvt.Open(rvt.Options{Name: "wrapped", Inline: true, Link: wrapAll(t, host), MAC: mac,
		Addrs: []netip.Addr{ip}, Resolve: fab.Resolve})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	c, err := dev.CreateCQ(16, nil)
	require.NoError(t, err)
	q, err := pd.CreateQP(rvt.QPInitAttr{Type: qp.UD, SendCQ: c, RecvCQ: c,
		Cap: rvt.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.Init, Port: 1, QKey: 0x1111},
		qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrQKey))
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTR}, qp.AttrState))
	require.NoError(t, q.Modify(&rvt.QPAttr{State: qp.RTS}, qp.AttrState|qp.AttrSQPSN))

	// GroupJoiner: attaching joins the group on the host, which reports
	// it (IGMP); the last detach leaves it.
	group := netip.MustParseAddr("239.1.2.3")
	require.NoError(t, dev.AttachMcast(q, netdev.GIDFromIP(group), 0))
	require.Equal(t, []netip.Addr{group}, host.Groups(), "joined through the wrappers")
	require.EqualValues(t, 1, igmp.Load(), "membership report sent")
	require.NoError(t, dev.DetachMcast(q, netdev.GIDFromIP(group), 0))
	require.Empty(t, host.Groups())
	require.EqualValues(t, 2, igmp.Load(), "leave sent")

	// Holder: a send runs under a hold of the link below.
	mr, err := pd.Reg(make([]byte, 64), keys.LocalWrite)
	require.NoError(t, err)
	ah, err := pd.CreateAH(rvt.AddressVector{DGID: netdev.GIDFromIP(peerIP), HopLimit: 64, Port: 1})
	require.NoError(t, err)
	require.NoError(t, q.PostSend(rvt.SendWR{WRID: 1, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []rvt.SGE{{Addr: mr.IOVA, Length: 64, Lkey: mr.Lkey}}, AH: ah, RemoteQPN: 2, RemoteQKey: 0x1111}))
	wc := make([]rvt.WC, 1)
	require.Equal(t, 1, c.Poll(wc))
	require.Equal(t, cq.Success, wc[0].Status, "%+v", wc[0])
	require.Positive(t, base.holds.Load(), "the transport holds the link below the wrappers")
	require.Equal(t, base.holds.Load(), base.flushes.Load(), "every hold flushed")

	// Poller: PollLink drives the link below.
	require.False(t, dev.PollLink())
	require.EqualValues(t, 1, base.polls.Load())
}

package host

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// captureLink is a Link that records what is sent on it and lets a test
// inject received frames.
type captureLink struct {
	mu      sync.Mutex
	sent    [][]byte
	handler netdev.Handler
	mac     netdev.MAC
}

func (c *captureLink) Send(f []byte) error {
	c.mu.Lock()
	c.sent = append(c.sent, append([]byte(nil), f...))
	c.mu.Unlock()
	return nil
}
func (c *captureLink) SetHandler(h netdev.Handler) { c.handler = h }
func (c *captureLink) HardwareAddr() netdev.MAC    { return c.mac }
func (c *captureLink) MTU() int                    { return 1500 }
func (c *captureLink) Close() error                { return nil }

func (c *captureLink) take() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

var (
	hostMAC = netdev.MAC{0x02, 0, 0, 0, 0, 0x01}
	peerMAC = netdev.MAC{0x02, 0, 0, 0, 0, 0x02}
	hostV4  = netip.MustParseAddr("10.9.0.1")
	peerV4  = netip.MustParseAddr("10.9.0.2")
	hostV6  = netip.MustParseAddr("fd00::1")
	peerV6  = netip.MustParseAddr("fd00::2")
	hostLL  = netdev.LinkLocalFromMAC(hostMAC)
)

// serialize builds a frame with gopacket, checksums included, so that the
// test's frames do not depend on the code under test.
func serialize(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...))
	return append([]byte(nil), buf.Bytes()...)
}

func arpFrame(t *testing.T, op uint16, srcMAC, dstMAC netdev.MAC, sha netdev.MAC, spa netip.Addr, tha netdev.MAC, tpa netip.Addr) []byte {
	s, d := spa.As4(), tpa.As4()
	return serialize(t,
		&layers.Ethernet{SrcMAC: srcMAC[:], DstMAC: dstMAC[:], EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6,
			ProtAddressSize: 4, Operation: op, SourceHwAddress: sha[:], SourceProtAddress: s[:],
			DstHwAddress: tha[:], DstProtAddress: d[:]})
}

func ndFrame(t *testing.T, srcMAC, dstMAC netdev.MAC, src, dst netip.Addr, msg gopacket.SerializableLayer, typ uint8, hop uint8) []byte {
	ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hop,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	require.NoError(t, icmp.SetNetworkLayerForChecksum(ip))
	return serialize(t, &layers.Ethernet{SrcMAC: srcMAC[:], DstMAC: dstMAC[:], EthernetType: layers.EthernetTypeIPv6},
		ip, icmp, msg)
}

func nsMsg(target netip.Addr, sll *netdev.MAC) *layers.ICMPv6NeighborSolicitation {
	m := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if sll != nil {
		m.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: sll[:]}}
	}
	return m
}

func naMsg(target netip.Addr, flags uint8, tll netdev.MAC) *layers.ICMPv6NeighborAdvertisement {
	return &layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: target.AsSlice(),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: tll[:]}}}
}

// checkICMPv6 verifies an ICMPv6 frame's checksum independently.
func checkICMPv6(t *testing.T, f []byte) {
	t.Helper()
	ip := netdev.IPv6(f[netdev.EthernetHeaderLen:])
	m := f[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen : netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+int(ip.PayloadLen())]
	var s uint32
	for _, a := range [][]byte{ip[8:24], ip[24:40]} {
		for i := 0; i < 16; i += 2 {
			s += uint32(a[i])<<8 | uint32(a[i+1])
		}
	}
	s += uint32(len(m)) + 58
	for i := 0; i+1 < len(m); i += 2 {
		s += uint32(m[i])<<8 | uint32(m[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	require.Equal(t, uint32(0xffff), s, "icmpv6 checksum")
	require.Equal(t, uint8(255), ip.HopLimit())
}

func newTestHost(t *testing.T) (*Host, *captureLink, *clock.Manual, *frametest.Recorder) {
	clk := clock.NewManual()
	cl := &captureLink{mac: netdev.MAC{0x02, 0xaa, 0, 0, 0, 9}}
	h := New(cl, hostMAC, []netip.Addr{hostLL, hostV4, hostV6}, clk)
	rec := &frametest.Recorder{}
	h.SetHandler(rec.Handler)
	return h, cl, clk, rec
}

func TestHostFrames(t *testing.T) {
	other := netip.MustParseAddr("10.9.0.77")
	tests := []struct {
		name  string
		in    func(t *testing.T) []byte
		check func(t *testing.T, out [][]byte, h *Host)
	}{
		{
			name: "arp request for us is answered and the sender learned",
			in: func(t *testing.T) []byte {
				return arpFrame(t, layers.ARPRequest, peerMAC, netdev.BroadcastMAC(), peerMAC, peerV4, netdev.MAC{}, hostV4)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Len(t, out, 1)
				p := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default)
				eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
				require.Equal(t, net.HardwareAddr(peerMAC[:]), eth.DstMAC)
				require.Equal(t, net.HardwareAddr(hostMAC[:]), eth.SrcMAC)
				a := p.Layer(layers.LayerTypeARP).(*layers.ARP)
				require.Equal(t, uint16(layers.ARPReply), a.Operation)
				require.Equal(t, hostMAC[:], a.SourceHwAddress)
				require.Equal(t, hostV4.AsSlice(), a.SourceProtAddress)
				require.Equal(t, peerMAC[:], a.DstHwAddress)
				require.Equal(t, peerV4.AsSlice(), a.DstProtAddress)
				m, ok := h.Neighbour(peerV4)
				require.True(t, ok)
				require.Equal(t, peerMAC, m)
			},
		},
		{
			name: "arp request for someone else is ignored",
			in: func(t *testing.T) []byte {
				return arpFrame(t, layers.ARPRequest, peerMAC, netdev.BroadcastMAC(), peerMAC, peerV4, netdev.MAC{}, other)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Empty(t, out)
				_, ok := h.Neighbour(peerV4)
				require.False(t, ok, "not learned: the request was not for us")
			},
		},
		{
			name: "arp reply is learned",
			in: func(t *testing.T) []byte {
				return arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Empty(t, out)
				m, ok := h.Neighbour(peerV4)
				require.True(t, ok)
				require.Equal(t, peerMAC, m)
			},
		},
		{
			name: "arp probe (sender 0.0.0.0) is answered, nothing learned",
			in: func(t *testing.T) []byte {
				return arpFrame(t, layers.ARPRequest, peerMAC, netdev.BroadcastMAC(), peerMAC, netip.IPv4Unspecified(), netdev.MAC{}, hostV4)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Len(t, out, 1)
				require.Equal(t, 0, int(h.Stats().Learned))
			},
		},
		{
			name: "neighbour solicitation to the solicited-node group is answered",
			in: func(t *testing.T) []byte {
				sn := netdev.SolicitedNodeAddr(hostV6)
				mac, _ := netdev.MulticastMAC(sn)
				return ndFrame(t, peerMAC, mac, peerV6, sn, nsMsg(hostV6, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Len(t, out, 1)
				checkICMPv6(t, out[0])
				p := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default)
				eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
				require.Equal(t, net.HardwareAddr(peerMAC[:]), eth.DstMAC)
				ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
				require.Equal(t, hostV6.AsSlice(), []byte(ip.SrcIP))
				require.Equal(t, peerV6.AsSlice(), []byte(ip.DstIP))
				na := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
				require.True(t, na.Solicited())
				require.True(t, na.Override())
				require.False(t, na.Router())
				require.Equal(t, hostV6.AsSlice(), []byte(na.TargetAddress))
				require.Len(t, na.Options, 1)
				require.Equal(t, layers.ICMPv6OptTargetAddress, na.Options[0].Type)
				require.Equal(t, hostMAC[:], na.Options[0].Data)
				m, ok := h.Neighbour(peerV6)
				require.True(t, ok)
				require.Equal(t, peerMAC, m)
			},
		},
		{
			name: "neighbour solicitation for the link-local address is answered",
			in: func(t *testing.T) []byte {
				sn := netdev.SolicitedNodeAddr(hostLL)
				mac, _ := netdev.MulticastMAC(sn)
				src := netip.MustParseAddr("fe80::2")
				return ndFrame(t, peerMAC, mac, src, sn, nsMsg(hostLL, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Len(t, out, 1)
				checkICMPv6(t, out[0])
			},
		},
		{
			name: "duplicate address detection gets an advertisement to all nodes",
			in: func(t *testing.T) []byte {
				sn := netdev.SolicitedNodeAddr(hostV6)
				mac, _ := netdev.MulticastMAC(sn)
				return ndFrame(t, peerMAC, mac, netip.IPv6Unspecified(), sn, nsMsg(hostV6, nil), layers.ICMPv6TypeNeighborSolicitation, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Len(t, out, 1)
				checkICMPv6(t, out[0])
				require.Equal(t, netdev.MAC{0x33, 0x33, 0, 0, 0, 1}, netdev.Ethernet(out[0]).Dst())
				require.Equal(t, netip.MustParseAddr("ff02::1"), netdev.IPv6(out[0][netdev.EthernetHeaderLen:]).Dst())
				require.Zero(t, out[0][netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+ndFlags]&naSolicited)
			},
		},
		{
			name: "solicitation for someone else is ignored",
			in: func(t *testing.T) []byte {
				target := netip.MustParseAddr("fd00::99")
				sn := netdev.SolicitedNodeAddr(target)
				mac, _ := netdev.MulticastMAC(sn)
				return ndFrame(t, peerMAC, mac, peerV6, sn, nsMsg(target, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) { require.Empty(t, out) },
		},
		{
			name: "solicitation with hop limit below 255 is dropped",
			in: func(t *testing.T) []byte {
				sn := netdev.SolicitedNodeAddr(hostV6)
				mac, _ := netdev.MulticastMAC(sn)
				return ndFrame(t, peerMAC, mac, peerV6, sn, nsMsg(hostV6, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 64)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Empty(t, out)
				require.Equal(t, uint64(1), h.Stats().Malformed)
			},
		},
		{
			name: "solicitation with a bad checksum is dropped",
			in: func(t *testing.T) []byte {
				sn := netdev.SolicitedNodeAddr(hostV6)
				mac, _ := netdev.MulticastMAC(sn)
				f := ndFrame(t, peerMAC, mac, peerV6, sn, nsMsg(hostV6, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 255)
				f[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+icmp6Checksum] ^= 1
				return f
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Empty(t, out)
				require.Equal(t, uint64(1), h.Stats().Malformed)
			},
		},
		{
			name: "solicited advertisement is learned",
			in: func(t *testing.T) []byte {
				return ndFrame(t, peerMAC, hostMAC, peerV6, hostV6, naMsg(peerV6, naSolicited|naOverride, peerMAC),
					layers.ICMPv6TypeNeighborAdvertisement, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				require.Empty(t, out)
				m, ok := h.Neighbour(peerV6)
				require.True(t, ok)
				require.Equal(t, peerMAC, m)
			},
		},
		{
			name: "unsolicited advertisement of an unknown neighbour is not cached",
			in: func(t *testing.T) []byte {
				return ndFrame(t, peerMAC, netdev.MAC{0x33, 0x33, 0, 0, 0, 1}, peerV6, netip.MustParseAddr("ff02::1"),
					naMsg(peerV6, naOverride, peerMAC), layers.ICMPv6TypeNeighborAdvertisement, 255)
			},
			check: func(t *testing.T, out [][]byte, h *Host) {
				_, ok := h.Neighbour(peerV6)
				require.False(t, ok)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, cl, _, rec := newTestHost(t)
			cl.handler(tc.in(t))
			tc.check(t, cl.take(), h)
			require.Zero(t, rec.Count(), "ARP/ND frames must not reach the upper handler")
		})
	}
}

func TestHostPassesAndFilters(t *testing.T) {
	h, cl, _, rec := newTestHost(t)
	toUs := frametest.RawFrame(peerMAC, hostMAC, 1, 60)
	toOther := frametest.RawFrame(peerMAC, netdev.MAC{0x02, 9, 9, 9, 9, 9}, 2, 60)
	toGroup := frametest.RawFrame(peerMAC, netdev.MAC{0x01, 0, 0x5e, 1, 2, 3}, 3, 60)
	toLinkMAC := frametest.RawFrame(peerMAC, cl.mac, 4, 60) // the TAP's kernel MAC is not ours
	for _, f := range [][]byte{toUs, toOther, toGroup, toLinkMAC} {
		cl.handler(f)
	}
	got := rec.Got()
	require.Len(t, got, 2)
	require.Equal(t, byte(1), got[0][netdev.EthernetHeaderLen])
	require.Equal(t, byte(3), got[1][netdev.EthernetHeaderLen])
	require.Equal(t, uint64(2), h.Stats().Filtered)
	require.Equal(t, hostMAC, h.HardwareAddr())
}

// releasingLink is a captureLink that pools: it records released frames.
type releasingLink struct {
	captureLink
	frametest.ReleaseRecorder
}

// TestHostNoHandler checks that a frame to pass up with no handler set is
// counted as dropped and given back to the wrapped link's pool.
func TestHostNoHandler(t *testing.T) {
	rl := &releasingLink{captureLink: captureLink{mac: netdev.MAC{0x02, 0xaa, 0, 0, 0, 9}}}
	h := New(rl, hostMAC, []netip.Addr{hostV4}, clock.NewManual())
	f := frametest.RawFrame(peerMAC, hostMAC, 1, 60)
	rl.handler(f)
	require.Len(t, rl.Released, 1)
	require.Same(t, &f[0], &rl.Released[0][0])
	st := h.Stats()
	require.EqualValues(t, 1, st.RxDropped)
	require.Zero(t, st.RxFrames)

	rec := &frametest.Recorder{}
	h.SetHandler(rec.Handler)
	rl.handler(frametest.RawFrame(peerMAC, hostMAC, 2, 60))
	require.Len(t, rec.Got(), 1)
	st = h.Stats()
	require.EqualValues(t, 1, st.RxFrames)
	require.EqualValues(t, 60+netdev.EthernetHeaderLen, st.RxBytes)
	require.EqualValues(t, 1, st.RxDropped)
}

func TestHostResolveRequestsAndAges(t *testing.T) {
	h, cl, clk, _ := newTestHost(t)

	// Group addresses need no request.
	m, ok := h.Resolve(netip.MustParseAddr("239.1.2.3"))
	require.True(t, ok)
	require.Equal(t, netdev.MAC{0x01, 0, 0x5e, 1, 2, 3}, m)
	m, ok = h.Resolve(netip.MustParseAddr("ff0e::1:2"))
	require.True(t, ok)
	require.Equal(t, netdev.MAC{0x33, 0x33, 0, 1, 0, 2}, m)
	m, ok = h.Resolve(netip.AddrFrom16(hostV4.As16())) // ourselves, IPv4-mapped
	require.True(t, ok)
	require.Equal(t, hostMAC, m)
	require.Empty(t, cl.take())

	// Unknown IPv4: one broadcast request, rate limited.
	_, ok = h.Resolve(peerV4)
	require.False(t, ok)
	_, ok = h.Resolve(peerV4)
	require.False(t, ok)
	out := cl.take()
	require.Len(t, out, 1)
	a := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, uint16(layers.ARPRequest), a.Operation)
	require.Equal(t, hostV4.AsSlice(), a.SourceProtAddress)
	require.Equal(t, peerV4.AsSlice(), a.DstProtAddress)
	require.Equal(t, netdev.BroadcastMAC(), netdev.Ethernet(out[0]).Dst())
	clk.Advance(ProbeInterval)
	_, ok = h.Resolve(peerV4)
	require.False(t, ok)
	require.Len(t, cl.take(), 1, "failed entries are retried after the probe interval")

	// Unknown IPv6: a solicitation to the solicited-node group.
	_, ok = h.Resolve(peerV6)
	require.False(t, ok)
	out = cl.take()
	require.Len(t, out, 1)
	checkICMPv6(t, out[0])
	sn := netdev.SolicitedNodeAddr(peerV6)
	require.Equal(t, sn, netdev.IPv6(out[0][netdev.EthernetHeaderLen:]).Dst())
	require.Equal(t, hostV6, netdev.IPv6(out[0][netdev.EthernetHeaderLen:]).Src())
	snMAC, _ := netdev.MulticastMAC(sn)
	require.Equal(t, snMAC, netdev.Ethernet(out[0]).Dst())
	ns := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default).
		Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	require.Equal(t, peerV6.AsSlice(), []byte(ns.TargetAddress))
	require.Equal(t, hostMAC[:], ns.Options[0].Data)

	// The reply makes it resolvable at once.
	cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4))
	m, ok = h.Resolve(peerV4)
	require.True(t, ok)
	require.Equal(t, peerMAC, m)
	require.Empty(t, cl.take())

	// After ReachableTime the entry is stale: still used, re-asked by unicast.
	clk.Advance(ReachableTime)
	m, ok = h.Resolve(peerV4)
	require.True(t, ok)
	require.Equal(t, peerMAC, m)
	out = cl.take()
	require.Len(t, out, 1)
	require.Equal(t, peerMAC, netdev.Ethernet(out[0]).Dst())

	// Without a confirmation it expires.
	clk.Advance(StaleTime)
	_, ok = h.Resolve(peerV4)
	require.False(t, ok)
	out = cl.take()
	require.Len(t, out, 1)
	require.Equal(t, netdev.BroadcastMAC(), netdev.Ethernet(out[0]).Dst())
}

func TestHostSetAddrsAnnounces(t *testing.T) {
	h, cl, _, _ := newTestHost(t)
	newV4 := netip.MustParseAddr("10.9.0.5")
	newV6 := netip.MustParseAddr("fd00::5")
	h.SetAddrs([]netip.Addr{hostLL, hostV4, newV4, newV6})
	out := cl.take()
	require.Len(t, out, 2)
	a := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, newV4.AsSlice(), a.SourceProtAddress)
	require.Equal(t, newV4.AsSlice(), a.DstProtAddress)
	checkICMPv6(t, out[1])
	na := gopacket.NewPacket(out[1], layers.LayerTypeEthernet, gopacket.Default).
		Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	require.True(t, na.Override())
	require.False(t, na.Solicited())
	require.Equal(t, newV6.AsSlice(), []byte(na.TargetAddress))

	// The old IPv6 address is gone: no answer for it.
	sn := netdev.SolicitedNodeAddr(hostV6)
	mac, _ := netdev.MulticastMAC(sn)
	cl.handler(ndFrame(t, peerMAC, mac, peerV6, sn, nsMsg(hostV6, &peerMAC), layers.ICMPv6TypeNeighborSolicitation, 255))
	require.Empty(t, cl.take())
}

// TestHostAnnounceRepeats: a new address is announced again as RFC 5227
// (IPv4: ANNOUNCE_NUM 2, ANNOUNCE_INTERVAL 2 s) and RFC 4861 (IPv6: up to
// MAX_NEIGHBOR_ADVERTISEMENT 3, RetransTimer 1 s apart) say, so a peer
// that missed the first (its segment was joined later, a bridge was still
// learning) learns the MAC; an address dropped meanwhile is not announced
// again, and no timer is left once the announcements are done.
func TestHostAnnounceRepeats(t *testing.T) {
	h, cl, clk, _ := newTestHost(t)
	newV4 := netip.MustParseAddr("10.9.0.5")
	newV6 := netip.MustParseAddr("fd00::5")
	gone := netip.MustParseAddr("10.9.0.6")
	h.SetAddrs([]netip.Addr{hostLL, hostV4, hostV6, newV4, newV6, gone})
	announced := func(out [][]byte) []netip.Addr {
		var ips []netip.Addr
		for _, f := range out {
			p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			if a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok {
				require.Equal(t, uint16(layers.ARPRequest), a.Operation)
				require.Equal(t, a.SourceProtAddress, a.DstProtAddress, "gratuitous")
				ip, _ := netip.AddrFromSlice(a.SourceProtAddress)
				ips = append(ips, ip)
				continue
			}
			checkICMPv6(t, f)
			na := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
			require.True(t, na.Override())
			ip, _ := netip.AddrFromSlice(na.TargetAddress)
			ips = append(ips, ip)
		}
		return ips
	}
	require.Equal(t, []netip.Addr{newV4, newV6, gone}, announced(cl.take()))
	h.SetAddrs([]netip.Addr{hostLL, hostV4, hostV6, newV4, newV6})

	steps := []struct {
		after time.Duration
		want  []netip.Addr
	}{
		{999 * time.Millisecond, nil},
		{time.Millisecond, []netip.Addr{newV6}},      // 1 s: the second NA
		{time.Second, []netip.Addr{newV4, newV6}},    // 2 s: the second ARP, the third NA
		{AnnounceInterval + AnnounceIntervalV6, nil}, // done
	}
	for i, s := range steps {
		clk.Advance(s.after)
		require.ElementsMatch(t, s.want, announced(cl.take()), "step %d", i)
	}
	require.Zero(t, clk.Pending(), "a timer outlived the announcements")
	require.Equal(t, uint64(3), h.Stats().ARPRequestsSent)
	require.Equal(t, uint64(3), h.Stats().NASent)

	// Closing stops announcements still due.
	h.Announce(newV4)
	require.Len(t, cl.take(), 1)
	require.NoError(t, h.Close())
	clk.Advance(time.Minute)
	require.Empty(t, cl.take())
}

func TestHostGroupReports(t *testing.T) {
	h, cl, _, _ := newTestHost(t)
	require.NoError(t, h.JoinGroup(netip.MustParseAddr("239.1.1.1")))
	require.NoError(t, h.JoinGroup(netip.MustParseAddr("ff0e::101")))
	require.NoError(t, h.JoinGroup(netip.MustParseAddr("239.1.1.1"))) // counted, no second report
	require.Error(t, h.JoinGroup(peerV4))
	out := cl.take()
	require.Len(t, out, 2)

	p := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default)
	ip4 := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	require.Equal(t, layers.IPProtocolIGMP, ip4.Protocol)
	require.Equal(t, uint8(1), ip4.TTL)
	require.True(t, netdev.IPv4(out[0][netdev.EthernetHeaderLen:]).ChecksumValid())
	igmp := p.Layer(layers.LayerTypeIGMP).(*layers.IGMPv1or2)
	require.Equal(t, layers.IGMPMembershipReportV2, igmp.Type)
	require.Equal(t, net.IP{239, 1, 1, 1}, igmp.GroupAddress.To4())
	require.Equal(t, netdev.MAC{0x01, 0, 0x5e, 1, 1, 1}, netdev.Ethernet(out[0]).Dst())

	p = gopacket.NewPacket(out[1], layers.LayerTypeEthernet, gopacket.Default)
	mld := p.Layer(layers.LayerTypeMLDv2MulticastListenerReport)
	require.NotNil(t, mld, "MLDv2 report: %v", p)
	rep := mld.(*layers.MLDv2MulticastListenerReportMessage)
	require.Len(t, rep.MulticastAddressRecords, 1)
	require.Equal(t, netip.MustParseAddr("ff0e::101").AsSlice(), []byte(rep.MulticastAddressRecords[0].MulticastAddress))
	require.Equal(t, layers.MLDv2MulticastAddressRecordTypeChangeToExcludeMode, rep.MulticastAddressRecords[0].RecordType)
	require.Equal(t, hostLL, netdev.IPv6(out[1][netdev.EthernetHeaderLen:]).Src())

	require.NoError(t, h.LeaveGroup(netip.MustParseAddr("239.1.1.1")))
	require.Empty(t, cl.take())
	require.NoError(t, h.LeaveGroup(netip.MustParseAddr("239.1.1.1")))
	out = cl.take()
	require.Len(t, out, 1)
	require.Equal(t, netdev.MAC{0x01, 0, 0x5e, 0, 0, 2}, netdev.Ethernet(out[0]).Dst())
	require.ErrorIs(t, h.LeaveGroup(netip.MustParseAddr("239.1.1.1")), netdev.ErrNotJoined)
}

// Two hosts on the in-memory fabric find each other over ARP and ND, with
// no fabric address table.
func TestHostsResolveOnFabric(t *testing.T) {
	clk := clock.NewManual()
	fab := fabric.New(clk, 7)
	a := New(fab.NewPort(hostMAC, 1500), hostMAC,
		[]netip.Addr{hostLL, hostV4, hostV6}, clk)
	b := New(fab.NewPort(peerMAC, 1500), peerMAC,
		[]netip.Addr{netdev.LinkLocalFromMAC(peerMAC), peerV4, peerV6}, clk)
	var got [][]byte
	b.SetHandler(func(f []byte) { got = append(got, f) })

	for _, ip := range []netip.Addr{peerV4, peerV6, netdev.LinkLocalFromMAC(peerMAC)} {
		m, ok := a.Resolve(ip)
		require.True(t, ok, "the fabric is synchronous: the reply arrives inside the request (%v)", ip)
		require.Equal(t, peerMAC, m)
	}
	// b learned a from the requests aimed at it.
	for _, ip := range []netip.Addr{hostV4, hostV6} {
		m, ok := b.Neighbour(ip)
		require.True(t, ok, "%v", ip)
		require.Equal(t, hostMAC, m)
	}
	_, ok := a.Resolve(netip.MustParseAddr("10.9.0.200"))
	require.False(t, ok, "nobody answers for a missing host")

	// Data frames pass through.
	require.NoError(t, a.Send(frametest.RawFrame(hostMAC, peerMAC, 42, 50)))
	require.Len(t, got, 1)
	require.Equal(t, byte(42), got[0][netdev.EthernetHeaderLen])
	require.Equal(t, uint64(0), b.Stats().Malformed)
}

// TestHostRoutes: with a routing table (SetRoute) a destination off the
// host's subnet is resolved through its gateway (the ARP asks for the
// gateway, and the gateway's MAC is the answer), and one with no route is
// not asked for at all.
func TestHostRoutes(t *testing.T) {
	h, cl, _, _ := newTestHost(t)
	gw := peerV4
	off := netip.MustParseAddr("10.99.0.1")
	h.SetRoute(netdev.StaticRoutes{OnLink: []netip.Prefix{netip.PrefixFrom(hostV4, 24)}}.Route)
	_, ok := h.Resolve(off)
	require.False(t, ok)
	require.Empty(t, cl.take(), "no route: nothing asked")

	h.SetRoute(netdev.StaticRoutes{OnLink: []netip.Prefix{netip.PrefixFrom(hostV4, 24)}, Gateway4: gw}.Route)
	_, ok = h.Resolve(off)
	require.False(t, ok)
	out := cl.take()
	require.Len(t, out, 1)
	a := gopacket.NewPacket(out[0], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, gw.AsSlice(), a.DstProtAddress, "the gateway is asked for")
	cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, gw, hostMAC, hostV4))
	m, ok := h.Resolve(off)
	require.True(t, ok)
	require.Equal(t, peerMAC, m, "the gateway's MAC")
}

// TestHostResolveCadence: asked every 10 ms (as the connection manager
// polls while rdma_resolve_addr waits), the host sends its ARP requests
// 1 s apart, as Linux's neighbour layer does (retrans_time 1 s, measured
// in the rxe guest: three requests in rdma_resolve_addr's 2 s, at 0, 1.0
// and 2.0 s). It used to send one every 100 ms.
func TestHostResolveCadence(t *testing.T) {
	h, cl, clk, _ := newTestHost(t)
	start := clk.Now()
	var at []time.Duration
	for clk.Now().Sub(start) < 2500*time.Millisecond {
		if _, ok := h.Resolve(peerV4); ok {
			t.Fatal("resolved with no answer")
		}
		for range cl.take() {
			at = append(at, clk.Now().Sub(start))
		}
		clk.Advance(10 * time.Millisecond)
	}
	require.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, at)
}

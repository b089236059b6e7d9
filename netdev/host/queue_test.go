package host

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// dataFrame builds a UDP frame from the host to ip with no destination MAC
// (what the transport sends for an unresolved neighbour), tagged by the
// first payload byte, n payload bytes long.
func dataFrame(t *testing.T, ip netip.Addr, tag byte, n int) []byte {
	t.Helper()
	payload := make([]byte, n)
	payload[0] = tag
	udp := &layers.UDP{SrcPort: 49152, DstPort: 4791}
	eth := &layers.Ethernet{SrcMAC: hostMAC[:], DstMAC: make([]byte, 6)}
	var ipl gopacket.SerializableLayer
	if ip.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		l := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: hostV4.AsSlice(), DstIP: ip.AsSlice()}
		require.NoError(t, udp.SetNetworkLayerForChecksum(l))
		ipl = l
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: hostV6.AsSlice(), DstIP: ip.AsSlice()}
		require.NoError(t, udp.SetNetworkLayerForChecksum(l))
		ipl = l
	}
	return serialize(t, eth, ipl, udp, gopacket.Payload(payload))
}

// tagOf returns a data frame's tag (see dataFrame).
func tagOf(f []byte) byte {
	off := netdev.EthernetHeaderLen + netdev.IPv4HeaderLen + 8
	if netdev.Ethernet(f).EtherType() == netdev.EtherTypeIPv6 {
		off = netdev.EthernetHeaderLen + netdev.IPv6HeaderLen + 8
	}
	return f[off]
}

// split separates what the host sent into data frames (by tag) and
// requests (ARP, neighbour solicitations).
func split(out [][]byte) (data [][]byte, requests int) {
	for _, f := range out {
		switch eth := netdev.Ethernet(f); {
		case eth.EtherType() == netdev.EtherTypeARP:
			requests++
		case eth.EtherType() == netdev.EtherTypeIPv6 && f[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen] == icmp6NS:
			requests++
		default:
			data = append(data, f)
		}
	}
	return data, requests
}

// Frames for a neighbour the host has not resolved wait in its queue and
// go out, oldest first and with the MAC written in, when the answer comes:
// an ARP reply, a gratuitous ARP about it, or a neighbour advertisement.
func TestHostQueueFlushesOnAnswer(t *testing.T) {
	tests := []struct {
		name   string
		peer   netip.Addr
		answer func(t *testing.T) []byte
	}{
		{"ARP reply", peerV4, func(t *testing.T) []byte {
			return arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4)
		}},
		{"gratuitous ARP", peerV4, func(t *testing.T) []byte {
			return arpFrame(t, layers.ARPRequest, peerMAC, netdev.BroadcastMAC(), peerMAC, peerV4, netdev.MAC{}, peerV4)
		}},
		{"solicited NA", peerV6, func(t *testing.T) []byte {
			return ndFrame(t, peerMAC, hostMAC, peerV6, hostV6,
				naMsg(peerV6, naSolicited|naOverride, peerMAC), icmp6NA, 255)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, cl, _, _ := newTestHost(t)
			require.True(t, h.QueuesUnresolved())
			for tag := byte(1); tag <= 2; tag++ {
				require.NoError(t, h.Send(dataFrame(t, tc.peer, tag, 64)))
			}
			data, requests := split(cl.take())
			require.Empty(t, data, "nothing goes out before the answer")
			require.Equal(t, 1, requests, "one request (ProbeInterval)")
			require.Equal(t, Stats{UnresQueued: 2}, unres(h.Stats()))

			cl.handler(tc.answer(t))
			data, _ = split(cl.take())
			require.Len(t, data, 2)
			for i, f := range data {
				require.Equal(t, byte(i+1), tagOf(f), "in the order sent")
				require.Equal(t, peerMAC, netdev.Ethernet(f).Dst())
				require.Equal(t, hostMAC, netdev.Ethernet(f).Src())
			}
			require.Equal(t, Stats{UnresQueued: 2, UnresSent: 2}, unres(h.Stats()))

			// Resolved now: the next frame goes at once.
			require.NoError(t, h.Send(dataFrame(t, tc.peer, 3, 64)))
			data, _ = split(cl.take())
			require.Len(t, data, 1)
			require.Equal(t, peerMAC, netdev.Ethernet(data[0]).Dst())
			require.Equal(t, Stats{UnresQueued: 2, UnresSent: 2}, unres(h.Stats()))
		})
	}
}

// unres keeps only the queue's counters of s.
func unres(s Stats) Stats {
	return Stats{UnresQueued: s.UnresQueued, UnresSent: s.UnresSent, UnresOverflow: s.UnresOverflow, UnresFailed: s.UnresFailed}
}

// The queue holds at most UnresQLen frames and UnresQLenBytes bytes per
// neighbour; the oldest make room for the newest, as in Linux.
func TestHostQueueBound(t *testing.T) {
	tests := []struct {
		name string
		n    int // frames sent
		size int // payload bytes each
		kept []byte
	}{
		{"under the bound", 2, 64, []byte{1, 2}},
		{"at the bound", UnresQLen, 64, []byte{1, 2, 3}},
		{"over the frame bound", 5, 64, []byte{3, 4, 5}},
		{"over the byte bound", 3, UnresQLenBytes / 2, []byte{3}},
		{"larger than the byte bound", 2, UnresQLenBytes + 1, []byte{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, cl, _, _ := newTestHost(t)
			for i := 1; i <= tc.n; i++ {
				require.NoError(t, h.Send(dataFrame(t, peerV4, byte(i), tc.size)))
			}
			require.Equal(t, Stats{UnresQueued: uint64(tc.n), UnresOverflow: uint64(tc.n - len(tc.kept))}, unres(h.Stats()))
			cl.take()
			cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4))
			data, _ := split(cl.take())
			var tags []byte
			for _, f := range data {
				tags = append(tags, tagOf(f))
			}
			require.Equal(t, tc.kept, tags)
			require.EqualValues(t, len(tc.kept), h.Stats().UnresSent)
		})
	}
}

// With no answer, the host asks again RetransTime after its last request,
// and MaxSolicit×RetransTime after the first frame was queued the frames
// are dropped; a late answer finds nothing to send.
func TestHostQueueFailedResolution(t *testing.T) {
	for _, peer := range []netip.Addr{peerV4, peerV6} {
		t.Run(peer.String(), func(t *testing.T) {
			h, cl, clk, _ := newTestHost(t)
			start := clk.Now()
			require.NoError(t, h.Send(dataFrame(t, peer, 1, 64)))
			clk.Advance(RetransTime / 2)
			require.NoError(t, h.Send(dataFrame(t, peer, 2, 64)))
			_, requests := split(cl.take())
			require.Equal(t, 1, requests, "the second send, within ProbeInterval, asks nothing")
			clk.Advance(RetransTime / 2)
			fail := time.Duration(MaxSolicit) * RetransTime
			for at := RetransTime; at < fail; at += RetransTime {
				if at > RetransTime {
					clk.Advance(RetransTime)
				}
				_, requests = split(cl.take())
				require.Equal(t, 1, requests, "RetransTime after the last request (at %v)", at)
				require.Zero(t, h.Stats().UnresFailed)
			}
			clk.Advance(start.Add(fail).Sub(clk.Now()))
			data, requests := split(cl.take())
			require.Empty(t, data)
			require.Zero(t, requests, "no request once resolution failed")
			require.Equal(t, Stats{UnresQueued: 2, UnresFailed: 2}, unres(h.Stats()))
			clk.Advance(10 * RetransTime)
			require.Empty(t, cl.take(), "the timer is not armed with nothing waiting")

			if peer.Is4() {
				cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peer, hostMAC, hostV4))
			} else {
				cl.handler(ndFrame(t, peerMAC, hostMAC, peer, hostV6, naMsg(peer, naSolicited|naOverride, peerMAC), icmp6NA, 255))
			}
			require.Empty(t, cl.take(), "a late answer sends nothing")
			require.Equal(t, Stats{UnresQueued: 2, UnresFailed: 2}, unres(h.Stats()))
		})
	}
}

// The timer retries the neighbours independently: one answered does not
// stop the others' requests, nor their failure.
func TestHostQueueTwoNeighbours(t *testing.T) {
	h, cl, clk, _ := newTestHost(t)
	other := netip.MustParseAddr("10.9.0.3")
	require.NoError(t, h.Send(dataFrame(t, peerV4, 1, 64)))
	require.NoError(t, h.Send(dataFrame(t, other, 2, 64)))
	cl.take()
	cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4))
	data, _ := split(cl.take())
	require.Len(t, data, 1)
	require.Equal(t, byte(1), tagOf(data[0]))
	clk.Advance(RetransTime)
	_, requests := split(cl.take())
	require.Equal(t, 1, requests, "the other is asked again")
	clk.Advance(time.Duration(MaxSolicit-1) * RetransTime)
	require.Equal(t, Stats{UnresQueued: 2, UnresSent: 1, UnresFailed: 1}, unres(h.Stats()))
}

// Frames that cannot be resolved are dropped and counted: no IP
// destination, or a host that is closed (which drops what waits, too).
func TestHostQueueDrops(t *testing.T) {
	h, cl, _, _ := newTestHost(t)
	raw := arpFrame(t, layers.ARPRequest, hostMAC, netdev.MAC{}, hostMAC, hostV4, netdev.MAC{}, peerV4)
	require.NoError(t, h.Send(raw), "an ARP frame with no destination MAC has no IP destination")
	require.Equal(t, Stats{UnresFailed: 1}, unres(h.Stats()))
	require.NoError(t, h.Send(dataFrame(t, peerV4, 1, 64)))
	require.NoError(t, h.Close())
	require.Equal(t, Stats{UnresQueued: 1, UnresFailed: 2}, unres(h.Stats()))
	require.ErrorIs(t, h.Send(dataFrame(t, netip.MustParseAddr("10.9.0.4"), 2, 64)), netdev.ErrClosed)
	cl.take()
	cl.handler(arpFrame(t, layers.ARPReply, peerMAC, hostMAC, peerMAC, peerV4, hostMAC, hostV4))
	data, _ := split(cl.take())
	require.Empty(t, data)
}

//go:build linux

package xdp

import (
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// xdpCase is one frame for the steering program and what it must do with it.
type xdpCase struct {
	name  string
	frame []byte
	roce  bool       // redirect to the XSK (XDP_PASS fallback when none)
	want  xdpCounter // the counter the frame must bump
}

var (
	tMACA = netdev.MAC{0x02, 0, 0, 0, 0, 0xa}
	tMACB = netdev.MAC{0x02, 0, 0, 0, 0, 0xb}
)

func tFrame(src, dst string, dport uint16, payload int) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	dmac := tMACB
	if m, ok := netdev.MulticastMAC(d); ok {
		dmac = m
	}
	hl := netdev.HeaderLen(netdev.UsesIPv6(s, d))
	b := make([]byte, hl+payload)
	for i := hl; i < len(b); i++ {
		b[i] = byte(i)
	}
	if netdev.EncodeRoCEv2(b, netdev.Endpoint{MAC: tMACA, IP: s, Port: 0xc000}, netdev.Endpoint{MAC: dmac, IP: d, Port: dport}, 64, 0, payload) == 0 {
		panic("encode")
	}
	return b
}

func tV4(dport uint16) []byte { return tFrame("10.0.0.1", "10.0.0.2", dport, 64) }
func tV6(dport uint16) []byte { return tFrame("fd00::1", "fd00::2", dport, 64) }

// tEdit returns a copy of b changed by f.
func tEdit(b []byte, f func(b []byte) []byte) []byte { return f(append([]byte(nil), b...)) }

// tVLAN inserts an 802.1Q tag after the MACs.
func tVLAN(b []byte) []byte {
	out := append([]byte(nil), b[:12]...)
	out = append(out, 0x81, 0x00, 0x00, 0x2a)
	return append(out, b[12:]...)
}

func tARP() []byte {
	b := make([]byte, 42)
	netdev.Ethernet(b).SetDst(netdev.BroadcastMAC())
	netdev.Ethernet(b).SetSrc(tMACA)
	netdev.Ethernet(b).SetEtherType(0x0806)
	copy(b[14:], []byte{0, 1, 8, 0, 6, 4, 0, 1})
	return b
}

func tProto(b []byte, v6 bool, proto byte) []byte {
	if v6 {
		b[netdev.EthernetHeaderLen+netdev.IPv6NextHeaderOff] = proto
	} else {
		netdev.IPv4(b[netdev.EthernetHeaderLen:]).SetProtocol(proto)
		netdev.IPv4(b[netdev.EthernetHeaderLen:]).UpdateChecksum()
	}
	return b
}

// tV4Options returns an IPv4 RoCEv2 frame whose header carries 4 bytes of
// options (IHL 6).
func tV4Options() []byte {
	b := tV4(netdev.RoCEv2Port)
	out := append([]byte(nil), b[:netdev.EthernetHeaderLen+netdev.IPv4HeaderLen]...)
	out = append(out, 1, 1, 1, 0) // NOP NOP NOP EOL
	out = append(out, b[netdev.EthernetHeaderLen+netdev.IPv4HeaderLen:]...)
	ip := netdev.IPv4(out[netdev.EthernetHeaderLen:])
	ip.SetHeaderLen(24)
	ip.SetTotalLen(ip.TotalLen() + 4)
	ip.UpdateChecksum()
	return out
}

func xdpCases() []xdpCase {
	v4, v6 := tV4(netdev.RoCEv2Port), tV6(netdev.RoCEv2Port)
	return []xdpCase{
		{"rocev2 ipv4 unicast", v4, true, xdpCntRedirected},
		{"rocev2 ipv4 multicast", tFrame("10.0.0.1", "239.1.2.3", netdev.RoCEv2Port, 64), true, xdpCntRedirected},
		{"rocev2 ipv6 unicast", v6, true, xdpCntRedirected},
		{"rocev2 ipv6 link-local", tFrame("fe80::1", "fe80::2", netdev.RoCEv2Port, 64), true, xdpCntRedirected},
		{"rocev2 ipv6 multicast", tFrame("fd00::1", "ff0e::1:2", netdev.RoCEv2Port, 64), true, xdpCntRedirected},
		{"rocev2 ipv4-mapped gid over ipv6", tFrame("::ffff:10.0.0.1", "fd00::2", netdev.RoCEv2Port, 64), true, xdpCntRedirected},
		{"rocev2 ipv4 with options", tV4Options(), true, xdpCntRedirected},
		{"rocev2 ipv4 vlan", tVLAN(v4), true, xdpCntRedirected},
		{"rocev2 ipv6 vlan", tVLAN(v6), true, xdpCntRedirected},
		{"rocev2 ipv4 4096 mtu", tFrame("10.0.0.1", "10.0.0.2", netdev.RoCEv2Port, 4096+28+4), true, xdpCntRedirected},
		{"rocev2 ipv6 jumbo", tFrame("fd00::1", "fd00::2", netdev.RoCEv2Port, 8900), true, xdpCntRedirected},
		{"rocev2 ipv4 df only", v4, true, xdpCntRedirected}, // EncodeRoCEv2 sets DF
		{"rocev2 empty udp payload", tFrame("10.0.0.1", "10.0.0.2", netdev.RoCEv2Port, 0), true, xdpCntRedirected},

		{"arp", tARP(), false, xdpCntNotIP},
		{"arp vlan", tVLAN(tARP()), false, xdpCntNotIP},
		{"lldp", tEdit(v4, func(b []byte) []byte { netdev.Ethernet(b).SetEtherType(0x88cc); return b }), false, xdpCntNotIP},
		{"qinq outer tag", tEdit(v4, func(b []byte) []byte { netdev.Ethernet(b).SetEtherType(0x88a8); return b }), false, xdpCntNotIP},
		{"double vlan", tVLAN(tVLAN(v4)), false, xdpCntNotIP},
		{"icmp", tEdit(v4, func(b []byte) []byte { return tProto(b, false, 1) }), false, xdpCntNotUDP},
		{"tcp", tEdit(v4, func(b []byte) []byte { return tProto(b, false, 6) }), false, xdpCntNotUDP},
		{"icmpv6", tEdit(v6, func(b []byte) []byte { return tProto(b, true, 58) }), false, xdpCntNotUDP},
		{"ipv6 hop-by-hop", tEdit(v6, func(b []byte) []byte { return tProto(b, true, 0) }), false, xdpCntNotUDP},
		{"udp other port", tV4(4792), false, xdpCntOtherPort},
		{"udp dns", tV4(53), false, xdpCntOtherPort},
		{"udp 4791 as source only", tEdit(tV4(9), func(b []byte) []byte {
			netdev.UDP(b[netdev.EthernetHeaderLen+netdev.IPv4HeaderLen:]).SetSrcPort(netdev.RoCEv2Port)
			return b
		}), false, xdpCntOtherPort},
		{"udp ipv6 other port", tV6(5000), false, xdpCntOtherPort},
		{"ipv4 more fragments", tEdit(v4, func(b []byte) []byte {
			netdev.IPv4(b[netdev.EthernetHeaderLen:]).SetFlagsFragment(netdev.IPv4FlagMoreFragments, 0)
			return b
		}), false, xdpCntFragment},
		{"ipv4 fragment offset", tEdit(v4, func(b []byte) []byte {
			netdev.IPv4(b[netdev.EthernetHeaderLen:]).SetFlagsFragment(0, 1480)
			return b
		}), false, xdpCntFragment},
		{"ipv6 fragment header", tEdit(v6, func(b []byte) []byte { return tProto(b, true, netdev.ProtocolIPv6Fragment) }), false, xdpCntFragment},
		{"ipv4 ihl 4", tEdit(v4, func(b []byte) []byte { b[netdev.EthernetHeaderLen] = 0x44; return b }), false, xdpCntMalformed},
		{"ipv4 ethertype version 6", tEdit(v4, func(b []byte) []byte { b[netdev.EthernetHeaderLen] = 0x65; return b }), false, xdpCntMalformed},
		{"ipv6 ethertype version 4", tEdit(v6, func(b []byte) []byte { b[netdev.EthernetHeaderLen] = 0x45; return b }), false, xdpCntMalformed},

		{"truncated ethernet only", v4[:netdev.EthernetHeaderLen], false, xdpCntTruncated},
		{"truncated vlan tag", tVLAN(v4)[:netdev.EthernetHeaderLen+2], false, xdpCntTruncated},
		{"truncated ipv4 header", v4[:netdev.EthernetHeaderLen+19], false, xdpCntTruncated},
		{"truncated ipv4 options", tV4Options()[:netdev.EthernetHeaderLen+24+4], false, xdpCntTruncated},
		{"truncated ihl 15", tEdit(v4[:netdev.EthernetHeaderLen+40], func(b []byte) []byte { b[netdev.EthernetHeaderLen] = 0x4f; return b }), false, xdpCntTruncated},
		{"truncated udp header", v4[:netdev.EthernetHeaderLen+netdev.IPv4HeaderLen+3], false, xdpCntTruncated},
		{"truncated ipv6 header", v6[:netdev.EthernetHeaderLen+39], false, xdpCntTruncated},
		{"truncated ipv6 udp header", v6[:netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+7], false, xdpCntTruncated},
		{"truncated vlan ipv4", tVLAN(v4)[:netdev.EthernetHeaderLen+netdev.VLANTagLen+10], false, xdpCntTruncated},
	}
}

// runXDPCases runs every case through prog and checks the verdict and that
// exactly the expected counter moved. roceVerdict is what a RoCEv2 frame
// must return: XDP_REDIRECT with a socket in the map, XDP_PASS without.
func runXDPCases(t *testing.T, objs *xdpObjects, roceVerdict uint32, roceCounter xdpCounter) {
	for _, c := range xdpCases() {
		t.Run(c.name, func(t *testing.T) {
			before, err := objs.readCounters()
			require.NoError(t, err)
			ret, err := objs.prog.Run(&ebpf.RunOptions{Data: c.frame})
			require.NoError(t, err)
			want, cnt := uint32(xdpPass), c.want
			if c.roce {
				want, cnt = roceVerdict, roceCounter
			}
			require.Equal(t, want, ret, "verdict")
			after, err := objs.readCounters()
			require.NoError(t, err)
			for i := range after {
				d := after[i] - before[i]
				if xdpCounter(i) == cnt {
					require.Equal(t, uint64(1), d, "counter %s", xdpCounter(i))
				} else {
					require.Zero(t, d, "counter %s", xdpCounter(i))
				}
			}
		})
	}
}

// TestXDPProgramNoSocket runs the table against a program whose XSKMAP is
// empty: RoCEv2 frames take the redirect path (its counter moves) and come
// back XDP_PASS through the fallback, as they would on a queue with no
// socket.
func TestXDPProgramNoSocket(t *testing.T) {
	nettest.RequireRoot(t)
	objs, err := loadXDPObjects()
	require.NoError(t, err)
	defer objs.Close()
	runXDPCases(t, objs, xdpPass, xdpCntNoSocket)
}

// TestXDPProgramRedirect runs the table against the program of a live
// Link (on a veth in a private, unnamed network namespace), whose XSKMAP holds
// the socket at queue 0: RoCEv2 frames return XDP_REDIRECT.
func TestXDPProgramRedirect(t *testing.T) {
	nettest.RequireRoot(t)
	type res struct {
		l   *Link
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		// A child process inherits the namespace of the thread that forks it.
		if out, err := exec.Command("ip", "link", "add", "svxt0", "type", "veth", "peer", "name", "svxt1").CombinedOutput(); err != nil {
			ch <- res{err: fmt.Errorf("ip link add: %v: %s", err, out)}
			return
		}
		l, err := Open("svxt0", Options{})
		ch <- res{l, err}
	}()
	r := <-ch
	require.NoError(t, r.err)
	defer func() { require.NoError(t, r.l.Close()) }()
	runXDPCases(t, r.l.objs, xdpRedirect, xdpCntRedirected)
}

// TestXDPProgramMatchesParseFrame holds the program against ParseFrame:
// every frame ParseFrame accepts as UDP to 4791 is steered, and every
// steered frame that is well formed parses.
func TestXDPProgramMatchesParseFrame(t *testing.T) {
	nettest.RequireRoot(t)
	objs, err := loadXDPObjects()
	require.NoError(t, err)
	defer objs.Close()
	for _, c := range xdpCases() {
		fi, err := netdev.ParseFrame(c.frame)
		parsed := err == nil && fi.DstPort == netdev.RoCEv2Port
		before, _ := objs.readCounters()
		_, err = objs.prog.Run(&ebpf.RunOptions{Data: c.frame})
		require.NoError(t, err)
		after, _ := objs.readCounters()
		steered := after[xdpCntNoSocket] > before[xdpCntNoSocket]
		if parsed {
			require.True(t, steered, "%s: parses as RoCEv2 but is not steered", c.name)
		}
		if steered {
			require.True(t, parsed, "%s: steered but ParseFrame says %v", c.name, err)
		}
	}
}

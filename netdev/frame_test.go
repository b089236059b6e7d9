package netdev

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
)

var (
	macA = MAC{0x02, 0, 0, 0, 0, 0x0a}
	macB = MAC{0x02, 0, 0, 0, 0, 0x0b}
	macC = MAC{0x02, 0, 0, 0, 0, 0x0c}
)

// buildFrame encodes a RoCEv2-style frame with a payload of n bytes
// (0, 1, 2, ...) and returns exactly the frame.
func buildFrame(t testing.TB, src, dst Endpoint, ttl, tos uint8, n int) []byte {
	t.Helper()
	hl := HeaderLen(UsesIPv6(src.IP, dst.IP))
	buf := make([]byte, hl+n)
	for i := range n {
		buf[hl+i] = byte(i)
	}
	got := EncodeRoCEv2(buf, src, dst, ttl, tos, n)
	require.Equal(t, hl, got)
	return buf
}

func ep(mac MAC, ip string, port uint16) Endpoint {
	return Endpoint{MAC: mac, IP: netip.MustParseAddr(ip), Port: port}
}

func TestEncodeParseRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		src, dst Endpoint
		ttl, tos uint8
		n        int
		v6       bool
		srcIP    string // expected parsed addresses
		dstIP    string
	}{
		{"ipv4", ep(macA, "10.0.0.1", 0xc001), ep(macB, "10.0.0.2", RoCEv2Port), 64, 0x68, 100, false, "10.0.0.1", "10.0.0.2"},
		{"ipv4 empty payload", ep(macA, "10.0.0.1", 0xc001), ep(macB, "10.0.0.2", RoCEv2Port), 1, 0, 0, false, "10.0.0.1", "10.0.0.2"},
		{"ipv4 odd payload", ep(macA, "192.168.1.1", 0xffff), ep(macB, "192.168.1.200", RoCEv2Port), 255, 0xff, 1025, false, "192.168.1.1", "192.168.1.200"},
		{"ipv4-mapped", ep(macA, "::ffff:10.0.0.1", 0xc001), ep(macB, "::ffff:10.0.0.2", RoCEv2Port), 64, 0, 64, false, "10.0.0.1", "10.0.0.2"},
		{"ipv6", ep(macA, "fe80::1", 0xc123), ep(macB, "fe80::2", RoCEv2Port), 64, 0x68, 100, true, "fe80::1", "fe80::2"},
		{"ipv6 odd payload", ep(macA, "2001:db8::1", 0xc123), ep(macB, "2001:db8::ffff:2", RoCEv2Port), 1, 3, 4097, true, "2001:db8::1", "2001:db8::ffff:2"},
		{"mixed families go ipv6", ep(macA, "10.0.0.1", 0xc001), ep(macB, "2001:db8::2", RoCEv2Port), 64, 0, 10, true, "::ffff:10.0.0.1", "2001:db8::2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := buildFrame(t, tt.src, tt.dst, tt.ttl, tt.tos, tt.n)
			require.Len(t, frame, HeaderLen(tt.v6)+tt.n)
			fi, err := ParseFrame(frame)
			require.NoError(t, err)
			require.Equal(t, tt.src.MAC, fi.SrcMAC)
			require.Equal(t, tt.dst.MAC, fi.DstMAC)
			require.Equal(t, netip.MustParseAddr(tt.srcIP), fi.Src)
			require.Equal(t, netip.MustParseAddr(tt.dstIP), fi.Dst)
			require.Equal(t, tt.src.Port, fi.SrcPort)
			require.Equal(t, tt.dst.Port, fi.DstPort)
			require.Equal(t, tt.ttl, fi.TTL)
			require.Equal(t, tt.tos, fi.TOS)
			require.Equal(t, tt.v6, fi.IsIPv6())
			require.Equal(t, EthernetHeaderLen, fi.IPOff)
			require.Equal(t, HeaderLen(tt.v6)-UDPHeaderLen, fi.UDPOff)
			require.Equal(t, HeaderLen(tt.v6), fi.PayloadOff)
			require.Equal(t, tt.n, fi.PayloadLen)
			require.Equal(t, len(frame), fi.End())
			for i := range tt.n {
				require.Equal(t, byte(i), frame[fi.PayloadOff+i])
			}
			udp := UDP(frame[fi.UDPOff:])
			if tt.v6 {
				ip := IPv6(frame[fi.IPOff:])
				require.EqualValues(t, 6, ip.Version())
				require.EqualValues(t, UDPHeaderLen+tt.n, ip.PayloadLen())
				require.EqualValues(t, ProtocolUDP, ip.NextHeader())
				require.NotZero(t, udp.Checksum())
				require.True(t, udp.ChecksumValid(fi.Src, fi.Dst))
				frame[len(frame)-1] ^= 0x40
				require.False(t, udp.ChecksumValid(fi.Src, fi.Dst))
			} else {
				ip := IPv4(frame[fi.IPOff:])
				require.EqualValues(t, 4, ip.Version())
				require.Equal(t, IPv4HeaderLen, ip.HeaderLen())
				require.EqualValues(t, IPv4HeaderLen+UDPHeaderLen+tt.n, ip.TotalLen())
				require.Zero(t, ip.ID())
				require.EqualValues(t, IPv4FlagDontFragment, ip.Flags())
				require.True(t, ip.ChecksumValid())
				require.Equal(t, ip.ComputeChecksum(), ip.Checksum())
				require.Zero(t, udp.Checksum())
				require.True(t, udp.ChecksumValid(fi.Src, fi.Dst))
			}
		})
	}
}

// TestEncodeMatchesGopacket holds EncodeRoCEv2 against gopacket's
// serialisation of the same headers, checksums included.
func TestEncodeMatchesGopacket(t *testing.T) {
	payload := []byte("an odd-length RoCEv2 payload!")
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			src, dst := ep(macA, "10.1.2.3", 0xc0de), ep(macB, "10.1.2.4", RoCEv2Port)
			if v6 {
				src, dst = ep(macA, "2001:db8::3", 0xc0de), ep(macB, "2001:db8::4", RoCEv2Port)
			}
			hl := HeaderLen(v6)
			ours := make([]byte, hl+len(payload))
			copy(ours[hl:], payload)
			require.Equal(t, hl, EncodeRoCEv2(ours, src, dst, 37, 0x2a, len(payload)))

			eth := &layers.Ethernet{SrcMAC: src.MAC.HardwareAddr(), DstMAC: dst.MAC.HardwareAddr()}
			udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port), DstPort: layers.UDPPort(dst.Port)}
			var ip gopacket.SerializableLayer
			if v6 {
				eth.EthernetType = layers.EthernetTypeIPv6
				l := &layers.IPv6{Version: 6, TrafficClass: 0x2a, NextHeader: layers.IPProtocolUDP,
					HopLimit: 37, SrcIP: src.IP.AsSlice(), DstIP: dst.IP.AsSlice()}
				require.NoError(t, udp.SetNetworkLayerForChecksum(l))
				ip = l
			} else {
				eth.EthernetType = layers.EthernetTypeIPv4
				l := &layers.IPv4{Version: 4, IHL: 5, TOS: 0x2a, Flags: layers.IPv4DontFragment,
					TTL: 37, Protocol: layers.IPProtocolUDP, SrcIP: src.IP.AsSlice(), DstIP: dst.IP.AsSlice()}
				require.NoError(t, udp.SetNetworkLayerForChecksum(l))
				ip = l
			}
			sb := gopacket.NewSerializeBuffer()
			opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
			require.NoError(t, gopacket.SerializeLayers(sb, opts, eth, ip, udp, gopacket.Payload(payload)))
			theirs := sb.Bytes()
			if !v6 {
				// RoCEv2 over IPv4 sends no UDP checksum.
				UDP(theirs[EthernetHeaderLen+IPv4HeaderLen:]).SetChecksum(0)
			}
			require.Equal(t, theirs, ours)

			// In two steps, as a sender that writes the ICRC in between does.
			split := make([]byte, hl+len(payload))
			copy(split[hl:], payload)
			require.Equal(t, hl, EncodeRoCEv2Headers(split, src, dst, 37, 0x2a, len(payload)))
			require.Zero(t, UDP(split[hl-UDPHeaderLen:]).Checksum(), "headers only: no checksum yet")
			PutUDPChecksum(split, src.IP, dst.IP)
			require.Equal(t, theirs, split)
			if v6 {
				// Whatever the field held before does not matter.
				UDP(split[hl-UDPHeaderLen:]).SetChecksum(0xbeef)
				PutUDPChecksum(split, src.IP, dst.IP)
				require.Equal(t, theirs, split, "again, over a stale checksum")
			}
		})
	}
}

func TestEncodeRejectsShortBuffer(t *testing.T) {
	src, dst := ep(macA, "10.0.0.1", 1), ep(macB, "10.0.0.2", 2)
	buf := make([]byte, HeaderLen(false)+9)
	require.Zero(t, EncodeRoCEv2(buf, src, dst, 64, 0, 10))
	require.Equal(t, make([]byte, len(buf)), buf, "nothing written")
	require.Zero(t, EncodeRoCEv2(buf, src, dst, 64, 0, -1))
	require.Zero(t, EncodeRoCEv2(make([]byte, 70000), src, dst, 64, 0, 65535-20))
	require.Equal(t, HeaderLen(false), EncodeRoCEv2(buf, src, dst, 64, 0, 9))
}

// fixIPv4 recomputes the IPv4 header checksum of a frame built by buildFrame.
func fixIPv4(b []byte) { IPv4(b[EthernetHeaderLen:]).UpdateChecksum() }

func TestParseFrameRejects(t *testing.T) {
	v4 := func() []byte {
		return buildFrame(t, ep(macA, "10.0.0.1", 1000), ep(macB, "10.0.0.2", RoCEv2Port), 64, 0, 40)
	}
	v6 := func() []byte {
		return buildFrame(t, ep(macA, "fe80::1", 1000), ep(macB, "fe80::2", RoCEv2Port), 64, 0, 40)
	}
	ip4 := func(b []byte) IPv4 { return IPv4(b[EthernetHeaderLen:]) }
	ip6 := func(b []byte) IPv6 { return IPv6(b[EthernetHeaderLen:]) }
	udp4 := func(b []byte) UDP { return UDP(b[EthernetHeaderLen+IPv4HeaderLen:]) }
	udp6 := func(b []byte) UDP { return UDP(b[EthernetHeaderLen+IPv6HeaderLen:]) }
	tests := []struct {
		name   string
		frame  func() []byte
		mutate func([]byte) []byte
		want   error
	}{
		{"empty", v4, func(b []byte) []byte { return b[:0] }, ErrTruncated},
		{"short ethernet", v4, func(b []byte) []byte { return b[:13] }, ErrTruncated},
		{"arp ethertype", v4, func(b []byte) []byte { Ethernet(b).SetEtherType(0x0806); return b }, ErrEtherType},
		{"vlan truncated", v4, func(b []byte) []byte { Ethernet(b).SetEtherType(EtherTypeVLAN); return b[:16] }, ErrTruncated},
		{"vlan inner not ip", v4, func(b []byte) []byte {
			Ethernet(b).SetEtherType(EtherTypeVLAN)
			return b // the inner type is now the IPv4 total length, 0x0044
		}, ErrEtherType},
		{"ipv4 header truncated", v4, func(b []byte) []byte { return b[:EthernetHeaderLen+19] }, ErrTruncated},
		{"ipv4 version 6", v4, func(b []byte) []byte { b[EthernetHeaderLen] = 0x65; fixIPv4(b); return b }, ErrIPVersion},
		{"ipv4 ihl 4", v4, func(b []byte) []byte { b[EthernetHeaderLen] = 0x44; return b }, ErrIPHeaderLen},
		{"ipv4 ihl beyond frame", v4, func(b []byte) []byte { b[EthernetHeaderLen] = 0x4f; return b[:EthernetHeaderLen+40] }, ErrTruncated},
		{"ipv4 total length below ihl", v4, func(b []byte) []byte { ip4(b).SetTotalLen(19); fixIPv4(b); return b }, ErrIPHeaderLen},
		{"ipv4 total length beyond frame", v4, func(b []byte) []byte { ip4(b).SetTotalLen(ip4(b).TotalLen() + 1); fixIPv4(b); return b }, ErrIPLength},
		{"ipv4 frame cut", v4, func(b []byte) []byte { return b[:len(b)-1] }, ErrIPLength},
		{"ipv4 bad checksum", v4, func(b []byte) []byte { ip4(b).SetTTL(63); return b }, ErrIPChecksum},
		{"ipv4 more fragments", v4, func(b []byte) []byte { ip4(b).SetFlagsFragment(IPv4FlagMoreFragments, 0); fixIPv4(b); return b }, ErrFragment},
		{"ipv4 fragment offset", v4, func(b []byte) []byte { ip4(b).SetFlagsFragment(0, 1480); fixIPv4(b); return b }, ErrFragment},
		{"ipv4 tcp", v4, func(b []byte) []byte { ip4(b).SetProtocol(6); fixIPv4(b); return b }, ErrNotUDP},
		{"ipv4 no room for udp", v4, func(b []byte) []byte { ip4(b).SetTotalLen(IPv4HeaderLen + 7); fixIPv4(b); return b }, ErrUDPLength},
		{"udp length 7", v4, func(b []byte) []byte { udp4(b).SetLength(7); return b }, ErrUDPLength},
		{"udp length beyond ip", v4, func(b []byte) []byte { udp4(b).SetLength(udp4(b).Length() + 1); return b }, ErrUDPLength},
		{"ipv6 header truncated", v6, func(b []byte) []byte { return b[:EthernetHeaderLen+39] }, ErrTruncated},
		{"ipv6 version 4", v6, func(b []byte) []byte { b[EthernetHeaderLen] = 0x40; return b }, ErrIPVersion},
		{"ipv6 payload beyond frame", v6, func(b []byte) []byte { ip6(b).SetPayloadLen(ip6(b).PayloadLen() + 1); return b }, ErrIPLength},
		{"ipv6 jumbo", v6, func(b []byte) []byte { ip6(b).SetPayloadLen(0); return b }, ErrUDPLength},
		{"ipv6 fragment header", v6, func(b []byte) []byte { ip6(b).SetNextHeader(44); return b }, ErrFragment},
		{"ipv6 hop-by-hop", v6, func(b []byte) []byte { ip6(b).SetNextHeader(0); return b }, ErrNotUDP},
		{"ipv6 tcp", v6, func(b []byte) []byte { ip6(b).SetNextHeader(6); return b }, ErrNotUDP},
		{"ipv6 udp length 0", v6, func(b []byte) []byte { udp6(b).SetLength(0); return b }, ErrUDPLength},
		{"ipv6 udp length beyond ip", v6, func(b []byte) []byte { udp6(b).SetLength(udp6(b).Length() + 2); return b }, ErrUDPLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFrame(tt.mutate(tt.frame()))
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestParseFrameAccepts(t *testing.T) {
	src, dst := ep(macA, "10.0.0.1", 1000), ep(macB, "10.0.0.2", RoCEv2Port)
	t.Run("ethernet padding", func(t *testing.T) {
		f := buildFrame(t, src, dst, 64, 0, 4)
		f = append(f, make([]byte, 60-len(f))...) // padded to the 60-byte minimum
		fi, err := ParseFrame(f)
		require.NoError(t, err)
		require.Equal(t, 4, fi.PayloadLen)
		require.Equal(t, 46, fi.End())
	})
	t.Run("udp length shorter than ip payload trims", func(t *testing.T) {
		f := buildFrame(t, src, dst, 64, 0, 20)
		UDP(f[34:]).SetLength(UDPHeaderLen + 5)
		fi, err := ParseFrame(f)
		require.NoError(t, err)
		require.Equal(t, 5, fi.PayloadLen)
	})
	t.Run("ipv4 options", func(t *testing.T) {
		plain := buildFrame(t, src, dst, 64, 0, 12)
		f := make([]byte, 0, len(plain)+4)
		f = append(f, plain[:34]...)
		f = append(f, 1, 1, 1, 0) // NOP NOP NOP EOL
		f = append(f, plain[34:]...)
		ip := IPv4(f[EthernetHeaderLen:])
		ip.SetHeaderLen(24)
		ip.SetTotalLen(ip.TotalLen() + 4)
		ip.UpdateChecksum()
		fi, err := ParseFrame(f)
		require.NoError(t, err)
		require.Equal(t, 38, fi.UDPOff)
		require.Equal(t, 46, fi.PayloadOff)
		require.Equal(t, 12, fi.PayloadLen)
		require.Equal(t, src.Port, fi.SrcPort)
	})
	t.Run("802.1q tag", func(t *testing.T) {
		plain := buildFrame(t, src, dst, 64, 0, 12)
		f := make([]byte, 0, len(plain)+4)
		f = append(f, plain[:12]...)
		f = binary.BigEndian.AppendUint16(f, EtherTypeVLAN)
		f = binary.BigEndian.AppendUint16(f, 0x6000|42) // PCP 3, VID 42
		f = append(f, plain[12:]...)
		fi, err := ParseFrame(f)
		require.NoError(t, err)
		require.True(t, fi.Tagged)
		require.EqualValues(t, 0x6000|42, fi.VLAN)
		require.Equal(t, 18, fi.IPOff)
		require.Equal(t, 46, fi.PayloadOff)
		require.Equal(t, dst.IP, fi.Dst)
	})
}

func TestParseFrameNoAlloc(t *testing.T) {
	f4 := buildFrame(t, ep(macA, "10.0.0.1", 1000), ep(macB, "10.0.0.2", RoCEv2Port), 64, 0, 256)
	f6 := buildFrame(t, ep(macA, "fe80::1", 1000), ep(macB, "fe80::2", RoCEv2Port), 64, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = ParseFrame(f4)
		_, _ = ParseFrame(f6)
		_, _ = ParseFrame(f4[:20])
	})
	require.Zero(t, allocs)
}

func TestViewsSetGet(t *testing.T) {
	b := make([]byte, 64)
	e := Ethernet(b)
	e.SetDst(macB)
	e.SetSrc(macA)
	e.SetEtherType(EtherTypeIPv6)
	require.Equal(t, macB, e.Dst())
	require.Equal(t, macA, e.Src())
	require.EqualValues(t, EtherTypeIPv6, e.EtherType())
	require.Len(t, e.Payload(), 50)

	ip6 := IPv6(make([]byte, 48))
	ip6.SetVersionClassFlow(0xab, 0xfffff)
	require.EqualValues(t, 6, ip6.Version())
	require.EqualValues(t, 0xab, ip6.TrafficClass())
	require.EqualValues(t, 0xfffff, ip6.FlowLabel())
	ip6.SetTrafficClass(0x12)
	require.EqualValues(t, 0x12, ip6.TrafficClass())
	require.EqualValues(t, 0xfffff, ip6.FlowLabel())
	ip6.SetFlowLabel(0x12345)
	require.EqualValues(t, 0x12, ip6.TrafficClass())
	require.EqualValues(t, 0x12345, ip6.FlowLabel())
	require.EqualValues(t, 6, ip6.Version())
	ip6.SetPayloadLen(8)
	require.Len(t, ip6.Payload(), 8)

	ip4 := IPv4(make([]byte, 28))
	ip4.SetHeaderLen(20)
	ip4.SetTotalLen(28)
	ip4.SetID(0xbeef)
	ip4.SetFlagsFragment(IPv4FlagMoreFragments, 8*100)
	require.EqualValues(t, 0xbeef, ip4.ID())
	require.EqualValues(t, IPv4FlagMoreFragments, ip4.Flags())
	require.Equal(t, 800, ip4.FragmentOffset())
	require.Len(t, ip4.Payload(), 8)

	u := UDP(make([]byte, 12))
	u.SetLength(12)
	require.Len(t, u.Payload(), 4)
}

func TestMulticastMAC(t *testing.T) {
	tests := []struct {
		ip   string
		want string
		ok   bool
	}{
		{"224.0.0.1", "01:00:5e:00:00:01", true},
		{"239.255.255.250", "01:00:5e:7f:ff:fa", true},
		{"224.128.1.2", "01:00:5e:00:01:02", true}, // bit 24 is dropped
		{"::ffff:239.1.2.3", "01:00:5e:01:02:03", true},
		{"ff02::1", "33:33:00:00:00:01", true},
		{"ff0e::1:ff12:3456", "33:33:ff:12:34:56", true},
		{"10.0.0.1", "", false},
		{"fe80::1", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			m, ok := MulticastMAC(netip.MustParseAddr(tt.ip))
			require.Equal(t, tt.ok, ok)
			if ok {
				require.Equal(t, tt.want, m.String())
				require.True(t, m.IsMulticast())
				require.False(t, m.IsBroadcast())
			}
		})
	}
}

func TestMAC(t *testing.T) {
	m, err := ParseMAC("02:00:5e:10:00:01")
	require.NoError(t, err)
	require.Equal(t, MAC{2, 0, 0x5e, 0x10, 0, 1}, m)
	require.Equal(t, "02:00:5e:10:00:01", m.String())
	require.Equal(t, net.HardwareAddr{2, 0, 0x5e, 0x10, 0, 1}, m.HardwareAddr())
	require.False(t, m.IsMulticast())
	_, err = ParseMAC("02:00:5e:10:00:01:02:03")
	require.Error(t, err)
	_, err = ParseMAC("nope")
	require.Error(t, err)
	_, ok := MACFrom(net.HardwareAddr{1, 2, 3})
	require.False(t, ok)
	require.True(t, BroadcastMAC().IsBroadcast())
	require.True(t, BroadcastMAC().IsMulticast())
	require.True(t, MAC{}.IsZero())
}

func TestGID(t *testing.T) {
	tests := []struct {
		ip     string
		gid    string // hex
		str    string
		isIPv4 bool
	}{
		{"10.50.0.1", "00000000000000000000ffff0a320001", "::ffff:10.50.0.1", true},
		{"::ffff:10.50.0.1", "00000000000000000000ffff0a320001", "::ffff:10.50.0.1", true},
		{"fe80::1", "fe800000000000000000000000000001", "fe80::1", false},
		{"2001:db8::5", "20010db8000000000000000000000005", "2001:db8::5", false},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.ip)
			g := GIDFromIP(ip)
			var want GID
			for i := range want {
				var v byte
				for _, c := range tt.gid[2*i : 2*i+2] {
					v <<= 4
					if c >= 'a' {
						v |= byte(c-'a') + 10
					} else {
						v |= byte(c - '0')
					}
				}
				want[i] = v
			}
			require.Equal(t, want, g)
			require.Equal(t, tt.str, g.String())
			require.Equal(t, tt.isIPv4, g.IsIPv4())
			require.Equal(t, ip.Unmap(), g.IP())
			require.Equal(t, g, GIDFromIP(g.IP()))
		})
	}
	require.True(t, GIDFromIP(netip.Addr{}).IsZero())
}

// capturesDir holds the golden captures made by Linux rxe and rdma-core
// tools (a copy of the project's shared captures, kept in the repository so
// that it tests itself).
const capturesDir = "../testdata/captures"

// captureFiles returns the golden captures. It fails the test when there are
// none: they are part of the repository, so a missing file is a broken
// checkout, not a reason to skip.
func captureFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	require.NoError(tb, err)
	require.NotEmpty(tb, files, "no golden captures in %s", capturesDir)
	return files
}

// captureFrames reads every frame from the golden captures made by Linux rxe.
func captureFrames(tb testing.TB) map[string][][]byte {
	tb.Helper()
	files := captureFiles(tb)
	out := make(map[string][][]byte)
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(tb, err)
		r, err := pcapgo.NewReader(f)
		require.NoError(tb, err, name)
		require.Equal(tb, layers.LinkTypeEthernet, r.LinkType(), name)
		for {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(tb, err, name)
			out[filepath.Base(name)] = append(out[filepath.Base(name)], data)
		}
		require.NoError(tb, f.Close())
	}
	return out
}

// TestParseGoldenCaptures parses every frame Linux rxe put on the wire.
func TestParseGoldenCaptures(t *testing.T) {
	for name, frames := range captureFrames(t) {
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, frames)
			for i, f := range frames {
				fi, err := ParseFrame(f)
				require.NoError(t, err, "frame %d", i+1)
				require.EqualValues(t, RoCEv2Port, fi.DstPort, "frame %d", i+1)
				require.True(t, fi.Src.Is4(), "frame %d", i+1)
				// The host's frames in host_ud_probe were captured on the
				// sender before checksum offload filled the UDP checksum in.
				if name != "host_ud_probe.pcap" || fi.Src != netip.MustParseAddr("10.50.0.254") {
					require.True(t, UDP(f[fi.UDPOff:]).ChecksumValid(fi.Src, fi.Dst), "frame %d", i+1)
				}
				// Re-encoding the headers gives a frame that parses the same.
				src := Endpoint{MAC: fi.SrcMAC, IP: fi.Src, Port: fi.SrcPort}
				dst := Endpoint{MAC: fi.DstMAC, IP: fi.Dst, Port: fi.DstPort}
				buf := make([]byte, HeaderLen(false)+fi.PayloadLen)
				copy(buf[HeaderLen(false):], f[fi.PayloadOff:fi.End()])
				require.Equal(t, HeaderLen(false), EncodeRoCEv2(buf, src, dst, fi.TTL, fi.TOS, fi.PayloadLen))
				fi2, err := ParseFrame(buf)
				require.NoError(t, err)
				fi2.IPOff, fi2.UDPOff, fi2.PayloadOff = fi.IPOff, fi.UDPOff, fi.PayloadOff
				require.Equal(t, fi, fi2)
			}
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(buildFrame(f, ep(macA, "10.0.0.1", 0xc000), ep(macB, "10.0.0.2", RoCEv2Port), 64, 0, 30))
	f.Add(buildFrame(f, ep(macA, "fe80::1", 0xc000), ep(macB, "fe80::2", RoCEv2Port), 64, 0, 30))
	f.Add([]byte{})
	for _, frames := range captureFramesNoSkip() {
		for _, fr := range frames {
			f.Add(fr)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		fi, err := ParseFrame(frame)
		if err != nil {
			return
		}
		if !(0 < fi.IPOff && fi.IPOff < fi.UDPOff && fi.UDPOff+UDPHeaderLen == fi.PayloadOff &&
			fi.PayloadLen >= 0 && fi.End() <= len(frame)) {
			t.Fatalf("offsets out of bounds: %+v, len %d", fi, len(frame))
		}
		// Re-encode the same flow and payload: it must parse the same.
		src := Endpoint{MAC: fi.SrcMAC, IP: fi.Src, Port: fi.SrcPort}
		dst := Endpoint{MAC: fi.DstMAC, IP: fi.Dst, Port: fi.DstPort}
		hl := HeaderLen(fi.IsIPv6())
		buf := make([]byte, hl+fi.PayloadLen)
		copy(buf[hl:], frame[fi.PayloadOff:fi.End()])
		if EncodeRoCEv2(buf, src, dst, fi.TTL, fi.TOS, fi.PayloadLen) != hl {
			t.Fatalf("re-encode failed for %+v", fi)
		}
		fi2, err := ParseFrame(buf)
		if err != nil {
			t.Fatalf("re-encoded frame does not parse: %v", err)
		}
		if fi2.Src != fi.Src || fi2.Dst != fi.Dst || fi2.SrcPort != fi.SrcPort || fi2.DstPort != fi.DstPort ||
			fi2.PayloadLen != fi.PayloadLen || fi2.TTL != fi.TTL || fi2.TOS != fi.TOS ||
			fi2.SrcMAC != fi.SrcMAC || fi2.DstMAC != fi.DstMAC {
			t.Fatalf("round trip differs:\n%+v\n%+v", fi, fi2)
		}
	})
}

// captureFramesNoSkip is captureFrames for seeding: missing files seed nothing.
func captureFramesNoSkip() [][][]byte {
	files, _ := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	var out [][][]byte
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			f.Close()
			continue
		}
		var frames [][]byte
		for {
			data, _, err := r.ReadPacketData()
			if err != nil {
				break
			}
			frames = append(frames, data)
		}
		f.Close()
		out = append(out, frames)
	}
	return out
}

func BenchmarkParseFrame(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		src, dst := ep(macA, "10.0.0.1", 0xc000), ep(macB, "10.0.0.2", RoCEv2Port)
		name := "ipv4"
		if v6 {
			src, dst = ep(macA, "fe80::1", 0xc000), ep(macB, "fe80::2", RoCEv2Port)
			name = "ipv6"
		}
		frame := buildFrame(b, src, dst, 64, 0, 1024+28)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, err := ParseFrame(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Headers.Put writes what EncodeRoCEv2Headers writes, byte for byte, for
// IPv4, IPv4-mapped and IPv6 flows, TTLs and TOS values, every payload
// length of a jumbo frame (the IPv4 checksum's carries differ from length
// to length) and some beyond, and refuses what EncodeRoCEv2Headers refuses.
func TestHeadersMatchEncode(t *testing.T) {
	flows := []struct{ src, dst Endpoint }{
		{ep(MAC{2, 0, 0, 0, 0, 1}, "10.0.0.1", 49152), ep(MAC{2, 0, 0, 0, 0, 2}, "10.0.0.2", 4791)},
		{ep(MAC{2, 0, 0, 0, 0, 1}, "255.255.255.254", 0xffff), ep(MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "255.255.255.255", 4791)},
		{ep(MAC{2, 0, 0, 0, 0, 1}, "::ffff:192.168.1.7", 50000), ep(MAC{2, 0, 0, 0, 0, 2}, "192.168.1.8", 4791)},
		{ep(MAC{2, 0, 0, 0, 0, 1}, "fe80::1", 50001), ep(MAC{2, 0, 0, 0, 0, 2}, "fe80::2", 4791)},
	}
	buf := make([]byte, 70000)
	want := make([]byte, 70000)
	for _, f := range flows {
		for _, tt := range []struct{ ttl, tos uint8 }{{64, 0}, {1, 0xff}, {255, 0x68}} {
			var h Headers
			require.False(t, h.Ready())
			h.Init(f.src, f.dst, tt.ttl, tt.tos)
			require.True(t, h.Ready())
			for n := 0; n <= 66000; n += 1 + max(0, n-9100)/7 {
				hl := EncodeRoCEv2Headers(want, f.src, f.dst, tt.ttl, tt.tos, n)
				require.Equal(t, hl, h.Put(buf, n), "%v -> %v len %d", f.src.IP, f.dst.IP, n)
				require.Equal(t, want[:hl], buf[:hl], "%v -> %v len %d", f.src.IP, f.dst.IP, n)
			}
			require.Zero(t, h.Put(buf[:100], 100), "no room for the payload")
			require.Zero(t, h.Put(buf, -1))
		}
	}
}

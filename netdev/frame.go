package netdev

// Ethernet, IPv4, IPv6 and UDP as views over bytes, in the style of gVisor's
// tcpip/header: a view is a named byte slice with big-endian getters and
// setters. A view does not check its length; callers validate first
// (ParseFrame does that for received frames) or build into a buffer they sized
// themselves (EncodeRoCEv2).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Sizes of the headers this package writes and reads.
const (
	EthernetHeaderLen = 14 // dst, src, ethertype; no VLAN tag
	VLANTagLen        = 4  // an 802.1Q tag: TPID 0x8100 and the TCI
	IPv4HeaderLen     = 20 // without options (IHL 5)
	IPv4MaxHeaderLen  = 60 // IHL 15
	IPv6HeaderLen     = 40
	UDPHeaderLen      = 8

	// RoCEv2Port is the IANA UDP destination port of RoCEv2.
	RoCEv2Port = 4791
)

// EtherType values.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100
)

// IP protocol numbers.
const (
	ProtocolIGMP         = 2
	ProtocolUDP          = 17
	ProtocolIPv6Fragment = 44 // the IPv6 fragment extension header
	ProtocolICMPv6       = 58
)

// Field offsets within each header, for code that reads headers without
// the views (the XDP steering program).
const (
	EthDstOff  = 0
	EthSrcOff  = 6
	EthTypeOff = 12

	VLANTCIOff  = 0 // relative to the end of the outer ethertype
	VLANTypeOff = 2

	IPv4VersIHLOff   = 0
	IPv4TOSOff       = 1
	IPv4TotalLenOff  = 2
	IPv4IDOff        = 4
	IPv4FlagsFragOff = 6
	IPv4TTLOff       = 8
	IPv4ProtocolOff  = 9
	IPv4ChecksumOff  = 10
	IPv4SrcOff       = 12
	IPv4DstOff       = 16

	IPv6VersTCFlowOff = 0
	IPv6PayloadLenOff = 4
	IPv6NextHeaderOff = 6
	IPv6HopLimitOff   = 7
	IPv6SrcOff        = 8
	IPv6DstOff        = 24

	UDPSrcPortOff  = 0
	UDPDstPortOff  = 2
	UDPLengthOff   = 4
	UDPChecksumOff = 6
)

// IPv4 flag bits as returned by IPv4.Flags.
const (
	IPv4FlagDontFragment  = 0x2
	IPv4FlagMoreFragments = 0x1
)

// MAC is an Ethernet hardware address. A value type, so frames can be parsed
// without allocating.
type MAC [6]byte

// BroadcastMAC returns ff:ff:ff:ff:ff:ff.
func BroadcastMAC() MAC { return MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }

// MACFrom converts a net.HardwareAddr; ok is false unless it has 6 bytes.
func MACFrom(a net.HardwareAddr) (m MAC, ok bool) {
	if len(a) != len(m) {
		return MAC{}, false
	}
	copy(m[:], a)
	return m, true
}

// ParseMAC parses "aa:bb:cc:dd:ee:ff" (and the other forms net.ParseMAC takes)
// into a 6-byte MAC.
func ParseMAC(s string) (MAC, error) {
	a, err := net.ParseMAC(s)
	if err != nil {
		return MAC{}, err
	}
	m, ok := MACFrom(a)
	if !ok {
		return MAC{}, fmt.Errorf("parse mac %q: not a 6-byte ethernet address", s)
	}
	return m, nil
}

// String formats m as "aa:bb:cc:dd:ee:ff".
func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// HardwareAddr returns m as a newly allocated net.HardwareAddr.
func (m MAC) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(append([]byte(nil), m[:]...)) }

// IsMulticast reports whether the group bit is set (broadcast included).
func (m MAC) IsMulticast() bool { return m[0]&1 != 0 }

// IsBroadcast reports whether m is ff:ff:ff:ff:ff:ff.
func (m MAC) IsBroadcast() bool { return m == BroadcastMAC() }

// IsZero reports whether m is 00:00:00:00:00:00.
func (m MAC) IsZero() bool { return m == MAC{} }

// MulticastMAC maps an IP multicast group to its Ethernet group address:
// 01:00:5e plus the low 23 bits for IPv4 (RFC 1112), 33:33 plus the low 32
// bits for IPv6 (RFC 2464). IPv4-mapped IPv6 groups are treated as IPv4. ok
// is false if ip is not a multicast address.
func MulticastMAC(ip netip.Addr) (m MAC, ok bool) {
	ip = ip.Unmap()
	if !ip.IsMulticast() {
		return MAC{}, false
	}
	if ip.Is4() {
		a := ip.As4()
		return MAC{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}, true
	}
	a := ip.As16()
	return MAC{0x33, 0x33, a[12], a[13], a[14], a[15]}, true
}

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 a GID is an IPv6
// address; an IPv4 address is carried IPv4-mapped (::ffff:a.b.c.d), as Linux
// rxe does.
type GID [16]byte

// GIDFromIP returns the GID for ip: IPv4 addresses are IPv4-mapped, IPv6
// addresses are taken as they are. The zero Addr gives the zero GID.
func GIDFromIP(ip netip.Addr) GID {
	if !ip.IsValid() {
		return GID{}
	}
	return GID(ip.As16())
}

// IP returns the address g stands for, unmapping IPv4-mapped GIDs to IPv4.
func (g GID) IP() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4 reports whether g is an IPv4-mapped GID.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// IsZero reports whether every byte of g is zero.
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as an IPv6 address ("fe80::1", "::ffff:10.0.0.1").
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Ethernet is a view of an Ethernet II header.
type Ethernet []byte

// Dst returns the destination MAC.
func (b Ethernet) Dst() MAC { return MAC(b[EthDstOff : EthDstOff+6]) }

// Src returns the source MAC.
func (b Ethernet) Src() MAC { return MAC(b[EthSrcOff : EthSrcOff+6]) }

// EtherType returns the ethertype (or the 802.1Q TPID if the frame is tagged).
func (b Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(b[EthTypeOff:]) }

// SetDst sets the destination MAC.
func (b Ethernet) SetDst(m MAC) { copy(b[EthDstOff:EthDstOff+6], m[:]) }

// SetSrc sets the source MAC.
func (b Ethernet) SetSrc(m MAC) { copy(b[EthSrcOff:EthSrcOff+6], m[:]) }

// SetEtherType sets the ethertype.
func (b Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(b[EthTypeOff:], t) }

// Payload returns the bytes after the 14-byte header.
func (b Ethernet) Payload() []byte { return b[EthernetHeaderLen:] }

// IPv4 is a view of an IPv4 header (and what follows it).
type IPv4 []byte

// Version returns the IP version nibble.
func (b IPv4) Version() uint8 { return b[IPv4VersIHLOff] >> 4 }

// HeaderLen returns the header length in bytes (IHL * 4).
func (b IPv4) HeaderLen() int { return int(b[IPv4VersIHLOff]&0x0f) * 4 }

// TOS returns the type-of-service byte (DSCP and ECN).
func (b IPv4) TOS() uint8 { return b[IPv4TOSOff] }

// TotalLen returns the total length field: header plus payload.
func (b IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(b[IPv4TotalLenOff:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[IPv4IDOff:]) }

// Flags returns the three flag bits (IPv4FlagDontFragment, IPv4FlagMoreFragments).
func (b IPv4) Flags() uint8 { return b[IPv4FlagsFragOff] >> 5 }

// FragmentOffset returns the fragment offset in bytes.
func (b IPv4) FragmentOffset() int {
	return int(binary.BigEndian.Uint16(b[IPv4FlagsFragOff:])&0x1fff) * 8
}

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[IPv4TTLOff] }

// Protocol returns the payload protocol number.
func (b IPv4) Protocol() uint8 { return b[IPv4ProtocolOff] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[IPv4ChecksumOff:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[IPv4SrcOff : IPv4SrcOff+4])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[IPv4DstOff : IPv4DstOff+4])) }

// Payload returns the bytes after the header, up to the total length. It
// assumes the view holds TotalLen bytes.
func (b IPv4) Payload() []byte { return b[b.HeaderLen():b.TotalLen()] }

// SetHeaderLen sets version 4 and the IHL for a header of n bytes (a multiple
// of 4 in [20, 60]).
func (b IPv4) SetHeaderLen(n int) { b[IPv4VersIHLOff] = 4<<4 | uint8(n/4)&0x0f }

// SetTOS sets the type-of-service byte.
func (b IPv4) SetTOS(v uint8) { b[IPv4TOSOff] = v }

// SetTotalLen sets the total length field.
func (b IPv4) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(b[IPv4TotalLenOff:], v) }

// SetID sets the identification field.
func (b IPv4) SetID(v uint16) { binary.BigEndian.PutUint16(b[IPv4IDOff:], v) }

// SetFlagsFragment sets the three flag bits and the fragment offset in bytes
// (a multiple of 8).
func (b IPv4) SetFlagsFragment(flags uint8, offset int) {
	binary.BigEndian.PutUint16(b[IPv4FlagsFragOff:], uint16(flags&0x7)<<13|uint16(offset/8)&0x1fff)
}

// SetTTL sets the time to live.
func (b IPv4) SetTTL(v uint8) { b[IPv4TTLOff] = v }

// SetProtocol sets the payload protocol number.
func (b IPv4) SetProtocol(v uint8) { b[IPv4ProtocolOff] = v }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[IPv4ChecksumOff:], v) }

// SetSrc sets the source address; ip must be IPv4 or IPv4-mapped.
func (b IPv4) SetSrc(ip netip.Addr) { a := ip.Unmap().As4(); copy(b[IPv4SrcOff:], a[:]) }

// SetDst sets the destination address; ip must be IPv4 or IPv4-mapped.
func (b IPv4) SetDst(ip netip.Addr) { a := ip.Unmap().As4(); copy(b[IPv4DstOff:], a[:]) }

// ComputeChecksum returns the header checksum of the HeaderLen bytes, taking
// the checksum field as zero.
func (b IPv4) ComputeChecksum() uint16 {
	n := b.HeaderLen()
	s := Sum16(b[:IPv4ChecksumOff], 0)
	s = Sum16(b[IPv4ChecksumOff+2:n], s)
	return ^Fold(s)
}

// UpdateChecksum computes the header checksum and stores it.
func (b IPv4) UpdateChecksum() { b.SetChecksum(b.ComputeChecksum()) }

// ChecksumValid reports whether the header checksum is correct.
func (b IPv4) ChecksumValid() bool { return Fold(Sum16(b[:b.HeaderLen()], 0)) == 0xffff }

// IPv6 is a view of an IPv6 fixed header (and what follows it).
type IPv6 []byte

// Version returns the IP version nibble.
func (b IPv6) Version() uint8 { return b[IPv6VersTCFlowOff] >> 4 }

// TrafficClass returns the traffic class (DSCP and ECN).
func (b IPv6) TrafficClass() uint8 {
	return uint8(binary.BigEndian.Uint16(b[IPv6VersTCFlowOff:]) >> 4)
}

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(b[IPv6VersTCFlowOff:]) & 0xfffff
}

// PayloadLen returns the payload length field.
func (b IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(b[IPv6PayloadLenOff:]) }

// NextHeader returns the next header (protocol) number.
func (b IPv6) NextHeader() uint8 { return b[IPv6NextHeaderOff] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[IPv6HopLimitOff] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[IPv6SrcOff : IPv6SrcOff+16])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[IPv6DstOff : IPv6DstOff+16])) }

// Payload returns the bytes after the fixed header, up to the payload length.
func (b IPv6) Payload() []byte { return b[IPv6HeaderLen : IPv6HeaderLen+int(b.PayloadLen())] }

// SetVersionClassFlow writes version 6, the traffic class and the flow label.
func (b IPv6) SetVersionClassFlow(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(b[IPv6VersTCFlowOff:], 6<<28|uint32(tc)<<20|flow&0xfffff)
}

// SetTrafficClass sets the traffic class, keeping version and flow label.
func (b IPv6) SetTrafficClass(tc uint8) {
	v := binary.BigEndian.Uint32(b[IPv6VersTCFlowOff:])
	binary.BigEndian.PutUint32(b[IPv6VersTCFlowOff:], v&^(0xff<<20)|uint32(tc)<<20)
}

// SetFlowLabel sets the flow label, keeping version and traffic class.
func (b IPv6) SetFlowLabel(flow uint32) {
	v := binary.BigEndian.Uint32(b[IPv6VersTCFlowOff:])
	binary.BigEndian.PutUint32(b[IPv6VersTCFlowOff:], v&^0xfffff|flow&0xfffff)
}

// SetPayloadLen sets the payload length field.
func (b IPv6) SetPayloadLen(v uint16) { binary.BigEndian.PutUint16(b[IPv6PayloadLenOff:], v) }

// SetNextHeader sets the next header number.
func (b IPv6) SetNextHeader(v uint8) { b[IPv6NextHeaderOff] = v }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(v uint8) { b[IPv6HopLimitOff] = v }

// SetSrc sets the source address (an IPv4 address is written IPv4-mapped).
func (b IPv6) SetSrc(ip netip.Addr) { a := ip.As16(); copy(b[IPv6SrcOff:], a[:]) }

// SetDst sets the destination address (an IPv4 address is written IPv4-mapped).
func (b IPv6) SetDst(ip netip.Addr) { a := ip.As16(); copy(b[IPv6DstOff:], a[:]) }

// UDP is a view of a UDP header (and what follows it).
type UDP []byte

// SrcPort returns the source port.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[UDPSrcPortOff:]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[UDPDstPortOff:]) }

// Length returns the length field: header plus payload.
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[UDPLengthOff:]) }

// Checksum returns the checksum field.
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[UDPChecksumOff:]) }

// Payload returns the bytes after the header, up to the length field. It
// assumes the view holds Length bytes.
func (b UDP) Payload() []byte { return b[UDPHeaderLen:b.Length()] }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(v uint16) { binary.BigEndian.PutUint16(b[UDPSrcPortOff:], v) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(v uint16) { binary.BigEndian.PutUint16(b[UDPDstPortOff:], v) }

// SetLength sets the length field.
func (b UDP) SetLength(v uint16) { binary.BigEndian.PutUint16(b[UDPLengthOff:], v) }

// SetChecksum sets the checksum field.
func (b UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[UDPChecksumOff:], v) }

// ComputeChecksum returns the UDP checksum over the pseudo-header for src and
// dst (IPv4 when both are IPv4 or IPv4-mapped, else IPv6) and the Length
// bytes of the datagram, taking the checksum field as zero. A computed zero is
// returned as 0xffff, as the wire requires.
func (b UDP) ComputeChecksum(src, dst netip.Addr) uint16 {
	n := int(b.Length())
	s := pseudoHeaderSum(src, dst, uint32(n))
	s = Sum16(b[:UDPChecksumOff], s)
	s = Sum16(b[UDPChecksumOff+2:n], s)
	c := ^Fold(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// ChecksumValid reports whether the checksum field is correct for src and
// dst. A zero field (no checksum, allowed for IPv4 only) is reported valid
// for IPv4 and invalid for IPv6.
func (b UDP) ChecksumValid(src, dst netip.Addr) bool {
	if b.Checksum() == 0 {
		return src.Unmap().Is4() && dst.Unmap().Is4()
	}
	n := int(b.Length())
	s := pseudoHeaderSum(src, dst, uint32(n))
	return Fold(Sum16(b[:n], s)) == 0xffff
}

func pseudoHeaderSum(src, dst netip.Addr, length uint32) uint32 {
	var s uint32
	if src.Unmap().Is4() && dst.Unmap().Is4() {
		a, d := src.Unmap().As4(), dst.Unmap().As4()
		s = Sum16(a[:], 0)
		s = Sum16(d[:], s)
		s += ProtocolUDP + length
	} else {
		a, d := src.As16(), dst.As16()
		s = Sum16(a[:], 0)
		s = Sum16(d[:], s)
		s += length>>16 + length&0xffff + ProtocolUDP
	}
	return s
}

// Sum16 adds b as big-endian 16-bit words (an odd last byte padded with
// zero) to the ones'-complement accumulator s.
func Sum16(b []byte, s uint32) uint32 {
	for len(b) >= 8 {
		s += uint32(binary.BigEndian.Uint16(b)) + uint32(binary.BigEndian.Uint16(b[2:])) +
			uint32(binary.BigEndian.Uint16(b[4:])) + uint32(binary.BigEndian.Uint16(b[6:]))
		s = s&0xffff + s>>16
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// Fold folds a 32-bit accumulator into 16 bits with end-around carry.
func Fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Endpoint is one end of a RoCEv2 flow on an Ethernet segment.
type Endpoint struct {
	MAC  MAC
	IP   netip.Addr
	Port uint16
}

// HeaderLen returns the Ethernet+IP+UDP header length EncodeRoCEv2 writes:
// 42 for IPv4, 62 for IPv6.
func HeaderLen(ipv6 bool) int {
	if ipv6 {
		return EthernetHeaderLen + IPv6HeaderLen + UDPHeaderLen
	}
	return EthernetHeaderLen + IPv4HeaderLen + UDPHeaderLen
}

// UsesIPv6 reports whether a frame between src and dst is carried over IPv6:
// false when both addresses are IPv4 or IPv4-mapped.
func UsesIPv6(src, dst netip.Addr) bool {
	return !(src.Unmap().Is4() && dst.Unmap().Is4())
}

// EncodeRoCEv2 writes the Ethernet, IP and UDP headers at the start of buf for
// a UDP payload of payloadLen bytes that already follows them in buf (at
// offset HeaderLen), and returns the header length.
//
// If both IPs are IPv4 or IPv4-mapped the frame is IPv4: version 4, IHL 5,
// the given TOS and TTL, ID 0, DF set, protocol UDP, header checksum, and UDP
// checksum 0 (RoCEv2 relies on the ICRC). Otherwise it is IPv6 (an IPv4
// address on one side is written IPv4-mapped): the traffic class tos, flow
// label 0, hop limit ttl, next header UDP and a UDP checksum computed over the
// pseudo-header and the payload.
//
// EncodeRoCEv2 returns 0 and writes nothing if buf is shorter than the headers
// plus payloadLen, or payloadLen is negative or too long for the IP length
// fields.
func EncodeRoCEv2(buf []byte, src, dst Endpoint, ttl, tos uint8, payloadLen int) int {
	hl := EncodeRoCEv2Headers(buf, src, dst, ttl, tos, payloadLen)
	if hl != 0 {
		PutUDPChecksum(buf[:hl+payloadLen], src.IP, dst.IP)
	}
	return hl
}

// EncodeRoCEv2Headers is EncodeRoCEv2 with the UDP checksum left 0. Over
// IPv6 the checksum covers the ICRC, so a sender that writes the ICRC after
// the headers calls this, then PutICRC, then PutUDPChecksum: the payload is
// summed once.
func EncodeRoCEv2Headers(buf []byte, src, dst Endpoint, ttl, tos uint8, payloadLen int) int {
	v6 := UsesIPv6(src.IP, dst.IP)
	hl := HeaderLen(v6)
	if payloadLen < 0 || len(buf)-hl < payloadLen {
		return 0
	}
	udpLen := UDPHeaderLen + payloadLen
	eth := Ethernet(buf)
	eth.SetDst(dst.MAC)
	eth.SetSrc(src.MAC)
	var udp UDP
	if v6 {
		if udpLen > 0xffff {
			return 0
		}
		eth.SetEtherType(EtherTypeIPv6)
		ip := IPv6(buf[EthernetHeaderLen:])
		ip.SetVersionClassFlow(tos, 0)
		ip.SetPayloadLen(uint16(udpLen))
		ip.SetNextHeader(ProtocolUDP)
		ip.SetHopLimit(ttl)
		ip.SetSrc(src.IP)
		ip.SetDst(dst.IP)
		udp = UDP(buf[EthernetHeaderLen+IPv6HeaderLen : hl+payloadLen])
	} else {
		if IPv4HeaderLen+udpLen > 0xffff {
			return 0
		}
		eth.SetEtherType(EtherTypeIPv4)
		ip := IPv4(buf[EthernetHeaderLen:])
		ip.SetHeaderLen(IPv4HeaderLen)
		ip.SetTOS(tos)
		ip.SetTotalLen(uint16(IPv4HeaderLen + udpLen))
		ip.SetID(0)
		ip.SetFlagsFragment(IPv4FlagDontFragment, 0)
		ip.SetTTL(ttl)
		ip.SetProtocol(ProtocolUDP)
		ip.SetSrc(src.IP)
		ip.SetDst(dst.IP)
		ip.UpdateChecksum()
		udp = UDP(buf[EthernetHeaderLen+IPv4HeaderLen : hl+payloadLen])
	}
	udp.SetSrcPort(src.Port)
	udp.SetDstPort(dst.Port)
	udp.SetLength(uint16(udpLen))
	udp.SetChecksum(0)
	return hl
}

// Headers is EncodeRoCEv2Headers made once for a flow and copied for each
// packet: what does not change from packet to packet (addresses, ports,
// TTL, TOS) is built in advance, with the IPv4 header checksum summed over
// all of it, so that Put only sets the lengths and folds the total length
// into the checksum. The zero value is not ready (Ready).
type Headers struct {
	b   [EthernetHeaderLen + IPv6HeaderLen + UDPHeaderLen]byte
	n   uint8  // header length: HeaderLen(v6), 0 when not ready
	v6  bool   // the flow is carried over IPv6
	sum uint32 // IPv4: the header's ones' complement sum without its total length
}

// Init builds h for frames from src to dst, as EncodeRoCEv2Headers would.
func (h *Headers) Init(src, dst Endpoint, ttl, tos uint8) {
	*h = Headers{}
	h.v6 = UsesIPv6(src.IP, dst.IP)
	n := HeaderLen(h.v6)
	if EncodeRoCEv2Headers(h.b[:], src, dst, ttl, tos, 0) != n {
		return
	}
	if !h.v6 {
		ip := IPv4(h.b[EthernetHeaderLen:])
		ip.SetTotalLen(0)
		ip.SetChecksum(0)
		h.sum = Sum16(ip[:IPv4HeaderLen], 0)
	}
	h.n = uint8(n)
}

// Ready reports whether Init built h.
func (h *Headers) Ready() bool { return h.n != 0 }

// Put is EncodeRoCEv2Headers(buf, src, dst, ttl, tos, payloadLen) for the
// endpoints and fields h was built for; h must be Ready.
func (h *Headers) Put(buf []byte, payloadLen int) int {
	hl := int(h.n)
	if payloadLen < 0 || len(buf)-hl < payloadLen {
		return 0
	}
	udpLen := UDPHeaderLen + payloadLen
	copy(buf[:hl], h.b[:hl])
	if h.v6 {
		if udpLen > 0xffff {
			return 0
		}
		IPv6(buf[EthernetHeaderLen:]).SetPayloadLen(uint16(udpLen))
	} else {
		total := IPv4HeaderLen + udpLen
		if total > 0xffff {
			return 0
		}
		ip := IPv4(buf[EthernetHeaderLen:])
		ip.SetTotalLen(uint16(total))
		ip.SetChecksum(^Fold(h.sum + uint32(total)))
	}
	UDP(buf[hl-UDPHeaderLen:]).SetLength(uint16(udpLen))
	return hl
}

// PutUDPChecksum fills in the UDP checksum of frame, which
// EncodeRoCEv2Headers built between src and dst and which ends with its
// payload: over IPv6, where it is required, the checksum of the
// pseudo-header and the datagram; over IPv4 it stays 0, as RoCEv2 senders
// leave it.
func PutUDPChecksum(frame []byte, src, dst netip.Addr) {
	if !UsesIPv6(src, dst) {
		return
	}
	udp := UDP(frame[EthernetHeaderLen+IPv6HeaderLen:])
	udp.SetChecksum(udp.ComputeChecksum(src, dst)) // it skips the old value
}

// Errors ParseFrame returns. They are plain sentinels, never wrapped, so the
// receive path does not allocate; a caller counts them as drop reasons.
var (
	ErrTruncated    = errors.New("netdev: frame truncated")
	ErrEtherType    = errors.New("netdev: ethertype is not IPv4 or IPv6")
	ErrIPVersion    = errors.New("netdev: ip version does not match ethertype")
	ErrIPHeaderLen  = errors.New("netdev: bad ipv4 header length")
	ErrIPLength     = errors.New("netdev: ip length exceeds frame")
	ErrIPChecksum   = errors.New("netdev: bad ipv4 header checksum")
	ErrFragment     = errors.New("netdev: ip fragment")
	ErrNotUDP       = errors.New("netdev: ip payload is not udp")
	ErrUDPLength    = errors.New("netdev: bad udp length")
	ErrFrameTooLong = errors.New("netdev: frame longer than mtu")
)

// FrameInfo describes a parsed Ethernet+IP+UDP frame. Offsets index the frame
// given to ParseFrame; the IP packet is frame[IPOff:PayloadOff+PayloadLen]
// (Ethernet padding excluded).
type FrameInfo struct {
	DstMAC, SrcMAC   MAC
	VLAN             uint16 // the 802.1Q TCI if Tagged
	Tagged           bool
	Src, Dst         netip.Addr // IPv4 addresses as IPv4 (not mapped)
	SrcPort, DstPort uint16
	TOS              uint8  // IPv4 TOS or IPv6 traffic class
	TTL              uint8  // IPv4 TTL or IPv6 hop limit
	FlowLabel        uint32 // IPv6 only
	IPOff            int
	UDPOff           int
	PayloadOff       int
	PayloadLen       int
}

// IsIPv6 reports whether the frame was carried over IPv6.
func (fi *FrameInfo) IsIPv6() bool { return fi.Src.Is6() }

// End returns the offset just past the UDP payload (where padding starts).
func (fi *FrameInfo) End() int { return fi.PayloadOff + fi.PayloadLen }

// ParseFrame validates an Ethernet II frame carrying UDP over IPv4 or IPv6 and
// describes it. One 802.1Q tag is skipped. It checks the ethertype, the IP
// version, the IPv4 IHL and header checksum, that the IP length fits the frame
// (trailing Ethernet padding is ignored), that the packet is not a fragment,
// that the protocol is UDP (IPv6 extension headers are not supported), and
// that the UDP length is at least 8 and fits the IP payload (a shorter UDP
// length trims the payload, as Linux does). The UDP checksum is not checked
// (see UDP.ChecksumValid); RoCEv2 relies on the ICRC.
//
// It returns one of the Err* sentinels above on failure and never allocates.
func ParseFrame(frame []byte) (FrameInfo, error) {
	var fi FrameInfo
	if len(frame) < EthernetHeaderLen {
		return fi, ErrTruncated
	}
	eth := Ethernet(frame)
	fi.DstMAC = eth.Dst()
	fi.SrcMAC = eth.Src()
	et := eth.EtherType()
	off := EthernetHeaderLen
	if et == EtherTypeVLAN {
		if len(frame) < EthernetHeaderLen+VLANTagLen {
			return fi, ErrTruncated
		}
		fi.Tagged = true
		fi.VLAN = binary.BigEndian.Uint16(frame[off+VLANTCIOff:])
		et = binary.BigEndian.Uint16(frame[off+VLANTypeOff:])
		off += VLANTagLen
	}
	fi.IPOff = off
	rest := frame[off:]
	var udpMax int // bytes of IP payload available to UDP
	switch et {
	case EtherTypeIPv4:
		if len(rest) < IPv4HeaderLen {
			return fi, ErrTruncated
		}
		ip := IPv4(rest)
		if ip.Version() != 4 {
			return fi, ErrIPVersion
		}
		hl := ip.HeaderLen()
		if hl < IPv4HeaderLen {
			return fi, ErrIPHeaderLen
		}
		if hl > len(rest) {
			return fi, ErrTruncated
		}
		tl := int(ip.TotalLen())
		if tl < hl {
			return fi, ErrIPHeaderLen
		}
		if tl > len(rest) {
			return fi, ErrIPLength
		}
		if !ip.ChecksumValid() {
			return fi, ErrIPChecksum
		}
		if ip.Flags()&IPv4FlagMoreFragments != 0 || ip.FragmentOffset() != 0 {
			return fi, ErrFragment
		}
		if ip.Protocol() != ProtocolUDP {
			return fi, ErrNotUDP
		}
		fi.Src, fi.Dst = ip.Src(), ip.Dst()
		fi.TOS, fi.TTL = ip.TOS(), ip.TTL()
		fi.UDPOff = off + hl
		udpMax = tl - hl
	case EtherTypeIPv6:
		if len(rest) < IPv6HeaderLen {
			return fi, ErrTruncated
		}
		ip := IPv6(rest)
		if ip.Version() != 6 {
			return fi, ErrIPVersion
		}
		pl := int(ip.PayloadLen())
		if IPv6HeaderLen+pl > len(rest) {
			return fi, ErrIPLength
		}
		if ip.NextHeader() == ProtocolIPv6Fragment {
			return fi, ErrFragment
		}
		if ip.NextHeader() != ProtocolUDP {
			return fi, ErrNotUDP
		}
		fi.Src, fi.Dst = ip.Src(), ip.Dst()
		fi.TOS, fi.TTL = ip.TrafficClass(), ip.HopLimit()
		fi.FlowLabel = ip.FlowLabel()
		fi.UDPOff = off + IPv6HeaderLen
		udpMax = pl
	default:
		return fi, ErrEtherType
	}
	if udpMax < UDPHeaderLen {
		return fi, ErrUDPLength
	}
	udp := UDP(frame[fi.UDPOff:])
	ul := int(udp.Length())
	if ul < UDPHeaderLen || ul > udpMax {
		return fi, ErrUDPLength
	}
	fi.SrcPort, fi.DstPort = udp.SrcPort(), udp.DstPort()
	fi.PayloadOff = fi.UDPOff + UDPHeaderLen
	fi.PayloadLen = ul - UDPHeaderLen
	return fi, nil
}

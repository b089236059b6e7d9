package transport

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softverbs/softverbs/internal/crc32x"
)

// The invariant CRC of RoCEv2 (IBTA annex A17, as Linux rxe computes it) is
// the Ethernet CRC-32 (IEEE polynomial, reflected, initial value and final
// XOR all ones: crc32.ChecksumIEEE) over
//
//	8 bytes of 0xFF                 in place of the InfiniBand LRH
//	the IP header                   IPv4: TOS, TTL and header checksum set to 1s;
//	                                IPv6: traffic class, flow label and hop limit set to 1s
//	the UDP header                  checksum set to 1s
//	the BTH                         byte 4 (FECN, BECN, reserved) set to 1s
//	everything after the BTH        extension headers, payload, pad
//
// and it is carried after the pad as the CRC value in little-endian byte
// order (the CRC's low byte first), unlike every other RoCE field.

const (
	ipv4MinHdrLen = 20
	ipv6HdrLen    = 40
	udpHdrLen     = 8
	ipProtoUDP    = 17
)

// icrcHdrMax is the longest masked prefix: IPv4 with options, UDP, BTH.
const icrcHdrMax = 60 + udpHdrLen + BTHLen

// icrcSeed is the CRC of the 8 bytes of ones that stand for the LRH.
var icrcSeed = crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// icrcOr holds the bytes ORed into the start of a packet to set its variant
// fields to ones: index 0 for IPv6, index IHL (5 to 11) for IPv4 headers
// whose masked fields all lie in the first 64 bytes.
var icrcOr = func() (m [12][64]byte) {
	set := func(o *[64]byte, ipLen int) {
		o[ipLen+6] = 0xFF // UDP checksum
		o[ipLen+7] = 0xFF
		o[ipLen+udpHdrLen+bthResv8a] = 0xFF // BTH FECN, BECN, reserved
	}
	v6 := &m[0]
	v6[0] = 0x0F // traffic class, high nibble
	v6[1] = 0xFF // traffic class, low nibble; flow label
	v6[2] = 0xFF
	v6[3] = 0xFF
	v6[7] = 0xFF // hop limit
	set(v6, ipv6HdrLen)
	for ihl := 5; ihl < len(m); ihl++ {
		v4 := &m[ihl]
		v4[1] = 0xFF // TOS: DSCP and ECN
		v4[8] = 0xFF // TTL
		v4[10] = 0xFF
		v4[11] = 0xFF // header checksum
		set(v4, ihl*4)
	}
	return m
}()

// ICRC computes the invariant CRC of a RoCEv2 packet. ipPacket starts at the
// IP header (IPv4 or IPv6) and ends before the 4 ICRC bytes. It returns an
// error carrying DropBadHeader if the IP header is not IPv4/IPv6 over UDP,
// or DropTruncated if the packet is too short to hold a BTH. The UDP port is
// not checked. ICRC does not allocate or modify ipPacket.
func ICRC(ipPacket []byte) (uint32, error) {
	ip := ipPacket
	if len(ip) < 1 {
		return 0, DropTruncated.Err()
	}
	var ipLen int
	v6 := false
	switch ip[0] >> 4 {
	case 4:
		ipLen = int(ip[0]&0x0F) * 4
		if ipLen < ipv4MinHdrLen {
			return 0, DropBadHeader.Err()
		}
		if len(ip) >= 10 && ip[9] != ipProtoUDP {
			return 0, DropBadHeader.Err()
		}
	case 6:
		ipLen, v6 = ipv6HdrLen, true
		if len(ip) >= 7 && ip[6] != ipProtoUDP {
			return 0, DropBadHeader.Err()
		}
	default:
		return 0, DropBadHeader.Err()
	}
	n := ipLen + udpHdrLen + BTHLen
	if len(ip) < n {
		return 0, DropTruncated.Err()
	}
	if n <= len(icrcOr[0]) {
		i := 0 // IPv6
		if !v6 {
			i = ipLen / 4
		}
		return crc32x.UpdateOr(icrcSeed, ip, &icrcOr[i]), nil
	}
	// IPv4 with long options: mask a copy of the headers.
	var buf [icrcHdrMax]byte
	h := buf[:n]
	copy(h, ip)
	if v6 {
		h[0] |= 0x0F // traffic class, high nibble
		h[1] = 0xFF  // traffic class, low nibble; flow label
		h[2] = 0xFF
		h[3] = 0xFF
		h[7] = 0xFF // hop limit
	} else {
		h[1] = 0xFF // TOS: DSCP and ECN
		h[8] = 0xFF // TTL
		h[10] = 0xFF
		h[11] = 0xFF // header checksum
	}
	h[ipLen+6] = 0xFF // UDP checksum
	h[ipLen+7] = 0xFF
	h[ipLen+udpHdrLen+bthResv8a] = 0xFF // BTH FECN, BECN, reserved
	// The masked copy is on the stack: Slice8 keeps it there.
	return crc32x.Update(crc32x.Slice8(icrcSeed, h), ip[n:]), nil
}

// CheckICRC reports whether the last 4 bytes of pkt, a RoCEv2 packet from
// the IP header through the ICRC, are its correct invariant CRC. It is false
// for anything malformed.
func CheckICRC(pkt []byte) bool {
	if len(pkt) < ICRCLen {
		return false
	}
	n := len(pkt) - ICRCLen
	crc, err := ICRC(pkt[:n])
	return err == nil && crc == binary.LittleEndian.Uint32(pkt[n:])
}

// PutICRC computes the invariant CRC of pkt, a RoCEv2 packet from the IP
// header whose last 4 bytes are room for the ICRC, and writes it there. The
// IP and UDP checksums may be filled in before or after: they are masked.
func PutICRC(pkt []byte) error {
	if len(pkt) < ICRCLen {
		return DropTruncated.Err()
	}
	n := len(pkt) - ICRCLen
	crc, err := ICRC(pkt[:n])
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[n:], crc)
	return nil
}

package netdev

import (
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

// BTHLen is the length of the IBA base transport header, which the ICRC
// covers; bthResv8a is the offset of its FECN/BECN/reserved byte.
const (
	BTHLen    = 12
	bthResv8a = 4
)

// icrcSeed is the CRC of the 8 bytes of ones that stand for the LRH.
var icrcSeed = crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// maskVariant sets to ones, in h (a packet from its IP header, at least
// through the BTH), the fields the ICRC does not cover. ipLen is the IP
// header's length. Setting a byte to ones is ORing it with 0xFF, so on a
// zeroed array it writes the mask to OR in.
func maskVariant(h []byte, ipLen int, v6 bool) {
	if v6 {
		// Version (4 bits) is covered; traffic class (8) and flow label
		// (20) are not.
		h[IPv6VersTCFlowOff] |= 0x0F
		h[IPv6VersTCFlowOff+1] = 0xFF
		h[IPv6VersTCFlowOff+2] = 0xFF
		h[IPv6VersTCFlowOff+3] = 0xFF
		h[IPv6HopLimitOff] = 0xFF
	} else {
		h[IPv4TOSOff] = 0xFF // DSCP and ECN
		h[IPv4TTLOff] = 0xFF
		h[IPv4ChecksumOff] = 0xFF
		h[IPv4ChecksumOff+1] = 0xFF
	}
	h[ipLen+UDPChecksumOff] = 0xFF
	h[ipLen+UDPChecksumOff+1] = 0xFF
	h[ipLen+UDPHeaderLen+bthResv8a] = 0xFF // BTH FECN, BECN, reserved
}

// icrcOr holds the masks crc32x.UpdateOr ORs into the first 64 bytes:
// index 0 for IPv6, index IHL for IPv4 headers of IHL 5 to 11 (whose
// headers through the BTH fit in 64 bytes).
var icrcOr = func() (m [12][64]byte) {
	maskVariant(m[0][:], IPv6HeaderLen, true)
	for ihl := 5; ihl < len(m); ihl++ {
		maskVariant(m[ihl][:], ihl*4, false)
	}
	return m
}()

// ICRC computes the invariant CRC of a RoCEv2 packet. ip starts at the IP
// header (IPv4 or IPv6) and ends before the 4 ICRC bytes. Errors:
// ErrIPVersion or ErrIPHeaderLen for a header that is not IPv4/IPv6,
// ErrNotUDP if the IP payload is not UDP, ErrTruncated if ip is too short
// to hold a BTH. The UDP port is not checked. ICRC does not allocate or
// modify ip.
func ICRC(ip []byte) (uint32, error) {
	or, err := icrcMask(ip)
	if err != nil {
		return 0, err
	}
	if or != nil {
		return crc32x.UpdateOr(icrcSeed, ip, or), nil
	}
	return icrcLongOptions(ip), nil
}

// ICRCCopy is ICRC of ip[:at+len(body)] after body is copied to ip[at:], in
// one pass over body: the sending side of a packet whose payload goes from
// memory into the frame as its ICRC is made. ip holds the headers before
// at, which must reach past the BTH.
func ICRCCopy(ip []byte, at int, body []byte) (uint32, error) {
	or, err := icrcMask(ip[:at])
	if err != nil {
		return 0, err
	}
	if or != nil {
		return crc32x.CopyUpdateOr(icrcSeed, ip, at, body, or), nil
	}
	copy(ip[at:], body)
	return icrcLongOptions(ip[:at+len(body)]), nil
}

// ICRCCopyOut is ICRC of ip with ip[at:] copied to dst as it is read, in
// one pass: the receiving side of ICRCCopy, for a packet whose payload at
// at goes out of the frame as its ICRC is checked. dst must have room for
// len(ip)-at bytes.
func ICRCCopyOut(ip []byte, at int, dst []byte) (uint32, error) {
	or, err := icrcMask(ip[:at])
	if err != nil {
		return 0, err
	}
	if or != nil {
		return crc32x.CheckCopy(icrcSeed, ip, at, dst, or), nil
	}
	copy(dst, ip[at:])
	return icrcLongOptions(ip), nil
}

// icrcMask checks that ip starts with an IPv4 or IPv6 header carrying UDP
// and holds a BTH, and returns the mask of its variant fields for
// crc32x.UpdateOr, or nil for an IPv4 header too long for one
// (icrcLongOptions).
func icrcMask(ip []byte) (*[64]byte, error) {
	if len(ip) < 1 {
		return nil, ErrTruncated
	}
	var ipLen int
	v6 := false
	switch ip[0] >> 4 {
	case 4:
		ipLen = int(ip[0]&0x0F) * 4
		if ipLen < IPv4HeaderLen {
			return nil, ErrIPHeaderLen
		}
		if len(ip) > IPv4ProtocolOff && ip[IPv4ProtocolOff] != ProtocolUDP {
			return nil, ErrNotUDP
		}
	case 6:
		ipLen, v6 = IPv6HeaderLen, true
		if len(ip) > IPv6NextHeaderOff && ip[IPv6NextHeaderOff] != ProtocolUDP {
			return nil, ErrNotUDP
		}
	default:
		return nil, ErrIPVersion
	}
	if len(ip) < ipLen+UDPHeaderLen+BTHLen {
		return nil, ErrTruncated
	}
	if v6 {
		return &icrcOr[0], nil
	}
	if ihl := ipLen / 4; ihl < len(icrcOr) {
		return &icrcOr[ihl], nil
	}
	return nil, nil
}

// icrcLongOptions is ICRC for IPv4 with long options, which icrcMask has
// checked: it masks a copy of the headers (on the stack: Slice8 keeps it
// there).
func icrcLongOptions(ip []byte) uint32 {
	ipLen := int(ip[0]&0x0F) * 4
	var buf [60 + UDPHeaderLen + BTHLen]byte
	h := buf[:ipLen+UDPHeaderLen+BTHLen]
	copy(h, ip)
	maskVariant(h, ipLen, false)
	return crc32x.Update(crc32x.Slice8(icrcSeed, h), ip[len(h):])
}

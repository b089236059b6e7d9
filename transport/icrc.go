package transport

import (
	"encoding/binary"
	"errors"

	"github.com/softverbs/softverbs/netdev"
)

// ICRC computes the invariant CRC of a RoCEv2 packet (netdev.ICRC has the
// rules). ipPacket starts at the IP header (IPv4 or IPv6) and ends before
// the 4 ICRC bytes. It returns an error carrying DropBadHeader if the IP
// header is not IPv4/IPv6 over UDP, or DropTruncated if the packet is too
// short to hold a BTH. The UDP port is not checked. ICRC does not allocate
// or modify ipPacket.
func ICRC(ipPacket []byte) (uint32, error) {
	crc, err := netdev.ICRC(ipPacket)
	if err != nil {
		if errors.Is(err, netdev.ErrTruncated) {
			return 0, DropTruncated.Err()
		}
		return 0, DropBadHeader.Err()
	}
	return crc, nil
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

// PutICRCCopy is PutICRC after copying body into pkt at at, in one pass
// over body (netdev.ICRCCopy): body fills pkt up to the ICRC's room, and
// pkt holds the headers, through the BTH at least, before at.
func PutICRCCopy(pkt []byte, at int, body []byte) error {
	n := len(pkt) - ICRCLen
	if n < at || n-at != len(body) {
		return DropTruncated.Err()
	}
	crc, err := netdev.ICRCCopy(pkt[:n], at, body)
	if err != nil {
		if errors.Is(err, netdev.ErrTruncated) {
			return DropTruncated.Err()
		}
		return DropBadHeader.Err()
	}
	binary.LittleEndian.PutUint32(pkt[n:], crc)
	return nil
}

// CheckICRCCopy is CheckICRC of pkt with pkt[at:] up to the ICRC copied
// to dst in the same pass (netdev.ICRCCopyOut). dst is written whatever
// the answer.
func CheckICRCCopy(pkt []byte, at int, dst []byte) bool {
	n := len(pkt) - ICRCLen
	if n < at || len(dst) < n-at {
		return false
	}
	crc, err := netdev.ICRCCopyOut(pkt[:n], at, dst)
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

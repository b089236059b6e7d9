package udp

// The UDP-socket link receives only UDP payloads: the kernel keeps the IP
// header, and with it the IPv4 identification field and flags, which the
// RoCEv2 ICRC covers. The link rebuilds the header with ID 0 and DF set
// (what softverbs and any sender through an unconnected DF socket put on
// the wire). For other senders, Linux rxe among them (rxe sends DF and an
// incrementing, non-zero ID), it recovers the ID from the ICRC itself: a
// CRC is linear over GF(2), so for a fixed packet length flipping bits of
// the ID changes the CRC by a linear function of those bits, and the 17
// unknown bits (ID and DF) fit in one burst of 24 bits, which CRC-32 maps
// injectively. Solving costs 17 vectors per packet length (cached) and a
// 32-step elimination per packet. The price is integrity: a corrupted
// packet whose CRC error happens to lie in the span of those 17 vectors is
// accepted with a wrong ID, so the ICRC guards rxe-originated packets with
// about 15 bits instead of 32 (1 in 32768 random corruptions pass).

import (
	"encoding/binary"
	"hash/crc32"
	"sync"

	"github.com/softverbs/softverbs/netdev"
)

// idUnknowns is the number of header bits solved for: 16 of ID, DF.
const idUnknowns = 17

// idBasis is, for one packet length, the CRC change each unknown bit
// causes, reduced to an XOR basis indexed by the highest set bit.
type idBasis struct {
	vec  [32]uint32
	mask [32]uint32 // which unknown bits make up vec[i]
	has  [32]bool
}

var zeros [1 << 16]byte

// idBases caches bases by the CRC'd length (IP header to the end of the
// payload). Lengths are few in practice (full-MTU packets, ACKs, a few
// sizes of short messages).
var idBases struct {
	sync.Mutex
	m map[int]*idBasis
}

func basisFor(n int) *idBasis {
	idBases.Lock()
	b := idBases.m[n]
	idBases.Unlock()
	if b != nil {
		return b
	}
	b = &idBasis{}
	// The message is 8 bytes of LRH then the IP packet; the ID is at IP
	// bytes 4-5, DF is bit 0x40 of byte 6.
	for u := 0; u < idUnknowns; u++ {
		var pos int
		var v byte
		switch {
		case u < 8:
			pos, v = 5, 1<<u
		case u < 16:
			pos, v = 4, 1<<(u-8)
		default:
			pos, v = 6, 0x40
		}
		// The raw CRC (zero start, no final inversion) of the single
		// flipped bit followed by the rest of the packet as zeros.
		s := crc32.IEEETable[v]
		s = ^crc32.Update(^s, crc32.IEEETable, zeros[:n-pos-1])
		b.insert(s, 1<<u)
	}
	idBases.Lock()
	if idBases.m == nil || len(idBases.m) >= 1024 {
		idBases.m = make(map[int]*idBasis)
	}
	idBases.m[n] = b
	idBases.Unlock()
	return b
}

func (b *idBasis) insert(v, m uint32) {
	for i := 31; i >= 0; i-- {
		if v&(1<<i) == 0 {
			continue
		}
		if !b.has[i] {
			b.vec[i], b.mask[i], b.has[i] = v, m, true
			return
		}
		v ^= b.vec[i]
		m ^= b.mask[i]
	}
}

// solve returns the unknown bits whose flips change the CRC by delta.
func (b *idBasis) solve(delta uint32) (uint32, bool) {
	var m uint32
	for i := 31; i >= 0; i-- {
		if delta&(1<<i) == 0 {
			continue
		}
		if !b.has[i] {
			return 0, false
		}
		delta ^= b.vec[i]
		m ^= b.mask[i]
	}
	return m, true
}

// fixIPv4ID makes a rebuilt IPv4 RoCEv2 packet's ICRC check out: pkt runs
// from the IP header through the 4-byte ICRC, with the header as the link
// rebuilt it (ID and flags guessed). If the ICRC already matches it
// returns matched. Otherwise it solves for the ID and DF bit the sender
// used and, if there is a solution, writes them, updates the header
// checksum and returns recovered. It returns failed if the packet is
// malformed or no ID explains the ICRC (corrupt).
func fixIPv4ID(pkt []byte) idFix {
	if len(pkt) < netdev.IPv4HeaderLen+netdev.UDPHeaderLen+netdev.BTHLen+4 {
		return idFailed
	}
	n := len(pkt) - 4
	c0, err := netdev.ICRC(pkt[:n])
	if err != nil {
		return idFailed
	}
	got := binary.LittleEndian.Uint32(pkt[n:])
	if c0 == got {
		return idMatched
	}
	m, ok := basisFor(n).solve(c0 ^ got)
	if !ok {
		return idFailed
	}
	ip := netdev.IPv4(pkt)
	ip.SetID(ip.ID() ^ uint16(m))
	if m&(1<<16) != 0 {
		pkt[netdev.IPv4FlagsFragOff] ^= 0x40
	}
	ip.UpdateChecksum()
	return idRecovered
}

type idFix uint8

const (
	idFailed idFix = iota
	idMatched
	idRecovered
)

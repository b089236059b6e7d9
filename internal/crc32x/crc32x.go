// Package crc32x computes the IEEE CRC-32 (the Ethernet CRC, and the RoCEv2
// ICRC's) faster than hash/crc32 on CPUs with 512-bit carry-less multiply
// (VPCLMULQDQ with AVX-512). Elsewhere it is hash/crc32.
//
// The fast path is the method of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ" widened to 512-bit registers. From 1024
// bytes on it folds 512 bytes per step in eight accumulators, then folds
// those into four; shorter input starts with the four, which fold 256 bytes
// per step. The four fold into one, which takes 64 bytes per step, its four
// 128-bit lanes fold into one, which takes 16 bytes per step. The
// resulting 128-bit remainder is reduced to the 32-bit register by two
// more multiplies (by x^96 and x^64 mod P) and a Barrett reduction, and
// the last len mod 16 bytes go to the table code. The folding constants
// are x^(D±32) mod P, bit-reflected, for each fold distance D, and the
// Barrett ones floor(x^64 / P) and P; TestFoldConstants derives them all
// from the polynomial and checks those in fold_amd64.s.
package crc32x

import (
	"encoding/binary"
	"hash/crc32"
)

// minFast is the shortest input worth the vector path: below it the
// 128-bit code in hash/crc32 wins, and the fast path needs 256 bytes to
// fill its accumulators.
const minFast = 512

// Update returns the CRC-32 of p appended to data whose CRC-32 is crc, like
// crc32.Update(crc, crc32.IEEETable, p).
func Update(crc uint32, p []byte) uint32 {
	if !haveFold || len(p) < minFast {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	return updateOr(crc, p, &noMask)
}

var noMask [64]byte

// UpdateOr is Update of p with its first 64 bytes ORed with or (a mask of
// fields to count as ones, like the RoCEv2 ICRC's variant header fields).
// p itself is not written.
func UpdateOr(crc uint32, p []byte, or *[64]byte) uint32 {
	if !haveFold || len(p) < minFast {
		var head [64]byte
		m := copy(head[:], p)
		for i := range m {
			head[i] |= or[i]
		}
		return crc32.Update(Slice8(crc, head[:m]), crc32.IEEETable, p[m:])
	}
	return updateOr(crc, p, or)
}

func updateOr(crc uint32, p []byte, or *[64]byte) uint32 {
	n := len(p) &^ 15
	// The last len(p) mod 16 bytes go to the tables. (Slice8, not
	// crc32.Update, whose function-variable call costs more for a few
	// bytes.)
	return Slice8(^fold(^crc, &p[0], n, or), p[n:])
}

// Checksum returns the IEEE CRC-32 of p, like crc32.ChecksumIEEE.
func Checksum(p []byte) uint32 { return Update(0, p) }

// tab8 holds slicing-by-8 tables for the IEEE CRC-32.
var tab8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// Slice8 is Update for short inputs, eight bytes a step from tables. Unlike
// Update and crc32.Update it never lets p escape, so it suits buffers on the
// stack (a masked copy of packet headers, say).
func Slice8(crc uint32, p []byte) uint32 {
	t := &tab8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

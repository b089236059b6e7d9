// Package crc32x computes the IEEE CRC-32 (the Ethernet CRC, and the RoCEv2
// ICRC's) faster than hash/crc32 on CPUs with 512-bit carry-less multiply
// (VPCLMULQDQ with AVX-512). Elsewhere it is hash/crc32.
//
// The fast path is the method of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ" widened to 512-bit registers. From 1024
// bytes on it folds 512 bytes per step in eight accumulators, then folds
// those into four; shorter input starts with the four, which fold 256 bytes
// per step. The four fold into one, which takes 64 bytes per step, its four
// 128-bit lanes fold into one, which takes 16 bytes per step. UpdateOr's
// input from 16 to 511 bytes (a packet's headers, most often) starts and
// ends in that one 128-bit accumulator (foldShort). The resulting 128-bit
// remainder is reduced to the 32-bit register by two more multiplies (by
// x^96 and x^64 mod P) and a Barrett reduction, and the last len mod 16
// bytes go to the table code. The folding constants
// are x^(D±32) mod P, bit-reflected, for each fold distance D, and the
// Barrett ones floor(x^64 / P) and P; TestFoldConstants derives them all
// from the polynomial and checks those in fold_amd64.s.
package crc32x

import (
	"encoding/binary"
	"hash/crc32"
)

// minFast is the shortest input worth the wide fold: below it Update uses
// the 128-bit code in hash/crc32, and UpdateOr foldShort (from 16 bytes);
// the wide fold needs 256 bytes to fill its accumulators.
const minFast = 512

// Update returns the CRC-32 of p appended to data whose CRC-32 is crc, like
// crc32.Update(crc, crc32.IEEETable, p).
func Update(crc uint32, p []byte) uint32 {
	if !haveFold || len(p) < minFast {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	return UpdateOr(crc, p, &noMask)
}

var noMask [64]byte

// UpdateOr is Update of p with its first 64 bytes ORed with or (a mask of
// fields to count as ones, like the RoCEv2 ICRC's variant header fields).
// p itself is not written.
func UpdateOr(crc uint32, p []byte, or *[64]byte) uint32 {
	if !haveFold || len(p) < 16 {
		var head [64]byte
		m := copy(head[:], p)
		for i := range m {
			head[i] |= or[i]
		}
		return crc32.Update(Slice8(crc, head[:m]), crc32.IEEETable, p[m:])
	}
	n := len(p) &^ 15
	var reg uint32
	if n >= minFast {
		reg = fold(^crc, &p[0], n, or)
	} else {
		// A packet's headers, most often: an ACK's 44 bytes (IPv4) in
		// 30-33 ns, against 81 ns by the tables before
		// (BenchmarkUpdateOrShort).
		reg = foldShort(^crc, &p[0], n, or)
	}
	// The last len(p) mod 16 bytes go to the tables (Slice8, not
	// crc32.Update, whose function-variable call costs more for a few
	// bytes), masked if the mask reaches them.
	tail := p[n:]
	if n < len(or) && len(tail) > 0 {
		var t [16]byte
		copy(t[:], tail)
		lo := binary.LittleEndian.Uint64(t[:]) | binary.LittleEndian.Uint64(or[n:])
		hi := binary.LittleEndian.Uint64(t[8:]) | binary.LittleEndian.Uint64(or[n+8:])
		binary.LittleEndian.PutUint64(t[:], lo)
		binary.LittleEndian.PutUint64(t[8:], hi)
		return Slice8(^reg, t[:len(tail)])
	}
	return Slice8(^reg, tail)
}

// CopyUpdateOr copies src into buf at h, where buf[:h] already holds the
// start of a message (a packet's headers), and returns UpdateOr(crc,
// buf[:h+len(src)], or): a copy and a CRC in one pass over the bytes, which
// costs about what the CRC alone does. buf must have room for src.
func CopyUpdateOr(crc uint32, buf []byte, h int, src []byte, or *[64]byte) uint32 {
	end := h + len(src)
	buf = buf[:end]
	if !haveFold || end < minFast || h > 256 {
		copy(buf[h:], src)
		return UpdateOr(crc, buf, or)
	}
	// The first 256 bytes are whole in buf before the fused loop starts.
	pre := 256 - h
	copy(buf[h:256], src[:pre])
	n := end &^ 15
	reg := foldCopy(^crc, &buf[0], &src[pre], &buf[256], n, or)
	tail := buf[n:]
	copy(tail, src[n-h:])
	return Slice8(^reg, tail)
}

// CheckCopy copies p[h:] into dst and returns UpdateOr(crc, p, or) in one
// pass: the receiving side of CopyUpdateOr, for a packet whose payload at
// h goes out as its CRC is checked. dst must have room for len(p)-h bytes.
func CheckCopy(crc uint32, p []byte, h int, dst []byte, or *[64]byte) uint32 {
	dst = dst[:len(p)-h]
	if !haveFold || len(p) < minFast || h > 256 {
		copy(dst, p[h:])
		return UpdateOr(crc, p, or)
	}
	copy(dst, p[h:256])
	n := len(p) &^ 15
	reg := foldCopy(^crc, &p[0], &p[256], &dst[256-h], n, or)
	copy(dst[n-h:], p[n:])
	return Slice8(^reg, p[n:])
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

// Slice8 is Update for short inputs, eight bytes a step from tables (then
// four, then one). Unlike Update and crc32.Update it never lets p escape,
// so it suits buffers on the stack (a masked copy of packet headers, say).
func Slice8(crc uint32, p []byte) uint32 {
	t := &tab8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	if len(p) >= 4 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[3][byte(crc)] ^ t[2][byte(crc>>8)] ^ t[1][byte(crc>>16)] ^ t[0][byte(crc>>24)]
		p = p[4:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

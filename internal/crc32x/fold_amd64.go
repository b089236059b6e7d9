package crc32x

import "golang.org/x/sys/cpu"

var haveFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// fold folds n bytes at p (n a multiple of 16, at least minFast), starting
// from the raw CRC register value reg (the complement of a finished CRC),
// and returns the raw register after them. The first 64 bytes are ORed
// with or as they are read (to mask fields to ones); the input is not
// written.
//
//go:noescape
func fold(reg uint32, p *byte, n int, or *[64]byte) uint32

// foldShort is fold for n a multiple of 16, at least 16 (below fold's
// 256): one 128-bit accumulator, 16 bytes a step.
//
//go:noescape
func foldShort(reg uint32, p *byte, n int, or *[64]byte) uint32

// foldCopy is fold of n bytes of which the first 256 are at p and the rest
// at ld, copied to st as they are read (n-256 bytes).
//
//go:noescape
func foldCopy(reg uint32, p, ld, st *byte, n int, or *[64]byte) uint32

// Package memx copies the payloads of RDMA messages into and out of
// registered memory: on amd64 CPUs with enhanced REP MOVSB (ERMS), a REP
// MOVSB for copies from 32 KiB up to 1 MiB, and copy() otherwise.
//
// Why: on this project's EPYC, Go's memmove (a 256-bit vector loop) moves
// 32 KiB to 256 KiB at 79-107 GB/s, and REP MOVSB at 106-137 GB/s, never
// slower at the sizes and alignments BenchmarkCopy tries. Below 32 KiB
// copy() is as fast; from 1 MiB memmove switches to non-temporal stores,
// which were faster or slower than REP MOVSB depending on where the
// buffers lay, so those keep copy() too. A payload copy is the one cost of
// a large WRITE, READ or SEND that grows with its size.
package memx

import "unsafe"

// REP MOVSB copies n bytes when minMOVSB <= n < maxMOVSB (BenchmarkCopy).
const (
	minMOVSB = 32 << 10
	maxMOVSB = 1 << 20 // where Go's memmove goes non-temporal
)

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// how many, like copy(); dst and src may overlap.
// Small enough to be inlined: most payload copies are below minMOVSB and
// pay no call for the check.
func Copy(dst, src []byte) int {
	if len(dst) < minMOVSB || len(src) < minMOVSB || !useMOVSB {
		return copy(dst, src)
	}
	return copyLarge(dst, src)
}

// copyLarge is Copy for copies of at least minMOVSB bytes on ERMS CPUs.
func copyLarge(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n >= maxMOVSB || overlap(dst[:n], src[:n]) {
		return copy(dst, src)
	}
	movsb(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), uintptr(n))
	return n
}

// overlap reports whether a and b, of the same non-zero length, share a byte:
// REP MOVSB copies forwards, which corrupts a source that the destination
// overlaps from above, so overlapping copies take copy() (memmove).
func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	n := uintptr(len(a))
	return pa < pb+n && pb < pa+n
}

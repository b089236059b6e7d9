package memx

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var useMOVSB = cpu.X86.HasERMS

// movsb copies n bytes from src to dst with REP MOVSB; the ranges must not
// overlap.
//
//go:noescape
func movsb(dst, src unsafe.Pointer, n uintptr)

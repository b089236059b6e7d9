//go:build !amd64

package memx

import "unsafe"

const useMOVSB = false

func movsb(dst, src unsafe.Pointer, n uintptr) { panic("memx: no REP MOVSB") }

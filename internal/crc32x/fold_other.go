//go:build !amd64

package crc32x

const haveFold = false

func fold(reg uint32, p *byte, n int, rem *[16]byte, or *[64]byte) { panic("crc32x: no vector fold") }

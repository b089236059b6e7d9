//go:build !amd64

package crc32x

const haveFold = false

func fold(reg uint32, p *byte, n int, or *[64]byte) uint32 { panic("crc32x: no vector fold") }

func foldShort(reg uint32, p *byte, n int, or *[64]byte) uint32 {
	panic("crc32x: no vector fold")
}

func foldCopy(reg uint32, p, ld, st *byte, n int, or *[64]byte) uint32 {
	panic("crc32x: no vector fold")
}

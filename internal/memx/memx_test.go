package memx

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// checkCopy copies n bytes inside one buffer, from src to dst offsets
// (overlapping or not), and checks the result against a snapshot of the
// source taken before, and that nothing outside the destination moved.
func checkCopy(t *testing.T, buf []byte, src, dst, n int) {
	t.Helper()
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	before := bytes.Clone(buf)
	want := bytes.Clone(buf[src : src+n])
	if got := Copy(buf[dst:dst+n], buf[src:src+n]); got != n {
		t.Fatalf("Copy(dst %d, src %d, %d bytes) = %d", dst, src, n, got)
	}
	if !bytes.Equal(buf[dst:dst+n], want) {
		t.Fatalf("Copy(dst %d, src %d, %d bytes): destination differs from the source", dst, src, n)
	}
	if !bytes.Equal(buf[:dst], before[:dst]) || !bytes.Equal(buf[dst+n:], before[dst+n:]) {
		t.Fatalf("Copy(dst %d, src %d, %d bytes) wrote outside the destination", dst, src, n)
	}
}

func TestCopy(t *testing.T) {
	sizes := []int{0, 1, 63, 4096, minMOVSB - 1, minMOVSB, minMOVSB + 1, 64 << 10, maxMOVSB - 1, maxMOVSB + 3}
	for _, n := range sizes {
		buf := make([]byte, 2*n+4096)
		for _, c := range []struct {
			name     string
			src, dst int
		}{
			{"apart", 0, n + 64},
			{"apart, unaligned", 3, n + 1001},
			{"destination first", n + 17, 5},
			{"same", 8, 8},
			{"destination overlaps the source from above", 0, n / 2},
			{"destination overlaps the source by one", 0, 1},
			{"destination overlaps the source from below", n / 2, 0},
		} {
			t.Run(fmt.Sprintf("%d/%s", n, c.name), func(t *testing.T) {
				checkCopy(t, buf, c.src, c.dst, n)
			})
		}
	}
}

func TestCopyLengths(t *testing.T) {
	src := make([]byte, 40<<10)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, 36<<10)
	if n := Copy(dst, src); n != len(dst) || !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatalf("short destination: copied %d, want %d and equal bytes", n, len(dst))
	}
	clear(dst)
	if n := Copy(dst, src[:33<<10]); n != 33<<10 || !bytes.Equal(dst[:n], src[:n]) ||
		!bytes.Equal(dst[n:], make([]byte, len(dst)-n)) {
		t.Fatalf("short source: copied %d, want %d with the rest untouched", n, 33<<10)
	}
	if n := Copy(nil, src); n != 0 {
		t.Fatalf("nil destination: copied %d", n)
	}
}

// TestMOVSB runs the REP MOVSB routine itself at lengths Copy never gives
// it, so that its every byte count is covered where the CPU has it.
func TestMOVSB(t *testing.T) {
	if !useMOVSB {
		t.Skip("no enhanced REP MOVSB on this CPU: Copy is copy()")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 8, 9, 255, 4096, 65537} {
		src, dst := make([]byte, n), make([]byte, n+1)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst[n] = 0xA5
		movsb(unsafePtr(dst), unsafePtr(src), uintptr(n))
		if !bytes.Equal(dst[:n], src) {
			t.Fatalf("movsb of %d bytes: the destination differs from the source", n)
		}
		if dst[n] != 0xA5 {
			t.Fatalf("movsb of %d bytes wrote past the end", n)
		}
	}
}

func FuzzCopy(f *testing.F) {
	f.Add(uint32(minMOVSB), uint16(0), uint16(100))
	f.Add(uint32(minMOVSB+5), uint16(300), uint16(7))
	f.Add(uint32(70000), uint16(0), uint16(1))
	f.Fuzz(func(t *testing.T, n uint32, src, dst uint16) {
		size := int(n % (256 << 10))
		buf := make([]byte, size+1<<16)
		checkCopy(t, buf, int(src), int(dst), size)
	})
}

// BenchmarkCopy measures Copy beside copy() of the same buffers in the
// same run, at sizes around the threshold and at a few alignments.
func BenchmarkCopy(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20} {
		for _, off := range []int{0, 1000} {
			buf := make([]byte, 2*size+off+64)
			src, dst := buf[:size], buf[size+off:2*size+off]
			b.Run(fmt.Sprintf("%dKiB/off=%d/copy", size>>10, off), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					copy(dst, src)
				}
			})
			b.Run(fmt.Sprintf("%dKiB/off=%d/Copy", size>>10, off), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					Copy(dst, src)
				}
			})
		}
	}
}

func unsafePtr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

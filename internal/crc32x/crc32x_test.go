package crc32x

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randBytes returns n bytes from rng.
func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randMask returns a mask for UpdateOr with about a quarter of its bytes
// set, at random.
func randMask(rng *rand.Rand) *[64]byte {
	var or [64]byte
	for i := range or {
		if rng.IntN(4) == 0 {
			or[i] = byte(rng.Uint32())
		}
	}
	return &or
}

// fuzzMask is the 64-byte mask a fuzz input's bytes give (zeros past them).
func fuzzMask(b []byte) *[64]byte {
	var or [64]byte
	copy(or[:], b)
	return &or
}

// needFold skips a test that compares Update with hash/crc32 only: without
// the vector fold, Update is hash/crc32, and the test would compare it
// with itself.
func needFold(t *testing.T) {
	t.Helper()
	if !haveFold {
		t.Skip("no VPCLMULQDQ/AVX-512 here: Update is hash/crc32 itself")
	}
}

// sweep calls check with slices of lengths 0 to 5000 at a few offsets,
// each with a random initial CRC.
func sweep(check func(p []byte, init uint32, msg string)) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := randBytes(rng, 5000+64)
	for n := 0; n <= 5000; n += 1 + n/64 {
		for _, off := range []int{0, 1, 7, 33} {
			check(buf[off:off+n], rng.Uint32(), fmt.Sprintf("n=%d off=%d", n, off))
		}
	}
}

func TestUpdateMatchesHashCRC32(t *testing.T) {
	needFold(t)
	sweep(func(p []byte, init uint32, msg string) {
		require.Equal(t, crc32.Update(init, crc32.IEEETable, p), Update(init, p), msg)
		require.Equal(t, crc32.ChecksumIEEE(p), Checksum(p), msg)
	})
}

// Slice8 is table code of its own, tested on every CPU.
func TestSlice8MatchesHashCRC32(t *testing.T) {
	sweep(func(p []byte, init uint32, msg string) {
		require.Equal(t, crc32.Update(init, crc32.IEEETable, p), Slice8(init, p), msg)
	})
}

// Every length around each branch of the fold: the minFast (512-byte)
// threshold, the 512-byte step in eight accumulators (from 1024 bytes on),
// and the 256-, 64- and 16-byte steps.
func TestUpdateEveryLengthNearSteps(t *testing.T) {
	needFold(t)
	buf := randBytes(rand.New(rand.NewPCG(3, 4)), 2048)
	for n := minFast - 20; n <= 2048; n++ {
		require.Equal(t, crc32.ChecksumIEEE(buf[:n]), Checksum(buf[:n]), "n=%d", n)
	}
}

func TestUpdateSplitAnywhere(t *testing.T) {
	needFold(t)
	p := randBytes(rand.New(rand.NewPCG(5, 6)), 3000)
	want := crc32.ChecksumIEEE(p)
	for _, cut := range []int{0, 1, 255, 256, 600, 1500, 2999, 3000} {
		require.Equal(t, want, Update(Checksum(p[:cut]), p[cut:]), "cut=%d", cut)
	}
}

// The constants in fold_amd64.s are x^(D+32) and x^(D-32) mod P,
// bit-reflected and shifted left by one, for each fold distance D; for the
// final reduction x^96 and x^64 mod P so too, and floor(x^64 / P) and P
// (33 bits each) bit-reflected. The test reads them from the assembly, so
// each one there is checked, and fails on a table it does not know.
func TestFoldConstants(t *testing.T) {
	const poly = 0x104C11DB7
	xpow := func(n int) uint64 {
		r := uint64(1)
		for range n {
			r <<= 1
			if r&(1<<32) != 0 {
				r ^= poly
			}
		}
		return r
	}
	refl := func(v uint64) uint64 { return uint64(bits.Reverse32(uint32(v))) << 1 }
	pair := func(d int) []uint64 { return []uint64{refl(xpow(d + 32)), refl(xpow(d - 32))} }
	// floor(x^64 / P), a 33-bit quotient, by long division; it and P
	// (33 bits too) are reflected whole.
	mu, rem := uint64(0), [2]uint64{0, 1} // rem = x^64: rem[1] bit 0
	for d := 64; d >= 32; d-- {
		if (rem[d/64]>>(d%64))&1 != 0 {
			mu |= 1 << (d - 32)
			sh := uint(d - 32)
			rem[0] ^= poly << sh
			if sh > 31 {
				rem[1] ^= poly >> (64 - sh)
			}
		}
	}
	refl33 := func(v uint64) uint64 { return bits.Reverse64(v) >> 31 }
	want := map[string][]uint64{
		"kred":    {refl(xpow(96)), refl(xpow(64))},
		"kbar":    {refl33(mu), refl33(poly)},
		"kmask32": {0xFFFFFFFF, 0},
		"k4096":   pair(4096),
		"k2048":   pair(2048),
		"k512":    pair(512),
		"k128":    pair(128),
		"klanes":  slices.Concat(pair(384), pair(256), pair(128), []uint64{0, 0}),
	}

	src, err := os.ReadFile("fold_amd64.s")
	require.NoError(t, err)
	data := regexp.MustCompile(`(?m)^DATA (\w+)<>\+(\d+)\(SB\)/8, \$(\w+)$`)
	got := map[string][]uint64{}
	for _, m := range data.FindAllStringSubmatch(string(src), -1) {
		off, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		v, err := strconv.ParseUint(m[3], 0, 64)
		require.NoError(t, err, "%s", m[0])
		require.Equal(t, len(got[m[1]])*8, off, "%s: offsets in order", m[0])
		got[m[1]] = append(got[m[1]], v)
	}
	lines := data.FindAllString(string(src), -1)
	require.Len(t, lines, strings.Count(string(src), "\nDATA "), "a DATA line the test cannot read")
	require.Equal(t, want, got)
}

func TestUpdateOr(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	or := randMask(rng)
	buf := randBytes(rng, 3000+33)
	check := func(p []byte, msg string) {
		init := rng.Uint32()
		before := slices.Clone(p)
		require.Equal(t, maskedCRC(init, p, or), UpdateOr(init, p, or), msg)
		require.Equal(t, before, p, "input written, %s", msg)
	}
	for _, n := range []int{1024, 2047, 3000} {
		check(buf[:n], fmt.Sprintf("n=%d", n))
	}
	// Every length of the short paths (a packet's headers: the mask
	// reaches into the last bytes the 16-byte steps leave over), at
	// offsets that misalign the input.
	for n := 0; n <= 2*minFast+1; n++ {
		for _, off := range []int{0, 1, 7, 33} {
			check(buf[off:off+n], fmt.Sprintf("n=%d off=%d", n, off))
		}
	}
}

// The masked head of a RoCEv2 packet of any length, on every CPU: on one
// without the vector fold this is the table code, checked as well.
func FuzzUpdateOr(f *testing.F) {
	f.Add(uint32(0), make([]byte, 44), make([]byte, 64))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 600), []byte{0xFF, 0, 0xFF})
	f.Fuzz(func(t *testing.T, init uint32, p, mask []byte) {
		or := fuzzMask(mask)
		if got, want := UpdateOr(init, p, or), maskedCRC(init, p, or); got != want {
			t.Fatalf("len %d: got %#x, want %#x", len(p), got, want)
		}
	})
}

func TestUpdateDoesNotAllocate(t *testing.T) {
	p := make([]byte, 4096+5)
	require.Zero(t, testing.AllocsPerRun(100, func() { Update(1, p) }))
	var small [40]byte
	require.Zero(t, testing.AllocsPerRun(100, func() { Slice8(1, small[:]) }))
	var or [64]byte
	require.Zero(t, testing.AllocsPerRun(100, func() { UpdateOr(1, p, &or) }))
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 1030))
	f.Fuzz(func(t *testing.T, init uint32, p []byte) {
		if got, want := Update(init, p), crc32.Update(init, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d: got %#x, want %#x", len(p), got, want)
		}
	})
}

func benchSizes(b *testing.B, f func([]byte) uint32) {
	for _, n := range []int{1024, 4096, 65536} {
		p := make([]byte, n)
		b.Run(fmt.Sprintf("%dKiB", n/1024), func(b *testing.B) {
			b.SetBytes(int64(n))
			var s uint32
			for range b.N {
				s ^= f(p)
			}
			_ = s
		})
	}
}

func BenchmarkChecksum(b *testing.B)  { benchSizes(b, Checksum) }
func BenchmarkHashCRC32(b *testing.B) { benchSizes(b, crc32.ChecksumIEEE) }

// BenchmarkUpdateOrShort measures UpdateOr on the lengths of packet
// headers (an ACK over IPv4 is 44 bytes from its IP header, an 8-byte
// SEND 48), beside the table code it replaced in the same run: a masked
// copy of the head through Slice8 and hash/crc32 for the rest
// (x_tables = its time over UpdateOr's).
func BenchmarkUpdateOrShort(b *testing.B) {
	var or [64]byte
	or[1], or[8], or[32] = 0xFF, 0xFF, 0xFF
	tables := func(crc uint32, p []byte) uint32 {
		var head [64]byte
		m := copy(head[:], p)
		for i := range m {
			head[i] |= or[i]
		}
		return crc32.Update(Slice8(crc, head[:m]), crc32.IEEETable, p[m:])
	}
	for _, n := range []int{44, 48, 128, 300} {
		p := make([]byte, n)
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			var s uint32
			t0 := time.Now()
			for range b.N {
				s ^= UpdateOr(s, p, &or)
			}
			d := time.Since(t0)
			b.StopTimer()
			t0 = time.Now()
			for range b.N {
				s ^= tables(s, p)
			}
			base := time.Since(t0)
			_ = s
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "tables_ns/op")
			b.ReportMetric(float64(base)/float64(d), "x_tables")
		})
	}
}

// maskedCRC is the CRC UpdateOr computes, by hash/crc32 over a masked copy.
func maskedCRC(init uint32, p []byte, or *[64]byte) uint32 {
	masked := append([]byte(nil), p...)
	for i := 0; i < len(masked) && i < 64; i++ {
		masked[i] |= or[i]
	}
	return crc32.Update(init, crc32.IEEETable, masked)
}

// checkCopies runs CopyUpdateOr and CheckCopy on a message of an h-byte
// head and an n-byte body at misaligning offsets, against hash/crc32 and
// copy: the same CRC, the body copied, and not a byte written outside it
// (guards of 64 bytes around each destination).
func checkCopies(t *testing.T, rng *rand.Rand, h, n int, or *[64]byte) {
	t.Helper()
	const guard = 64
	msg := randBytes(rng, h+n)
	init := rng.Uint32()
	want := maskedCRC(init, msg, or)
	for _, off := range []int{0, 1, 14} {
		// Send: the head in place, the body copied in behind it.
		buf := randBytes(rng, guard+off+h+n+guard)
		fill := slices.Clone(buf)
		dst := buf[guard+off : guard+off+h+n]
		copy(dst, msg[:h])
		src := slices.Clone(msg[h:])
		got := CopyUpdateOr(init, dst, h, src, or)
		require.Equal(t, want, got, "CopyUpdateOr h=%d n=%d off=%d", h, n, off)
		require.Equal(t, msg, dst, "CopyUpdateOr's copy h=%d n=%d off=%d", h, n, off)
		require.Equal(t, fill[:guard+off], buf[:guard+off], "written before")
		require.Equal(t, fill[guard+off+h+n:], buf[guard+off+h+n:], "written after")
		require.Equal(t, msg[h:], src, "source written")

		// Receive: the message in place, the body copied out.
		p := slices.Clone(msg)
		out := randBytes(rng, guard+off+n+guard)
		fill = slices.Clone(out)
		got = CheckCopy(init, p, h, out[guard+off:], or)
		require.Equal(t, want, got, "CheckCopy h=%d n=%d off=%d", h, n, off)
		require.Equal(t, msg[h:], out[guard+off:guard+off+n], "CheckCopy's copy")
		require.Equal(t, fill[:guard+off], out[:guard+off], "written before")
		require.Equal(t, fill[guard+off+n:], out[guard+off+n:], "written after")
		require.Equal(t, msg, p, "packet written")
	}
}

func TestCopyUpdateOr(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	or := randMask(rng)
	// RoCEv2 heads (IPv4 and IPv6, with and without a RETH), the
	// longest head the fused path takes and the first it does not, and
	// bodies across every step of the fold: below minFast, at the
	// 512- and 1024-byte switches, an MTU's packets, and odd ends.
	for _, h := range []int{0, 1, 40, 56, 60, 76, 255, 256, 257, 300} {
		for n := 0; n <= 4200; n += 1 + n/16 {
			checkCopies(t, rng, h, n, or)
		}
		for _, n := range []int{4096, 4096 + 4, 9000} {
			checkCopies(t, rng, h, n, or)
		}
	}
}

func FuzzCopyUpdateOr(f *testing.F) {
	f.Add(uint16(40), make([]byte, 4136), make([]byte, 64))
	f.Add(uint16(56), make([]byte, 1030), []byte{0xFF, 0, 0xFF})
	f.Fuzz(func(t *testing.T, h uint16, msg, mask []byte) {
		or := fuzzMask(mask)
		hl := int(h) % (len(msg) + 1)
		want := maskedCRC(0x1234, msg, or)
		buf := make([]byte, len(msg))
		copy(buf, msg[:hl])
		if got := CopyUpdateOr(0x1234, buf, hl, msg[hl:], or); got != want || !slices.Equal(buf, msg) {
			t.Fatalf("CopyUpdateOr h=%d len %d: %#x, want %#x", hl, len(msg), got, want)
		}
		out := make([]byte, len(msg)-hl)
		if got := CheckCopy(0x1234, msg, hl, out, or); got != want || !slices.Equal(out, msg[hl:]) {
			t.Fatalf("CheckCopy h=%d len %d: %#x, want %#x", hl, len(msg), got, want)
		}
	})
}

// BenchmarkCopyUpdateOr is a 4 KiB packet's payload behind a 56-byte head
// copied and CRCed in one pass, against copy then UpdateOr (the baseline,
// reported as x_apart: the fused pass's speed over it).
func BenchmarkCopyUpdateOr(b *testing.B) {
	const h, n = 56, 4096
	var or [64]byte
	src := make([]byte, n)
	buf := make([]byte, h+n)
	apart := func() uint32 {
		copy(buf[h:], src)
		return UpdateOr(0, buf, &or)
	}
	var sink uint32
	t0 := time.Now()
	const m = 200000
	for range m {
		sink += apart()
	}
	base := time.Since(t0).Seconds() / m * 1e9
	b.SetBytes(n)
	b.ResetTimer()
	for range b.N {
		sink += CopyUpdateOr(0, buf, h, src, &or)
	}
	b.StopTimer()
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(base, "apart_ns/op")
	b.ReportMetric(base/per, "x_apart")
	if sink == 1 {
		b.Log(sink)
	}
}

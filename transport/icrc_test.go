package transport

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// Two packets from the golden captures, IP header through ICRC, so that the
// ICRC has a known answer even without ../shared.
var icrcVectors = []struct {
	name string
	hex  string
}{
	{"rxe RC ACKNOWLEDGE", "450000302ddb40004011f87b0a3200010a320002c1c812b7001c00001100ffff00000013008142211f0000016e99638c"},
	{"rxe RC COMPARE_SWAP", "45000048b4884000401171b60a3200020a320001c32612b7003400001300ffff0000001f8023fd3400005577694c40000000104d000000000000000000000000000000009bf6a755"},
}

func TestICRCVectors(t *testing.T) {
	for _, v := range icrcVectors {
		t.Run(v.name, func(t *testing.T) {
			pkt, err := hex.DecodeString(v.hex)
			require.NoError(t, err)
			require.True(t, CheckICRC(pkt))
			crc, err := ICRC(pkt[:len(pkt)-ICRCLen])
			require.NoError(t, err)
			require.Equal(t, binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]), crc)
			require.Equal(t, refICRC(pkt[:len(pkt)-ICRCLen]), crc)
			pkt[len(pkt)-1] ^= 1
			require.False(t, CheckICRC(pkt))
		})
	}
}

// refICRC is the plain statement of the rule: copy the packet, set the
// masked fields to ones, prepend 8 bytes of ones, CRC-32 it all.
func refICRC(ip []byte) uint32 {
	data := append([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, ip...)
	m := data[8:]
	ipLen := netdev.IPv6HeaderLen
	if m[0]>>4 == 4 {
		ipLen = int(m[0]&0xF) * 4
		m[1], m[8], m[10], m[11] = 0xFF, 0xFF, 0xFF, 0xFF
	} else {
		m[0] |= 0x0F
		m[1], m[2], m[3], m[7] = 0xFF, 0xFF, 0xFF, 0xFF
	}
	m[ipLen+6], m[ipLen+7] = 0xFF, 0xFF
	m[ipLen+8+4] = 0xFF
	return crc32.ChecksumIEEE(data)
}

// synthPacket builds a RoCEv2 packet (IP header through ICRC room) with
// random contents: IPv4 with ipv4Opts bytes of options, or IPv6.
func synthPacket(r *rand.Rand, v6 bool, ipv4Opts, ibLen int) []byte {
	ipLen := netdev.IPv6HeaderLen
	if !v6 {
		ipLen = netdev.IPv4HeaderLen + ipv4Opts
	}
	pkt := make([]byte, ipLen+netdev.UDPHeaderLen+ibLen+ICRCLen)
	for i := range pkt {
		pkt[i] = byte(r.Uint32())
	}
	if v6 {
		pkt[0] = 0x60 | pkt[0]&0x0F
		pkt[6] = netdev.ProtocolUDP
	} else {
		pkt[0] = 0x40 | byte(ipLen/4)
		pkt[9] = netdev.ProtocolUDP
	}
	binary.BigEndian.PutUint16(pkt[ipLen+2:], RoCEv2Port)
	return pkt
}

func TestICRCSynthetic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		v6 := i%2 == 0
		opts := 4 * (i % 11)
		pkt := synthPacket(r, v6, opts, BTHLen+r.IntN(600))
		n := len(pkt) - ICRCLen
		crc, err := ICRC(pkt[:n])
		require.NoError(t, err)
		require.Equal(t, refICRC(pkt[:n]), crc, "v6=%v opts=%d", v6, opts)
		require.NoError(t, PutICRC(pkt))
		require.True(t, CheckICRC(pkt))
		require.Equal(t, crc, binary.LittleEndian.Uint32(pkt[n:]))
		if v6 {
			// Traffic class, flow label and hop limit are masked; payload
			// length and addresses are not.
			for _, off := range []int{0, 1, 2, 3, 7} {
				cp := append([]byte(nil), pkt...)
				cp[off] ^= 0x0F
				require.True(t, CheckICRC(cp), "IPv6 byte %d is masked", off)
			}
			for _, off := range []int{4, 5, 8, 39} {
				cp := append([]byte(nil), pkt...)
				cp[off] ^= 0x01
				require.False(t, CheckICRC(cp), "IPv6 byte %d is covered", off)
			}
			cp := append([]byte(nil), pkt...)
			cp[0] ^= 0x10 // the version nibble is covered (and changes the parse)
			require.False(t, CheckICRC(cp))
		}
	}
}

// PutICRCCopy makes the ICRC PutICRC makes, with the body copied in, for
// IPv4 with and without options (those past the fused path's mask too)
// and IPv6, over bodies shorter and longer than the fused path takes.
func TestPutICRCCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 300 {
		v6 := i%3 == 0
		opts := 4 * (i % 11)
		ext := BTHLen + 4*(i%5)
		body := 4 * r.IntN(1200)
		want := synthPacket(r, v6, opts, ext+body)
		require.NoError(t, PutICRC(want))
		at := len(want) - ICRCLen - body
		got := append([]byte(nil), want[:at]...)
		got = append(got, make([]byte, body+ICRCLen)...)
		require.NoError(t, PutICRCCopy(got, at, want[at:len(want)-ICRCLen]))
		require.Equal(t, want, got, "v6=%v opts=%d body=%d", v6, opts, body)
	}
	pkt := synthPacket(r, false, 0, BTHLen+64)
	require.Error(t, PutICRCCopy(pkt, 40, make([]byte, 63)), "body short of the ICRC's room")
	require.Error(t, PutICRCCopy(pkt, 20, make([]byte, len(pkt)-ICRCLen-20)), "headers short of a BTH")
}

func TestICRCMalformed(t *testing.T) {
	v4 := synthPacket(rand.New(rand.NewPCG(3, 4)), false, 0, BTHLen)
	n := len(v4) - ICRCLen
	tests := []struct {
		name string
		ip   []byte
		want DropReason
	}{
		{"empty", nil, DropTruncated},
		{"not IP", append([]byte{0x50}, v4[1:n]...), DropBadHeader},
		{"IPv4 IHL 4", append([]byte{0x44}, v4[1:n]...), DropBadHeader},
		{"IPv4 IHL 15 too long", append([]byte{0x4F}, v4[1:n]...), DropTruncated},
		{"short BTH", v4[:n-1], DropTruncated},
		{"not UDP", func() []byte { b := append([]byte(nil), v4[:n]...); b[9] = 6; return b }(), DropBadHeader},
		{"IPv6 short", append([]byte{0x60, 0, 0, 0, 0, 0, netdev.ProtocolUDP}, make([]byte, 52)...), DropTruncated},
		{"IPv6 not UDP", append([]byte{0x60, 0, 0, 0, 0, 0, 6}, make([]byte, 60)...), DropBadHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ICRC(tc.ip)
			r, ok := DropReasonOf(err)
			require.True(t, ok)
			require.Equal(t, tc.want, r)
			require.False(t, CheckICRC(append(tc.ip, 0, 0, 0, 0)))
		})
	}
	require.False(t, CheckICRC([]byte{1, 2, 3}))
	require.Error(t, PutICRC([]byte{1, 2, 3}))
	require.Error(t, PutICRC(make([]byte, 64)))
}

func TestICRCNoAlloc(t *testing.T) {
	pkt := synthPacket(rand.New(rand.NewPCG(5, 6)), false, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		if err := PutICRC(pkt); err != nil {
			panic(err)
		}
		if !CheckICRC(pkt) {
			panic("bad ICRC")
		}
	})
	require.Zero(t, allocs)
}

func FuzzICRC(f *testing.F) {
	for _, v := range icrcVectors {
		b, _ := hex.DecodeString(v.hex)
		f.Add(b)
	}
	f.Add([]byte{0x60})
	f.Add([]byte{0x4F, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ok := CheckICRC(b)
		if len(b) < ICRCLen {
			require.False(t, ok)
			return
		}
		cp := append([]byte(nil), b...)
		err := PutICRC(cp)
		if ok {
			require.NoError(t, err)
			require.Equal(t, b, cp, "PutICRC rewrote a correct ICRC differently")
		}
		if err == nil {
			require.True(t, CheckICRC(cp))
			require.Equal(t, refICRC(b[:len(b)-ICRCLen]), binary.LittleEndian.Uint32(cp[len(cp)-ICRCLen:]))
		}
	})
}

// BenchmarkICRC measures the ICRC of an IPv4 RoCEv2 packet with a 4096-byte
// payload, and reports it against memcpy of the same packet measured in the
// same run (x_memcpy = ICRC throughput / memcpy throughput).
func BenchmarkICRC(b *testing.B) {
	const payload = 4096
	pkt := synthPacket(rand.New(rand.NewPCG(7, 8)), false, 0, BTHLen+RETHLen+payload)
	ip := pkt[:len(pkt)-ICRCLen]
	b.SetBytes(int64(len(ip)))
	b.ResetTimer()
	start := time.Now()
	var sink uint32
	for range b.N {
		crc, err := ICRC(ip)
		if err != nil {
			b.Fatal(err)
		}
		sink ^= crc
	}
	icrcDur := time.Since(start)
	b.StopTimer()
	_ = sink

	// memcpy baseline: copy the same number of bytes, for at least as many
	// iterations and at least 20 ms, so that the rate is stable.
	dst := make([]byte, len(ip))
	iters := 0
	start = time.Now()
	var copyDur time.Duration
	for iters < b.N || copyDur < 20*time.Millisecond {
		for range 64 {
			copy(dst, ip)
		}
		iters += 64
		copyDur = time.Since(start)
	}
	icrcRate := float64(b.N) * float64(len(ip)) / icrcDur.Seconds()
	copyRate := float64(iters) * float64(len(ip)) / copyDur.Seconds()
	b.ReportMetric(icrcRate/1e9, "GB/s")
	b.ReportMetric(copyRate/1e9, "memcpy_GB/s")
	b.ReportMetric(icrcRate/copyRate, "x_memcpy")
}

// CheckICRCCopy answers as CheckICRC does, good ICRC or bad, and copies
// the payload either way.
func TestCheckICRCCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for i := range 300 {
		v6 := i%3 == 0
		opts := 4 * (i % 11)
		body := 4 * r.IntN(1200)
		pkt := synthPacket(r, v6, opts, BTHLen+body)
		require.NoError(t, PutICRC(pkt))
		at := len(pkt) - ICRCLen - body
		if i%4 == 1 {
			pkt[r.IntN(len(pkt))] ^= 1 << r.IntN(8)
		}
		dst := make([]byte, body)
		require.Equal(t, CheckICRC(pkt), CheckICRCCopy(pkt, at, dst), "v6=%v opts=%d body=%d", v6, opts, body)
		require.Equal(t, pkt[at:len(pkt)-ICRCLen], dst)
	}
	pkt := synthPacket(r, false, 0, BTHLen+64)
	require.NoError(t, PutICRC(pkt))
	require.False(t, CheckICRCCopy(pkt, 40, make([]byte, 63)), "no room for the payload")
}

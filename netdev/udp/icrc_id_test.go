package udp

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// capturesDir holds the golden captures made by Linux rxe and rdma-core
// tools, at the repository's root.
const capturesDir = "../../testdata/captures"

// captureFiles returns the golden captures. It fails the test when there are
// none: they are part of the repository, so a missing file is a broken
// checkout, not a reason to skip.
func captureFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	require.NoError(tb, err)
	require.NotEmpty(tb, files, "no golden captures in %s", capturesDir)
	return files
}

// captureIPv4RoCE returns the IPv4 RoCEv2 packets (IP header through ICRC)
// of the shared rxe captures.
func captureIPv4RoCE(t *testing.T) [][]byte {
	t.Helper()
	files := captureFiles(t)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for off := 24; off+16 <= len(b); {
			n := int(binary.LittleEndian.Uint32(b[off+8:]))
			p := b[off+16 : off+16+n]
			off += 16 + n
			fi, err := netdev.ParseFrame(p)
			if err != nil || fi.IsIPv6() || fi.DstPort != netdev.RoCEv2Port {
				continue
			}
			out = append(out, append([]byte(nil), p[fi.IPOff:fi.End()]...))
		}
	}
	require.NotEmpty(t, out)
	return out
}

func TestICRCIDRecoveryOnRxeCaptures(t *testing.T) {
	nonZero := 0
	for i, pkt := range captureIPv4RoCE(t) {
		n := len(pkt) - 4
		c, err := netdev.ICRC(pkt[:n])
		require.NoError(t, err)
		require.Equal(t, binary.LittleEndian.Uint32(pkt[n:]), c, "packet %d: ICRC", i)
		ip := netdev.IPv4(pkt)
		id, flags := ip.ID(), ip.Flags()
		require.Equal(t, uint8(netdev.IPv4FlagDontFragment), flags, "packet %d: rxe sets DF", i)
		if id != 0 {
			nonZero++
		}

		// What a UDP socket gives: the header rebuilt with ID 0, DF set.
		rebuilt := append([]byte(nil), pkt...)
		netdev.IPv4(rebuilt).SetID(0)
		netdev.IPv4(rebuilt).UpdateChecksum()
		want := idRecovered
		if id == 0 {
			want = idMatched
		}
		require.Equal(t, want, fixIPv4ID(rebuilt), "packet %d", i)
		require.Equal(t, pkt, rebuilt, "packet %d: the recovered header is the original", i)

		// And without DF: the DF bit is recovered too.
		rebuilt = append([]byte(nil), pkt...)
		netdev.IPv4(rebuilt).SetID(0x1234)
		netdev.IPv4(rebuilt).SetFlagsFragment(0, 0)
		netdev.IPv4(rebuilt).UpdateChecksum()
		require.Equal(t, idRecovered, fixIPv4ID(rebuilt), "packet %d without DF", i)
		require.Equal(t, pkt, rebuilt, "packet %d without DF: the recovered header is the original", i)
	}
	require.Positive(t, nonZero, "rxe sends non-zero IPv4 IDs")
}

func TestICRCIDRecoveryRejectsCorruption(t *testing.T) {
	pkts := captureIPv4RoCE(t)
	failed, total := 0, 0
	for _, pkt := range pkts {
		for bit := 0; bit < 8; bit++ {
			c := append([]byte(nil), pkt...)
			netdev.IPv4(c).SetID(0)
			netdev.IPv4(c).UpdateChecksum()
			c[len(c)-5] ^= 1 << bit // last payload byte before the ICRC
			total++
			if fixIPv4ID(c) == idFailed {
				failed++
			}
		}
	}
	// Corruption is caught unless its CRC change happens to lie in the span
	// of the 17 ID/DF vectors (about 1 in 2^15 for random errors); none of
	// these single-bit errors does.
	require.Equal(t, total, failed)
}

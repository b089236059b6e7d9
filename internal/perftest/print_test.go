package perftest

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goldenSections splits a capture made by ../shared/rxe-peer into each
// side's terminal output: the text after "--- client ..." or
// "--- server ..." up to the next such line or peer.sh's summary.
func goldenSections(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	out := map[string]string{}
	side := ""
	var cur strings.Builder
	flush := func() {
		if side != "" {
			out[side] = cur.String()
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "--- client"):
			flush()
			side = "client"
		case strings.HasPrefix(line, "--- server"):
			flush()
			side = "server"
		case strings.HasPrefix(line, "peer.sh:"):
			flush()
			side = ""
		default:
			if side != "" {
				cur.WriteString(line)
			}
		}
	}
	flush()
	require.Len(t, out, 2, "%s: want a client and a server section", name)
	return out
}

// gid returns the IPv4-mapped GID of a guest address.
func gid(s string) [16]byte { return netip.MustParseAddr("::ffff:" + s).As16() }

// goldenSide is what one side printed, as the figures to feed in.
type goldenSide struct {
	hdr           Header
	local, remote Dest
	bw            *BWReport
	lat           *LatResult
	size, iters   uint64
}

// render prints a side the way the tools run: the inline warning (stderr,
// which reaches the capture first), the banner, the header, the
// addresses, the title, the row and the closing line.
func render(s goldenSide) string {
	var b bytes.Buffer
	if s.hdr.Verb == Read || s.hdr.Verb == Atomic {
		b.WriteString(InlineWarning)
		b.WriteString(ResultLine)
	}
	if s.hdr.Server {
		WriteWaiting(&b)
	}
	s.hdr.Write(&b)
	WriteDest(&b, "local", s.local, s.hdr.Verb, true)
	WriteDest(&b, "remote", s.remote, s.hdr.Verb, true)
	if s.bw != nil {
		WriteBWTitle(&b, false)
		WriteBWRow(&b, *s.bw, FullVerbosity, false)
	} else if s.lat != nil {
		WriteLatTitle(&b, false)
		WriteLatRow(&b, s.size, s.iters, *s.lat, FullVerbosity)
	}
	b.WriteString(ResultLine)
	return b.String()
}

// TestPrinterGolden feeds the figures of perftest 4.5's runs on Linux rxe
// (testdata/*.txt, made by ../shared/rxe-peer) into the printer and wants
// each side's terminal output byte for byte.
func TestPrinterGolden(t *testing.T) {
	g1, g2 := gid("10.50.0.1"), gid("10.50.0.2")
	hdr := func(v Verb, server bool) Header {
		h := Header{Verb: v, Device: "rxe0", QPs: 1, Conn: "RC", Server: server, TxDepth: 20, RxDepth: 20,
			CQMod: 20, MTU: 1024, LinkType: "Ethernet", GIDIndex: 1, OutReads: 128}
		return h
	}
	atomic := func(op string, server bool) Header {
		h := hdr(Atomic, server)
		h.Atomic = op
		return h
	}
	latOf := func(v Verb, server bool) Header {
		h := hdr(v, server)
		h.Latency, h.TxDepth = true, 1
		return h
	}
	lat := func(server bool) Header { return latOf(Send, server) }
	bw := func(size, iters uint64, peak, avg, rate float64) *BWReport {
		return &BWReport{Size: size, Iters: iters, Peak: peak, Avg: avg, MsgRate: rate}
	}
	type pair struct{ client, server goldenSide }
	for _, tc := range []struct {
		file string
		// c and s are the client's and the server's QP addresses.
		c, s              Dest
		hdrC, hdrS        Header
		rowC, rowS        *BWReport
		latC, latS        *LatResult
		latSize, latIters uint64
	}{
		{file: "ib_write_bw.txt",
			c:    Dest{QPN: 0x16, PSN: 0xb5931f, RKey: 0x786, VAddr: 0x561cbeb2d000, GID: g2},
			s:    Dest{QPN: 0x1b, PSN: 0xc5546e, RKey: 0xce4, VAddr: 0x55e06b7fa000, GID: g1},
			hdrC: hdr(Write, false), hdrS: hdr(Write, true),
			rowC: bw(4096, 20, 4.18, 4.12, 0.001055), rowS: bw(4096, 20, 4.18, 4.12, 0.001055)},
		{file: "ib_read_bw.txt",
			c:    Dest{QPN: 0x17, PSN: 0xe30c10, OutReads: 128, RKey: 0x8df, VAddr: 0x560fc30b5000, GID: g2},
			s:    Dest{QPN: 0x1c, PSN: 0x282f8, OutReads: 128, RKey: 0xdbe, VAddr: 0x55cdae7da000, GID: g1},
			hdrC: hdr(Read, false), hdrS: hdr(Read, true),
			rowC: bw(4096, 20, 4.34, 4.32, 0.001105), rowS: bw(4096, 20, 4.34, 4.32, 0.001105)},
		{file: "ib_send_bw.txt",
			c:    Dest{QPN: 0x18, PSN: 0x928585, GID: g2},
			s:    Dest{QPN: 0x1d, PSN: 0x4fb5a2, GID: g1},
			hdrC: hdr(Send, false), hdrS: hdr(Send, true),
			rowC: bw(4096, 20, 3.55, 3.10, 0.000794), rowS: bw(4096, 20, 0, 4.66, 0.001194)},
		{file: "ib_atomic_bw.txt",
			c:    Dest{QPN: 0x19, PSN: 0x96b5dd, GID: g2},
			s:    Dest{QPN: 0x1e, PSN: 0x6ab20e, GID: g1},
			hdrC: atomic(FetchAndAdd, false), hdrS: atomic(FetchAndAdd, true),
			rowC: bw(8, 20, 0.01, 0.01, 0.001722), rowS: bw(8, 20, 0.01, 0.01, 0.001722)},
		{file: "ib_atomic_bw_cmp_swap.txt",
			c:    Dest{QPN: 0x1a, PSN: 0x23fd34, GID: g2},
			s:    Dest{QPN: 0x1f, PSN: 0x7aefe, GID: g1},
			hdrC: atomic(CmpAndSwap, false), hdrS: atomic(CmpAndSwap, true),
			rowC: bw(8, 20, 0.02, 0.02, 0.002178), rowS: bw(8, 20, 0.02, 0.02, 0.002178)},
		{file: "ib_send_lat.txt",
			c:    Dest{QPN: 0x1b, PSN: 0x33450f, GID: g2},
			s:    Dest{QPN: 0x20, PSN: 0x42169c, GID: g1},
			hdrC: lat(false), hdrS: lat(true),
			latC:    &LatResult{Min: 341.07, Max: 3851.73, Typical: 772.24, Avg: 778.20, Stdev: 363.17, P99: 3851.73, P999: 3851.73},
			latS:    &LatResult{Min: 375.85, Max: 2167.11, Typical: 638.59, Avg: 738.09, Stdev: 381.72, P99: 2167.11, P999: 2167.11},
			latSize: 64, latIters: 20},
		// ib_write_lat prints "PCIe relax order: OFF", unlike the others.
		{file: "ib_write_lat.txt",
			c:    Dest{QPN: 0x5c, PSN: 0xb5427c, RKey: 0x47cc, VAddr: 0x56402724f000, GID: g1},
			s:    Dest{QPN: 0x5b, PSN: 0x19cdfa, RKey: 0x4606, VAddr: 0x55d49faa5000, GID: g1},
			hdrC: latOf(Write, false), hdrS: latOf(Write, true),
			latC:    &LatResult{Min: 2382.84, Max: 4166.98, Typical: 3949.68, Avg: 3840.48, Stdev: 377.38, P99: 4166.98, P999: 4166.98},
			latS:    &LatResult{Min: 2499.21, Max: 4175.07, Typical: 3943.19, Avg: 3840.73, Stdev: 348.38, P99: 4175.07, P999: 4175.07},
			latSize: 64, latIters: 20},
		// The server of ib_read_lat prints no table: the client alone measures.
		{file: "ib_read_lat.txt",
			c:    Dest{QPN: 0x5e, PSN: 0xf38828, OutReads: 128, RKey: 0x4999, VAddr: 0x55904b0e7000, GID: g1},
			s:    Dest{QPN: 0x5d, PSN: 0xf0e03e, OutReads: 128, RKey: 0x4806, VAddr: 0x55b835c44000, GID: g1},
			hdrC: latOf(Read, false), hdrS: latOf(Read, true),
			latC:    &LatResult{Min: 54.79, Max: 164.10, Typical: 58.16, Avg: 65.52, Stdev: 18.37, P99: 164.10, P999: 164.10},
			latSize: 64, latIters: 20},
	} {
		t.Run(tc.file, func(t *testing.T) {
			want := goldenSections(t, tc.file)
			p := pair{
				client: goldenSide{hdr: tc.hdrC, local: tc.c, remote: tc.s, bw: tc.rowC, lat: tc.latC, size: tc.latSize, iters: tc.latIters},
				server: goldenSide{hdr: tc.hdrS, local: tc.s, remote: tc.c, bw: tc.rowS, lat: tc.latS, size: tc.latSize, iters: tc.latIters},
			}
			require.Equal(t, want["client"], render(p.client), "client")
			require.Equal(t, want["server"], render(p.server), "server")
		})
	}
}

func TestCHex(t *testing.T) {
	for _, tc := range []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"}, {0x16, 6, "0x0016"}, {0x282f8, 6, "0x282f8"}, {0x80, 4, "0x80"},
		{0x786, 8, "0x000786"}, {0x561cbeb2d000, 16, "0x00561cbeb2d000"}, {0, 16, "0000000000000000"},
		{0xffffffffffffffff, 16, "0xffffffffffffffff"},
	} {
		require.Equal(t, tc.want, cHex(tc.v, tc.width), "%#x width %d", tc.v, tc.width)
	}
}

func TestBWRowFormats(t *testing.T) {
	r := BWReport{Size: 65536, Iters: 5000, Peak: 1234.5678, Avg: 1200.25, MsgRate: 0.0192}
	var b bytes.Buffer
	WriteBWRow(&b, r, OutputBandwidth, false)
	WriteBWRow(&b, r, OutputMsgRate, false)
	require.Equal(t, "1200.250000\n0.019200\n", b.String())
	b.Reset()
	WriteBWRow(&b, BWReport{Size: 8, Iters: 20, Peak: 0.05, Avg: 0.04, MsgRate: 0.5}, FullVerbosity, true)
	require.Equal(t, " 8          20           0.050000            0.040000            0.500000\n", b.String())
}

func TestHeaderVariants(t *testing.T) {
	var b bytes.Buffer
	Header{Verb: Write, Duplex: true, PostList: 4, Events: true, Device: "rvt0", QPs: 4, Conn: "UC",
		Server: true, TxDepth: 128, CQMod: 100, MTU: 4096, LinkType: "Ethernet", GIDIndex: -1}.Write(&b)
	got := b.String()
	require.Contains(t, got, "                    RDMA_Write Bidirectional Post List BW Test\n Test with events. Using rvt0_comp0\n")
	require.Contains(t, got, " TX depth        : 128\n Post List       : 4\n CQ Moderation   : 100\n")
	require.NotContains(t, got, "GID index")
}

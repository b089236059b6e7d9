package transport

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// Golden packets: RoCEv2 captures made by Linux Soft-RoCE (rxe) and
// rdma-core tools. ICRC.txt lists every packet with the ICRC rxe wrote, as
// checked by an independent implementation; each NAME.txt says which tools
// ran and which QP numbers they used.

// capturesDir is the repository's copy of those captures.
const capturesDir = "../testdata/captures"

// capturedPacket is one RoCEv2 packet of a capture.
type capturedPacket struct {
	file  string // base name of the pcap
	frame int    // 1-based frame number in the pcap
	ip    []byte // IP header .. ICRC
	ipHdr int    // IP header length
}

// ib returns the bytes from the BTH through the ICRC.
func (c capturedPacket) ib() []byte { return c.ip[c.ipHdr+netdev.UDPHeaderLen:] }

// ibNoICRC returns the bytes Parse takes: BTH .. pad.
func (c capturedPacket) ibNoICRC() []byte { ib := c.ib(); return ib[:len(ib)-ICRCLen] }

func (c capturedPacket) String() string { return c.file + "#" + strconv.Itoa(c.frame) }

// requireCaptures returns the pcap files. The captures are part of the
// repository, so their absence fails the test rather than skipping it.
func requireCaptures(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	require.NoError(tb, err)
	require.NotEmpty(tb, files, "no pcap files in %s", capturesDir)
	return files
}

// loadCaptures reads every RoCEv2 packet (UDP destination port 4791) of
// every capture.
func loadCaptures(tb testing.TB) []capturedPacket {
	tb.Helper()
	var out []capturedPacket
	for _, path := range requireCaptures(tb) {
		out = append(out, readPcap(tb, path)...)
	}
	return out
}

func readPcap(tb testing.TB, path string) []capturedPacket {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	require.NoError(tb, err, path)
	require.Equal(tb, layers.LinkTypeEthernet, r.LinkType(), path)
	var out []capturedPacket
	for frame := 1; ; frame++ {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		require.NoError(tb, err, path)
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true})
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || udp.DstPort != RoCEv2Port {
			continue
		}
		// The IP packet starts after the link layers (Ethernet, VLAN tags).
		start := 0
		var ipHdr, ipLen int
		for _, l := range pkt.Layers() {
			if v4, ok := l.(*layers.IPv4); ok {
				ipHdr, ipLen = int(v4.IHL)*4, int(v4.Length)
				break
			}
			if v6, ok := l.(*layers.IPv6); ok {
				ipHdr, ipLen = netdev.IPv6HeaderLen, netdev.IPv6HeaderLen+int(v6.Length)
				break
			}
			start += len(l.LayerContents())
		}
		require.NotZero(tb, ipHdr, "%s#%d: no IP layer", path, frame)
		require.LessOrEqual(tb, start+ipLen, len(data), "%s#%d: truncated capture", path, frame)
		ip := make([]byte, ipLen)
		copy(ip, data[start:start+ipLen])
		out = append(out, capturedPacket{file: filepath.Base(path), frame: frame, ip: ip, ipHdr: ipHdr})
	}
	return out
}

// icrcLine is one table line of ICRC.txt.
type icrcLine struct {
	name     string // icrc_check.py's short name, e.g. "RC WRITE_ONLY_IMM"
	dqp, psn uint32
	length   int    // BTH .. ICRC
	icrc     []byte // the 4 wire bytes
}

var icrcLineRE = regexp.MustCompile(`^\s*(\d+)\s+\S+ -> \S+\s+(.+?)\s+dqp=0x([0-9a-f]{6}) psn=0x([0-9a-f]{6}) len=(\d+)\s+icrc=([0-9a-f]{8}) (\S+)`)

// readICRCTable parses ICRC.txt into file -> frame -> line.
func readICRCTable(tb testing.TB) map[string]map[int]icrcLine {
	tb.Helper()
	f, err := os.Open(filepath.Join(capturesDir, "ICRC.txt"))
	require.NoError(tb, err)
	defer f.Close()
	out := map[string]map[int]icrcLine{}
	var cur map[int]icrcLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "== "); ok {
			cur = map[int]icrcLine{}
			out[filepath.Base(name)] = cur
			continue
		}
		m := icrcLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		require.NotNil(tb, cur, "table line before a file header: %q", line)
		require.Equal(tb, "OK", m[7], "ICRC.txt marks a packet bad: %q", line)
		frame, _ := strconv.Atoi(m[1])
		dqp, _ := strconv.ParseUint(m[3], 16, 32)
		psn, _ := strconv.ParseUint(m[4], 16, 32)
		length, _ := strconv.Atoi(m[5])
		icrc, err := hex.DecodeString(m[6])
		require.NoError(tb, err)
		cur[frame] = icrcLine{name: m[2], dqp: uint32(dqp), psn: uint32(psn), length: length, icrc: icrc}
	}
	require.NoError(tb, sc.Err())
	return out
}

// ibtaName turns icrc_check.py's short opcode names into the IBTA-style names
// of the opcode table: "RC WRITE_LAST_IMM" -> "RC RDMA_WRITE_LAST_WITH_IMMEDIATE".
func ibtaName(short string) string {
	class, op, ok := strings.Cut(short, " ")
	if !ok {
		return short
	}
	if strings.HasPrefix(op, "WRITE_") || strings.HasPrefix(op, "READ_") {
		op = "RDMA_" + op
	}
	if s, ok := strings.CutSuffix(op, "_IMM"); ok {
		op = s + "_WITH_IMMEDIATE"
	}
	if s, ok := strings.CutSuffix(op, "_INV"); ok {
		op = s + "_WITH_INVALIDATE"
	}
	return class + " " + op
}

var qpnRE = regexp.MustCompile(`QPN 0x([0-9a-fA-F]+)`)

// captureQPNs returns the QP numbers a capture's .txt names, if any.
func captureQPNs(tb testing.TB, pcap string) map[uint32]bool {
	tb.Helper()
	txt, err := os.ReadFile(filepath.Join(capturesDir, strings.TrimSuffix(pcap, ".pcap")+".txt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(tb, err)
	var out map[uint32]bool
	for _, m := range qpnRE.FindAllStringSubmatch(string(txt), -1) {
		n, err := strconv.ParseUint(m[1], 16, 32)
		require.NoError(tb, err)
		if out == nil {
			out = map[uint32]bool{}
		}
		out[uint32(n)] = true
	}
	return out
}

// reencode writes the headers of p into a zeroed buffer with the setters,
// from the parsed fields and the getters only.
func reencode(p *Packet) []byte {
	out := make([]byte, p.HdrLen)
	b := BTH(out)
	b.Init(p.Opcode, p.PKey, p.DestQP, p.PSN)
	b.SetSE(p.SE)
	b.SetMigReq(p.MigReq)
	b.SetPadCount(p.PadCount)
	b.SetFECN(p.FECN)
	b.SetBECN(p.BECN)
	b.SetAckReq(p.AckReq)
	info := p.Info
	for _, h := range info.Headers() {
		dst := out[info.Offset(h) : info.Offset(h)+h.Len()]
		switch h {
		case HdrRETH:
			src, d := p.RETH(), RETH(dst)
			d.SetVA(src.VA())
			d.SetRKey(src.RKey())
			d.SetDMALen(src.DMALen())
		case HdrAETH:
			src, d := p.AETH(), AETH(dst)
			d.SetSyndrome(src.Syndrome())
			d.SetMSN(src.MSN())
		case HdrAtomicETH:
			src, d := p.AtomicETH(), AtomicETH(dst)
			d.SetVA(src.VA())
			d.SetRKey(src.RKey())
			d.SetSwapAdd(src.SwapAdd())
			d.SetCompare(src.Compare())
		case HdrAtomicAckETH:
			AtomicAckETH(dst).SetOrigData(p.AtomicAckETH().OrigData())
		case HdrDETH:
			src, d := p.DETH(), DETH(dst)
			d.SetQKey(src.QKey())
			d.SetSrcQP(src.SrcQP())
		case HdrImmDt:
			ImmDt(dst).SetImm(p.ImmDt().Imm())
		case HdrIETH:
			IETH(dst).SetRKey(p.IETH().RKey())
		case HdrCNPResv:
			// reserved: zero
		}
	}
	return out
}

func TestGoldenCaptures(t *testing.T) {
	pkts := loadCaptures(t)
	table := readICRCTable(t)
	qpns := map[string]map[uint32]bool{}
	seen := map[string]int{}
	opcodes := map[Opcode]int{}
	for _, c := range pkts {
		if _, ok := qpns[c.file]; !ok {
			qpns[c.file] = captureQPNs(t, c.file)
		}
		t.Run(c.String(), func(t *testing.T) {
			want, ok := table[c.file][c.frame]
			require.True(t, ok, "packet not listed in ICRC.txt")
			seen[c.file]++
			ib := c.ib()

			// ICRC: verifies, and equals what rxe wrote and ICRC.txt lists.
			require.True(t, CheckICRC(c.ip))
			crc, err := ICRC(c.ip[:len(c.ip)-ICRCLen])
			require.NoError(t, err)
			require.Equal(t, want.icrc, ib[len(ib)-ICRCLen:])
			require.Equal(t, binary.LittleEndian.Uint32(want.icrc), crc)
			cp := append([]byte(nil), c.ip...)
			clear(cp[len(cp)-ICRCLen:])
			require.NoError(t, PutICRC(cp))
			require.Equal(t, c.ip, cp)

			// Parse and the fields ICRC.txt lists.
			var p Packet
			require.NoError(t, Parse(c.ibNoICRC(), &p))
			opcodes[p.Opcode]++
			require.Equal(t, ibtaName(want.name), p.Opcode.String())
			require.Equal(t, want.dqp, p.DestQP)
			require.Equal(t, PSN(want.psn), p.PSN)
			require.Equal(t, want.length, len(ib))
			require.Equal(t, len(c.ibNoICRC()), int(p.HdrLen)+int(p.PayloadLen)+int(p.PadCount))
			require.Equal(t, p.Info.HdrLen, int(p.HdrLen))
			require.Len(t, p.Payload(), int(p.PayloadLen))
			require.Equal(t, uint16(DefaultPKey), p.PKey)
			if set := qpns[c.file]; set != nil {
				require.True(t, set[p.DestQP] || p.DestQP == GSIQPN,
					"dest QP %#x is not one the capture's tools used (%v)", p.DestQP, set)
			}
			if p.Info.HasHdr(HdrAETH) {
				require.True(t, p.AETH().Syndrome().Valid(), p.AETH().Syndrome().String())
			}
			if p.Opcode.Class() == ClassUD && p.DestQP == GSIQPN {
				require.Equal(t, uint32(GSIQKey), p.DETH().QKey())
			}

			// Re-encoding every header field gives the captured bytes.
			require.Equal(t, ib[:p.HdrLen], reencode(&p))
		})
	}
	for file, lines := range table {
		require.Equal(t, len(lines), seen[file], "%s: ICRC.txt lists packets the pcap does not hold", file)
	}
	t.Logf("%d RoCEv2 packets in %d captures; opcodes: %v", len(pkts), len(table), opcodes)
}

// TestGoldenICRCMasks changes each field the ICRC masks (the ICRC must not
// change) and a few it covers (it must).
func TestGoldenICRCMasks(t *testing.T) {
	pkts := loadCaptures(t)
	masked := []struct {
		name string
		off  func(c capturedPacket) int
	}{
		{"IPv4 TOS", func(capturedPacket) int { return 1 }},
		{"IPv4 TTL", func(capturedPacket) int { return 8 }},
		{"IPv4 checksum", func(capturedPacket) int { return 10 }},
		{"UDP checksum", func(c capturedPacket) int { return c.ipHdr + 6 }},
		{"BTH FECN/BECN/resv", func(c capturedPacket) int { return c.ipHdr + netdev.UDPHeaderLen + 4 }},
	}
	covered := []struct {
		name string
		off  func(c capturedPacket) int
	}{
		{"IPv4 ID", func(capturedPacket) int { return 4 }},
		{"IPv4 source", func(capturedPacket) int { return 12 }},
		{"UDP source port", func(c capturedPacket) int { return c.ipHdr }},
		{"UDP length", func(c capturedPacket) int { return c.ipHdr + 5 }},
		{"BTH opcode", func(c capturedPacket) int { return c.ipHdr + netdev.UDPHeaderLen }},
		{"BTH dest QP", func(c capturedPacket) int { return c.ipHdr + netdev.UDPHeaderLen + 7 }},
		{"BTH AckReq/resv", func(c capturedPacket) int { return c.ipHdr + netdev.UDPHeaderLen + 8 }},
		{"last byte before ICRC", func(c capturedPacket) int { return len(c.ip) - ICRCLen - 1 }},
	}
	for _, c := range pkts {
		require.Equal(t, byte(4), c.ip[0]>>4, "the captures are IPv4")
		for _, m := range masked {
			cp := append([]byte(nil), c.ip...)
			cp[m.off(c)] ^= 0xA5
			require.True(t, CheckICRC(cp), "%s: %s is masked", c, m.name)
		}
		for _, m := range covered {
			cp := append([]byte(nil), c.ip...)
			cp[m.off(c)] ^= 0x01
			require.False(t, CheckICRC(cp), "%s: %s is covered", c, m.name)
		}
	}
}

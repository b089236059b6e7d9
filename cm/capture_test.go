package cm

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
)

// capturesDir holds the RoCEv2 captures made by Linux rxe and rdma-core
// (rping.pcap, ucmatose.pcap, udaddy.pcap carry the CM exchanges).
const capturesDir = "../testdata/captures"

// capturedMAD is one CM MAD of a capture with its frame number.
type capturedMAD struct {
	file  string
	frame int
	src   [4]byte // IPv4 source of the frame
	mad   []byte  // the 256 bytes
}

// loadCMMADs returns every MAD sent to QP 1 (UD SEND_ONLY, DestQP 1) of the
// named captures, in order.
func loadCMMADs(tb testing.TB, names ...string) []capturedMAD {
	tb.Helper()
	var out []capturedMAD
	for _, name := range names {
		path := filepath.Join(capturesDir, name)
		fh, err := os.Open(path)
		require.NoError(tb, err, "the captures are part of the repository")
		r, err := pcapgo.NewReader(fh)
		require.NoError(tb, err)
		for frame := 1; ; frame++ {
			data, _, err := r.ReadPacketData()
			if err == io.EOF {
				break
			}
			require.NoError(tb, err)
			pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if !ok || udp.DstPort != 4791 {
				continue
			}
			ib := udp.Payload
			// BTH opcode 0x64 (UD SEND_ONLY), destination QP 1; DETH follows.
			if len(ib) < 20+MADLen || ib[0] != 0x64 || binary.BigEndian.Uint32(ib[4:])&0xFFFFFF != 1 {
				continue
			}
			var src [4]byte
			if v4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
				copy(src[:], v4.SrcIP.To4())
			}
			out = append(out, capturedMAD{file: name, frame: frame, src: src,
				mad: append([]byte(nil), ib[20:20+MADLen]...)})
		}
		fh.Close()
	}
	return out
}

package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// bthReserved masks the reserved bits of a BTH, which Parse ignores and the
// Packet does not keep.
var bthReserved = [BTHLen]byte{4: 0x3F, 8: 0x7F}

func FuzzParse(f *testing.F) {
	// Seeds: every packet of the golden captures, plus one of each opcode.
	for _, c := range loadCaptures(f) {
		f.Add(c.ibNoICRC())
	}
	for op := range 256 {
		if Opcode(op).Valid() {
			f.Add(buildPkt(Opcode(op), 5))
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := Parse(b, &p)
		if err != nil {
			r, ok := DropReasonOf(err)
			require.True(t, ok, "Parse returned an error without a drop reason: %v", err)
			require.Contains(t, []DropReason{DropTruncated, DropBadOpcode, DropBadVersion, DropBadPad, DropBadLength}, r)
			return
		}
		require.True(t, p.Info.Valid())
		require.Same(t, p.Opcode.Info(), p.Info)
		require.Equal(t, p.Info.HdrLen, int(p.HdrLen))
		require.Equal(t, len(b), int(p.HdrLen)+int(p.PayloadLen)+int(p.PadCount))
		require.Zero(t, (int(p.PayloadLen)+int(p.PadCount))%4)
		require.Len(t, p.Payload(), int(p.PayloadLen))
		require.True(t, p.PSN.Valid())
		require.LessOrEqual(t, p.DestQP, uint32(0xFFFFFF))
		for _, h := range p.Info.Headers() {
			off := p.Info.Offset(h)
			require.GreaterOrEqual(t, off, BTHLen)
			require.LessOrEqual(t, off+h.Len(), int(p.HdrLen))
		}
		_, _, _, _ = p.RETH(), p.AETH(), p.AtomicETH(), p.AtomicAckETH()
		_, _, _ = p.DETH(), p.ImmDt(), p.IETH()
		// Re-encoding the parsed fields gives the same BTH, reserved bits aside.
		enc := reencode(&p)
		for i := range BTHLen {
			require.Equal(t, b[i]&^bthReserved[i], enc[i], "BTH byte %d", i)
		}
	})
}

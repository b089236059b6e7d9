package transport

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

func TestResumePacket(t *testing.T) {
	const mtu = 1024
	first := PSN(0xFFFFFE) // the message's PSNs wrap
	tests := []struct {
		name   string
		retry  PSN
		length uint32
		want   uint32
	}{
		{"from the first packet", first, 4096, 0},
		{"from the third", first.Add(2), 4096, 2},
		{"from the last", first.Add(3), 4096, 3},
		{"past a multiple of the MTU: the last packet", first.Add(4), 4096, 3},
		{"past a partial last packet", first.Add(9), 4000, 3},
		{"before the message: its start", first.Sub(5), 4096, 0},
		{"zero-length message", first.Add(1), 0, 0},
		{"one short packet", first.Add(1), 10, 0},
	}
	for _, tc := range tests {
		got := resumePacket(tc.retry, first, tc.length, mtu)
		require.Equal(t, tc.want, got, "%s: retry %#x first %#x length %d", tc.name, uint32(tc.retry), uint32(first), tc.length)
	}
}

// TestGatherScatter walks an SGE list with an empty SGE in it at every
// message offset and length: scatter writes exactly the bytes of the
// message range into the right SGEs, gather reads them back, and view
// returns memory in place only when the range lies in one SGE.
func TestGatherScatter(t *testing.T) {
	tb := keys.NewTable(6)
	pd := keys.NewPD(1)
	lens := []uint32{5, 0, 7, 4}
	var sgl []qp.SGE
	var mrs []*keys.MR
	var bufs [][]byte
	for i, n := range lens {
		buf := make([]byte, n)
		mr, err := tb.RegMR(pd, buf, uint64(0x1000*(i+1)), keys.LocalWrite)
		require.NoError(t, err)
		sgl = append(sgl, qp.SGE{Addr: mr.IOVA, Length: n, Lkey: mr.Lkey})
		mrs, bufs = append(mrs, mr), append(bufs, buf)
	}
	flat := func() []byte { return slices.Concat(bufs...) }
	total := uint32(len(flat()))
	// inOne reports whether the n bytes at message offset off lie in one
	// SGE (none for an offset at the end), from the SGEs' start offsets.
	inOne := func(off, n uint32) bool {
		start := uint32(0)
		for _, l := range lens {
			if off >= start && off < start+l {
				return off+n <= start+l
			}
			start += l
		}
		return false
	}
	w := &qp.SendWQE{WR: qp.SendWR{SGL: sgl}, MRs: mrs}
	for off := uint32(0); off <= total; off++ {
		for n := uint32(0); off+n <= total; n++ {
			for _, b := range bufs {
				clear(b)
			}
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i + 1)
			}
			scatter(sgl, mrs, off, src)
			want := make([]byte, total)
			copy(want[off:], src)
			require.Equal(t, want, flat(), "scatter at %d, %d bytes", off, n)
			got := make([]byte, n)
			gather(w, off, got)
			require.Equal(t, src, got, "gather at %d, %d bytes", off, n)
			v := view(w, off, n)
			if inOne(off, n) {
				require.Equal(t, src, v, "view at %d, %d bytes: one SGE", off, n)
			} else {
				require.Nil(t, v, "view at %d, %d bytes spans SGEs", off, n)
			}
		}
	}
}

func TestNpkts(t *testing.T) {
	for _, c := range []struct{ n, mtu, want uint32 }{
		{0, 1024, 1}, // a zero-length message still takes a packet
		{1, 1024, 1},
		{1023, 1024, 1},
		{1024, 1024, 1},
		{1025, 1024, 2},
		{4096, 1024, 4},
		{4097, 1024, 5},
		{1 << 31, 4096, 1 << 19},
		{1<<31 + 1, 256, 1<<23 + 1},
	} {
		require.Equal(t, c.want, npkts(c.n, c.mtu), "npkts(%d, %d)", c.n, c.mtu)
	}
}

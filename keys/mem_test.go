package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadWriteContiguous(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	buf := make([]byte, 100)
	mr, err := tb.RegMR(pd, buf, 0x1000, LocalWrite)
	require.NoError(t, err)
	require.Equal(t, 5, mr.WriteAt([]byte("hello"), 0x1000+10))
	require.Equal(t, "hello", string(buf[10:15]), "registered memory is the caller's buffer")
	p := make([]byte, 5)
	require.Equal(t, 5, mr.ReadAt(p, 0x100a))
	require.Equal(t, "hello", string(p))

	// Out-of-range copies are clamped, never panic.
	require.Equal(t, 0, mr.ReadAt(p, 0xfff))
	require.Equal(t, 0, mr.ReadAt(p, 0x1000+100))
	require.Equal(t, 2, mr.WriteAt([]byte("xyz"), 0x1000+98))
	require.Equal(t, 0, mr.ReadAt(p, ^uint64(0)))
	require.Nil(t, mr.Word(0x1000+96))
	require.Nil(t, mr.Word(0x0))

	w := mr.Word(0x1000 + 8)
	require.Len(t, w, 8)
	require.Equal(t, 8, cap(w), "the word cannot be appended into the neighbour")
	w[0] = 0xee
	require.Equal(t, byte(0xee), buf[8])
}

func TestReadWritePages(t *testing.T) {
	const ps = 16
	tb := NewTable(4)
	pd := NewPD(1)
	mr, err := tb.AllocMR(pd, 8)
	require.NoError(t, err)
	pages := make([][]byte, 5)
	for i := range pages {
		pages[i] = make([]byte, ps)
	}
	const iova = 0x2000 + 5 // starts 5 bytes into the first page
	const length = 4*ps + 3 // ends 8 bytes into the fifth page
	require.NoError(t, mr.MapPages(pages, ps, iova, length))
	require.NoError(t, tb.FastReg(pd, mr, 1, LocalWrite))

	for _, tc := range []struct {
		name string
		off  uint64
		n    int
	}{
		{"inside a page", 1, 4},
		{"to a page end", 0, ps - 5},
		{"across one boundary", 8, 8},
		{"across all pages", 0, length},
		{"from a page start", ps - 5, ps},
		{"last byte", length - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.n)
			for i := range data {
				data[i] = byte(0x80 + i)
			}
			require.Equal(t, tc.n, mr.WriteAt(data, iova+tc.off))
			// The bytes land at the right page offsets.
			for i := range data {
				pos := 5 + tc.off + uint64(i)
				require.Equal(t, data[i], pages[pos/ps][pos%ps], "byte %d", i)
			}
			back := make([]byte, tc.n)
			require.Equal(t, tc.n, mr.ReadAt(back, iova+tc.off))
			require.Equal(t, data, back)
		})
	}

	// Clamped at the end of the region (not at the end of the last page).
	require.Equal(t, 3, mr.ReadAt(make([]byte, 10), iova+length-3))
	require.Equal(t, 0, mr.WriteAt(make([]byte, 10), iova+length))
	require.Equal(t, 0, mr.ReadAt(make([]byte, 10), iova-1))

	// Word: aligned addresses map to one page.
	w := mr.Word(0x2000 + 3*ps + 8)
	require.Len(t, w, 8)
	w[7] = 0x99
	require.Equal(t, byte(0x99), pages[3][15])
	require.Nil(t, mr.Word(0x2000+4*ps+8), "past the region")
	require.Nil(t, mr.Word(0x2000), "before the region")
}

func TestZeroBasedContiguous(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	buf := make([]byte, 64)
	mr, err := tb.RegMR(pd, buf, 0xdead0000, LocalWrite|RemoteWrite|ZeroBased)
	require.NoError(t, err)
	got, err := tb.CheckRemote(pd, mr.Rkey, 8, 8, RemoteWrite)
	require.NoError(t, err)
	got.WriteAt([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 8)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, buf[8:16])
	require.Equal(t, buf[8:16], mr.Word(8))
}

func TestEmptyMRData(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	mr, err := tb.AllocMR(pd, 1)
	require.NoError(t, err)
	// Never mapped: every copy is empty, nothing panics.
	require.Equal(t, 0, mr.ReadAt(make([]byte, 8), 0))
	require.Equal(t, 0, mr.WriteAt(make([]byte, 8), 0))
	require.Nil(t, mr.Word(0))
}

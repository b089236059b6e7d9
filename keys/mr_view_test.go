package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMRView(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	buf := make([]byte, 100)
	mr, err := tb.RegMR(pd, buf, 0x1000, LocalWrite)
	require.NoError(t, err)
	v, ok := mr.View(0x1010, 20)
	require.True(t, ok)
	v[0] = 7
	require.Equal(t, byte(7), buf[0x10], "the view aliases the memory")
	_, ok = mr.View(0x1000+90, 20)
	require.False(t, ok, "past the end")
	_, ok = mr.View(0xFFF, 2)
	require.False(t, ok, "before the start")

	fr, err := tb.AllocMR(pd, 2)
	require.NoError(t, err)
	pages := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	require.NoError(t, fr.MapPages(pages, 4096, 0x20000, 8192))
	v, ok = fr.View(0x20000+4000, 96)
	require.True(t, ok)
	v[95] = 9
	require.Equal(t, byte(9), pages[0][4095])
	_, ok = fr.View(0x20000+4000, 97)
	require.False(t, ok, "spans two pages")
	v, ok = fr.View(0x20000+4096, 10)
	require.True(t, ok)
	v[0] = 3
	require.Equal(t, byte(3), pages[1][0])
}

func TestSpan(t *testing.T) {
	s := span{base: 0x1000, length: 16}
	const max = ^uint64(0)
	cases := []struct {
		name    string
		s       span
		addr, n uint64
		off     uint64
		err     error // from contains; offset fails exactly when err != nil
	}{
		{"all", s, 0x1000, 16, 0, nil},
		{"last byte", s, 0x100f, 1, 15, nil},
		{"empty at the end", s, 0x1010, 0, 16, nil},
		{"before", s, 0xfff, 1, 0, errBounds},
		{"one past the end", s, 0x1001, 16, 0, errBounds},
		{"start past the end", s, 0x1011, 0, 0, errBounds},
		{"wraps", s, 0x1008, max - 4, 0, errOverflow},
		{"wraps at the top", span{base: max - 15, length: 16}, max, 2, 0, errOverflow},
		{"top byte", span{base: max - 15, length: 15}, max - 1, 1, 14, nil},
		{"empty span", span{}, 0, 1, 0, errBounds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			off, ok := c.s.offset(c.addr, c.n)
			require.Equal(t, c.err == nil, ok)
			require.Equal(t, c.off, off)
			require.Equal(t, c.err, c.s.contains(c.addr, c.n))
		})
	}
}

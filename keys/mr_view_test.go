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

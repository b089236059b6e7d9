package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// regMR registers a fresh buffer and fails the test on error.
func regMR(t testing.TB, tb *Table, pd *PD, n int, iova uint64, access Access) *MR {
	t.Helper()
	mr, err := tb.RegMR(pd, make([]byte, n), iova, access)
	require.NoError(t, err)
	return mr
}

// makePages returns n pages of size ps; page i byte j holds byte(i*ps+j).
func makePages(n, ps int) [][]byte {
	pages := make([][]byte, n)
	for i := range pages {
		pages[i] = make([]byte, ps)
		for j := range pages[i] {
			pages[i][j] = byte(i*ps + j)
		}
	}
	return pages
}

// fastMR allocates, maps and fast-registers an MR over n pages of ps bytes
// starting at iova (page aligned) with the given key byte and access.
func fastMR(t testing.TB, tb *Table, pd *PD, n, ps int, iova uint64, key uint8, access Access) (*MR, [][]byte) {
	t.Helper()
	mr, err := tb.AllocMR(pd, n)
	require.NoError(t, err)
	pages := makePages(n, ps)
	require.NoError(t, mr.MapPages(pages, ps, iova, uint64(n*ps)))
	require.NoError(t, tb.FastReg(pd, mr, key, access))
	return mr, pages
}

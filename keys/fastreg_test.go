package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFastRegLifeCycle(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	const ps = 256
	const iova = 0x4000
	mr, err := tb.AllocMR(pd, 4)
	require.NoError(t, err)
	require.True(t, mr.FastRegister())
	require.False(t, mr.Valid())
	require.Equal(t, mr.Lkey, mr.Rkey)
	require.Equal(t, uint32(0), mr.Lkey&0xff)
	idxGen := mr.Lkey &^ 0xff

	// Allocated but not registered: keys fail.
	_, err = tb.CheckLocal(pd, mr.Lkey, iova, 8, 0)
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = tb.CheckRemote(pd, mr.Rkey, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)

	pages := makePages(4, ps)
	require.NoError(t, mr.MapPages(pages, ps, iova, 4*ps))
	require.Equal(t, uint64(iova), mr.IOVA)
	require.Equal(t, uint64(4*ps), mr.Length)
	_, err = tb.CheckRemote(pd, mr.Rkey, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey, "mapped but not registered")

	// REG_MR with key byte 0x11.
	require.ErrorIs(t, tb.FastReg(NewPD(2), mr, 0x11, RemoteRead), ErrPDMismatch)
	require.NoError(t, tb.FastReg(pd, mr, 0x11, LocalWrite|RemoteRead|RemoteWrite))
	require.True(t, mr.Valid())
	require.Equal(t, idxGen|0x11, mr.Lkey, "key byte replaced, index and generation kept")
	require.Equal(t, mr.Lkey, mr.Rkey)
	key1 := mr.Rkey

	got, err := tb.CheckRemote(pd, key1, iova+ps-4, 8, RemoteWrite)
	require.NoError(t, err)
	require.Same(t, mr, got)
	got, err = tb.CheckLocal(pd, key1, iova, 4*ps, LocalWrite)
	require.NoError(t, err)
	require.Same(t, mr, got)
	_, err = tb.CheckRemote(pd, key1, iova, 8, RemoteAtomic)
	require.ErrorIs(t, err, ErrAccess)
	_, err = tb.CheckRemote(pd, idxGen, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey, "the allocation key byte no longer matches")

	// Valid MRs cannot be remapped or registered again.
	require.ErrorIs(t, mr.MapPages(pages[:1], ps, iova, ps), ErrInvalidState)
	require.ErrorIs(t, tb.FastReg(pd, mr, 0x12, RemoteRead), ErrInvalidState)

	// LOCAL_INV needs the exact key and the PD.
	require.ErrorIs(t, tb.Invalidate(pd, key1^0xff), ErrInvalidKey)
	require.ErrorIs(t, tb.Invalidate(pd, key1+1<<8), ErrInvalidKey)
	require.ErrorIs(t, tb.Invalidate(NewPD(2), key1), ErrPDMismatch)
	require.True(t, mr.Valid())
	require.NoError(t, tb.Invalidate(pd, key1))
	require.False(t, mr.Valid())
	require.NoError(t, tb.Invalidate(pd, key1), "invalidating an invalid MR succeeds")
	_, err = tb.CheckRemote(pd, key1, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	require.ErrorContains(t, err, "invalidated")
	_, err = tb.CheckLocal(pd, key1, iova, 8, 0)
	require.ErrorIs(t, err, ErrInvalidKey)

	// Remap smaller and register again with a new key byte.
	require.NoError(t, mr.MapPages(pages[1:3], ps, 0x9000+ps/2, ps))
	require.NoError(t, tb.FastReg(pd, mr, 0x12, RemoteRead))
	key2 := mr.Rkey
	require.Equal(t, idxGen|0x12, key2)
	_, err = tb.CheckRemote(pd, key1, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey, "old key byte")
	_, err = tb.CheckRemote(pd, key2, iova, 8, RemoteRead)
	require.ErrorIs(t, err, ErrBounds, "old range")
	got, err = tb.CheckRemote(pd, key2, 0x9000+ps/2, ps, RemoteRead)
	require.NoError(t, err)
	require.Same(t, mr, got)
	_, err = tb.CheckRemote(pd, key2, 0x9000+ps/2, ps+1, RemoteRead)
	require.ErrorIs(t, err, ErrBounds)
	buf := make([]byte, ps)
	require.Equal(t, ps, mr.ReadAt(buf, 0x9000+ps/2))
	require.Equal(t, pages[1][ps/2:], buf[:ps/2])
	require.Equal(t, pages[2][:ps/2], buf[ps/2:])

	// Dereg works in any state; the key dies with the slot.
	require.NoError(t, tb.DeregMR(mr))
	require.ErrorIs(t, tb.Invalidate(pd, key2), ErrInvalidKey)
	require.ErrorIs(t, tb.FastReg(pd, mr, 1, 0), ErrInvalidState)
	require.ErrorIs(t, mr.MapPages(nil, ps, 0, 0), ErrInvalidState)
	require.NoError(t, pd.Free(), "nothing holds the PD")
}

func TestFastRegErrors(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	_, err := tb.AllocMR(nil, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = tb.AllocMR(pd, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)

	reg := regMR(t, tb, pd, 64, 0, LocalWrite)
	require.ErrorIs(t, tb.FastReg(pd, reg, 1, 0), ErrInvalidArgument, "RegMR MR is not fast-register")
	require.ErrorIs(t, reg.MapPages(nil, 64, 0, 0), ErrInvalidArgument)
	require.ErrorIs(t, tb.Invalidate(pd, reg.Lkey), ErrInvalidArgument, "RegMR MR cannot be invalidated")
	require.True(t, reg.Valid())

	mr, err := tb.AllocMR(pd, 2)
	require.NoError(t, err)
	require.ErrorIs(t, tb.FastReg(pd, nil, 1, 0), ErrInvalidArgument)
	require.ErrorIs(t, tb.FastReg(nil, mr, 1, 0), ErrInvalidArgument)
	require.ErrorIs(t, NewTable(8).FastReg(pd, mr, 1, 0), ErrInvalidArgument, "foreign table")
	require.ErrorIs(t, tb.FastReg(pd, mr, 1, RemoteWrite), ErrInvalidArgument, "access rule")

	// Registering an MR never mapped gives an empty, valid MR.
	require.NoError(t, tb.FastReg(pd, mr, 1, RemoteRead))
	_, err = tb.CheckRemote(pd, mr.Rkey, 0, 1, RemoteRead)
	require.ErrorIs(t, err, ErrBounds)
}

func TestMapPages(t *testing.T) {
	const ps = 64
	full := func(n int) [][]byte { return makePages(n, ps) }
	short := func(n, last int) [][]byte {
		p := makePages(n, ps)
		p[n-1] = p[n-1][:last]
		return p
	}
	for _, tc := range []struct {
		name   string
		pages  [][]byte
		ps     int
		iova   uint64
		length uint64
		err    error
	}{
		{"one page", full(1), ps, 0x1000, ps, nil},
		{"four pages", full(4), ps, 0x1000, 4 * ps, nil},
		{"ends inside last page", full(3), ps, 0x1000, 2*ps + 1, nil},
		{"short last page", short(3, 10), ps, 0x1000, 2*ps + 10, nil},
		{"last page too short", short(3, 9), ps, 0x1000, 2*ps + 10, ErrInvalidArgument},
		{"last page too long", append(full(1), make([]byte, ps+1)), ps, 0x1000, ps + 1, ErrInvalidArgument},
		{"starts inside first page", full(2), ps, 0x1000 + 60, 8, nil},
		{"offset needs another page", full(1), ps, 0x1000 + 60, 8, ErrInvalidArgument},
		{"short middle page", [][]byte{make([]byte, ps), make([]byte, 8), make([]byte, ps)}, ps, 0x1000, 3 * ps, ErrInvalidArgument},
		{"too many for length", full(3), ps, 0x1000, 2 * ps, ErrInvalidArgument},
		{"too few for length", full(2), ps, 0x1000, 2*ps + 1, ErrInvalidArgument},
		{"more than maxPages", full(5), ps, 0x1000, 5 * ps, ErrInvalidArgument},
		{"zero length", nil, ps, 0x1000, 0, nil},
		{"zero length with a page", full(1), ps, 0x1000, 0, ErrInvalidArgument},
		{"page size not power of two", full(1), 48, 0, 48, ErrInvalidArgument},
		{"page size too small", full(1), 4, 0, 4, ErrInvalidArgument},
		{"page size zero", nil, 0, 0, 0, ErrInvalidArgument},
		{"iova overflow", full(1), ps, ^uint64(0) - 10, ps, ErrInvalidArgument},
		{"at the top", full(2), ps, ^uint64(0) - 2*ps + 1, 2*ps - 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(4)
			pd := NewPD(1)
			mr, err := tb.AllocMR(pd, 4)
			require.NoError(t, err)
			err = mr.MapPages(tc.pages, tc.ps, tc.iova, tc.length)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Equal(t, uint64(0), mr.Length, "a refused map changes nothing")
				return
			}
			require.NoError(t, err)
			require.NoError(t, tb.FastReg(pd, mr, 7, LocalWrite|RemoteRead))
			if tc.length > 0 {
				_, err = tb.CheckRemote(pd, mr.Rkey, tc.iova, uint32(tc.length), RemoteRead)
				require.NoError(t, err)
				// Every byte can be written and read back.
				data := make([]byte, tc.length)
				for i := range data {
					data[i] = byte(i*7 + 3)
				}
				require.Equal(t, len(data), mr.WriteAt(data, tc.iova))
				back := make([]byte, tc.length)
				require.Equal(t, len(back), mr.ReadAt(back, tc.iova))
				require.Equal(t, data, back)
			}
			_, err = tb.CheckRemote(pd, mr.Rkey, tc.iova, uint32(tc.length)+1, RemoteRead)
			require.ErrorIs(t, err, ErrBounds)
		})
	}
}

// TestMapPagesKeepsOwnList: the caller may reuse its page-list slice.
func TestMapPagesKeepsOwnList(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	mr, err := tb.AllocMR(pd, 2)
	require.NoError(t, err)
	pages := makePages(2, 16)
	first := pages[0]
	require.NoError(t, mr.MapPages(pages, 16, 0, 32))
	pages[0] = make([]byte, 16)
	require.NoError(t, tb.FastReg(pd, mr, 0, 0))
	b := make([]byte, 1)
	require.Equal(t, 1, mr.ReadAt(b, 3))
	require.Equal(t, first[3], b[0])
}

// TestFastRegZeroBased: with ZeroBased, addresses count from 0 and the page
// offset of IOVA is kept.
func TestFastRegZeroBased(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	mr, err := tb.AllocMR(pd, 3)
	require.NoError(t, err)
	pages := makePages(3, 64)
	require.NoError(t, mr.MapPages(pages, 64, 0x1000+16, 2*64))
	require.NoError(t, tb.FastReg(pd, mr, 3, LocalWrite|RemoteRead|ZeroBased))
	_, err = tb.CheckRemote(pd, mr.Rkey, 0, 128, RemoteRead)
	require.NoError(t, err)
	_, err = tb.CheckRemote(pd, mr.Rkey, 0x1010, 8, RemoteRead)
	require.ErrorIs(t, err, ErrBounds)
	b := make([]byte, 128)
	require.Equal(t, 128, mr.ReadAt(b, 0))
	require.Equal(t, pages[0][16:], b[:48])
	require.Equal(t, pages[1], b[48:112])
	require.Equal(t, pages[2][:16], b[112:])
	require.Equal(t, pages[1][8:16], mr.Word(56))

	// Re-register without ZeroBased: IOVA addressing again.
	require.NoError(t, tb.Invalidate(pd, mr.Rkey))
	require.NoError(t, tb.FastReg(pd, mr, 4, RemoteRead))
	_, err = tb.CheckRemote(pd, mr.Rkey, 0, 8, RemoteRead)
	require.ErrorIs(t, err, ErrBounds)
	_, err = tb.CheckRemote(pd, mr.Rkey, 0x1010, 128, RemoteRead)
	require.NoError(t, err)
	require.Equal(t, pages[1][8:16], mr.Word(0x1048))
}

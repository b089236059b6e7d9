package keys

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeProc is an Accessor over pages of a pretend address space, with
// pages that can be unmapped: like process_vm_readv, a copy stops at the
// first unmapped page and returns what it copied with an error.
type fakeProc struct {
	mu    sync.Mutex
	base  uint64 // address of mem[0]
	mem   []byte
	ps    uint64
	gone  map[uint64]bool // unmapped page numbers
	dead  bool            // the whole process is gone
	calls int
}

var errFault = errors.New("fake: bad address")

func newFakeProc(base uint64, n int, ps uint64) *fakeProc {
	p := &fakeProc{base: base, mem: make([]byte, n), ps: ps, gone: map[uint64]bool{}}
	for i := range p.mem {
		p.mem[i] = byte(i * 3)
	}
	return p
}

func (f *fakeProc) do(b []byte, addr uint64, write bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.dead {
		return 0, errors.New("fake: no such process")
	}
	n := 0
	for n < len(b) {
		a := addr + uint64(n)
		if a < f.base || a >= f.base+uint64(len(f.mem)) || f.gone[a/f.ps] {
			return n, errFault
		}
		off := a - f.base
		end := min(uint64(len(f.mem)), (a/f.ps+1)*f.ps-f.base) // to the page end
		var c int
		if write {
			c = copy(f.mem[off:end], b[n:])
		} else {
			c = copy(b[n:], f.mem[off:end])
		}
		n += c
	}
	return n, nil
}

func (f *fakeProc) ReadAt(b []byte, addr uint64) (int, error)  { return f.do(b, addr, false) }
func (f *fakeProc) WriteAt(b []byte, addr uint64) (int, error) { return f.do(b, addr, true) }

func TestAccessorMRReadWrite(t *testing.T) {
	const ps = 64
	proc := newFakeProc(0x7000, 8*ps, ps)
	tb := NewTable(8)
	pd := NewPD(1)
	// 5 pages of the process from its address 0x7000+16, at IOVA 0x100000.
	const addr, iova, n = 0x7000 + 16, 0x100000, 5 * ps
	mr, err := tb.RegMRAccessor(pd, proc, addr, n, iova, LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic)
	require.NoError(t, err)
	require.True(t, mr.Accessed())
	require.Equal(t, uint64(iova), mr.IOVA)
	require.Equal(t, uint64(n), mr.Length)

	got, err := tb.CheckRemote(pd, mr.Rkey, iova+n-8, 8, RemoteWrite)
	require.NoError(t, err)
	require.Same(t, mr, got)
	_, err = tb.CheckRemote(pd, mr.Rkey, iova+n-7, 8, RemoteWrite)
	require.ErrorIs(t, err, ErrBounds)

	// A read straddling pages of the process: one call, the right bytes.
	p := make([]byte, 2*ps)
	require.Equal(t, len(p), mr.ReadAt(p, iova+ps-8))
	for i := range p {
		require.Equal(t, byte((16+ps-8+i)*3), p[i], "byte %d", i)
	}
	w := []byte("across a page boundary")
	require.Equal(t, len(w), mr.WriteAt(w, iova+ps-4))
	require.Equal(t, w, proc.mem[16+ps-4:16+ps-4+len(w)])

	// Clamped to the region, as slice MRs are: never beyond it.
	require.Equal(t, 4, mr.WriteAt([]byte("tailtail"), iova+n-4))
	require.Equal(t, "tail", string(proc.mem[16+n-4:16+n]))
	require.NotEqual(t, byte('t'), proc.mem[16+n], "nothing past the region")
	require.Equal(t, 0, mr.ReadAt(p, iova-1))
	require.Equal(t, 0, mr.ReadAt(p, iova+n))

	// No slice view of accessor memory.
	v, ok := mr.View(iova, 8)
	require.False(t, ok)
	require.Nil(t, v)
	require.Nil(t, mr.Word(iova))

	// A page unmapped since registration: a short count, no panic.
	proc.mu.Lock()
	proc.gone[(0x7000+16+2*ps)/ps] = true
	proc.mu.Unlock()
	require.Less(t, mr.ReadAt(p, iova+ps), len(p))
	require.Equal(t, 0, mr.WriteAt(make([]byte, 8), iova+2*ps))

	// The process gone: every access fails.
	proc.mu.Lock()
	proc.dead = true
	proc.mu.Unlock()
	require.Equal(t, 0, mr.ReadAt(p[:8], iova))
	_, ok = mr.Atomic64(iova, func(old uint64) (uint64, bool) { return old + 1, true })
	require.False(t, ok)
}

func TestAccessorMRZeroBased(t *testing.T) {
	proc := newFakeProc(0x10000, 256, 64)
	tb := NewTable(8)
	pd := NewPD(1)
	mr, err := tb.RegMRAccessor(pd, proc, 0x10000+64, 128, 0xdead000, LocalWrite|RemoteRead|ZeroBased)
	require.NoError(t, err)
	_, err = tb.CheckRemote(pd, mr.Rkey, 0, 128, RemoteRead)
	require.NoError(t, err)
	p := make([]byte, 4)
	require.Equal(t, 4, mr.ReadAt(p, 10))
	require.Equal(t, []byte{byte(74 * 3), byte(75 * 3), byte(76 * 3), byte(77 * 3)}, p)
}

func TestAccessorMRArguments(t *testing.T) {
	proc := newFakeProc(0, 64, 64)
	tb := NewTable(8)
	pd := NewPD(1)
	for _, c := range []struct {
		name            string
		pd              *PD
		acc             Accessor
		addr, len, iova uint64
		access          Access
	}{
		{"nil pd", nil, proc, 0, 8, 0, LocalWrite},
		{"nil accessor", pd, nil, 0, 8, 0, LocalWrite},
		{"iova overflow", pd, proc, 0, 16, ^uint64(0) - 8, LocalWrite},
		{"addr overflow", pd, proc, ^uint64(0) - 8, 16, 0, LocalWrite},
		{"remote write without local write", pd, proc, 0, 8, 0, RemoteWrite},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tb.RegMRAccessor(c.pd, c.acc, c.addr, c.len, c.iova, c.access)
			require.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
	// Deregistered like any MR: its key fails afterwards.
	mr, err := tb.RegMRAccessor(pd, proc, 0, 64, 0x1000, LocalWrite)
	require.NoError(t, err)
	require.NoError(t, tb.DeregMR(mr))
	_, err = tb.CheckLocal(pd, mr.Lkey, 0x1000, 8, 0)
	require.ErrorIs(t, err, ErrInvalidKey)
}

func TestAtomic64(t *testing.T) {
	add := func(d uint64) func(uint64) (uint64, bool) {
		return func(old uint64) (uint64, bool) { return old + d, true }
	}
	cas := func(cmp, swap uint64) func(uint64) (uint64, bool) {
		return func(old uint64) (uint64, bool) { return swap, old == cmp }
	}
	tb := NewTable(8)
	pd := NewPD(1)

	t.Run("slice", func(t *testing.T) {
		buf := make([]byte, 64)
		mr, err := tb.RegMR(pd, buf, 0x1000, LocalWrite|RemoteAtomic)
		require.NoError(t, err)
		binary.NativeEndian.PutUint64(buf[8:], 40)
		orig, ok := mr.Atomic64(0x1008, add(2))
		require.True(t, ok)
		require.Equal(t, uint64(40), orig)
		require.Equal(t, uint64(42), binary.NativeEndian.Uint64(buf[8:]))
		orig, ok = mr.Atomic64(0x1008, cas(41, 7))
		require.True(t, ok)
		require.Equal(t, uint64(42), orig)
		require.Equal(t, uint64(42), binary.NativeEndian.Uint64(buf[8:]), "failed compare stores nothing")
		_, ok = mr.Atomic64(0x1000+60, add(1))
		require.False(t, ok, "outside the region")
	})
	t.Run("accessor", func(t *testing.T) {
		proc := newFakeProc(0x5000, 128, 64)
		mr, err := tb.RegMRAccessor(pd, proc, 0x5000, 128, 0x9000, LocalWrite|RemoteAtomic)
		require.NoError(t, err)
		binary.NativeEndian.PutUint64(proc.mem[64:], 100)
		orig, ok := mr.Atomic64(0x9000+64, cas(100, 5))
		require.True(t, ok)
		require.Equal(t, uint64(100), orig)
		require.Equal(t, uint64(5), binary.NativeEndian.Uint64(proc.mem[64:]))
		proc.gone[(0x5000+64)/64] = true
		calls := proc.calls
		_, ok = mr.Atomic64(0x9000+64, add(1))
		require.False(t, ok)
		require.Equal(t, calls+1, proc.calls, "a failed read writes nothing")
	})
	t.Run("page list straddle", func(t *testing.T) {
		// A ZeroBased page-list MR whose IOVA is not 8-byte aligned: the
		// word at an aligned offset straddles two pages, which Word cannot
		// return; Atomic64 copies.
		mr, err := tb.AllocMR(pd, 2)
		require.NoError(t, err)
		pages := makePages(2, 16)
		require.NoError(t, mr.MapPages(pages, 16, 0x4, 20))
		require.NoError(t, tb.FastReg(pd, mr, 1, LocalWrite|RemoteAtomic|ZeroBased))
		require.Nil(t, mr.Word(8))
		orig, ok := mr.Atomic64(8, add(1))
		require.True(t, ok)
		want := binary.NativeEndian.Uint64([]byte{12, 13, 14, 15, 16, 17, 18, 19})
		require.Equal(t, want, orig)
		var b [8]byte
		require.Equal(t, 8, mr.ReadAt(b[:], 8))
		require.Equal(t, want+1, binary.NativeEndian.Uint64(b[:]))
	})
}

// TestAccessorMRLargeCopy copies more than one bounce buffer, and stops at
// the first failing chunk.
func TestAccessorMRLargeCopy(t *testing.T) {
	const n = 3*bounceSize + 100
	proc := newFakeProc(0x100000, n, 4096)
	tb := NewTable(8)
	pd := NewPD(1)
	mr, err := tb.RegMRAccessor(pd, proc, 0x100000, n, 0, LocalWrite)
	require.NoError(t, err)
	p := make([]byte, n)
	require.Equal(t, n, mr.ReadAt(p, 0))
	require.Equal(t, proc.mem, p)
	for i := range p {
		p[i] = byte(i)
	}
	require.Equal(t, n, mr.WriteAt(p, 0))
	require.Equal(t, p, proc.mem)
	proc.gone[(0x100000+bounceSize+5000)/4096] = true
	got := mr.ReadAt(p, 0)
	require.Equal(t, bounceSize+4096, got, "up to the unmapped page")
}

// TestAccessorPages fast-registers pages of a process in scattered order
// and copies across their boundaries.
func TestAccessorPages(t *testing.T) {
	const ps = 64
	proc := newFakeProc(0x20000, 8*ps, ps)
	tb := NewTable(8)
	pd := NewPD(1)
	mr, err := tb.AllocMR(pd, 3)
	require.NoError(t, err)
	// Pages 5, 1, 6 of the process; the region starts 10 bytes into the
	// first and ends 20 bytes into the last.
	addrs := []uint64{0x20000 + 5*ps, 0x20000 + 1*ps, 0x20000 + 6*ps}
	const iova = 0x9000 + 10
	const length = 2*ps - 10 + 20
	require.ErrorIs(t, mr.MapAccessorPages(proc, addrs[:2], ps, iova, length), ErrInvalidArgument, "too few pages")
	require.ErrorIs(t, mr.MapAccessorPages(nil, addrs, ps, iova, length), ErrInvalidArgument)
	require.ErrorIs(t, mr.MapAccessorPages(proc, addrs, 12, iova, length), ErrInvalidArgument, "page size")
	require.NoError(t, mr.MapAccessorPages(proc, addrs, ps, iova, length))
	require.NoError(t, tb.FastReg(pd, mr, 3, LocalWrite|RemoteRead|RemoteWrite))
	require.True(t, mr.Accessed())
	_, err = tb.CheckRemote(pd, mr.Rkey, iova, length, RemoteRead)
	require.NoError(t, err)

	p := make([]byte, length)
	require.Equal(t, length, mr.ReadAt(p, iova))
	var want []byte
	want = append(want, proc.mem[5*ps+10:6*ps]...)
	want = append(want, proc.mem[1*ps:2*ps]...)
	want = append(want, proc.mem[6*ps:6*ps+20]...)
	require.Equal(t, want, p)
	require.Equal(t, 8, mr.WriteAt([]byte("straddle"), iova+ps-10-4))
	require.Equal(t, "stra", string(proc.mem[6*ps-4:6*ps]))
	require.Equal(t, "ddle", string(proc.mem[1*ps:1*ps+4]))
	_, ok := mr.View(iova, 8)
	require.False(t, ok)

	// Invalidate and map slice pages: the MR is an ordinary page list again.
	require.NoError(t, tb.Invalidate(pd, mr.Rkey))
	require.NoError(t, mr.MapPages(makePages(1, ps), ps, 0x1000, ps))
	require.NoError(t, tb.FastReg(pd, mr, 4, LocalWrite))
	require.False(t, mr.Accessed())
}

package keys

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzFixture is a table with one object of every kind.
type fuzzFixture struct {
	tb      *Table
	pd, pd2 *PD
	keys    []uint32
	windows map[uint32][2]uint64 // rkey -> window [addr, addr+length)
}

func newFuzzFixture(t testing.TB) *fuzzFixture {
	tb := NewTable(4)
	f := &fuzzFixture{tb: tb, pd: NewPD(1), pd2: NewPD(2), windows: map[uint32][2]uint64{}}
	all := LocalWrite | RemoteAccess | MWBind
	mrs := []*MR{
		regMR(t, tb, f.pd, 256, 0x1000, all),
		regMR(t, tb, f.pd, 64, 0x1000, RemoteRead),
		regMR(t, tb, f.pd, 0, 0x2000, all),
		regMR(t, tb, f.pd, 128, ^uint64(0)-128, all),
		regMR(t, tb, f.pd, 128, 0x5000, all|ZeroBased),
		regMR(t, tb, f.pd2, 128, 0x1000, all),
	}
	fmr, _ := fastMR(t, tb, f.pd, 3, 32, 0x3000, 0x42, all)
	inv, _ := fastMR(t, tb, f.pd, 1, 32, 0x3000, 0x43, all)
	require.NoError(t, tb.Invalidate(f.pd, inv.Lkey))
	mrs = append(mrs, fmr, inv)
	for _, mr := range mrs {
		f.keys = append(f.keys, mr.Lkey)
	}
	mw1, err := tb.AllocMW(f.pd, MWType1)
	require.NoError(t, err)
	k, err := tb.BindMW(mw1, mrs[0], 0x1010, 32, RemoteRead|RemoteWrite, 9)
	require.NoError(t, err)
	f.windows[k] = [2]uint64{0x1010, 0x1030}
	mw2, err := tb.AllocMW(f.pd, MWType2)
	require.NoError(t, err)
	k, err = tb.BindMW(mw2, fmr, 0x3008, 64, RemoteAtomic, 10)
	require.NoError(t, err)
	f.windows[k] = [2]uint64{0x3008, 0x3048}
	unbound, err := tb.AllocMW(f.pd, MWType1)
	require.NoError(t, err)
	f.keys = append(f.keys, mw1.Rkey, mw2.Rkey, unbound.Rkey)
	return f
}

var checkSentinels = []error{ErrInvalidKey, ErrPDMismatch, ErrAccess, ErrBounds}

// FuzzCheckRemote feeds random keys, addresses, lengths and access flags to
// both checks. Invariants: no panic; an error wraps a check sentinel; a
// success returns a valid MR of the PD, granting the access, whose memory
// holds the whole range (and, through a window, the range is in the window).
func FuzzCheckRemote(f *testing.F) {
	fx := newFuzzFixture(f)
	for i, k := range fx.keys {
		f.Add(k, uint64(0x1000), uint32(8), uint32(RemoteRead), false, uint8(i))
		f.Add(k, uint64(0x3000), uint32(96), uint32(RemoteAtomic), true, uint8(i))
		f.Add(k^1, ^uint64(0)-4, uint32(8), uint32(RemoteWrite), false, uint8(i))
	}
	f.Fuzz(func(t *testing.T, key uint32, va uint64, length uint32, access uint32, local bool, sel uint8) {
		// Half the inputs take a real key, possibly perturbed.
		if sel&1 == 1 {
			key = fx.keys[int(sel>>1)%len(fx.keys)] ^ key&0x00000101
		}
		pd := fx.pd
		if sel&0x80 != 0 {
			pd = fx.pd2
		}
		acc := Access(access)
		var mr *MR
		var err error
		if local {
			mr, err = fx.tb.CheckLocal(pd, key, va, length, acc)
		} else {
			mr, err = fx.tb.CheckRemote(pd, key, va, length, acc)
		}
		if err != nil {
			require.Nil(t, mr)
			ok := false
			for _, s := range checkSentinels {
				ok = ok || errors.Is(err, s)
			}
			require.True(t, ok, "unexpected error %v", err)
			return
		}
		if length == 0 {
			require.Nil(t, mr)
			return
		}
		require.NotNil(t, mr)
		require.True(t, mr.Valid())
		require.Same(t, pd, mr.PD)
		m := mr.mem.Load()
		off, in := m.offset(va, uint64(length))
		require.True(t, in, "range %#x+%d outside mr %#x", va, length, mr.Lkey)
		require.LessOrEqual(t, off+uint64(length), mr.Length)
		if w, isMW := fx.windows[key]; isMW {
			require.False(t, local)
			require.GreaterOrEqual(t, va, w[0])
			require.LessOrEqual(t, va+uint64(length), w[1])
		} else {
			require.Equal(t, key, mr.Lkey)
			require.Zero(t, acc&^mr.Access, "access %s not in %s", acc, mr.Access)
			if !local {
				require.NotZero(t, acc&RemoteAccess)
			}
		}
		buf := make([]byte, length)
		require.Equal(t, int(length), mr.ReadAt(buf, va))
		require.Equal(t, int(length), mr.WriteAt(buf, va))
	})
}

// FuzzVerbs drives a random sequence of verbs on a small table and checks
// its bookkeeping after every step: PD references match live objects, window
// counts match bindings, and every live key resolves to its own object.
func FuzzVerbs(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 4, 1, 6, 3, 8, 5, 7, 9, 0, 1, 3, 5, 7, 9, 2, 4, 6, 8})
	f.Fuzz(func(t *testing.T, prog []byte) {
		tb := NewTable(4)
		pd := NewPD(1)
		var mrs []*MR
		var mws []*MW
		pick := func(i int, b byte) int { return int(b) % i }
		for len(prog) >= 4 {
			op, a, b, c := prog[0], prog[1], prog[2], prog[3]
			prog = prog[4:]
			switch op % 10 {
			case 0:
				if mr, err := tb.RegMR(pd, make([]byte, int(a)), uint64(b)<<8, Access(c)&allAccess); err == nil {
					mrs = append(mrs, mr)
				}
			case 1:
				if mr, err := tb.AllocMR(pd, int(a%4)+1); err == nil {
					mrs = append(mrs, mr)
				}
			case 2:
				if len(mrs) > 0 {
					n := int(b % 4)
					_ = mrs[pick(len(mrs), a)].MapPages(makePages(n, 16), 16, uint64(c)<<4, uint64(n*16))
				}
			case 3:
				if len(mrs) > 0 {
					_ = tb.FastReg(pd, mrs[pick(len(mrs), a)], b, Access(c)&allAccess)
				}
			case 4:
				if len(mrs) > 0 {
					_ = tb.Invalidate(pd, mrs[pick(len(mrs), a)].Lkey)
				}
			case 5:
				if len(mws) > 0 {
					_ = tb.Invalidate(pd, mws[pick(len(mws), a)].Rkey)
				}
			case 6:
				if len(mrs) > 0 {
					i := pick(len(mrs), a)
					if tb.DeregMR(mrs[i]) == nil {
						mrs = append(mrs[:i], mrs[i+1:]...)
					}
				}
			case 7:
				if mw, err := tb.AllocMW(pd, MWType(a%2+1)); err == nil {
					mws = append(mws, mw)
				}
			case 8:
				if len(mws) > 0 && len(mrs) > 0 {
					mr := mrs[pick(len(mrs), b)]
					_, _ = tb.BindMW(mws[pick(len(mws), a)], mr, mr.IOVA+uint64(c%8), uint64(c>>3), RemoteAccess&Access(c), c)
				}
			case 9:
				if len(mws) > 0 {
					i := pick(len(mws), a)
					require.NoError(t, tb.DeallocMW(mws[i]))
					mws = append(mws[:i], mws[i+1:]...)
				}
			}
			// Invariants.
			require.Equal(t, len(mrs)+len(mws), pd.Refs())
			require.Equal(t, len(mrs)+len(mws), tb.Len())
			bound := map[*MR]int{}
			for _, mw := range mws {
				if mr, addr, length, _, ok := mw.Binding(); ok {
					bound[mr]++
					require.True(t, mr.Valid(), "window bound to an invalid MR")
					require.LessOrEqual(t, mr.IOVA, addr)
					require.LessOrEqual(t, addr+length, mr.IOVA+mr.Length)
					got, err := tb.CheckRemote(pd, mw.Rkey, addr, 1, RemoteAccess)
					if err == nil {
						require.Same(t, mr, got)
					}
				}
				_, err := tb.CheckLocal(pd, mw.Rkey, 0, 1, 0)
				require.ErrorIs(t, err, ErrInvalidKey)
			}
			for _, mr := range mrs {
				require.Equal(t, bound[mr], mr.Windows())
				got, err := tb.CheckLocal(pd, mr.Lkey, mr.IOVA, 1, 0)
				if mr.Access&ZeroBased != 0 {
					got, err = tb.CheckLocal(pd, mr.Lkey, 0, 1, 0)
				}
				switch {
				case !mr.Valid():
					require.ErrorIs(t, err, ErrInvalidKey)
				case mr.Length == 0:
					require.ErrorIs(t, err, ErrBounds)
				default:
					require.NoError(t, err)
					require.Same(t, mr, got)
				}
			}
		}
	})
}

package keys

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMWType1(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	const base = 0x10000
	mr := regMR(t, tb, pd, 4096, base, LocalWrite|MWBind) // no remote access of its own
	mw, err := tb.AllocMW(pd, MWType1)
	require.NoError(t, err)
	require.Equal(t, MWType1, mw.Type)
	_, _, _, _, ok := mw.Binding()
	require.False(t, ok)

	rkey, err := tb.BindMW(mw, mr, base+1024, 512, RemoteRead|RemoteWrite, 0x21)
	require.NoError(t, err)
	require.Equal(t, mw.Rkey, rkey)
	require.Equal(t, uint32(0x21), rkey&0xff)
	require.NotEqual(t, tb.Index(mr.Rkey), tb.Index(rkey), "a window has its own slot")
	require.Equal(t, 1, mr.Windows())
	bmr, addr, length, access, ok := mw.Binding()
	require.True(t, ok)
	require.Same(t, mr, bmr)
	require.Equal(t, []uint64{base + 1024, 512}, []uint64{addr, length})
	require.Equal(t, RemoteRead|RemoteWrite, access)

	for _, tc := range []struct {
		name   string
		pd     *PD
		key    uint32
		va     uint64
		n      uint32
		access Access
		err    error
	}{
		{"read whole window", pd, rkey, base + 1024, 512, RemoteRead, nil},
		{"write inside", pd, rkey, base + 1100, 8, RemoteWrite, nil},
		{"atomic not granted", pd, rkey, base + 1024, 8, RemoteAtomic, ErrAccess},
		{"below window, inside mr", pd, rkey, base + 1023, 8, RemoteRead, ErrBounds},
		{"past window, inside mr", pd, rkey, base + 1024 + 505, 8, RemoteRead, ErrBounds},
		{"overflow", pd, rkey, ^uint64(0) - 2, 8, RemoteRead, ErrBounds},
		{"pd mismatch", NewPD(2), rkey, base + 1024, 8, RemoteRead, ErrPDMismatch},
		{"wrong key byte", pd, rkey ^ 0x01, base + 1024, 8, RemoteRead, ErrInvalidKey},
		{"mr rkey has no remote access", pd, mr.Rkey, base + 1024, 8, RemoteRead, ErrAccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tb.CheckRemote(tc.pd, tc.key, tc.va, tc.n, tc.access)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Same(t, mr, got, "an MW rkey resolves to its MR")
		})
	}
	_, err = tb.CheckLocal(pd, rkey, base+1024, 8, 0)
	require.ErrorIs(t, err, ErrInvalidKey, "an MW key is not an lkey")
	require.ErrorContains(t, err, "memory window")

	// Type 1 windows cannot be invalidated.
	require.ErrorIs(t, tb.Invalidate(pd, rkey), ErrInvalidArgument)

	// Rebind while bound: the old rkey dies, the count stays 1.
	rkey2, err := tb.BindMW(mw, mr, base, 64, RemoteRead, 0x22)
	require.NoError(t, err)
	require.Equal(t, rkey&^0xff|0x22, rkey2)
	require.Equal(t, 1, mr.Windows())
	_, err = tb.CheckRemote(pd, rkey, base+1024, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = tb.CheckRemote(pd, rkey2, base, 64, RemoteRead)
	require.NoError(t, err)

	// Dereg refused while bound.
	require.ErrorIs(t, tb.DeregMR(mr), ErrBusy)
	require.True(t, mr.Valid())

	// Zero-length bind unbinds (mr may be nil).
	rkey3, err := tb.BindMW(mw, nil, 0, 0, 0, 0x23)
	require.NoError(t, err)
	require.Equal(t, uint32(0x23), rkey3&0xff)
	require.Equal(t, 0, mr.Windows())
	_, err = tb.CheckRemote(pd, rkey2, base, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = tb.CheckRemote(pd, rkey3, base, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	require.ErrorContains(t, err, "not bound")

	require.NoError(t, tb.DeregMR(mr))
	require.NoError(t, tb.DeallocMW(mw))
	err = tb.DeallocMW(mw)
	require.ErrorIs(t, err, ErrInvalidState)
	require.ErrorContains(t, err, fmt.Sprintf("mw %#x", mw.Rkey), "the error names the window")
	_, err = tb.BindMW(mw, nil, 0, 0, 0, 0)
	require.ErrorIs(t, err, ErrInvalidState)
	require.ErrorContains(t, err, fmt.Sprintf("mw %#x", mw.Rkey))
	require.NoError(t, pd.Free(), "nothing holds the PD")
	require.Equal(t, 0, tb.Len())
}

// mwBase is where type1Window's MR starts.
const mwBase = 0x10000

// window is a table with a 4 KiB MR at mwBase that may carry windows, and
// a window of type typ in the same PD.
func window(t *testing.T, typ MWType) (*Table, *PD, *MR, *MW) {
	t.Helper()
	tb := NewTable(8)
	pd := NewPD(1)
	mr := regMR(t, tb, pd, 4096, mwBase, LocalWrite|MWBind)
	mw, err := tb.AllocMW(pd, typ)
	require.NoError(t, err)
	return tb, pd, mr, mw
}

// type1Window is window of type 1.
func type1Window(t *testing.T) (*Table, *PD, *MR, *MW) { return window(t, MWType1) }

// TestBindMWNextKey: the bind verb's rule, each type-1 bind (and unbind)
// moves the key byte on by one, wrapping from 0xff to 0; a failed bind and a
// type-2 window move nothing.
func TestBindMWNextKey(t *testing.T) {
	tb, pd, mr, mw := type1Window(t)
	start := mw.Rkey
	rkey, err := tb.BindMWNextKey(mw, mr, mwBase, 64, RemoteRead)
	require.NoError(t, err)
	require.Equal(t, start&^0xff|1, rkey, "only the key byte moves, by one")
	require.Equal(t, mw.Rkey, rkey)
	_, err = tb.BindMWNextKey(mw, mr, mwBase-1, 64, RemoteRead)
	require.ErrorIs(t, err, ErrBounds)
	require.Equal(t, rkey, mw.Rkey, "a failed bind keeps the key")
	_, err = tb.BindMW(mw, mr, mwBase, 64, RemoteRead, 0xff)
	require.NoError(t, err)
	rkey, err = tb.BindMWNextKey(mw, nil, 0, 0, 0)
	require.NoError(t, err, "a zero-length bind unbinds")
	require.Equal(t, start&^0xff, rkey, "the key byte wraps")

	mw2, err := tb.AllocMW(pd, MWType2)
	require.NoError(t, err)
	before := mw2.Rkey
	_, err = tb.BindMWNextKey(mw2, mr, mwBase, 64, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidArgument, "type 2 windows are bound by a work request")
	require.ErrorContains(t, err, fmt.Sprintf("bind mw %#x: ", before), "the error names the window")
	require.Equal(t, before, mw2.Rkey)
	_, err = tb.BindMWNextKey(nil, mr, mwBase, 64, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestBindMWNextKeyType2Race: the refusal of a type-2 window reads its
// rkey (for the error) under the table lock, where BIND_MW work requests
// write it; run under the race detector (make race).
func TestBindMWNextKeyType2Race(t *testing.T) {
	tb, pd, mr, mw := window(t, MWType2)
	const base = mwBase
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			rkey, err := tb.BindMW(mw, mr, base, 64, RemoteRead, uint8(i))
			if err == nil {
				err = tb.Invalidate(pd, rkey)
			}
			if err != nil {
				t.Errorf("bind %d: %v", i, err)
				return
			}
		}
	}()
	for range 200 {
		_, err := tb.BindMWNextKey(mw, mr, base, 64, RemoteRead)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
	<-done
}

// TestBindMWNextKeyConcurrent: the key byte is read under the table lock,
// so binds racing on one window each get their own key byte.
func TestBindMWNextKeyConcurrent(t *testing.T) {
	tb, _, mr, mw := type1Window(t)
	const workers, each = 8, 30 // 240 binds: key bytes 1..240, none twice
	got := make([][]uint32, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				k, err := tb.BindMWNextKey(mw, mr, mwBase, 64, RemoteRead)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				got[w] = append(got[w], k)
			}
		}()
	}
	wg.Wait()
	seen := make(map[uint32]bool)
	for _, ks := range got {
		for _, k := range ks {
			require.False(t, seen[k], "rkey %#x handed out twice", k)
			seen[k] = true
		}
	}
	require.Len(t, seen, workers*each)
	require.Equal(t, uint32(workers*each), mw.Rkey&0xff)
}

func TestMWType2(t *testing.T) {
	tb, pd, mr, mw := window(t, MWType2)
	const base = mwBase
	var err error

	_, err = tb.BindMW(mw, mr, base, 0, RemoteRead, 1)
	require.ErrorIs(t, err, ErrInvalidArgument, "type 2 zero-length bind")
	_, err = tb.BindMW(mw, nil, base, 8, RemoteRead, 1)
	require.ErrorIs(t, err, ErrInvalidArgument, "type 2 bind without mr")

	rkey, err := tb.BindMW(mw, mr, base, 4096, RemoteAtomic, 0x31)
	require.NoError(t, err)
	got, err := tb.CheckRemote(pd, rkey, base+8, 8, RemoteAtomic)
	require.NoError(t, err)
	require.Same(t, mr, got)
	_, err = tb.CheckRemote(pd, rkey, base+8, 8, RemoteRead)
	require.ErrorIs(t, err, ErrAccess)

	_, err = tb.BindMW(mw, mr, base, 8, RemoteRead, 0x32)
	require.ErrorIs(t, err, ErrInvalidState, "type 2 bind while bound")
	require.Equal(t, rkey, mw.Rkey, "refused bind keeps the key")

	require.ErrorIs(t, tb.Invalidate(NewPD(2), rkey), ErrPDMismatch)
	require.ErrorIs(t, tb.Invalidate(pd, rkey^0xff), ErrInvalidKey)
	require.ErrorIs(t, tb.DeregMR(mr), ErrBusy)
	require.NoError(t, tb.Invalidate(pd, rkey))
	require.Equal(t, 0, mr.Windows())
	require.NoError(t, tb.Invalidate(pd, rkey), "already unbound")
	_, err = tb.CheckRemote(pd, rkey, base+8, 8, RemoteAtomic)
	require.ErrorIs(t, err, ErrInvalidKey)

	rkey2, err := tb.BindMW(mw, mr, base+8, 8, RemoteRead, 0x32)
	require.NoError(t, err)
	require.Equal(t, rkey&^0xff|0x32, rkey2)
	_, err = tb.CheckRemote(pd, rkey2, base+8, 8, RemoteRead)
	require.NoError(t, err)

	// Deallocating a bound window unbinds it.
	require.NoError(t, tb.DeallocMW(mw))
	require.Equal(t, 0, mr.Windows())
	_, err = tb.CheckRemote(pd, rkey2, base+8, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	require.NoError(t, tb.DeregMR(mr))
}

func TestBindMWRules(t *testing.T) {
	const base = 0x10000
	type env struct {
		tb   *Table
		pd   *PD
		mr   *MR // LocalWrite|MWBind over [base, base+4096)
		mw1  *MW
		mw2  *MW
		fast *MR
	}
	setup := func(t *testing.T) env {
		tb := NewTable(8)
		pd := NewPD(1)
		e := env{tb: tb, pd: pd, mr: regMR(t, tb, pd, 4096, base, LocalWrite|MWBind)}
		var err error
		e.mw1, err = tb.AllocMW(pd, MWType1)
		require.NoError(t, err)
		e.mw2, err = tb.AllocMW(pd, MWType2)
		require.NoError(t, err)
		e.fast, _ = fastMR(t, tb, pd, 1, 4096, base, 5, LocalWrite|MWBind)
		return e
	}
	for _, tc := range []struct {
		name string
		bind func(e env) error
		err  error
	}{
		{"ok", func(e env) error {
			_, err := e.tb.BindMW(e.mw1, e.mr, base, 4096, RemoteAccess, 1)
			return err
		}, nil},
		{"mr without MWBind", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, LocalWrite|RemoteAccess)
			_, err := e.tb.BindMW(e.mw1, mr, base, 8, RemoteRead, 1)
			return err
		}, ErrAccess},
		{"remote write window needs mr LocalWrite", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, MWBind|RemoteRead)
			_, err := e.tb.BindMW(e.mw2, mr, base, 8, RemoteWrite, 1)
			return err
		}, ErrAccess},
		{"remote atomic window needs mr LocalWrite", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, MWBind)
			_, err := e.tb.BindMW(e.mw1, mr, base, 8, RemoteAtomic, 1)
			return err
		}, ErrAccess},
		{"remote read window without mr LocalWrite", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, MWBind)
			_, err := e.tb.BindMW(e.mw1, mr, base, 8, RemoteRead, 1)
			return err
		}, nil},
		{"window below mr", func(e env) error {
			_, err := e.tb.BindMW(e.mw1, e.mr, base-1, 8, RemoteRead, 1)
			return err
		}, ErrBounds},
		{"window past mr", func(e env) error {
			_, err := e.tb.BindMW(e.mw2, e.mr, base+4090, 8, RemoteRead, 1)
			return err
		}, ErrBounds},
		{"window overflow", func(e env) error {
			_, err := e.tb.BindMW(e.mw1, e.mr, base, ^uint64(0), RemoteRead, 1)
			return err
		}, ErrBounds},
		{"pd mismatch type 1", func(e env) error {
			mw, err := e.tb.AllocMW(NewPD(2), MWType1)
			require.NoError(t, err)
			_, err = e.tb.BindMW(mw, e.mr, base, 8, RemoteRead, 1)
			return err
		}, ErrPDMismatch},
		{"pd mismatch type 2", func(e env) error {
			mw, err := e.tb.AllocMW(NewPD(2), MWType2)
			require.NoError(t, err)
			_, err = e.tb.BindMW(mw, e.mr, base, 8, RemoteRead, 1)
			return err
		}, ErrPDMismatch},
		{"zero-based window", func(e env) error {
			_, err := e.tb.BindMW(e.mw2, e.mr, base, 8, RemoteRead|ZeroBased, 1)
			return err
		}, ErrInvalidArgument},
		{"MWBind in window access", func(e env) error {
			_, err := e.tb.BindMW(e.mw1, e.mr, base, 8, RemoteRead|MWBind, 1)
			return err
		}, ErrInvalidArgument},
		{"zero-based mr", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, MWBind|ZeroBased)
			_, err := e.tb.BindMW(e.mw1, mr, 0, 8, RemoteRead, 1)
			return err
		}, ErrInvalidArgument},
		{"type 1 nil mr nonzero length", func(e env) error {
			_, err := e.tb.BindMW(e.mw1, nil, base, 8, RemoteRead, 1)
			return err
		}, ErrInvalidArgument},
		{"deregistered mr", func(e env) error {
			mr := regMR(t, e.tb, e.pd, 64, base, MWBind)
			require.NoError(t, e.tb.DeregMR(mr))
			_, err := e.tb.BindMW(e.mw1, mr, base, 8, RemoteRead, 1)
			return err
		}, ErrInvalidState},
		{"invalidated fast-reg mr", func(e env) error {
			require.NoError(t, e.tb.Invalidate(e.pd, e.fast.Lkey))
			_, err := e.tb.BindMW(e.mw1, e.fast, base, 8, RemoteRead, 1)
			return err
		}, ErrInvalidState},
		{"fast-reg mr with window cannot be invalidated", func(e env) error {
			_, err := e.tb.BindMW(e.mw2, e.fast, base, 8, RemoteRead, 1)
			require.NoError(t, err)
			return e.tb.Invalidate(e.pd, e.fast.Lkey)
		}, ErrBusy},
		{"nil mw", func(e env) error {
			_, err := e.tb.BindMW(nil, e.mr, base, 8, RemoteRead, 1)
			return err
		}, ErrInvalidArgument},
		{"foreign mr", func(e env) error {
			other := NewTable(4)
			mr := regMR(t, other, e.pd, 64, base, MWBind)
			_, err := e.tb.BindMW(e.mw1, mr, base, 8, RemoteRead, 1)
			return err
		}, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			err := tc.bind(e)
			if tc.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.err)
		})
	}
}

func TestAllocMWErrors(t *testing.T) {
	tb := NewTable(4)
	_, err := tb.AllocMW(nil, MWType1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = tb.AllocMW(NewPD(1), 3)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, tb.DeallocMW(nil), ErrInvalidArgument)
	require.Equal(t, "type1", MWType1.String())
	require.Equal(t, "type2", MWType2.String())
	require.Equal(t, "MWType(3)", MWType(3).String())
}

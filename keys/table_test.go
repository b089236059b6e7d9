package keys

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewTableBounds(t *testing.T) {
	for _, bits := range []int{-1, 0, 3, 21, 24, 32} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			require.Panics(t, func() { NewTable(bits) })
		})
	}
	for _, bits := range []int{MinTableBits, 8, 16, MaxTableBits} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			require.Equal(t, bits, NewTable(bits).Bits())
		})
	}
}

func TestKeyLayout(t *testing.T) {
	for _, bits := range []int{4, 8, 12, 20} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			tb := NewTable(bits)
			pd := NewPD(1)
			mr := regMR(t, tb, pd, 16, 0, LocalWrite)
			require.Equal(t, mr.Lkey, mr.Rkey, "lkey == rkey as in rdmavt")
			require.Equal(t, uint32(1), tb.Index(mr.Lkey), "first object takes index 1")
			require.Equal(t, uint32(1)<<(32-bits), mr.Lkey, "index in the top bits, generation 0, key byte 0")
			require.Equal(t, uint32(0), tb.Generation(mr.Lkey))
			require.Equal(t, uint32(0), mr.Lkey&0xff, "key byte 0")

			// The next slot: index 2.
			mr2 := regMR(t, tb, pd, 16, 0, LocalWrite)
			require.Equal(t, uint32(2), tb.Index(mr2.Lkey))

			// Field accessors invert makeKey.
			genMask := uint32(1)<<(24-bits) - 1
			k := tb.makeKey(3, genMask, 0xab)
			require.Equal(t, uint32(3), tb.Index(k))
			require.Equal(t, genMask, tb.Generation(k))
			require.Equal(t, uint32(0xab), k&0xff)
			// The generation wraps inside its field, never touching the index.
			require.Equal(t, uint32(3), tb.Index(tb.makeKey(3, genMask+1, 0)))
		})
	}
}

// TestStaleGeneration: after DeregMR, the slot's next MR has a new generation,
// so the old key fails with ErrInvalidKey and never reaches the new MR.
func TestStaleGeneration(t *testing.T) {
	tb := NewTable(4) // 15 usable slots: reuse happens quickly
	pd := NewPD(1)
	all := RemoteAccess | LocalWrite
	old := regMR(t, tb, pd, 64, 0x1000, all)
	oldKey := old.Rkey
	require.NoError(t, tb.DeregMR(old))
	_, err := tb.CheckRemote(pd, oldKey, 0x1000, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey, "deregistered")

	// Fill the table so that the old slot is certainly reused.
	var mrs []*MR
	for {
		mr, err := tb.RegMR(pd, make([]byte, 64), 0x1000, all)
		if err != nil {
			require.ErrorIs(t, err, ErrNoResources)
			break
		}
		mrs = append(mrs, mr)
	}
	require.Len(t, mrs, 15)
	require.Equal(t, 15, tb.Len())
	var reused *MR
	for _, mr := range mrs {
		if tb.Index(mr.Lkey) == tb.Index(oldKey) {
			reused = mr
		}
	}
	require.NotNil(t, reused)
	require.Equal(t, tb.Generation(oldKey)+1, tb.Generation(reused.Lkey))
	require.NotEqual(t, oldKey, reused.Lkey)

	_, err = tb.CheckRemote(pd, oldKey, 0x1000, 8, RemoteRead)
	require.ErrorIs(t, err, ErrInvalidKey)
	require.ErrorContains(t, err, "stale key generation")
	_, err = tb.CheckLocal(pd, oldKey, 0x1000, 8, 0)
	require.ErrorIs(t, err, ErrInvalidKey)
	got, err := tb.CheckRemote(pd, reused.Rkey, 0x1000, 8, RemoteRead)
	require.NoError(t, err)
	require.Same(t, reused, got)
}

// TestSlotReuseFIFO: freed slots come back oldest first, so one slot is not
// cycled through its generations while others sit idle.
func TestSlotReuseFIFO(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	var mrs []*MR
	for range 15 {
		mrs = append(mrs, regMR(t, tb, pd, 8, 0, 0))
	}
	_, err := tb.RegMR(pd, nil, 0, 0)
	require.ErrorIs(t, err, ErrNoResources)
	order := []int{7, 2, 11}
	for _, i := range order {
		require.NoError(t, tb.DeregMR(mrs[i]))
	}
	for _, i := range order {
		mr := regMR(t, tb, pd, 8, 0, 0)
		require.Equal(t, tb.Index(mrs[i].Lkey), tb.Index(mr.Lkey))
		require.Equal(t, uint32(1), tb.Generation(mr.Lkey))
	}
	require.Equal(t, 15, pd.Refs())
}

// TestGenerationEveryReuse cycles one slot many times (a 4-bit table has a
// 20-bit generation) and checks that every earlier key stays invalid.
func TestGenerationEveryReuse(t *testing.T) {
	tb := NewTable(4)
	pd := NewPD(1)
	seen := map[uint32]bool{}
	var keys []uint32
	for range 300 {
		mr := regMR(t, tb, pd, 8, 0, RemoteRead)
		require.False(t, seen[mr.Rkey], "key %#x reused", mr.Rkey)
		seen[mr.Rkey] = true
		keys = append(keys, mr.Rkey)
		require.NoError(t, tb.DeregMR(mr))
	}
	live := regMR(t, tb, pd, 8, 0, RemoteRead)
	for _, k := range keys {
		_, err := tb.CheckRemote(pd, k, 0, 8, RemoteRead)
		require.ErrorIs(t, err, ErrInvalidKey)
	}
	_, err := tb.CheckRemote(pd, live.Rkey, 0, 8, RemoteRead)
	require.NoError(t, err)
	require.Equal(t, 1, tb.Len())
}

func TestKeyZero(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	regMR(t, tb, pd, 64, 0, LocalWrite|RemoteAccess)
	for _, k := range []uint32{0, 0xff, 1 << 8, 0x00ffffff} { // all index 0
		_, err := tb.CheckLocal(pd, k, 0, 8, 0)
		require.ErrorIs(t, err, ErrInvalidKey)
		_, err = tb.CheckRemote(pd, k, 0, 8, RemoteRead)
		require.ErrorIs(t, err, ErrInvalidKey)
		require.ErrorIs(t, tb.Invalidate(pd, k), ErrInvalidKey)
	}
}

func TestRegMRArgs(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	_, err := tb.RegMR(nil, nil, 0, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = tb.RegMR(pd, make([]byte, 16), ^uint64(0)-14, 0)
	require.ErrorIs(t, err, ErrInvalidArgument, "iova+len overflows")
	_, err = tb.RegMR(pd, make([]byte, 16), ^uint64(0)-15, 0)
	require.ErrorIs(t, err, ErrInvalidArgument, "iova+len wraps to 0, as the kernel refuses it")
	mr, err := tb.RegMR(pd, make([]byte, 16), ^uint64(0)-16, 0)
	require.NoError(t, err, "last byte at 2^64-2")
	require.Equal(t, uint64(16), mr.Length)
	zero, err := tb.RegMR(pd, nil, 0x1000, RemoteRead)
	require.NoError(t, err, "zero-length MR")
	require.Equal(t, uint64(0), zero.Length)
	require.True(t, zero.Valid())
	require.False(t, zero.FastRegister())

	require.ErrorIs(t, tb.DeregMR(nil), ErrInvalidArgument)
	require.ErrorIs(t, NewTable(8).DeregMR(mr), ErrInvalidArgument, "foreign table")
	require.NoError(t, tb.DeregMR(mr))
	err = tb.DeregMR(mr)
	require.ErrorIs(t, err, ErrInvalidState, "twice")
	require.ErrorContains(t, err, fmt.Sprintf("mr %#x", mr.Lkey), "the error names the MR")
	require.False(t, mr.Valid())
	require.NoError(t, tb.DeregMR(zero))
	require.NoError(t, pd.Free(), "nothing holds the PD")
}

func TestPDRefs(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(7)
	require.Equal(t, uint32(7), pd.Handle)
	require.Zero(t, pd.Refs())
	mr := regMR(t, tb, pd, 8, 0, MWBind)
	fmr, err := tb.AllocMR(pd, 4)
	require.NoError(t, err)
	mw, err := tb.AllocMW(pd, MWType1)
	require.NoError(t, err)
	require.NoError(t, pd.TryRef()) // e.g. a QP
	require.Equal(t, 4, pd.Refs())
	require.NoError(t, tb.DeregMR(mr))
	require.NoError(t, tb.DeregMR(fmr))
	require.NoError(t, tb.DeallocMW(mw))
	require.Equal(t, 1, pd.Refs())
	require.ErrorIs(t, pd.Free(), ErrBusy)
	pd.Unref()
	require.Zero(t, pd.Refs())
	require.Panics(t, pd.Unref)
	// The panic changed nothing: the PD is not freed, still takes and
	// drops references, and frees once.
	require.Zero(t, pd.Refs())
	require.NoError(t, pd.TryRef())
	require.Equal(t, 1, pd.Refs())
	pd.Unref()
	require.NoError(t, pd.Free())
}

// A freed PD takes no references: every creating call fails, names the
// PD, and leaves the count at zero; freeing it again fails.
func TestFreedPD(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(9)
	require.NoError(t, pd.Free())
	require.ErrorIs(t, pd.TryRef(), ErrInvalidArgument)
	_, err := tb.RegMR(pd, make([]byte, 8), 0, LocalWrite)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "PD 9")
	_, err = tb.AllocMR(pd, 4)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = tb.AllocMW(pd, MWType2)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Zero(t, pd.Refs())
	require.ErrorIs(t, pd.Free(), ErrInvalidArgument)
	require.Panics(t, pd.Unref, "a freed PD holds no reference to drop")
	// The panic changed nothing: the PD is still freed, not busy.
	require.ErrorIs(t, pd.Free(), ErrInvalidArgument)
	require.ErrorIs(t, pd.TryRef(), ErrInvalidArgument)
	require.Zero(t, pd.Refs())
}

// A full table gives back the PD reference RegMR and AllocMW took.
func TestFullTableKeepsNoPDRef(t *testing.T) {
	tb := NewTable(MinTableBits)
	pd := NewPD(1)
	for {
		if _, err := tb.AllocMW(pd, MWType2); err != nil {
			require.ErrorIs(t, err, ErrNoResources)
			break
		}
	}
	refs := pd.Refs()
	_, err := tb.RegMR(pd, make([]byte, 8), 0, LocalWrite)
	require.ErrorIs(t, err, ErrNoResources)
	_, err = tb.AllocMW(pd, MWType1)
	require.ErrorIs(t, err, ErrNoResources)
	require.Equal(t, refs, pd.Refs())
}

// TryRef and Free racing: either the reference wins (Free sees a busy PD)
// or Free wins (TryRef fails), never both and never neither.
func TestPDTryRefRacesFree(t *testing.T) {
	for range 200 {
		pd := NewPD(1)
		var refErr, freeErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); refErr = pd.TryRef() }()
		go func() { defer wg.Done(); freeErr = pd.Free() }()
		wg.Wait()
		if refErr == nil {
			require.ErrorIs(t, freeErr, ErrBusy)
			require.Equal(t, 1, pd.Refs())
		} else {
			require.NoError(t, freeErr)
			require.ErrorIs(t, refErr, ErrInvalidArgument)
			require.Zero(t, pd.Refs())
		}
	}
}

// TestConcurrent runs verbs and checks from many goroutines; run with -race.
func TestConcurrent(t *testing.T) {
	tb := NewTable(10)
	pd := NewPD(1)
	stable := regMR(t, tb, pd, 4096, 0x10000, LocalWrite|RemoteAccess|MWBind)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			buf := make([]byte, 64)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Each worker writes its own quarter of the MR.
				va := 0x10000 + uint64(w*1024+i%960)
				mr, err := tb.CheckRemote(pd, stable.Rkey, va, 64, RemoteWrite)
				if err != nil || mr.WriteAt(buf, va) != len(buf) {
					t.Errorf("check or write failed: %v", err)
					return
				}
				// Random keys hit slots that other goroutines churn.
				_, _ = tb.CheckRemote(pd, uint32(i*2654435761+w), uint64(i), 8, RemoteRead)
				_, _ = tb.CheckLocal(pd, uint32(i*40503+w)|1<<22, uint64(i), 8, LocalWrite)
			}
		})
	}
	var verbs sync.WaitGroup
	for range 4 {
		verbs.Go(func() {
			for i := range 100 {
				// Not require: FailNow must not run off the test goroutine.
				if err := churn(tb, pd, stable); err != nil {
					t.Errorf("round %d: %v", i, err)
					return
				}
			}
		})
	}
	verbs.Wait()
	close(stop)
	wg.Wait()
	require.Equal(t, 1, tb.Len())
	require.Equal(t, 1, pd.Refs())
}

// churn runs one round of verbs for TestConcurrent: it registers, checks,
// fast-registers, binds, invalidates and frees, and returns the first error.
func churn(tb *Table, pd *PD, stable *MR) error {
	mr, err := tb.RegMR(pd, make([]byte, 128), 0, LocalWrite|RemoteRead)
	if err != nil {
		return err
	}
	if _, err := tb.CheckRemote(pd, mr.Rkey, 0, 128, RemoteRead); err != nil {
		return fmt.Errorf("check remote: %w", err)
	}
	fmr, err := tb.AllocMR(pd, 2)
	if err != nil {
		return err
	}
	if err := fmr.MapPages(makePages(2, 64), 64, 0, 128); err != nil {
		return err
	}
	if err := tb.FastReg(pd, fmr, 9, RemoteRead); err != nil {
		return err
	}
	mw, err := tb.AllocMW(pd, MWType2)
	if err != nil {
		return err
	}
	if _, err := tb.BindMW(mw, stable, 0x10000, 64, RemoteRead, 3); err != nil {
		return err
	}
	if err := tb.Invalidate(pd, mw.Rkey); err != nil {
		return err
	}
	if err := tb.Invalidate(pd, fmr.Lkey); err != nil {
		return err
	}
	if err := tb.DeallocMW(mw); err != nil {
		return err
	}
	if err := tb.DeregMR(fmr); err != nil {
		return err
	}
	return tb.DeregMR(mr)
}

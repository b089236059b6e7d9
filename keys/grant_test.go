package keys

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGrantsMatchLockedChecks drives a small table through random
// registrations, fast registrations, invalidations and deregistrations
// (so slots are reused with new generations and the grant array grows),
// and after each step checks every key ever handed out: the lock-free
// path of CheckLocal and CheckRemote must succeed exactly when the locked
// path does, with the same MR.
func TestGrantsMatchLockedChecks(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tb := NewTable(7)
		pds := []*PD{NewPD(1), NewPD(2)}
		var live []*MR
		var seen []uint32
		all := LocalWrite | RemoteAccess
		for step := 0; step < 300; step++ {
			switch op := rng.IntN(5); {
			case op == 0 || len(live) == 0:
				mr, err := tb.RegMR(pds[rng.IntN(2)], make([]byte, 64), 0x1000, Access(rng.IntN(16))&all|LocalWrite)
				require.NoError(t, err)
				live = append(live, mr)
			case op == 1:
				mr, err := tb.AllocMR(pds[0], 1)
				require.NoError(t, err)
				require.NoError(t, mr.MapPages(makePages(1, 64), 64, 0x2000, 64))
				require.NoError(t, tb.FastReg(pds[0], mr, uint8(rng.IntN(256)), all))
				live = append(live, mr)
			case op == 2:
				mr := live[rng.IntN(len(live))]
				if mr.FastRegister() {
					if mr.Valid() {
						require.NoError(t, tb.Invalidate(pds[0], mr.Lkey))
					} else {
						require.NoError(t, tb.FastReg(pds[0], mr, uint8(rng.IntN(256)), all))
					}
				}
			default:
				i := rng.IntN(len(live))
				require.NoError(t, tb.DeregMR(live[i]))
				live = append(live[:i], live[i+1:]...)
			}
			for _, mr := range live {
				seen = append(seen, mr.Lkey)
			}
			for _, key := range seen {
				pd := pds[rng.IntN(2)]
				addr := 0x1000 + uint64(rng.IntN(3))*0x1000 + uint64(rng.IntN(80))
				n := uint32(1 + rng.IntN(16))
				acc := Access(rng.IntN(16)) & all
				gotL, errL := tb.CheckLocal(pd, key, addr, n, acc&LocalWrite)
				wantL, werrL := tb.checkLocalSlow(pd, key, addr, n, acc&LocalWrite)
				require.Equal(t, werrL == nil, errL == nil, "seed %d step %d key %#x", seed, step, key)
				require.Same(t, wantL, gotL)
				if acc&RemoteAccess == 0 {
					acc |= RemoteRead
				}
				gotR, errR := tb.CheckRemote(pd, key, addr, n, acc)
				wantR, werrR := tb.checkRemoteSlow(pd, key, addr, n, acc)
				require.Equal(t, werrR == nil, errR == nil, "seed %d step %d key %#x", seed, step, key)
				require.Same(t, wantR, gotR)
				if werrL == nil {
					require.NotNil(t, tb.grantOf(key), "a valid MR has a grant: the fast path serves it")
				}
			}
			if len(seen) > 200 {
				seen = seen[len(seen)-200:]
			}
		}
	}
}

// TestInvalidateVisibleAtOnce checks, with checkers running on other
// goroutines, that a key fails on the goroutine that invalidated it as soon
// as Invalidate returns, and passes again as soon as FastReg returns.
func TestInvalidateVisibleAtOnce(t *testing.T) {
	tb := NewTable(6)
	pd := NewPD(1)
	mr, _ := fastMR(t, tb, pd, 1, 64, 0x3000, 1, LocalWrite|RemoteWrite)
	other := mr.Lkey&^0xff | 1 // read before the checkers start: FastReg writes Lkey
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				tb.CheckLocal(pd, other, 0x3000, 8, LocalWrite)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for i := range 2000 {
		key := mr.Lkey
		require.NoError(t, tb.Invalidate(pd, key))
		_, err := tb.CheckLocal(pd, key, 0x3000, 8, LocalWrite)
		require.ErrorIs(t, err, ErrInvalidKey, "round %d", i)
		require.NoError(t, tb.FastReg(pd, mr, uint8(i), LocalWrite|RemoteWrite))
		got, err := tb.CheckRemote(pd, mr.Rkey, 0x3000, 8, RemoteWrite)
		require.NoError(t, err, "round %d", i)
		require.Same(t, mr, got)
	}
}

// TestEpochMovesAfterTheChange checks what the transport relies on when it
// keeps a key check's result while Epoch is unchanged: a change that removes
// a key publishes its grant first and moves the epoch after, so a checker
// that read the new epoch cannot pass on the old grant. Adding a key does not
// move the epoch.
func TestEpochMovesAfterTheChange(t *testing.T) {
	tb := NewTable(10)
	pd := NewPD(1)
	e := tb.Epoch()
	mr := regMR(t, tb, pd, 64, 0x1000, LocalWrite)
	_, err := tb.AllocMW(pd, MWType1)
	require.NoError(t, err)
	require.Equal(t, e, tb.Epoch(), "RegMR and AllocMW make no passing check fail")

	fmr, _ := fastMR(t, tb, pd, 1, 64, 0x3000, 1, LocalWrite)
	win, err := tb.AllocMW(pd, MWType2)
	require.NoError(t, err)
	bindMR := regMR(t, tb, pd, 64, 0x5000, LocalWrite|MWBind)
	// Binding adds a key; it moves no epoch either.
	_, err = tb.BindMW(win, bindMR, 0x5000, 8, RemoteRead, 1)
	require.NoError(t, err)
	require.Equal(t, e, tb.Epoch(), "BindMW makes no passing check fail")
	// None of these can make a passing lkey check fail: a valid MR's grant
	// stays as it was, so the epoch (and with it every WQE's checked MRs)
	// must stay too. want is the error the step fails with, nil if none.
	still := []struct {
		name string
		want error
		do   func() error
	}{
		{"AllocMR, MapPages, FastReg", nil, func() error {
			_, _ = fastMR(t, tb, pd, 1, 64, 0x4000, 2, LocalWrite)
			return nil
		}},
		{"failed Invalidate (wrong key byte)", ErrInvalidKey, func() error { return tb.Invalidate(pd, fmr.Lkey^1) }},
		{"failed FastReg (MR valid)", ErrInvalidState, func() error { return tb.FastReg(pd, fmr, 3, LocalWrite) }},
		{"failed MapPages (MR valid)", ErrInvalidState, func() error { return fmr.MapPages(makePages(1, 64), 64, 0x3000, 64) }},
		{"failed DeregMR (windows bound)", ErrBusy, func() error { return tb.DeregMR(bindMR) }},
		{"Invalidate a window", nil, func() error { return tb.Invalidate(pd, win.Rkey) }},
		{"DeallocMW", nil, func() error { return tb.DeallocMW(win) }},
	}
	for _, st := range still {
		before := tb.Epoch()
		if err := st.do(); st.want != nil {
			require.ErrorIs(t, err, st.want, st.name)
		} else {
			require.NoError(t, err, st.name)
		}
		require.Equal(t, before, tb.Epoch(), "%s moved the epoch", st.name)
	}
	changes := []struct {
		name string
		key  uint32
		do   func() error
	}{
		{"Invalidate", fmr.Lkey, func() error { return tb.Invalidate(pd, fmr.Lkey) }},
		{"DeregMR", mr.Lkey, func() error { return tb.DeregMR(mr) }},
	}
	for _, ch := range changes {
		before := tb.Epoch()
		published := false
		tb.onPublish = func() {
			published = true
			require.Nil(t, tb.grantOf(ch.key), "%s: the grant is gone when published", ch.name)
			require.Equal(t, before, tb.Epoch(), "%s: the epoch moved before the grant was published", ch.name)
		}
		require.NoError(t, ch.do())
		tb.onPublish = nil
		require.True(t, published, "%s published no grant", ch.name)
		require.Greater(t, tb.Epoch(), before, "%s moves the epoch", ch.name)
	}
}

// TestGrantAllows checks each condition of the lock-free check on its own,
// including ranges that wrap around the address space.
func TestGrantAllows(t *testing.T) {
	tb := NewTable(8)
	pd, other := NewPD(1), NewPD(2)
	mr := regMR(t, tb, pd, 64, 0x1000, LocalWrite|RemoteRead)
	g := tb.grantOf(mr.Lkey)
	require.NotNil(t, g)
	const max = ^uint64(0)
	cases := []struct {
		name   string
		g      *grant
		pd     *PD
		key    uint32
		addr   uint64
		n      uint64
		access Access
		want   bool
	}{
		{"all of it", g, pd, mr.Lkey, 0x1000, 64, LocalWrite | RemoteRead, true},
		{"last byte", g, pd, mr.Lkey, 0x103f, 1, 0, true},
		{"no grant", nil, pd, mr.Lkey, 0x1000, 1, 0, false},
		{"other key byte", g, pd, mr.Lkey ^ 1, 0x1000, 1, 0, false},
		{"other PD", g, other, mr.Lkey, 0x1000, 1, 0, false},
		{"access not granted", g, pd, mr.Lkey, 0x1000, 1, RemoteWrite, false},
		{"before", g, pd, mr.Lkey, 0xfff, 1, 0, false},
		{"past the end", g, pd, mr.Lkey, 0x1000, 65, 0, false},
		{"wraps", g, pd, mr.Lkey, 0x1001, max, 0, false},
		{"at the top", g, pd, mr.Lkey, max, 2, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.g.allows(c.pd, c.key, c.addr, c.n, c.access))
		})
	}
}

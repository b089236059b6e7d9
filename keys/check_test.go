package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChecks(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	other := NewPD(2)
	const base = 0x10000
	rw := regMR(t, tb, pd, 4096, base, LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic)
	ro := regMR(t, tb, pd, 4096, base, RemoteRead)    // local read + remote read
	local := regMR(t, tb, pd, 4096, base, LocalWrite) // no remote access at all
	empty := regMR(t, tb, pd, 0, base, LocalWrite|RemoteRead)
	zb := regMR(t, tb, pd, 4096, 0x7000_0000, LocalWrite|RemoteWrite|ZeroBased)
	top := regMR(t, tb, pd, 4096, ^uint64(0)-4096, LocalWrite|RemoteRead)
	mw, err := tb.AllocMW(pd, MWType1)
	require.NoError(t, err)

	type check struct {
		name   string
		remote bool
		pd     *PD
		key    uint32
		va     uint64
		n      uint32
		access Access
		want   *MR
		err    error
	}
	for _, tc := range []check{
		{"local read", false, pd, rw.Lkey, base, 4096, 0, rw, nil},
		{"local write", false, pd, rw.Lkey, base + 100, 8, LocalWrite, rw, nil},
		{"local write refused", false, pd, ro.Lkey, base, 8, LocalWrite, nil, ErrAccess},
		{"local pd mismatch", false, other, rw.Lkey, base, 8, 0, nil, ErrPDMismatch},
		{"local below", false, pd, rw.Lkey, base - 1, 8, 0, nil, ErrBounds},
		{"local past end", false, pd, rw.Lkey, base + 4089, 8, 0, nil, ErrBounds},
		{"local last byte", false, pd, rw.Lkey, base + 4095, 1, 0, rw, nil},
		{"local overflow", false, pd, rw.Lkey, ^uint64(0) - 3, 8, 0, nil, ErrBounds},
		{"local zero length skips everything", false, other, 0xdeadbeef, ^uint64(0), 0, RemoteAccess, nil, nil},
		{"local wrong key byte", false, pd, rw.Lkey | 0x5a, base, 8, 0, nil, ErrInvalidKey},
		{"local stale generation", false, pd, rw.Lkey + 1<<8, base, 8, 0, nil, ErrInvalidKey},
		{"local unused index", false, pd, 200 << 24, base, 8, 0, nil, ErrInvalidKey},
		{"local mw key", false, pd, mw.Rkey, base, 8, 0, nil, ErrInvalidKey},
		{"local empty mr", false, pd, empty.Lkey, base, 1, 0, nil, ErrBounds},
		{"local zero-based", false, pd, zb.Lkey, 0, 4096, LocalWrite, zb, nil},
		{"local zero-based iova is out", false, pd, zb.Lkey, 0x7000_0000, 8, 0, nil, ErrBounds},
		{"local at top of address space", false, pd, top.Lkey, ^uint64(0) - 8, 8, 0, top, nil},
		{"local overflow at top", false, pd, top.Lkey, ^uint64(0) - 7, 8, 0, nil, ErrBounds},

		{"remote read", true, pd, rw.Rkey, base, 4096, RemoteRead, rw, nil},
		{"remote write", true, pd, rw.Rkey, base + 8, 16, RemoteWrite, rw, nil},
		{"remote atomic", true, pd, rw.Rkey, base + 8, 8, RemoteAtomic, rw, nil},
		{"remote read-only refuses write", true, pd, ro.Rkey, base, 8, RemoteWrite, nil, ErrAccess},
		{"remote read-only refuses atomic", true, pd, ro.Rkey, base, 8, RemoteAtomic, nil, ErrAccess},
		{"remote read-only read", true, pd, ro.Rkey, base, 8, RemoteRead, ro, nil},
		{"rkey of a local-only mr", true, pd, local.Rkey, base, 8, RemoteRead, nil, ErrAccess},
		{"rkey of a local-only mr, write", true, pd, local.Rkey, base, 8, RemoteWrite, nil, ErrAccess},
		{"remote needs a remote flag", true, pd, rw.Rkey, base, 8, LocalWrite, nil, ErrAccess},
		{"remote no flag", true, pd, rw.Rkey, base, 8, 0, nil, ErrAccess},
		{"remote pd mismatch", true, other, rw.Rkey, base, 8, RemoteRead, nil, ErrPDMismatch},
		{"remote below", true, pd, rw.Rkey, 0, 8, RemoteRead, nil, ErrBounds},
		{"remote past end", true, pd, rw.Rkey, base + 4096, 1, RemoteRead, nil, ErrBounds},
		{"remote overflow", true, pd, rw.Rkey, ^uint64(0), 2, RemoteRead, nil, ErrBounds},
		{"remote huge length", true, pd, rw.Rkey, base, ^uint32(0), RemoteRead, nil, ErrBounds},
		{"remote zero length", true, other, 0, 0, 0, 0, nil, nil},
		{"remote key 0", true, pd, 0, base, 8, RemoteRead, nil, ErrInvalidKey},
		{"remote wrong key byte", true, pd, rw.Rkey ^ 1, base, 8, RemoteRead, nil, ErrInvalidKey},
		{"remote unbound mw", true, pd, mw.Rkey, base, 8, RemoteRead, nil, ErrInvalidKey},
		{"remote zero-based", true, pd, zb.Rkey, 4088, 8, RemoteWrite, zb, nil},
		{"remote zero-based past end", true, pd, zb.Rkey, 4089, 8, RemoteWrite, nil, ErrBounds},
		{"remote empty mr", true, pd, empty.Rkey, base, 1, RemoteRead, nil, ErrBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mr *MR
			var err error
			if tc.remote {
				mr, err = tb.CheckRemote(tc.pd, tc.key, tc.va, tc.n, tc.access)
			} else {
				mr, err = tb.CheckLocal(tc.pd, tc.key, tc.va, tc.n, tc.access)
			}
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Nil(t, mr)
				return
			}
			require.NoError(t, err)
			require.Same(t, tc.want, mr)
		})
	}
}

// TestCheckErrorsDistinguish checks that the reason for ErrInvalidKey is in
// the message.
func TestCheckErrorsDistinguish(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	mr := regMR(t, tb, pd, 64, 0, RemoteRead)
	for _, tc := range []struct {
		key  uint32
		want string
	}{
		{mr.Rkey ^ 0x80, "key byte mismatch"},
		{mr.Rkey ^ 0x100, "stale key generation"},
		{mr.Rkey & 0xff, "reserved"},
		{mr.Rkey + 1<<24, "no object"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := tb.CheckRemote(pd, tc.key, 0, 8, RemoteRead)
			require.ErrorIs(t, err, ErrInvalidKey)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckNoAllocs(t *testing.T) {
	tb := NewTable(8)
	pd := NewPD(1)
	mr := regMR(t, tb, pd, 4096, 0x1000, LocalWrite|RemoteAccess)
	fmr, _ := fastMR(t, tb, pd, 4, 1024, 0x8000, 1, LocalWrite|RemoteAccess)
	other := NewPD(2)
	buf := make([]byte, 2000)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = tb.CheckRemote(pd, mr.Rkey, 0x1000, 64, RemoteWrite)
		_, _ = tb.CheckRemote(pd, mr.Rkey^1, 0x1000, 64, RemoteWrite) // fails
		_, _ = tb.CheckRemote(pd, mr.Rkey, 0x0, 64, RemoteWrite)      // fails
		_, _ = tb.CheckLocal(pd, mr.Lkey, 0x1000, 64, LocalWrite)
		_, _ = tb.CheckLocal(other, mr.Lkey, 0x1000, 64, 0) // fails
		_ = fmr.WriteAt(buf, 0x8000+100)
		_ = fmr.ReadAt(buf, 0x8000+100)
		_ = mr.Word(0x1008)
	})
	require.Zero(t, allocs)
}

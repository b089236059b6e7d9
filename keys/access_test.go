package keys

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAccessValues(t *testing.T) {
	// libibverbs enum ibv_access_flags.
	require.Equal(t, Access(1), LocalWrite)
	require.Equal(t, Access(2), RemoteWrite)
	require.Equal(t, Access(4), RemoteRead)
	require.Equal(t, Access(8), RemoteAtomic)
	require.Equal(t, Access(16), MWBind)
	require.Equal(t, Access(32), ZeroBased)
}

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LocalWrite"},
		{LocalWrite | RemoteRead, "LocalWrite|RemoteRead"},
		{RemoteAccess, "RemoteWrite|RemoteRead|RemoteAtomic"},
		{MWBind | ZeroBased, "MWBind|ZeroBased"},
		{0x40, "0x40"},
		{LocalWrite | 0x180, "LocalWrite|0x180"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			require.Equal(t, tc.want, tc.a.String())
		})
	}
}

// TestMRAccessRules holds RegMR and FastReg to ib_check_mr_access: remote
// write or remote atomic needs local write; everything else known is allowed.
func TestMRAccessRules(t *testing.T) {
	for _, tc := range []struct {
		a  Access
		ok bool
	}{
		{0, true},
		{LocalWrite, true},
		{RemoteRead, true},
		{RemoteWrite, false},
		{RemoteAtomic, false},
		{RemoteWrite | RemoteRead, false},
		{LocalWrite | RemoteWrite, true},
		{LocalWrite | RemoteAtomic, true},
		{LocalWrite | RemoteAccess | MWBind | ZeroBased, true},
		{MWBind, true},
		{ZeroBased, true},
		{RemoteAtomic | MWBind, false},
		{0x40, false},
		{LocalWrite | 0x80000000, false},
	} {
		t.Run(tc.a.String(), func(t *testing.T) {
			tb := NewTable(8)
			pd := NewPD(1)
			mr, err := tb.RegMR(pd, make([]byte, 64), 0x1000, tc.a)
			fmr, ferr := tb.AllocMR(pd, 1)
			require.NoError(t, ferr)
			fErr := tb.FastReg(pd, fmr, 1, tc.a)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, tc.a, mr.Access)
				require.NoError(t, fErr)
				require.Equal(t, 2, pd.Refs())
				return
			}
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.Nil(t, mr)
			require.ErrorIs(t, fErr, ErrInvalidArgument)
			require.False(t, fmr.Valid())
			require.Equal(t, 1, pd.Refs(), "a refused RegMR takes no PD reference")
		})
	}
	// Exhaustively over the known flags.
	for a := Access(0); a <= allAccess; a++ {
		want := a&(RemoteWrite|RemoteAtomic) == 0 || a&LocalWrite != 0
		require.Equal(t, want, checkMRAccess(a) == nil, "access %s", a)
	}
}

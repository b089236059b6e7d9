package netdev

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGroupRefs: nested joins and leaves, as every GroupJoiner counts
// them: only the first join and the last leave act, a first join whose
// act fails does not count, and leaving a group not joined is an error
// naming it that does not act.
func TestGroupRefs(t *testing.T) {
	g1, g2 := netip.MustParseAddr("239.1.1.1"), netip.MustParseAddr("ff0e::101")
	errAct := errors.New("act failed")
	var r GroupRefs
	steps := []struct {
		join    bool // else leave
		g       netip.Addr
		actErr  error // what the act returns, if called
		want    bool  // first join, last leave: the act is called
		wantErr error // nil: none; errAct: the act's; ErrNotJoined: one naming g
	}{
		{join: false, g: g1, wantErr: ErrNotJoined}, // never joined
		{join: true, g: g1, actErr: errAct, wantErr: errAct},
		{join: false, g: g1, wantErr: ErrNotJoined}, // the failed join did not count
		{join: true, g: g1, want: true},
		{join: true, g: g1},
		{join: true, g: g2, want: true},
		{join: false, g: g1},
		{join: false, g: g2, want: true},
		{join: true, g: g2, want: true},
		{join: false, g: g2, actErr: errAct, want: true, wantErr: errAct},
		{join: false, g: g2, wantErr: ErrNotJoined}, // forgotten all the same
		{join: false, g: g1, want: true},
		{join: false, g: g1, wantErr: ErrNotJoined}, // one leave too many
		{join: true, g: g1, want: true},             // counting starts over
	}
	for i, s := range steps {
		name := fmt.Sprintf("step %d: join=%v %v", i, s.join, s.g)
		acted := false
		act := func() error { acted = true; return s.actErr }
		var got bool
		var err error
		if s.join {
			got, err = r.Join(s.g, act)
		} else {
			got, err = r.Leave(s.g, act)
		}
		require.Equal(t, s.want, got, name)
		switch s.wantErr {
		case nil:
			require.NoError(t, err, name)
		case errAct:
			require.ErrorIs(t, err, errAct, name)
			require.NotErrorIs(t, err, ErrNotJoined, name)
		default:
			require.ErrorIs(t, err, ErrNotJoined, name)
			require.ErrorContains(t, err, s.g.String(), name)
		}
		require.Equal(t, s.want || s.actErr != nil, acted, "%s: act called", name)
	}
	require.Equal(t, []netip.Addr{g1}, r.All())
	r.Reset()
	require.Empty(t, r.All())
	_, err := r.Leave(g1, nil)
	require.ErrorIs(t, err, ErrNotJoined, "reset forgets the joins")
}

package mcast

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type qp uint32

func (q qp) QPN() uint32 { return uint32(q) }

func gid(t testing.TB, s string) GID {
	t.Helper()
	g, err := ParseGID(s)
	require.NoError(t, err)
	return g
}

func qpns(ms []Member) []uint32 {
	out := make([]uint32, len(ms))
	for i, m := range ms {
		out[i] = m.QPN()
	}
	return out
}

func TestGID(t *testing.T) {
	tests := []struct {
		in, str string
		mc      bool
	}{
		{"ff0e::1", "ff0e::1", true},
		{"ff12:401b:ffff::1", "ff12:401b:ffff::1", true},
		{"ff02::1:ff00:1", "ff02::1:ff00:1", true},
		{"fe80::1", "fe80::1", false},
		{"::", "::", false},
		{"::ffff:224.0.0.1", "::ffff:224.0.0.1", true},
		{"239.255.255.250", "::ffff:239.255.255.250", true},
		{"::ffff:240.0.0.1", "::ffff:240.0.0.1", false},
		{"::ffff:223.255.255.255", "::ffff:223.255.255.255", false},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1", false},
		{"::224.0.0.1", "::e000:1", false}, // IPv4-compatible, not mapped
		{"1::ffff:224.0.0.1", "1::ffff:e000:1", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			g := gid(t, tc.in)
			require.Equal(t, tc.str, g.String())
			require.Equal(t, tc.mc, g.IsMulticast())
		})
	}
	_, err := ParseGID("not a gid")
	require.Error(t, err)
}

func TestRules(t *testing.T) {
	g1 := gid(t, "ff0e::1")
	g2 := gid(t, "ff0e::2")
	g3 := gid(t, "ff0e::3")
	v4 := gid(t, "239.1.1.1")
	uni := gid(t, "fe80::1")

	type step struct {
		detach bool
		mgid   GID
		mlid   uint16
		qpn    uint32
		nilM   bool
		err    error
	}
	attach := func(g GID, l uint16, q uint32, err error) step { return step{false, g, l, q, false, err} }
	detach := func(g GID, l uint16, q uint32, err error) step { return step{true, g, l, q, false, err} }

	tests := []struct {
		name      string
		maxGroups int
		maxQPs    int
		steps     []step
		groups    int
		want      map[GID][]uint32
	}{
		{name: "attach", steps: []step{attach(g1, 0xc001, 1, nil), attach(g1, 0xc001, 2, nil)},
			groups: 1, want: map[GID][]uint32{g1: {1, 2}}},
		{name: "ipv4 mapped", steps: []step{attach(v4, 0, 1, nil)},
			groups: 1, want: map[GID][]uint32{v4: {1}}},
		{name: "unicast refused", steps: []step{attach(uni, 0xc001, 1, ErrInvalidArgument), detach(uni, 0xc001, 1, ErrInvalidArgument)}},
		{name: "nil member", steps: []step{{mgid: g1, mlid: 1, nilM: true, err: ErrInvalidArgument}, {detach: true, mgid: g1, mlid: 1, nilM: true, err: ErrInvalidArgument}}},
		{name: "one mgid one mlid", steps: []step{attach(g1, 0xc001, 1, nil), attach(g1, 0xc002, 2, ErrInvalidArgument), attach(g1, 0xc002, 1, ErrInvalidArgument)},
			groups: 1, want: map[GID][]uint32{g1: {1}}},
		{name: "one mlid many mgids", steps: []step{attach(g1, 0xc001, 1, nil), attach(g2, 0xc001, 1, nil), attach(g3, 0xc001, 2, nil)},
			groups: 3, want: map[GID][]uint32{g1: {1}, g2: {1}, g3: {2}}},
		{name: "re-attach", steps: []step{attach(g1, 0xc001, 1, nil), attach(g1, 0xc001, 1, ErrExists)},
			groups: 1, want: map[GID][]uint32{g1: {1}}},
		{name: "detach", steps: []step{attach(g1, 0xc001, 1, nil), attach(g1, 0xc001, 2, nil), attach(g1, 0xc001, 3, nil), detach(g1, 0xc001, 2, nil)},
			groups: 1, want: map[GID][]uint32{g1: {1, 3}}},
		{name: "detach last removes group", steps: []step{attach(g1, 0xc001, 1, nil), detach(g1, 0xc001, 1, nil), detach(g1, 0xc001, 1, ErrNotAttached)}},
		{name: "detach unknown group", steps: []step{detach(g1, 0xc001, 1, ErrNotAttached)}},
		{name: "detach non-member", steps: []step{attach(g1, 0xc001, 1, nil), detach(g1, 0xc001, 2, ErrNotAttached)},
			groups: 1, want: map[GID][]uint32{g1: {1}}},
		{name: "detach wrong mlid", steps: []step{attach(g1, 0xc001, 1, nil), detach(g1, 0xc002, 1, ErrNotAttached)},
			groups: 1, want: map[GID][]uint32{g1: {1}}},
		{name: "group limit", maxGroups: 2, steps: []step{attach(g1, 1, 1, nil), attach(g2, 1, 1, nil), attach(g3, 1, 1, ErrNoResources), attach(g2, 1, 2, nil)},
			groups: 2, want: map[GID][]uint32{g1: {1}, g2: {1, 2}}},
		{name: "group limit frees", maxGroups: 1, steps: []step{attach(g1, 1, 1, nil), detach(g1, 1, 1, nil), attach(g2, 1, 1, nil)},
			groups: 1, want: map[GID][]uint32{g2: {1}}},
		{name: "qp limit", maxQPs: 2, steps: []step{attach(g1, 1, 1, nil), attach(g1, 1, 2, nil), attach(g1, 1, 3, ErrNoResources), attach(g2, 1, 3, nil), detach(g1, 1, 1, nil), attach(g1, 1, 3, nil)},
			groups: 2, want: map[GID][]uint32{g1: {2, 3}, g2: {3}}},
		{name: "re-attach at limit is exists", maxQPs: 1, steps: []step{attach(g1, 1, 1, nil), attach(g1, 1, 1, ErrExists)},
			groups: 1, want: map[GID][]uint32{g1: {1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(tc.maxGroups, tc.maxQPs)
			for i, s := range tc.steps {
				var m Member
				if !s.nilM {
					m = qp(s.qpn)
				}
				op := tb.Attach
				if s.detach {
					op = tb.Detach
				}
				err := op(s.mgid, s.mlid, m)
				if s.err == nil {
					require.NoError(t, err, "step %d", i)
				} else {
					require.ErrorIs(t, err, s.err, "step %d", i)
				}
			}
			require.Equal(t, tc.groups, tb.Groups())
			require.Len(t, tb.List(), tc.groups)
			for mgid, want := range tc.want {
				_, members, ok := tb.Lookup(mgid)
				require.True(t, ok, "group %v", mgid)
				require.Equal(t, want, qpns(members), "group %v", mgid)
			}
		})
	}
}

func TestLookupFindList(t *testing.T) {
	tb := NewTable(0, 0)
	g1, g2 := gid(t, "ff0e::1"), gid(t, "ff02::2")
	_, _, ok := tb.Lookup(g1)
	require.False(t, ok)
	require.NoError(t, tb.Attach(g1, 0xc001, qp(7)))
	require.NoError(t, tb.Attach(g2, 0xc001, qp(8)))
	require.NoError(t, tb.Attach(g2, 0xc001, qp(9)))

	mlid, members, ok := tb.Lookup(g1)
	require.True(t, ok)
	require.Equal(t, uint16(0xc001), mlid)
	require.Equal(t, []uint32{7}, qpns(members))

	members, ok = tb.Find(g2, 0xc001)
	require.True(t, ok)
	require.Equal(t, []uint32{8, 9}, qpns(members))
	_, ok = tb.Find(g2, 0xc002)
	require.False(t, ok)

	require.Equal(t, []GroupInfo{
		{MGID: g2, MLID: 0xc001, QPNs: []uint32{8, 9}},
		{MGID: g1, MLID: 0xc001, QPNs: []uint32{7}},
	}, tb.List())

	allocs := testing.AllocsPerRun(100, func() { tb.Lookup(g2) })
	require.Zero(t, allocs)
}

// TestDetachAll: a member leaves every group it is in, other members stay,
// and the groups it was the last member of are reported, by MGID.
func TestDetachAll(t *testing.T) {
	tb := NewTable(0, 0)
	g1, g2, g3, g4 := gid(t, "ff0e::1"), gid(t, "ff02::2"), gid(t, "ff0e::3"), gid(t, "ff0e::4")
	require.NoError(t, tb.Attach(g3, 0xc003, qp(7)))
	require.NoError(t, tb.Attach(g1, 0xc001, qp(7)))
	require.NoError(t, tb.Attach(g2, 0xc002, qp(8)))
	require.NoError(t, tb.Attach(g2, 0xc002, qp(7)))
	require.NoError(t, tb.Attach(g2, 0xc002, qp(9)))
	require.NoError(t, tb.Attach(g4, 0xc004, qp(9)))
	_, before, _ := tb.Lookup(g2)

	require.Equal(t, []GID{g1, g3}, tb.DetachAll(qp(7)))
	require.Equal(t, []GroupInfo{
		{MGID: g2, MLID: 0xc002, QPNs: []uint32{8, 9}},
		{MGID: g4, MLID: 0xc004, QPNs: []uint32{9}},
	}, tb.List())
	require.Equal(t, []uint32{8, 7, 9}, qpns(before), "a snapshot taken before is unchanged")
	require.Nil(t, tb.DetachAll(qp(7)), "in no group any more")
	require.Nil(t, tb.DetachAll(nil))
	require.ErrorIs(t, tb.Detach(g2, 0xc002, qp(7)), ErrNotAttached)
	require.Nil(t, tb.DetachAll(qp(8)), "g2 keeps 9")
	require.Equal(t, []GID{g2, g4}, tb.DetachAll(qp(9)))
	require.Zero(t, tb.Groups())
}

func TestSnapshotIsolation(t *testing.T) {
	tb := NewTable(0, 0)
	g := gid(t, "ff0e::1")
	for q := range 4 {
		require.NoError(t, tb.Attach(g, 1, qp(q)))
	}
	_, snap, ok := tb.Lookup(g)
	require.True(t, ok)
	before := qpns(snap)

	require.NoError(t, tb.Attach(g, 1, qp(4)))
	require.NoError(t, tb.Detach(g, 1, qp(0)))
	require.NoError(t, tb.Detach(g, 1, qp(2)))
	require.Equal(t, before, qpns(snap), "an earlier snapshot does not change")
	require.Equal(t, []uint32{0, 1, 2, 3}, qpns(snap))

	_, now, _ := tb.Lookup(g)
	require.Equal(t, []uint32{1, 3, 4}, qpns(now))

	for q := range 5 {
		_ = tb.Detach(g, 1, qp(q))
	}
	_, _, ok = tb.Lookup(g)
	require.False(t, ok)
	require.Equal(t, []uint32{1, 3, 4}, qpns(now), "snapshot survives the group")
}

// TestConcurrent attaches and detaches while readers iterate snapshots. Run
// with -race.
func TestConcurrent(t *testing.T) {
	tb := NewTable(0, 0)
	mgids := []GID{gid(t, "ff0e::1"), gid(t, "ff0e::2"), gid(t, "239.0.0.1")}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, g := range mgids {
					mlid, members, ok := tb.Lookup(g)
					if !ok {
						continue
					}
					if mlid != 0xc000 {
						t.Errorf("mlid %#x", mlid)
					}
					seen := map[uint32]bool{}
					for _, m := range members {
						if seen[m.QPN()] {
							t.Errorf("duplicate member %d in %v", m.QPN(), g)
						}
						seen[m.QPN()] = true
					}
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := range 500 {
				g := mgids[i%len(mgids)]
				m := qp(w*1000 + i%10)
				if err := tb.Attach(g, 0xc000, m); err == nil {
					if err := tb.Detach(g, 0xc000, m); err != nil {
						t.Errorf("detach: %v", err)
					}
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	require.Zero(t, tb.Groups())
}

func BenchmarkLookup(b *testing.B) {
	tb := NewTable(0, 0)
	g := gid(b, "ff0e::1")
	for q := range 8 {
		require.NoError(b, tb.Attach(g, 0xc001, qp(q)))
	}
	b.ReportAllocs()
	for b.Loop() {
		tb.Lookup(g)
	}
}

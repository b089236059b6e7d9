package netdev

import (
	"errors"
	"fmt"
	"net/netip"
)

// GroupJoiner is implemented by links that must be told which multicast
// groups to receive: a Host announces membership (IGMP/MLD) so that
// snooping bridges forward the group to it; the UDP link joins the group
// on its socket. Joins nest; LeaveGroup of a group not joined returns an
// error wrapping ErrNotJoined.
type GroupJoiner interface {
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
}

// ErrNotJoined is wrapped by the error of LeaveGroup for a group that is
// not joined.
var ErrNotJoined = errors.New("netdev: group not joined")

// GroupRefs counts the joins of each multicast group, so that every
// GroupJoiner nests joins alike: the first join of a group and its last
// leave act (join the kernel's group, send a report, ...), the others only
// count.
type GroupRefs struct{ n map[netip.Addr]int }

// Join counts one join of g and reports whether it is the first. The
// first join calls act (nil: nothing to do) and counts only if act
// succeeds; act's error is returned as is.
func (r *GroupRefs) Join(g netip.Addr, act func() error) (first bool, err error) {
	if n := r.n[g]; n > 0 {
		r.n[g] = n + 1
		return false, nil
	}
	if act != nil {
		if err := act(); err != nil {
			return false, err
		}
	}
	if r.n == nil {
		r.n = make(map[netip.Addr]int)
	}
	r.n[g] = 1
	return true, nil
}

// Leave undoes one join of g and reports whether it was the last. The
// last leave calls act (nil: nothing to do) and returns its error; the
// join is forgotten even if act fails, as a group half left cannot be
// left again. Leaving a group that is not joined is an error naming the
// group and wrapping ErrNotJoined, and act is not called.
func (r *GroupRefs) Leave(g netip.Addr, act func() error) (last bool, err error) {
	switch n := r.n[g]; n {
	case 0:
		return false, fmt.Errorf("leave group %v: %w", g, ErrNotJoined)
	case 1:
		delete(r.n, g)
		if act != nil {
			err = act()
		}
		return true, err
	default:
		r.n[g] = n - 1
		return false, nil
	}
}

// All returns the joined groups, in no particular order.
func (r *GroupRefs) All() []netip.Addr {
	out := make([]netip.Addr, 0, len(r.n))
	for g := range r.n {
		out = append(out, g)
	}
	return out
}

// Reset forgets every join.
func (r *GroupRefs) Reset() { clear(r.n) }

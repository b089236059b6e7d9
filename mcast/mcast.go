// Package mcast keeps the multicast groups of a device, in the manner of
// rdmavt's rvt_mcast: each group is named by its MGID, carries one MLID, and
// holds the QPs attached to it. The receive path looks a group up once per
// packet and delivers a copy to every member.
//
// Lock order: Table.mu only. Lookup takes it for reading and returns a member
// slice that is never modified afterwards (attach and detach build a new one),
// so callers iterate it without any lock while others attach and detach.
package mcast

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/softverbs/softverbs/internal/verr"
)

// Errors returned by this package, wrapped with context.
var (
	// ErrInvalidArgument: not a multicast GID, a nil member, or an MGID
	// attached with an MLID other than the one its group carries.
	ErrInvalidArgument = verr.ErrInvalidArgument
	// ErrExists: the member is already attached to the group.
	ErrExists = errors.New("already attached")
	// ErrNotAttached: the member is not attached to that group (no such
	// group, another MLID, or another member).
	ErrNotAttached = errors.New("not attached")
	// ErrNoResources: the table's group limit or the group's member limit
	// is reached.
	ErrNoResources = verr.ErrNoResources
)

// GID is a 128-bit global identifier, in network byte order.
type GID [16]byte

// String returns g in IPv6 text form ("ff0e::1", "::ffff:239.1.1.1").
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// ParseGID parses a GID in IPv6 text form; an IPv4 address is taken as its
// IPv4-mapped GID, as RoCEv2 does.
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, fmt.Errorf("parse gid: %w", err)
	}
	return a.As16(), nil
}

// IsMulticast reports whether g may name a multicast group: an IB/IPv6
// multicast GID (first byte 0xff), or, for RoCEv2, an IPv4-mapped IPv4
// multicast address (::ffff:224.0.0.0/4).
func (g GID) IsMulticast() bool {
	if g[0] == 0xff {
		return true
	}
	return g.isV4Mapped() && g[12]&0xf0 == 0xe0
}

func (g GID) isV4Mapped() bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// Member is a QP that can be attached to a group. Members are identified by
// QPN: two Members with the same QPN are the same member. QPN is called with
// the table lock held, so it must be a plain getter.
type Member interface{ QPN() uint32 }

type group struct {
	mlid    uint16
	members []Member // immutable once published; replaced on change
}

// Table is the multicast group table of a device. It is safe for concurrent
// use.
type Table struct {
	maxGroups, maxQPs int

	mu     sync.RWMutex
	groups map[GID]*group // guarded by mu
}

// NewTable returns an empty table allowing at most maxGroups groups and at
// most maxQPsPerGroup members in each (ibv_device_attr max_mcast_grp and
// max_mcast_qp_attach). A limit <= 0 means no limit.
func NewTable(maxGroups, maxQPsPerGroup int) *Table {
	return &Table{maxGroups: maxGroups, maxQPs: maxQPsPerGroup, groups: make(map[GID]*group)}
}

// Attach adds m to the group mgid, creating the group with mlid if it does
// not exist. Errors: ErrInvalidArgument when mgid is not multicast, m is nil,
// or the group exists with another MLID (one MGID carries one MLID; one MLID
// may carry several MGIDs); ErrExists when m is already a member;
// ErrNoResources when the group or member limit is reached.
func (t *Table) Attach(mgid GID, mlid uint16, m Member) error {
	if !mgid.IsMulticast() {
		return fmt.Errorf("attach mcast %v: %w: not a multicast gid", mgid, ErrInvalidArgument)
	}
	if m == nil {
		return fmt.Errorf("attach mcast %v: %w: nil member", mgid, ErrInvalidArgument)
	}
	qpn := m.QPN()
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.groups[mgid]
	if !ok {
		if t.maxGroups > 0 && len(t.groups) >= t.maxGroups {
			return fmt.Errorf("attach mcast %v: qp %#x: %w: %d groups", mgid, qpn, ErrNoResources, len(t.groups))
		}
		t.groups[mgid] = &group{mlid: mlid, members: []Member{m}}
		return nil
	}
	if g.mlid != mlid {
		return fmt.Errorf("attach mcast %v: %w: mlid %#x, group has mlid %#x", mgid, ErrInvalidArgument, mlid, g.mlid)
	}
	if indexQPN(g.members, qpn) >= 0 {
		return fmt.Errorf("attach mcast %v: qp %#x: %w", mgid, qpn, ErrExists)
	}
	if t.maxQPs > 0 && len(g.members) >= t.maxQPs {
		return fmt.Errorf("attach mcast %v: qp %#x: %w: %d members", mgid, qpn, ErrNoResources, len(g.members))
	}
	// Copy on write: readers may hold the old slice.
	members := make([]Member, len(g.members), len(g.members)+1)
	copy(members, g.members)
	g.members = append(members, m)
	return nil
}

// Detach removes m from the group mgid; the group goes away with its last
// member. Errors: ErrInvalidArgument when mgid is not multicast or m is nil;
// ErrNotAttached when there is no such group, it carries another MLID, or m
// is not a member.
func (t *Table) Detach(mgid GID, mlid uint16, m Member) error {
	if !mgid.IsMulticast() {
		return fmt.Errorf("detach mcast %v: %w: not a multicast gid", mgid, ErrInvalidArgument)
	}
	if m == nil {
		return fmt.Errorf("detach mcast %v: %w: nil member", mgid, ErrInvalidArgument)
	}
	qpn := m.QPN()
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.groups[mgid]
	if !ok {
		return fmt.Errorf("detach mcast %v: qp %#x: %w: no such group", mgid, qpn, ErrNotAttached)
	}
	if g.mlid != mlid {
		return fmt.Errorf("detach mcast %v: qp %#x: %w: mlid %#x, group has mlid %#x", mgid, qpn, ErrNotAttached, mlid, g.mlid)
	}
	i := indexQPN(g.members, qpn)
	if i < 0 {
		return fmt.Errorf("detach mcast %v: qp %#x: %w", mgid, qpn, ErrNotAttached)
	}
	t.removeLocked(mgid, g, i)
	return nil
}

// removeLocked removes member i of group g, named mgid, and the group with
// its last member. It reports whether the group went away.
func (t *Table) removeLocked(mgid GID, g *group, i int) (gone bool) {
	if len(g.members) == 1 {
		delete(t.groups, mgid)
		return true
	}
	// Copy on write: readers may hold the old slice.
	members := make([]Member, 0, len(g.members)-1)
	members = append(members, g.members[:i]...)
	g.members = append(members, g.members[i+1:]...)
	return false
}

// DetachAll removes m from every group it is attached to, as destroying a
// QP does, and returns the MGIDs of the groups that went away with it (m
// was their last member), ordered by MGID. It returns nil when no group
// went away, and does nothing for a nil m.
func (t *Table) DetachAll(m Member) (gone []GID) {
	if m == nil {
		return nil
	}
	qpn := m.QPN()
	t.mu.Lock()
	for mgid, g := range t.groups {
		if i := indexQPN(g.members, qpn); i >= 0 && t.removeLocked(mgid, g, i) {
			gone = append(gone, mgid)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(gone, func(a, b GID) int { return bytes.Compare(a[:], b[:]) })
	return gone
}

func indexQPN(members []Member, qpn uint32) int {
	for i, m := range members {
		if m.QPN() == qpn {
			return i
		}
	}
	return -1
}

// Lookup returns the MLID and members of the group mgid, in attach order. It
// does not allocate. The slice is a snapshot shared with other callers: it is
// never modified by the table, so it may be iterated without locks while
// others attach and detach, and callers must not modify it.
func (t *Table) Lookup(mgid GID) (mlid uint16, members []Member, ok bool) {
	t.mu.RLock()
	g, ok := t.groups[mgid]
	if ok {
		mlid, members = g.mlid, g.members
	}
	t.mu.RUnlock()
	return mlid, members, ok
}

// Find is Lookup for a packet addressed to (mgid, mlid), as rdmavt's
// rvt_mcast_find: a group whose MLID differs is not found.
func (t *Table) Find(mgid GID, mlid uint16) (members []Member, ok bool) {
	l, members, ok := t.Lookup(mgid)
	if !ok || l != mlid {
		return nil, false
	}
	return members, true
}

// Groups returns the number of groups.
func (t *Table) Groups() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.groups)
}

// GroupInfo describes a group, for tools.
type GroupInfo struct {
	MGID GID
	MLID uint16
	QPNs []uint32 // in attach order
}

// List returns every group, ordered by MGID. It allocates; it is for tools,
// not the data path.
func (t *Table) List() []GroupInfo {
	t.mu.RLock()
	list := make([]GroupInfo, 0, len(t.groups))
	for mgid, g := range t.groups {
		info := GroupInfo{MGID: mgid, MLID: g.mlid, QPNs: make([]uint32, len(g.members))}
		for i, m := range g.members {
			info.QPNs[i] = m.QPN()
		}
		list = append(list, info)
	}
	t.mu.RUnlock()
	slices.SortFunc(list, func(a, b GroupInfo) int { return bytes.Compare(a.MGID[:], b.MGID[:]) })
	return list
}

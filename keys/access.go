package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// Access is a set of memory access flags, with the libibverbs values
// (IBV_ACCESS_*).
type Access uint32

// Access flags.
const (
	LocalWrite   Access = 1 << iota // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite                     // IBV_ACCESS_REMOTE_WRITE
	RemoteRead                      // IBV_ACCESS_REMOTE_READ
	RemoteAtomic                    // IBV_ACCESS_REMOTE_ATOMIC
	MWBind                          // IBV_ACCESS_MW_BIND
	ZeroBased                       // IBV_ACCESS_ZERO_BASED
)

// RemoteAccess is the set of flags that an rkey can grant.
const RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic

// allAccess is every flag this package knows.
const allAccess = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased

var accessNames = [...]struct {
	flag Access
	name string
}{
	{LocalWrite, "LocalWrite"},
	{RemoteWrite, "RemoteWrite"},
	{RemoteRead, "RemoteRead"},
	{RemoteAtomic, "RemoteAtomic"},
	{MWBind, "MWBind"},
	{ZeroBased, "ZeroBased"},
}

// String returns the flags joined by "|", e.g. "LocalWrite|RemoteRead"; unknown
// bits are shown in hex; the empty set is "0".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	for _, n := range accessNames {
		if a&n.flag == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(n.name)
	}
	if rest := a &^ allAccess; rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

// checkMRAccess applies the rules that ib_check_mr_access applies to a memory
// region's access flags: only known flags, and remote write or remote atomic
// access requires local write (the HCA must be able to write the memory it
// lets a peer write).
func checkMRAccess(a Access) error {
	if a&^allAccess != 0 {
		return fmt.Errorf("unknown access flags %s: %w", a&^allAccess, ErrInvalidArgument)
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return fmt.Errorf("access %s: remote write or atomic needs LocalWrite: %w", a, ErrInvalidArgument)
	}
	return nil
}

package transport

import (
	"regexp"
	"testing"
)

// Counter and metric names are snake case: a test that looks a drop up by
// a name with a space or a capital would read zero forever.
func TestDropReasonNames(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	seen := map[string]DropReason{}
	for r := DropReason(1); r < NumDropReasons; r++ {
		n := r.Name()
		if !snake.MatchString(n) {
			t.Errorf("%d (%q): Name %q is not snake case", r, r.String(), n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("%d and %d share the name %q", o, r, n)
		}
		seen[n] = r
	}
	for _, c := range []struct {
		r    DropReason
		want string
	}{{DropBadICRC, "bad_icrc"}, {DropUnknownQP, "unknown_qp"}, {DropBadQKey, "bad_q_key"}, {DropQPType, "opcode_not_valid_for_qp_type"}} {
		if got := c.r.Name(); got != c.want {
			t.Errorf("%v: Name %q, want %q", c.r, got, c.want)
		}
	}
}

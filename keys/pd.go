package keys

import (
	"fmt"
	"sync/atomic"
)

// PD is a protection domain. MRs, MWs and (in other packages) QPs, SRQs and
// AHs hold a reference on their PD; a PD with references is busy and cannot
// be freed, and a freed PD takes no new references, so nothing new is ever
// made in it.
type PD struct {
	// Handle is the consumer-visible handle; this package does not interpret it.
	Handle uint32

	// refs counts the references, or is pdFreed once Free succeeded: one
	// word, so that a TryRef racing a Free either wins (and Free sees a busy
	// PD) or loses (and fails), never both.
	refs atomic.Int64
}

const pdFreed = -1

// NewPD returns a protection domain with no references.
func NewPD(handle uint32) *PD { return &PD{Handle: handle} }

// TryRef takes a reference on the PD for an object being made in it; it
// fails with ErrInvalidArgument once the PD is freed.
func (pd *PD) TryRef() error {
	for {
		n := pd.refs.Load()
		if n == pdFreed {
			return fmt.Errorf("PD %d: %w: deallocated", pd.Handle, ErrInvalidArgument)
		}
		if pd.refs.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// Unref drops a reference taken with TryRef. Dropping more references than
// were taken (or any on a freed PD) is a programming error and panics,
// before the count is changed: a PD at zero must not turn into a freed one.
func (pd *PD) Unref() {
	for {
		n := pd.refs.Load()
		if n <= 0 {
			panic(fmt.Sprintf("keys: PD %d reference count underflow", pd.Handle))
		}
		if pd.refs.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// Free marks the PD freed: ErrBusy while objects hold references,
// ErrInvalidArgument if it was freed already.
func (pd *PD) Free() error {
	if pd.refs.CompareAndSwap(0, pdFreed) {
		return nil
	}
	if n := pd.refs.Load(); n != pdFreed {
		return fmt.Errorf("PD %d: %w: %d objects use it", pd.Handle, ErrBusy, n)
	}
	return fmt.Errorf("PD %d: %w: deallocated already", pd.Handle, ErrInvalidArgument)
}

// Refs returns the number of references held (0 once freed).
func (pd *PD) Refs() int { return int(max(pd.refs.Load(), 0)) }

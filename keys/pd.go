package keys

import "sync/atomic"

// PD is a protection domain. MRs, MWs and (in other packages) QPs and AHs
// hold a reference to their PD; a PD with references is busy and must not be
// deallocated.
type PD struct {
	// Handle is the consumer-visible handle; this package does not interpret it.
	Handle uint32

	refs atomic.Int64
}

// NewPD returns a protection domain with no references.
func NewPD(handle uint32) *PD { return &PD{Handle: handle} }

// Ref takes a reference on the PD.
func (pd *PD) Ref() { pd.refs.Add(1) }

// Unref drops a reference taken with Ref. Dropping more references than were
// taken is a programming error and panics.
func (pd *PD) Unref() {
	if pd.refs.Add(-1) < 0 {
		panic("keys: PD reference count underflow")
	}
}

// Refs returns the number of references held.
func (pd *PD) Refs() int { return int(pd.refs.Load()) }

// Busy reports whether any object still holds a reference on the PD.
func (pd *PD) Busy() bool { return pd.refs.Load() > 0 }

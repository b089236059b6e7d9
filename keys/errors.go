package keys

import (
	"errors"
	"fmt"

	"github.com/softverbs/softverbs/internal/verr"
)

// Sentinel errors. Every error returned by this package wraps one of these;
// test with errors.Is.
var (
	// ErrInvalidKey: no object for the key, a stale generation, a wrong key
	// byte, an invalidated MR or unbound MW, or an MW key used as an lkey.
	ErrInvalidKey = errors.New("invalid key")
	// ErrPDMismatch: the object belongs to another protection domain.
	ErrPDMismatch = errors.New("protection domain mismatch")
	// ErrAccess: the object does not grant the requested access.
	ErrAccess = errors.New("access not granted")
	// ErrBounds: the address range is outside the MR or MW, or overflows.
	ErrBounds = errors.New("out of bounds")
	// ErrInvalidArgument: a verb was called with arguments it never accepts.
	ErrInvalidArgument = verr.ErrInvalidArgument
	// ErrBusy: the object is still in use (windows bound, references held).
	ErrBusy = verr.ErrBusy
	// ErrNoResources: the key table is full.
	ErrNoResources = verr.ErrNoResources
	// ErrInvalidState: the object is not in a state that allows the verb.
	ErrInvalidState = verr.ErrInvalidState
)

// Errors of the check path are built once so that CheckLocal and CheckRemote
// never allocate, not even when they fail.
var (
	errKeyReserved = fmt.Errorf("key index 0 is reserved: %w", ErrInvalidKey)
	errNoSuchKey   = fmt.Errorf("no object for key: %w", ErrInvalidKey)
	errStaleKey    = fmt.Errorf("stale key generation: %w", ErrInvalidKey)
	errKeyByte     = fmt.Errorf("key byte mismatch: %w", ErrInvalidKey)
	errInvalidated = fmt.Errorf("memory region is invalidated: %w", ErrInvalidKey)
	errUnbound     = fmt.Errorf("memory window is not bound: %w", ErrInvalidKey)
	errMWAsLkey    = fmt.Errorf("memory window key used as lkey: %w", ErrInvalidKey)
	errPD          = fmt.Errorf("key belongs to another pd: %w", ErrPDMismatch)
	errAccess      = fmt.Errorf("requested access not granted: %w", ErrAccess)
	errNoRemote    = fmt.Errorf("remote check without a remote access flag: %w", ErrAccess)
	errBounds      = fmt.Errorf("range outside the region: %w", ErrBounds)
	errOverflow    = fmt.Errorf("address plus length overflows: %w", ErrBounds)
)

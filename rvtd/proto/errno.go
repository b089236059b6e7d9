package proto

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/qp"
)

// Errno is a reply status: 0 or a positive Linux errno value, the one
// rdma-core returns for the same failure.
type Errno uint32

// The errno values the protocol uses (Linux numbering, on every
// architecture: a client on another kernel ABI translates).
const (
	EPERM           = Errno(unix.EPERM)           // 1: process_vm access refused
	ENOENT          = Errno(unix.ENOENT)          // 2: no such device
	EBADF           = Errno(unix.EBADF)           // 9: a passed descriptor is unusable
	EAGAIN          = Errno(unix.EAGAIN)          // 11
	ENOMEM          = Errno(unix.ENOMEM)          // 12: no resources, a per-client limit
	EACCES          = Errno(unix.EACCES)          // 13
	EFAULT          = Errno(unix.EFAULT)          // 14: memory not mapped in the client
	EBUSY           = Errno(unix.EBUSY)           // 16: still in use
	EEXIST          = Errno(unix.EEXIST)          // 17
	ENODEV          = Errno(unix.ENODEV)          // 19
	EINVAL          = Errno(unix.EINVAL)          // 22: bad argument, bad handle, bad state
	EMFILE          = Errno(unix.EMFILE)          // 24: a session's share of the daemon's descriptors
	ENOSYS          = Errno(unix.ENOSYS)          // 38
	EPROTO          = Errno(unix.EPROTO)          // 71: malformed body
	EMSGSIZE        = Errno(unix.EMSGSIZE)        // 90
	EPROTONOSUPPORT = Errno(unix.EPROTONOSUPPORT) // 93: major version mismatch
	EOPNOTSUPP      = Errno(unix.EOPNOTSUPP)      // 95: unknown opcode, verb not supported
	EADDRINUSE      = Errno(unix.EADDRINUSE)      // 98: rdma_cm port taken
	ETIMEDOUT       = Errno(unix.ETIMEDOUT)       // 110
)

func (e Errno) Error() string { return unix.Errno(e).Error() }

// Is lets errors.Is(err, syscall.EINVAL) hold for the matching Errno.
func (e Errno) Is(target error) bool {
	t, ok := target.(unix.Errno)
	return ok && uint32(t) == uint32(e)
}

// errnos maps the verbs packages' errors to what rdma-core returns for the
// same failure (first match wins: specific errors before the shared ones
// they may also wrap).
var errnos = []struct {
	err   error
	errno Errno
}{
	{qp.ErrQueueFull, ENOMEM},      // post_send/post_recv on a full queue (rxe: -ENOMEM)
	{mcast.ErrExists, EEXIST},      // attach twice
	{mcast.ErrNotAttached, EINVAL}, // detach of a group not attached (rxe: -EINVAL)
	{keys.ErrInvalidKey, EINVAL},   // a key or handle that names nothing
	{keys.ErrPDMismatch, EINVAL},   // objects of different PDs
	{keys.ErrAccess, EACCES},       // access flags not granted
	{keys.ErrBounds, EINVAL},       // outside a region
	{cq.ErrDestroyed, EINVAL},      // a destroyed CQ
	{cq.ErrOverflow, EIO},          // a CQ in error
	{verr.ErrBusy, EBUSY},          // ibv_dealloc_pd with MRs, destroy of a used CQ
	{verr.ErrNoResources, ENOMEM},  // a table full (ibv_create_* return NULL, ENOMEM)
	{verr.ErrNotSupported, EOPNOTSUPP},
	{verr.ErrInvalidState, EINVAL}, // ibv_modify_qp to an illegal state: EINVAL
	{verr.ErrInvalidArgument, EINVAL},
}

// EIO is a CQ that overflowed.
const EIO = Errno(unix.EIO)

// ErrnoOf returns the reply status for the error a verb returned: nil is
// 0, an Errno (or a unix.Errno) is itself, the verbs packages' errors map as
// rdma-core's do, anything else is EINVAL.
func ErrnoOf(err error) Errno {
	if err == nil {
		return 0
	}
	var e Errno
	if errors.As(err, &e) {
		return e
	}
	var ue unix.Errno
	if errors.As(err, &ue) {
		return Errno(ue)
	}
	for _, m := range errnos {
		if errors.Is(err, m.err) {
			return m.errno
		}
	}
	return EINVAL
}

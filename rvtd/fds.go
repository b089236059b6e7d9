package rvtd

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// Descriptors. The daemon's descriptor table (RLIMIT_NOFILE) is shared by
// every session, where over the kernel each process has its own: so each
// session may hold at most limits.fds of it, and a create that would take
// a session past that is refused, as a device refuses a QP past max_qp.
// What a session holds: its socket, and its client's /proc/<pid>/mem and
// pidfd (from hello on, never refused: they exist before any request), then one
// descriptor per device context (the async event socket), completion
// channel, rdma_cm event channel and QP (its doorbell eventfd). A memfd
// the daemon passes is counted from its creation until the reply has
// passed it, so a session never goes past its share even for a moment;
// CQs, SRQs and segments keep none after that. Descriptors a request
// carries (at most 4, shm_attach's memfd) are the client's, closed before
// the next request is read, and not counted.

// Default of limits.fds: a session may hold a quarter of what the
// daemon's RLIMIT_NOFILE leaves after its own descriptors and a reserve
// (for accepting sessions, the metrics endpoint, transient descriptors),
// so that three sessions at their limit still leave a quarter to the
// rest; never fewer than MinFDLimit.
const (
	fdShares     = 4
	fdReserveMax = 256 // or an eighth of the limit, if less
	// MinFDLimit is the least limits.fds: a session's socket, mem file
	// and pidfd, a device context, a QP while it is made.
	MinFDLimit = 8
)

// DefaultFDLimit is limits.fds when the config leaves it 0, from this
// process's RLIMIT_NOFILE (Go raises the soft limit to the hard one at
// start) and the descriptors it has open now; New works it out once its
// devices are open. It returns the RLIMIT_NOFILE and the open count too.
func DefaultFDLimit() (limit, nofile, open int) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		rl.Cur = 1 << 20
	}
	nofile = int(rl.Cur)
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(ents)
	}
	reserve := min(fdReserveMax, nofile/8)
	return max((nofile-open-reserve)/fdShares, MinFDLimit), nofile, open
}

// takeFDs counts n more descriptors against the session's share, or
// refuses them with e (nothing counted).
func (ss *session) takeFDs(n int, e proto.Errno) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.takeFDsLocked(n, e)
}

func (ss *session) takeFDsLocked(n int, e proto.Errno) error {
	if ss.fds+n > ss.srv.fdLimit {
		if !ss.fdsRefused {
			ss.fdsRefused = true
			ss.log.Warn("session at its share of the daemon's descriptors: creates refused", "fds", ss.fds, "limit", ss.srv.fdLimit)
		}
		return e
	}
	ss.fds += n
	return nil
}

// putFDs gives back n descriptors the session no longer holds.
func (ss *session) putFDs(n int) {
	if n == 0 {
		return
	}
	ss.mu.Lock()
	ss.fds -= n
	ss.mu.Unlock()
}

// FDLimit is the descriptors one session may hold (limits.fds, or the
// default derived from RLIMIT_NOFILE at New).
func (s *Server) FDLimit() int { return s.fdLimit }

package rvtd

import (
	"os"
	"time"

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
//
// Users. A process may open several sessions (and several processes of one
// user many), so the sessions of one client user (its uid, SO_PEERCRED)
// together hold at most limits.user_fds, their sockets, mem files and pidfds
// included: a create past it is refused as past the session's share, and a
// session that would take the user past it (its socket, mem file and pidfd) is
// refused at hello with EMFILE, what opening /dev/infiniband/uverbsN gives
// a process past its RLIMIT_NOFILE. Root is a user like the others: a
// runaway program run as root (a benchmark, a test) is the likeliest to
// flood the daemon, and root's processes over the kernel have a
// RLIMIT_NOFILE of their own too; an administrator who wants root
// unbounded sets limits.user_fds to the daemon's RLIMIT_NOFILE.
//
// Lock order: session.mu, then Server.umu (a leaf).

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

// Default of limits.user_fds: half of what the daemon's RLIMIT_NOFILE
// leaves, so that a user at its bound still leaves half to the others (two
// sessions at their share reach it); never less than limits.fds.
const fdUserShares = 2

// userFDs is what one client user's sessions hold together (Server.umu).
type userFDs struct {
	fds      int // descriptors, the sessions' sockets, mem files and pidfds included
	sessions int // sessions admitted
	refusing int // sessions being refused (their socket is open until hello)
	warned   bool
}

// maxRefusing bounds the connections of one user waiting to be told at
// hello that they are refused; past it they are closed at once.
const maxRefusing = 8

// DefaultUserFDLimit is limits.user_fds when the config leaves it 0, as
// DefaultFDLimit is limits.fds.
func DefaultUserFDLimit() int {
	lim, nofile, open := DefaultFDLimit()
	reserve := min(fdReserveMax, nofile/8)
	return max((nofile-open-reserve)/fdUserShares, lim)
}

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
	s := ss.srv
	s.umu.Lock()
	u := ss.user
	if u.fds+n > s.userFDLimit {
		warn := !u.warned
		u.warned = true
		fds := u.fds
		s.umu.Unlock()
		if warn {
			ss.log.Warn("user at its share of the daemon's descriptors: creates and new sessions refused", "uid", ss.uid, "fds", fds, "limit", s.userFDLimit)
		}
		return e
	}
	u.fds += n
	s.umu.Unlock()
	ss.fds += n
	return nil
}

// addFDsLocked counts n descriptors the session holds already (its pidfd),
// past the shares if need be.
func (ss *session) addFDsLocked(n int) {
	ss.fds += n
	ss.srv.umu.Lock()
	ss.user.fds += n
	ss.srv.umu.Unlock()
}

// putFDs gives back n descriptors the session no longer holds.
func (ss *session) putFDs(n int) {
	if n == 0 {
		return
	}
	ss.mu.Lock()
	ss.putFDsLocked(n)
	ss.mu.Unlock()
}

func (ss *session) putFDsLocked(n int) {
	ss.fds -= n
	ss.srv.umu.Lock()
	ss.user.fds -= n
	ss.srv.umu.Unlock()
}

// admit counts a new session's socket against its user, or says why it is
// refused: EMFILE if the user's sessions hold its share less the room for
// this one's socket, mem file and pidfd; close (no reply) if that user has
// maxRefusing connections being refused already. A refused session's
// socket is counted in refusing until it is closed (release).
func (s *Server) admit(ss *session) (refuse proto.Errno, closeNow bool) {
	s.umu.Lock()
	defer s.umu.Unlock()
	u := s.users[ss.uid]
	if u == nil {
		u = &userFDs{}
		s.users[ss.uid] = u
	}
	ss.user = u
	if u.fds+3 > s.userFDLimit {
		if u.refusing >= maxRefusing {
			return proto.EMFILE, true
		}
		u.refusing++
		return proto.EMFILE, false
	}
	u.sessions++
	u.fds++ // the socket (ss.fds 1); the mem file and pidfd from hello on
	return 0, false
}

// refuseWait is how long a refused connection may take to say hello.
const refuseWait = time.Second

// serveRefused answers a refused session's hello with its error (the
// client library reports it: "rvtd refused the session: Too many open
// files") and closes it.
func (ss *session) serveRefused() {
	defer ss.release()
	defer ss.conn.Close()
	// A deadline on the socket is the kernel's time, not the server's clock.
	_ = ss.conn.UnixConn().SetReadDeadline(time.Now().Add(refuseWait))
	b, fds, err := ss.conn.ReadRaw()
	closeFDs(fds)
	if err != nil {
		return
	}
	msg, err := proto.Decode(b, nil)
	if err != nil || msg.Op != proto.OpHello {
		return
	}
	ss.log.Warn("session refused: its user holds its share of the daemon's descriptors", "uid", ss.uid, "limit", ss.srv.userFDLimit)
	ss.reply(msg.Header, ss.refused, nil, nil)
}

// release forgets a session that has ended: its descriptors are closed.
func (ss *session) release() {
	s := ss.srv
	ss.mu.Lock()
	n := ss.fds
	ss.fds = 0
	ss.mu.Unlock()
	s.umu.Lock()
	defer s.umu.Unlock()
	u := ss.user
	if ss.refused != 0 {
		u.refusing--
	} else {
		u.fds -= n
		u.sessions--
	}
	if u.sessions == 0 && u.refusing == 0 {
		delete(s.users, ss.uid)
	}
}

// FDLimit is the descriptors one session may hold (limits.fds, or the
// default derived from RLIMIT_NOFILE at New).
func (s *Server) FDLimit() int { return s.fdLimit }

// UserFDLimit is the descriptors the sessions of one user may hold
// together (limits.user_fds, or its default).
func (s *Server) UserFDLimit() int { return s.userFDLimit }

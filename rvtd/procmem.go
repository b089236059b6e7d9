package rvtd

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// Client memory (reg_mr kind 2, docs/rvtd-protocol.md section 8). A
// session has one procAccessor for its client's pid (SO_PEERCRED), opened
// at hello; every kind-2 MR of the session reads and writes through it.
//
// The address space, not the pid. The accessor reads and writes through
// /proc/<pid>/mem opened at hello, which holds the address space the
// process had then: as over the kernel, where an MR pins the registering
// process's pages, an MR never reaches the image an exec puts in its place
// (the old address space is gone and every access fails). process_vm_readv
// would follow the pid into the new image with the daemon's privileges:
// a client that forked, kept the session in the child and exec'd a setuid
// program in the parent could read and write that program's memory (found
// by a QA pass with passwd). At hello, after the open, the process must
// still be the client's: /proc/<pid> owned by the client's uid, which a
// setuid exec or a non-dumpable process would make root's.
//
// Pid reuse. The pid names the client only while it lives. At hello the
// session opens a pidfd for the pid before the mem file, and after it
// checks that the pidfd has not seen an exit: the mem file is then the
// client's. Later accesses go to that address space whatever becomes of
// the pid; the pidfd, watched in Go's netpoller, makes them fail at once
// (ESRCH) once the client exits, without a system call.

// procAccessor is a session's access to its client's memory.
type procAccessor interface {
	keys.Accessor
	// Probe checks that the daemon may read the length bytes at addr
	// (their first and last byte): nil, proto.EPERM (the system refuses
	// ptrace access) or proto.EFAULT (not mapped, or the process gone).
	Probe(addr, length uint64) error
	Close()
}

// openProcAccessor opens the accessor of a session's client.
func openProcAccessor(pid int, uid uint32) (procAccessor, error) {
	procOpenMu.Lock()
	open := procOpen
	procOpenMu.Unlock()
	return open(pid, uid)
}

// procOpen is what openProcAccessor calls; tests replace it (under
// procOpenMu: sessions read it on the server's goroutines) to inject
// failures.
var (
	procOpenMu sync.Mutex
	procOpen   = func(pid int, uid uint32) (procAccessor, error) { return openProcMem(pid, uid) }
)

// procMem is a procAccessor on a live process.
type procMem struct {
	pid   int
	mem   *os.File // /proc/<pid>/mem: the client's address space at hello
	memFD int      // mem's descriptor
	pidfd *os.File // nil if the kernel has no pidfd_open (before 5.3)
	gone  atomic.Bool
	done  chan struct{}
}

// descriptors is how many descriptors p holds (its mem file and pidfd).
func (p *procMem) descriptors() int {
	if p.pidfd != nil {
		return 2
	}
	return 1
}

var errGone = fmt.Errorf("client process exited: %w", unix.ESRCH)

// openProcMem opens the address space of process pid, whose user is uid
// (the session's SO_PEERCRED).
func openProcMem(pid int, uid uint32) (*procMem, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("process memory: no peer pid: %w", unix.ESRCH)
	}
	p := &procMem{pid: pid, done: make(chan struct{})}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	switch {
	case err == nil:
		p.pidfd = os.NewFile(uintptr(fd), "pidfd")
	case !errors.Is(err, unix.ENOSYS):
		return nil, os.NewSyscallError("pidfd_open", err)
	}
	fail := func(err error) (*procMem, error) {
		if p.mem != nil {
			p.mem.Close()
		}
		if p.pidfd != nil {
			p.pidfd.Close()
		}
		return nil, err
	}
	p.mem, err = os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return fail(err)
	}
	p.memFD = int(p.mem.Fd())
	// The process, after the open: still the client's user and dumpable
	// (a setuid exec, or PR_SET_DUMPABLE 0, makes /proc/<pid> root's),
	// and still the client (no exit since the pidfd was opened).
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil {
		return fail(os.NewSyscallError("stat", err))
	}
	if st.Uid != uid {
		return fail(fmt.Errorf("process memory: /proc/%d is uid %d's, the client is uid %d's: %w", pid, st.Uid, uid, unix.EPERM))
	}
	if p.pidfd == nil {
		close(p.done) // an old kernel: no exit watch, the window is teardown's
		return p, nil
	}
	pfd := []unix.PollFd{{Fd: int32(p.pidfd.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 0); err != nil || n > 0 {
		return fail(errGone)
	}
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return fail(err)
	}
	go func() {
		defer close(p.done)
		// A pidfd polls readable when its process exits. Read waits
		// in the netpoller while the function returns false; Close
		// ends the wait with an error.
		_ = rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			return err != nil || n > 0
		})
		p.gone.Store(true)
	}()
	return p, nil
}

// Gone reports whether the process is known to have exited.
func (p *procMem) Gone() bool { return p.gone.Load() }

func (p *procMem) Close() {
	p.gone.Store(true)
	if p.pidfd != nil {
		p.pidfd.Close()
	}
	<-p.done
	p.mem.Close()
}

func (p *procMem) ReadAt(b []byte, addr uint64) (int, error) { return p.rw(b, addr, false) }

func (p *procMem) WriteAt(b []byte, addr uint64) (int, error) { return p.rw(b, addr, true) }

// rw moves len(b) bytes, calling again after a partial transfer until an
// error or nothing moves.
func (p *procMem) rw(b []byte, addr uint64, write bool) (int, error) {
	n := 0
	for n < len(b) {
		if p.gone.Load() {
			return n, errGone
		}
		k, err := p.access(b[n:], addr+uint64(n), write)
		if k > 0 {
			n += k
		}
		if err != nil {
			return n, err
		}
		if k <= 0 {
			return n, unix.EFAULT
		}
	}
	return n, nil
}

// access is one read or write of b at addr in the client's address space.
// After the address space is gone (an exec, or the exit), it moves 0
// bytes, which rw reports as EFAULT.
func (p *procMem) access(b []byte, addr uint64, write bool) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if addr > math.MaxInt64 {
		return 0, unix.EFAULT
	}
	if write {
		return unix.Pwrite(p.memFD, b, int64(addr))
	}
	return unix.Pread(p.memFD, b, int64(addr))
}

func (p *procMem) Probe(addr, length uint64) error {
	if length == 0 || addr+length < addr {
		return proto.EINVAL
	}
	var b [1]byte
	for _, a := range []uint64{addr, addr + length - 1} {
		if _, err := p.ReadAt(b[:], a); err != nil {
			return probeErrno(err)
		}
	}
	return nil
}

// probeErrno is the reg_mr status of a failed probe: EPERM when the
// system refuses access (ptrace rules, Yama), EFAULT otherwise (not mapped,
// or the process gone).
func probeErrno(err error) proto.Errno {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return proto.EPERM
	}
	return proto.EFAULT
}

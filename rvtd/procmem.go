package rvtd

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// Client memory through process_vm_readv/writev (reg_mr kind 2,
// docs/rvtd-protocol.md section 8). A session has one procAccessor for its
// client's pid (SO_PEERCRED), opened at hello; every kind-2 MR of the
// session reads and writes through it.
//
// Pid reuse. The pid names the client only while it lives: after it exits
// and is reaped, the kernel may give the number to a new process. At hello
// the session opens a pidfd for the pid, which names that very process, and
// watches it in Go's netpoller; once it reports exit, every access fails
// (ESRCH) without a system call on the pid. The window that remains: an
// access that checked the flag just before the client exited, was reaped
// and its pid reused by a process of a user the daemon may ptrace, all
// before the process_vm call, would reach the new process. A read checks
// the flag again after the call and discards what it read, so such a
// read never leaks the new process's bytes; a write cannot be undone. The
// session's teardown (the socket closes when the client dies) deregisters
// its MRs first, so the window is the few microseconds between the client's
// death and the daemon noticing it, and pid reuse within them needs pid
// wrap-around on a busy system. Linux has no process_vm_readv on a pidfd
// that would close it.

// procAccessor is a session's access to its client's memory.
type procAccessor interface {
	keys.Accessor
	// Probe checks that the daemon may read the length bytes at addr
	// (their first and last byte): nil, proto.EPERM (the system refuses
	// ptrace access) or proto.EFAULT (not mapped, or the process gone).
	Probe(addr, length uint64) error
	Close()
}

// openProcAccessor opens the accessor of a session's client; tests replace
// it to inject failures.
var openProcAccessor = func(pid int) (procAccessor, error) { return openProcMem(pid) }

// procMem is a procAccessor on a live process.
type procMem struct {
	pid   int
	pidfd *os.File // nil if the kernel has no pidfd_open (before 5.3)
	gone  atomic.Bool
	done  chan struct{}
}

// hasPidfd reports whether p holds a descriptor (its pidfd).
func (p *procMem) hasPidfd() bool { return p.pidfd != nil }

var errGone = fmt.Errorf("client process exited: %w", unix.ESRCH)

func openProcMem(pid int) (*procMem, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("process_vm: no peer pid: %w", unix.ESRCH)
	}
	p := &procMem{pid: pid, done: make(chan struct{})}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) {
			return nil, os.NewSyscallError("pidfd_open", err)
		}
		close(p.done) // an old kernel: no exit watch, the window is teardown's
		return p, nil
	}
	p.pidfd = os.NewFile(uintptr(fd), "pidfd")
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		p.pidfd.Close()
		return nil, err
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
}

func (p *procMem) ReadAt(b []byte, addr uint64) (int, error) {
	n, err := p.rw(b, addr, false)
	if p.gone.Load() {
		return 0, errGone // see the pid reuse note above
	}
	return n, err
}

func (p *procMem) WriteAt(b []byte, addr uint64) (int, error) { return p.rw(b, addr, true) }

// rw moves len(b) bytes, calling again after a partial transfer until an
// error or nothing moves.
func (p *procMem) rw(b []byte, addr uint64, write bool) (int, error) {
	n := 0
	for n < len(b) {
		if p.gone.Load() {
			return n, errGone
		}
		k, err := processVM(p.pid, b[n:], addr+uint64(n), write)
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

// processVM is one process_vm_readv or process_vm_writev of b at addr in
// pid.
func processVM(pid int, b []byte, addr uint64, write bool) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if addr > uint64(^uintptr(0)) {
		return 0, unix.EFAULT
	}
	local := []unix.Iovec{{Base: unsafe.SliceData(b)}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	if write {
		return unix.ProcessVMWritev(pid, local, remote, 0)
	}
	return unix.ProcessVMReadv(pid, local, remote, 0)
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

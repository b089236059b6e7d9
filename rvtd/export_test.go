package rvtd

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/softverbs/softverbs/cm"
	"golang.org/x/sys/unix"
)

// Test hooks for the external test package.

// failProbe is a procAccessor on a live process whose Probe fails with err.
type failProbe struct {
	*procMem
	err error
}

func (f failProbe) Probe(addr, length uint64) error { return f.err }

// SetProbeErrorForTest makes the sessions that say hello from now on refuse
// reg_mr kind 2 with err (a proto.Errno) in their probe; the returned
// function restores the real accessor.
func SetProbeErrorForTest(err error) (restore func()) {
	procOpenMu.Lock()
	defer procOpenMu.Unlock()
	old := procOpen
	procOpen = func(pid int, uid uint32) (procAccessor, error) {
		p, e := openProcMem(pid, uid)
		if e != nil {
			return nil, e
		}
		return failProbe{p, err}, nil
	}
	return func() {
		procOpenMu.Lock()
		procOpen = old
		procOpenMu.Unlock()
	}
}

// ProbeProcessForTest probes length bytes at addr in process pid as the
// daemon does at reg_mr: nil, proto.EPERM or proto.EFAULT.
func ProbeProcessForTest(pid int, addr, length uint64) error {
	p, err := openProcMem(pid, procUID(pid))
	if err != nil {
		return probeErrno(err) // as reg_mr answers when hello could not open it
	}
	defer p.Close()
	return p.Probe(addr, length)
}

// ProcGoneForTest opens pid's accessor and reports, after wait returns,
// whether reads through it fail and the pidfd reported the exit.
func ProcGoneForTest(pid int, addr uint64, wait func()) (readFails, gone bool, err error) {
	p, err := openProcMem(pid, procUID(pid))
	if err != nil {
		return false, false, err
	}
	defer p.Close()
	var b [1]byte
	if _, err := p.ReadAt(b[:], addr); err != nil {
		return false, false, err // it must work while the process lives
	}
	wait()
	for deadline := time.Now().Add(5 * time.Second); !p.Gone() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	_, rerr := p.ReadAt(b[:], addr)
	return rerr != nil, p.Gone(), nil
}

// SessionFDsForTest returns the descriptors each session holds by the
// daemon's count (limits.fds), by session number.
func (s *Server) SessionFDsForTest() map[uint32]int {
	m := map[uint32]int{}
	for _, ss := range s.sessionList() {
		ss.mu.Lock()
		m[ss.id] = ss.fds
		ss.mu.Unlock()
	}
	return m
}

// CloseCMAgentForTest closes the connection manager's agent of the named
// device, as an embedding program may, while the sessions live.
func CloseCMAgentForTest(s *Server, name string) error {
	a, err := cm.AgentFor(s.byName[name].dev)
	if err != nil {
		return err
	}
	return a.Close()
}

// procUID is the owner of /proc/<pid> (the uid openProcMem wants), or
// ^0 when it cannot be read.
func procUID(pid int) uint32 {
	var st unix.Stat_t
	if unix.Stat(fmt.Sprintf("/proc/%d", pid), &st) != nil {
		return ^uint32(0)
	}
	return st.Uid
}

// OpenProcMemForTest opens pid's memory as hello does for a client of
// user uid, and closes it: nil, or why it was refused.
func OpenProcMemForTest(pid int, uid uint32) error {
	p, err := openProcMem(pid, uid)
	if err == nil {
		p.Close()
	}
	return err
}

// ChannelPendingForTest returns the CQ handles of the completion events
// the daemon holds for a session's completion channel (its socket was
// full), oldest first.
func (s *Server) ChannelPendingForTest(session, channel uint32) []uint32 {
	s.mu.Lock()
	ss := s.sessions[session]
	s.mu.Unlock()
	if ss == nil {
		return nil
	}
	ch := lookup[chanObj](ss, channel)
	if ch == nil {
		return nil
	}
	ch.sock.mu.Lock()
	defer ch.sock.mu.Unlock()
	var l []uint32
	for _, rec := range ch.sock.pending {
		l = append(l, binary.LittleEndian.Uint32(rec[8:]))
	}
	return l
}

// HoldDrainsForTest makes s's data-path loops wait, before they drain a
// CQ of device dev, until release is called: completions then reach such
// a CQ's ring only by another way.
func (s *Server) HoldDrainsForTest(dev string) (release func()) {
	ch := make(chan struct{})
	f := func(c *cqObj) {
		if c.ctx.d.cfg.Name == dev {
			<-ch
		}
	}
	s.drainHold.Store(&f)
	return sync.OnceFunc(func() {
		s.drainHold.Store(nil)
		close(ch)
	})
}

package rvtd

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/ring"
)

// retireGrace is how long a retired segment's placeholder stays mapped.
const retireGrace = 2 * time.Second

// retire unmaps a client's shared-memory segment without ever faulting a
// late reader. Its MRs are deregistered already, so the engine starts no
// new access; but a copy that began before (a peer's responder reading
// this client's memory on the loopback path) may still be running. So an
// anonymous mapping replaces the segment at once (mmap MAP_FIXED is
// atomic): such a copy reads zeros or writes nowhere, the daemon's hold on
// the client's pages ends, and the placeholder itself is
// unmapped after retireGrace.
func (s *Server) retire(reg *ring.Region) {
	mem := reg.Bytes()
	if len(mem) == 0 {
		_ = reg.Close()
		return
	}
	p := unsafe.Pointer(&mem[0])
	n := uintptr(len(mem))
	_, err := unix.MmapPtr(-1, 0, p, n, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		s.log.Warn("retiring a segment", "err", err)
		_ = reg.Close()
		return
	}
	_ = reg.CloseFD() // if the daemon still has it (it gives memfds up once mapped)
	s.clk.AfterFunc(retireGrace, func() { _ = unix.MunmapPtr(p, n) })
}

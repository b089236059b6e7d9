package ring

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Region is a memfd mapped shared: the memory of one or more rings, or a
// client's registered segment. The mapping keeps the memory alive without
// the descriptor, so a side that has passed the memfd on (or needs it no
// more) may give it up (TakeFD, CloseFD) and keep only the mapping.
type Region struct {
	fd  int // -1 once given up
	mem []byte
}

// Seals the daemon puts on the memfds it creates: neither side can change
// the size under the other's mapping (which would fault it).
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Create makes a sealed memfd of size bytes (rounded up to pages) and maps
// it.
func Create(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("memfd of %d bytes: %w", size, ErrLayout)
	}
	pg := os.Getpagesize()
	size = (size + pg - 1) &^ (pg - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sizing memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing memfd: %w", err)
	}
	return mapFD(fd, size)
}

// Map maps size bytes of a memfd received from the other side, taking the
// descriptor. It refuses a file shorter than size, and one that is not
// sealed against shrinking (requireSeal: the daemon mapping a client's
// segment, whose shrinking would fault the daemon). The seals are looked
// at before the size: a file measured first could be shrunk and then
// sealed between the two, and the mapping's pages past its end would
// fault (SIGBUS) in the daemon.
func Map(fd int, size int, requireSeal bool) (*Region, error) {
	if requireSeal {
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
			unix.Close(fd)
			return nil, fmt.Errorf("%w: not a memfd sealed against shrinking", ErrNotSealed)
		}
	}
	if testHookMapBetween != nil {
		testHookMapBetween(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if size <= 0 || st.Size < int64(size) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: memfd of %d bytes, %d needed", ErrLayout, st.Size, size)
	}
	return mapFD(fd, size)
}

// testHookMapBetween, if set, runs between Map's two checks: what a client
// racing the daemon could do there (TestMapSealRace).
var testHookMapBetween func(fd int)

// ErrNotSealed: a segment that could shrink under the daemon's mapping. It
// wraps EBADF, the errno the protocol answers it with (proto.ErrnoOf;
// proto cannot import this package, whose tests import proto).
var ErrNotSealed = fmt.Errorf("memfd not sealed: %w", unix.EBADF)

func mapFD(fd, size int) (*Region, error) {
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &Region{fd: fd, mem: mem}, nil
}

// FD is the memfd (to pass to the other side); -1 once given up.
func (r *Region) FD() int { return r.fd }

// TakeFD hands the memfd to the caller, who closes it (the daemon, after a
// reply has passed it): the region keeps only its mapping. -1 if the
// descriptor was given up already.
func (r *Region) TakeFD() int {
	fd := r.fd
	r.fd = -1
	return fd
}

// CloseFD closes the memfd and keeps the mapping.
func (r *Region) CloseFD() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// Bytes is the mapping.
func (r *Region) Bytes() []byte { return r.mem }

// Close unmaps the region and closes the memfd if it still has it.
func (r *Region) Close() error {
	err := unix.Munmap(r.mem)
	r.mem = nil
	if cerr := r.CloseFD(); err == nil {
		err = cerr
	}
	return err
}

// Doorbell is an eventfd: one side rings it, the other sleeps on it.
type Doorbell struct {
	fd int
	f  *os.File // the same descriptor, on Go's poller, for Wait
}

// NewDoorbell creates an eventfd.
func NewDoorbell() (*Doorbell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return OpenDoorbell(fd)
}

// OpenDoorbell takes an eventfd received from the other side.
func OpenDoorbell(fd int) (*Doorbell, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Doorbell{fd: fd, f: os.NewFile(uintptr(fd), "doorbell")}, nil
}

// FD is the eventfd (to pass to the other side).
func (d *Doorbell) FD() int { return d.fd }

var one = [8]byte{1}

// Ring adds 1 to the eventfd. A counter already near its limit (EAGAIN)
// still wakes the sleeper, so that is not an error.
func (d *Doorbell) Ring() error {
	_, err := unix.Write(d.fd, one[:])
	if err == unix.EAGAIN {
		return nil
	}
	return err
}

// Wait sleeps until the doorbell has been rung (since the last Wait), and
// resets it.
func (d *Doorbell) Wait() error {
	var b [8]byte
	_, err := d.f.Read(b[:])
	return err
}

// SetDeadline bounds Wait (zero: none); a Wait past it returns
// os.ErrDeadlineExceeded.
func (d *Doorbell) SetDeadline(t time.Time) error { return d.f.SetReadDeadline(t) }

// Close closes the eventfd; a Wait in progress returns.
func (d *Doorbell) Close() error { return d.f.Close() }

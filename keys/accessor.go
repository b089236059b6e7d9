package keys

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
)

// Accessor is memory that the engine cannot hold as a byte slice: another
// process's, which rvtd reaches with process_vm_readv/process_vm_writev.
// An MR of this kind (RegMRAccessor) copies through it; it has no View and
// no Word, and its reads and writes can fail (the process is gone, or the
// range was unmapped since registration): ReadAt and WriteAt of the MR then
// return a short count and the engine turns it into the IBTA outcome (a
// local protection error, or a remote access error NAK).
//
// Addresses are the accessor's own (the client's virtual addresses), not
// the MR's IOVA space. Both methods copy len(p) bytes and return nil, or
// return the bytes copied before the failure and an error. They are called
// from the engine's goroutines, concurrently, and must not block for long.
type Accessor interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
}

// RegMRAccessor registers length bytes of acc's memory at address addr as a
// memory region of pd, at I/O virtual address iova with the given access,
// and takes a reference on pd, as RegMR does for a slice. The memory is
// reached only through acc: the region has no View or Word, and RDMA
// atomics on it are made atomic by the engine's device-wide atomic lock
// (Atomic64), not by the CPU.
//
// Errors: as RegMR; ErrInvalidArgument also for a nil acc or addr+length
// overflowing.
func (t *Table) RegMRAccessor(pd *PD, acc Accessor, addr, length, iova uint64, access Access) (*MR, error) {
	if pd == nil || acc == nil {
		return nil, fmt.Errorf("reg mr: nil pd or accessor: %w", ErrInvalidArgument)
	}
	if err := checkMRAccess(access); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	if iova+length < iova || addr+length < addr {
		return nil, fmt.Errorf("reg mr: %#x/%#x + length %d overflows: %w", iova, addr, length, ErrInvalidArgument)
	}
	mr := &MR{PD: pd, IOVA: iova, Length: length, Access: access, table: t, valid: true}
	m := &mapping{span: span{base: iova, length: length}, acc: acc, accAddr: addr}
	if access&ZeroBased != 0 {
		m.base = 0
	}
	mr.mem.Store(m)
	if err := t.insertMR(mr); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	return mr, nil
}

// Accessed reports whether mr's memory is reached through an Accessor.
func (mr *MR) Accessed() bool { return mr.mem.Load().acc != nil }

// accCopy is copy for an accessor MR: off is the offset in the region and
// p already clamped to it. It copies through a pooled bounce buffer: p
// handed to an interface method would escape, and then every caller's
// stack buffer (a UD GRH, an atomic's result) would be allocated on the
// heap on the slice MRs' hot path too.
func (m *mapping) accCopy(p []byte, off uint64, write bool) int {
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	b := *bp
	n := 0
	for n < len(p) {
		addr, room := m.accAt(off + uint64(n))
		c := min(uint64(len(b)), uint64(len(p)-n), room)
		if c == 0 {
			break
		}
		var got int
		if write {
			copy(b, p[n:n+int(c)])
			got, _ = m.acc.WriteAt(b[:c], addr)
		} else {
			got, _ = m.acc.ReadAt(b[:c], addr)
			got = max(0, min(got, int(c)))
			copy(p[n:], b[:got])
		}
		got = max(0, min(got, int(c)))
		n += got
		if got < int(c) {
			break
		}
	}
	return n
}

// accAt returns the accessor's address of region offset off and how many
// bytes from there are contiguous (to the end of its page for a page list).
func (m *mapping) accAt(off uint64) (addr, room uint64) {
	if m.accPages == nil {
		return m.accAddr + off, ^uint64(0)
	}
	pos := off + m.first
	i := pos >> m.shift
	if i >= uint64(len(m.accPages)) {
		return 0, 0
	}
	in := pos & (1<<m.shift - 1)
	return m.accPages[i] + in, 1<<m.shift - in
}

// MapAccessorPages is MapPages for a fast-register MR whose pages are
// reached through acc: addrs holds acc's address of each page, with the
// same rules as MapPages (iova's offset within a page is the region's
// offset in the first page; exactly the pages the region touches).
//
// Errors: as MapPages; ErrInvalidArgument also for a nil acc.
func (mr *MR) MapAccessorPages(acc Accessor, addrs []uint64, pageSize int, iova, length uint64) error {
	if acc == nil {
		return fmt.Errorf("map pages: nil accessor: %w", ErrInvalidArgument)
	}
	if pageSize < MinPageSize || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("map pages: page size %d: %w", pageSize, ErrInvalidArgument)
	}
	for _, a := range addrs {
		if a+uint64(pageSize) < a {
			return fmt.Errorf("map pages: page at %#x overflows: %w", a, ErrInvalidArgument)
		}
	}
	need, first, err := pagesFor(pageSize, iova, length)
	if err != nil {
		return err
	}
	if uint64(len(addrs)) != need {
		return fmt.Errorf("map pages: %d pages given, %d needed for %d bytes at %#x: %w",
			len(addrs), need, length, iova, ErrInvalidArgument)
	}
	m := &mapping{
		span:     span{base: iova, length: length},
		acc:      acc,
		accPages: append([]uint64(nil), addrs...),
		shift:    uint(bits.TrailingZeros64(uint64(pageSize))),
		first:    first,
	}
	return mr.setPages(m, len(addrs))
}

// bounceSize is the most one accessor call moves.
const bounceSize = 64 << 10

var bouncePool = sync.Pool{New: func() any { b := make([]byte, bounceSize); return &b }}

// Atomic64 performs an RDMA atomic on the 8-byte word at iova: f gets the
// word's value and returns the value to store and whether to store it (a
// failed compare stores nothing). It returns the original value; ok is false
// if the word could not be read or written (outside the region, or an
// accessor that failed), and then nothing was stored. The caller has checked
// bounds and alignment and holds the device's atomic lock: that lock is
// what makes the read-modify-write atomic, against the device's other
// atomics only (IBV_ATOMIC_HCA), never against the CPU of the memory's
// owner.
func (mr *MR) Atomic64(iova uint64, f func(old uint64) (uint64, bool)) (orig uint64, ok bool) {
	m := mr.mem.Load()
	var w [8]byte
	if m.acc == nil {
		if b, in := mr.View(iova, 8); in {
			orig = binary.NativeEndian.Uint64(b)
			if v, store := f(orig); store {
				binary.NativeEndian.PutUint64(b, v)
			}
			return orig, true
		}
	}
	// An accessor MR, or a word that straddles two pages of a page list.
	if m.copy(w[:], iova, false) != 8 {
		return 0, false
	}
	orig = binary.NativeEndian.Uint64(w[:])
	v, store := f(orig)
	if !store {
		return orig, true
	}
	binary.NativeEndian.PutUint64(w[:], v)
	if m.copy(w[:], iova, true) != 8 {
		return 0, false
	}
	return orig, true
}

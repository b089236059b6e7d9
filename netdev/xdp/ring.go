//go:build linux

package xdp

// The four AF_XDP rings, mapped from the socket. This file and xdp.go are
// the only places in the project that cast memory with unsafe: the rings'
// producer, consumer and flags words and their descriptor arrays live in
// pages the kernel shares with us, at offsets it reports (XDP_MMAP_OFFSETS).
//
// A ring has one producer and one consumer. The producer writes entries,
// then publishes them by storing the producer index; the consumer reads the
// producer index, then the entries, then stores its consumer index to hand
// the slots back. The kernel pairs these with smp_load_acquire and
// smp_store_release; Go's sync/atomic loads and stores are at least as
// strong. Indices are free-running uint32s; an entry's slot is index&mask.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xskRing is the common part of a mapped ring.
type xskRing struct {
	mem    []byte
	prod   *uint32
	cons   *uint32
	flags  *uint32
	size   uint32
	mask   uint32
	cached uint32 // our own index: prod for a producer ring, cons for a consumer ring
}

func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32, entSize uintptr) (xskRing, unsafe.Pointer, error) {
	length := int(off.Desc) + int(entries)*int(entSize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return xskRing{}, nil, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r := xskRing{
		mem:   mem,
		prod:  (*uint32)(unsafe.Add(base, off.Producer)),
		cons:  (*uint32)(unsafe.Add(base, off.Consumer)),
		flags: (*uint32)(unsafe.Add(base, off.Flags)),
		size:  entries,
		mask:  entries - 1,
	}
	return r, unsafe.Add(base, off.Desc), nil
}

func (r *xskRing) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// needWakeup reports whether the kernel asked to be woken (XDP_RING_NEED_WAKEUP).
func (r *xskRing) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// Producer side.

// free returns how many entries can be produced now.
func (r *xskRing) free() uint32 { return r.size - (r.cached - atomic.LoadUint32(r.cons)) }

// submit publishes the entries produced so far.
func (r *xskRing) submit() { atomic.StoreUint32(r.prod, r.cached) }

// unpublished returns how many entries were produced but not submitted.
func (r *xskRing) unpublished() uint32 { return r.cached - atomic.LoadUint32(r.prod) }

// pending returns how many published entries the kernel has not consumed.
func (r *xskRing) pending() uint32 { return atomic.LoadUint32(r.prod) - atomic.LoadUint32(r.cons) }

// Consumer side.

// available returns how many entries can be consumed now.
func (r *xskRing) available() uint32 { return atomic.LoadUint32(r.prod) - r.cached }

// release hands n consumed entries back to the kernel.
func (r *xskRing) release(n uint32) {
	r.cached += n
	atomic.StoreUint32(r.cons, r.cached)
}

// addrRing is the fill or the completion ring: entries are UMEM offsets.
type addrRing struct {
	xskRing
	addrs []uint64
}

func mapAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32) (addrRing, error) {
	r, p, err := mapRing(fd, pgoff, off, entries, 8)
	if err != nil {
		return addrRing{}, err
	}
	return addrRing{xskRing: r, addrs: unsafe.Slice((*uint64)(p), entries)}, nil
}

// put produces one address; the caller checked free().
func (r *addrRing) put(addr uint64) {
	r.addrs[r.cached&r.mask] = addr
	r.cached++
}

// at returns the i-th available address (consumer side).
func (r *addrRing) at(i uint32) uint64 { return r.addrs[(r.cached+i)&r.mask] }

// descRing is the RX or the TX ring: entries are xdp_desc.
type descRing struct {
	xskRing
	descs []unix.XDPDesc
}

func mapDescRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32) (descRing, error) {
	r, p, err := mapRing(fd, pgoff, off, entries, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return descRing{}, err
	}
	return descRing{xskRing: r, descs: unsafe.Slice((*unix.XDPDesc)(p), entries)}, nil
}

// put produces one descriptor; the caller checked free().
func (r *descRing) put(d unix.XDPDesc) {
	r.descs[r.cached&r.mask] = d
	r.cached++
}

// at returns the i-th available descriptor (consumer side).
func (r *descRing) at(i uint32) unix.XDPDesc { return r.descs[(r.cached+i)&r.mask] }

// rotate reorders the n unpublished descriptors so that the first k go
// last, the rest keeping their order (three reversals, in place).
func (r *descRing) rotate(k, n uint32) {
	start := r.cached - n
	r.reverse(start, k)
	r.reverse(start+k, n-k)
	r.reverse(start, n)
}

// reverse reverses the n descriptors from position at (unmasked: positions
// wrap as the producer index does).
func (r *descRing) reverse(at, n uint32) {
	for i, j := uint32(0), n; i+1 < j; i, j = i+1, j-1 {
		a, b := &r.descs[(at+i)&r.mask], &r.descs[(at+j-1)&r.mask]
		*a, *b = *b, *a
	}
}

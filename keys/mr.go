package keys

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/softverbs/softverbs/internal/memx"
)

// MinPageSize is the smallest page size MapPages accepts. With power-of-two
// pages of at least 8 bytes an 8-byte aligned word never straddles a page.
const MinPageSize = 8

// MR is a memory region. The exported fields describe it for its owner and
// change only through the table's verbs (FastReg changes Lkey, Rkey and
// Access; MapPages changes IOVA and Length); the data path does not read them.
type MR struct {
	Lkey, Rkey uint32 // equal, as in rdmavt
	PD         *PD
	IOVA       uint64 // address of the first byte
	Length     uint64
	Access     Access

	table *Table
	mem   atomic.Pointer[mapping] // never nil

	// guarded by table.mu
	fast     bool // AllocMR (fast-register) rather than RegMR
	maxPages int  // fast-register page list capacity
	valid    bool // keys pass checks; RegMR MRs are valid until deregistered
	dead     bool // deregistered
	windows  int  // memory windows bound to this MR
}

// mapping is an immutable description of an MR's memory, replaced as a whole
// so that the lock-free data path always sees a consistent one.
type mapping struct {
	span // base is the address of byte 0: IOVA, or 0 when ZeroBased

	buf []byte // contiguous memory (RegMR), or nil

	pages [][]byte // page list (fast register)
	shift uint     // log2 page size
	first uint64   // offset of the first byte within pages[0]

	acc      Accessor // memory reached through calls (RegMRAccessor), or nil
	accAddr  uint64   // acc's address of byte 0
	accPages []uint64 // or acc's address of each page (MapAccessorPages)
}

var emptyMapping = &mapping{}

// RegMR registers buf as a memory region of pd at address iova with the given
// access, and takes a reference on pd. Lkey and Rkey are the same key, with
// key byte 0.
//
// Errors: ErrInvalidArgument (nil or freed pd, unknown access flags,
// RemoteWrite or RemoteAtomic without LocalWrite, iova+len(buf) overflows),
// ErrNoResources
// (table full). A zero-length MR is allowed; every non-empty range is out of
// its bounds.
func (t *Table) RegMR(pd *PD, buf []byte, iova uint64, access Access) (*MR, error) {
	if pd == nil {
		return nil, fmt.Errorf("reg mr: nil pd: %w", ErrInvalidArgument)
	}
	if err := checkMRAccess(access); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	n := uint64(len(buf))
	if iova+n < iova {
		return nil, fmt.Errorf("reg mr: iova %#x + length %d overflows: %w", iova, n, ErrInvalidArgument)
	}
	mr := &MR{PD: pd, IOVA: iova, Length: n, Access: access, table: t, valid: true}
	m := &mapping{span: span{base: iova, length: n}, buf: buf[:n:n]}
	if access&ZeroBased != 0 {
		m.base = 0
	}
	mr.mem.Store(m)
	if err := t.insertMR(mr); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	return mr, nil
}

// insertMR gives mr a slot and its keys (key byte 0, lkey == rkey) and takes
// a reference on its PD.
func (t *Table) insertMR(mr *MR) error {
	if err := mr.PD.TryRef(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, err := t.allocLocked()
	if err != nil {
		mr.PD.Unref()
		return err
	}
	s := &t.slots[idx]
	s.mr = mr
	mr.Lkey = t.makeKey(idx, s.gen, 0)
	mr.Rkey = mr.Lkey
	t.publishLocked(idx)
	return nil
}

// AllocMR allocates a fast-register MR of pd whose page list holds up to
// maxPages pages, and takes a reference on pd. The MR starts invalid (its keys
// fail every check) and empty; MapPages gives it memory and FastReg makes it
// valid.
//
// Errors: ErrInvalidArgument (nil or freed pd, maxPages < 1), ErrNoResources.
func (t *Table) AllocMR(pd *PD, maxPages int) (*MR, error) {
	if pd == nil {
		return nil, fmt.Errorf("alloc mr: nil pd: %w", ErrInvalidArgument)
	}
	if maxPages < 1 {
		return nil, fmt.Errorf("alloc mr: max pages %d: %w", maxPages, ErrInvalidArgument)
	}
	mr := &MR{PD: pd, table: t, fast: true, maxPages: maxPages}
	mr.mem.Store(emptyMapping)
	if err := t.insertMR(mr); err != nil {
		return nil, fmt.Errorf("alloc mr: %w", err)
	}
	return mr, nil
}

// MapPages sets the memory of a fast-register MR from a page list, like
// ib_map_mr_sg: the region is length bytes at iova, and iova's offset within a
// page (iova & (pageSize-1)) is its offset within pages[0]. pages must be
// exactly the pages that the region touches; each is pageSize bytes long,
// except that the last may be shorter as long as it holds the region's end.
// The slices are kept, not copied. Only allowed while the MR is invalid (after
// AllocMR or Invalidate, before FastReg).
//
// Errors: ErrInvalidArgument (not a fast-register MR, pageSize not a power of
// two >= MinPageSize, more pages than the MR's maxPages, a page list that does
// not match iova and length, iova+length overflows), ErrInvalidState (the MR
// is valid or deregistered).
func (mr *MR) MapPages(pages [][]byte, pageSize int, iova uint64, length uint64) error {
	if mr == nil || mr.table == nil {
		return fmt.Errorf("map pages: nil mr: %w", ErrInvalidArgument)
	}
	if pageSize < MinPageSize || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("map pages: page size %d: %w", pageSize, ErrInvalidArgument)
	}
	need, first, err := pagesFor(pageSize, iova, length)
	if err != nil {
		return err
	}
	ps := uint64(pageSize)
	end := first + length
	if uint64(len(pages)) != need {
		return fmt.Errorf("map pages: %d pages given, %d needed for %d bytes at %#x: %w",
			len(pages), need, length, iova, ErrInvalidArgument)
	}
	for i, p := range pages {
		n := uint64(len(p))
		if uint64(i) == need-1 {
			// The last page must reach the end of the region.
			if n >= end-uint64(i)*ps && n <= ps {
				continue
			}
		} else if n == ps {
			continue
		}
		return fmt.Errorf("map pages: page %d is %d bytes, page size %d: %w", i, len(p), pageSize, ErrInvalidArgument)
	}
	m := &mapping{
		span:  span{base: iova, length: length},
		pages: append([][]byte(nil), pages...),
		shift: uint(bits.TrailingZeros64(ps)),
		first: first,
	}
	return mr.setPages(m, len(pages))
}

// pagesFor returns how many pages of pageSize (a checked power of two) a
// region of length bytes at iova touches, and iova's offset in the first.
func pagesFor(pageSize int, iova, length uint64) (need, first uint64, err error) {
	if iova+length < iova {
		return 0, 0, fmt.Errorf("map pages: iova %#x + length %d overflows: %w", iova, length, ErrInvalidArgument)
	}
	ps := uint64(pageSize)
	first = iova & (ps - 1)
	end := first + length // cannot overflow: first <= iova
	need = end / ps
	if end%ps != 0 {
		need++
	}
	if length == 0 {
		need = 0
	}
	return need, first, nil
}

// setPages makes m, a page list of n pages, the memory of the
// fast-register MR mr, if it is invalid.
func (mr *MR) setPages(m *mapping, n int) error {
	if mr == nil || mr.table == nil {
		return fmt.Errorf("map pages: nil mr: %w", ErrInvalidArgument)
	}
	t := mr.table
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case !mr.fast:
		return fmt.Errorf("map pages: mr %#x is not a fast-register mr: %w", mr.Lkey, ErrInvalidArgument)
	case mr.dead:
		return fmt.Errorf("map pages: mr %#x is deregistered: %w", mr.Lkey, ErrInvalidState)
	case mr.valid:
		return fmt.Errorf("map pages: mr %#x is valid, invalidate it first: %w", mr.Lkey, ErrInvalidState)
	case n > mr.maxPages:
		return fmt.Errorf("map pages: %d pages, mr holds %d: %w", n, mr.maxPages, ErrInvalidArgument)
	}
	mr.IOVA, mr.Length = m.base, m.length
	mr.mem.Store(m)
	return nil
}

// FastReg performs the REG_MR work request posted on a QP of pd: the
// fast-register MR gets key byte key in both Lkey and Rkey (index and
// generation unchanged), the given access flags, and becomes valid over the
// memory set by MapPages (an MR never mapped is valid and empty). With
// ZeroBased in access, addresses in the MR count from 0 instead of IOVA.
//
// Errors: ErrInvalidArgument (nil arguments, an MR of another table, not a
// fast-register MR, bad access as for RegMR), ErrPDMismatch (pd is not the
// MR's), ErrInvalidState (the MR is already valid, or deregistered).
func (t *Table) FastReg(pd *PD, mr *MR, key uint8, access Access) error {
	if pd == nil || mr == nil || mr.table != t {
		return fmt.Errorf("fast reg: nil or foreign argument: %w", ErrInvalidArgument)
	}
	if err := checkMRAccess(access); err != nil {
		return fmt.Errorf("fast reg: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case mr.dead:
		return fmt.Errorf("fast reg: mr %#x is deregistered: %w", mr.Lkey, ErrInvalidState)
	case !mr.fast:
		return fmt.Errorf("fast reg: mr %#x is not a fast-register mr: %w", mr.Lkey, ErrInvalidArgument)
	case mr.PD != pd:
		return fmt.Errorf("fast reg: mr %#x: %w", mr.Lkey, ErrPDMismatch)
	case mr.valid:
		return fmt.Errorf("fast reg: mr %#x is valid, invalidate it first: %w", mr.Lkey, ErrInvalidState)
	}
	m := mr.mem.Load()
	var base uint64
	if access&ZeroBased == 0 {
		base = mr.IOVA
	}
	if m.base != base {
		c := *m
		c.base = base
		mr.mem.Store(&c)
	}
	mr.Lkey = mr.Lkey&^0xff | uint32(key)
	mr.Rkey = mr.Lkey
	mr.Access = access
	mr.valid = true
	t.publishLocked(t.Index(mr.Lkey))
	return nil
}

// Invalidate performs LOCAL_INV, or the invalidation that SEND_WITH_INV asks
// of the responder, on behalf of a QP of pd. key must name, exactly (index,
// generation and key byte), a fast-register MR or a type-2 MW of pd. The MR
// becomes invalid (its key fails every check until the next FastReg); the MW
// is unbound. Invalidating an object that is already invalid succeeds, as in
// rxe and rdmavt.
//
// The rules follow rxe's rxe_invalidate_mr/rxe_invalidate_mw, which are
// stricter than rdmavt's rvt_invalidate_rkey (rdmavt invalidates any MR):
// an MR from RegMR cannot be invalidated, a type-1 MW cannot be invalidated
// (IBTA o10-37.2.26; unbind it with a zero-length bind), and an MR with
// windows bound cannot be invalidated.
//
// Errors: ErrInvalidKey (key 0, no such key, stale generation or key byte),
// ErrPDMismatch, ErrInvalidArgument (a RegMR MR or a type-1 MW), ErrBusy
// (windows bound to the MR).
func (t *Table) Invalidate(pd *PD, key uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.lookupLocked(key)
	if err != nil {
		return fmt.Errorf("invalidate %#x: %w", key, err)
	}
	if mr := s.mr; mr != nil {
		switch {
		case matchKey(mr.Lkey, key) != nil:
			return fmt.Errorf("invalidate %#x: %w", key, matchKey(mr.Lkey, key))
		case mr.PD != pd:
			return fmt.Errorf("invalidate %#x: %w", key, ErrPDMismatch)
		case !mr.fast:
			return fmt.Errorf("invalidate %#x: registered (not fast-register) mr: %w", key, ErrInvalidArgument)
		case mr.windows > 0:
			return fmt.Errorf("invalidate %#x: %d windows bound: %w", key, mr.windows, ErrBusy)
		}
		mr.valid = false
		t.publishLocked(t.Index(key))
		return nil
	}
	mw := s.mw
	switch {
	case matchKey(mw.Rkey, key) != nil:
		return fmt.Errorf("invalidate %#x: %w", key, matchKey(mw.Rkey, key))
	case mw.PD != pd:
		return fmt.Errorf("invalidate %#x: %w", key, ErrPDMismatch)
	case mw.Type != MWType2:
		return fmt.Errorf("invalidate %#x: type 1 window: %w", key, ErrInvalidArgument)
	}
	mw.unbindLocked()
	return nil
}

// DeregMR deregisters mr: its slot is freed (a later object in the slot gets a
// new generation, so mr's key stays invalid) and the reference on its PD is
// dropped. mr must not be used afterwards except that data already in flight
// may still copy to or from its memory.
//
// Errors: ErrInvalidArgument (nil or foreign mr), ErrInvalidState (already
// deregistered), ErrBusy (memory windows are bound to it).
func (t *Table) DeregMR(mr *MR) error {
	if mr == nil || mr.table != t {
		return fmt.Errorf("dereg mr: nil or foreign mr: %w", ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if mr.dead {
		return fmt.Errorf("dereg mr %#x: already deregistered: %w", mr.Lkey, ErrInvalidState)
	}
	if mr.windows > 0 {
		return fmt.Errorf("dereg mr %#x: %d windows bound: %w", mr.Lkey, mr.windows, ErrBusy)
	}
	t.freeLocked(t.Index(mr.Lkey))
	mr.dead = true
	mr.valid = false
	mr.PD.Unref()
	return nil
}

// Valid reports whether mr's key currently passes checks: true for a
// registered MR until DeregMR, and for a fast-register MR between FastReg and
// Invalidate.
func (mr *MR) Valid() bool {
	mr.table.mu.RLock()
	defer mr.table.mu.RUnlock()
	return mr.valid
}

// FastRegister reports whether mr came from AllocMR.
func (mr *MR) FastRegister() bool { return mr.fast }

// Windows returns the number of memory windows bound to mr.
func (mr *MR) Windows() int {
	mr.table.mu.RLock()
	defer mr.table.mu.RUnlock()
	return mr.windows
}

// ReadAt copies from the MR at address iova into p and returns the number of
// bytes copied. Addresses are those of the checks: from IOVA, or from 0 for a
// ZeroBased MR. The caller has checked the range (CheckLocal/CheckRemote); a
// range that is not inside the MR is clamped, never a panic, so a short count
// means the MR was remapped under the caller, or (RegMRAccessor) that its
// accessor failed: the caller treats it as a protection error. Page-list MRs
// copy across page boundaries. No locking, no allocation (beyond what an
// accessor does).
func (mr *MR) ReadAt(p []byte, iova uint64) int { return mr.mem.Load().copy(p, iova, false) }

// WriteAt copies p into the MR at address iova and returns the number of
// bytes copied, with the same rules as ReadAt.
func (mr *MR) WriteAt(p []byte, iova uint64) int { return mr.mem.Load().copy(p, iova, true) }

// Word returns the 8 bytes of the MR at iova, for atomics: View(iova, 8). The
// caller has checked bounds and alignment. It returns nil if the 8 bytes are
// not inside the MR or not contiguous in memory (they straddle pages of a
// ZeroBased page-list MR whose IOVA is not 8-byte aligned), and always for
// an accessor MR: the engine uses Atomic64, which handles every kind.
func (mr *MR) Word(iova uint64) []byte {
	b, _ := mr.View(iova, 8)
	return b
}

// span is a range of addresses, length bytes from base: the memory of an MR
// (in mapping) or a memory window.
type span struct {
	base, length uint64
}

// offset returns the offset of [addr, addr+n) within s if the range is
// inside. It never overflows.
func (s span) offset(addr, n uint64) (uint64, bool) {
	if addr < s.base {
		return 0, false
	}
	off := addr - s.base
	if off > s.length || n > s.length-off {
		return 0, false
	}
	return off, true
}

// contains checks [addr, addr+n) against s, for the check path:
// errOverflow when addr+n wraps, errBounds when the range is not inside.
func (s span) contains(addr, n uint64) error {
	if addr+n < addr {
		return errOverflow
	}
	if _, ok := s.offset(addr, n); !ok {
		return errBounds
	}
	return nil
}

// copy moves bytes between p and the region at addr, clamped to the region.
func (m *mapping) copy(p []byte, addr uint64, write bool) int {
	if addr < m.base {
		return 0
	}
	off := addr - m.base
	if off >= m.length {
		return 0
	}
	if rem := m.length - off; uint64(len(p)) > rem {
		p = p[:rem]
	}
	if m.pages == nil {
		if m.acc != nil {
			return m.accCopy(p, off, write)
		}
		if write {
			return memx.Copy(m.buf[off:], p)
		}
		return memx.Copy(p, m.buf[off:])
	}
	mask := uint64(1)<<m.shift - 1
	pos := off + m.first
	n := 0
	for n < len(p) {
		i := pos >> m.shift
		if i >= uint64(len(m.pages)) {
			break
		}
		pg := m.pages[i]
		in := pos & mask
		if in >= uint64(len(pg)) {
			break
		}
		var c int
		if write {
			c = memx.Copy(pg[in:], p[n:])
		} else {
			c = memx.Copy(p[n:], pg[in:])
		}
		n += c
		pos += uint64(c)
	}
	return n
}

// View returns the n bytes at iova as a slice of the region's memory, when
// they lie in one contiguous piece (always for RegMR regions; within one
// page for fast-register regions). ok is false otherwise: use ReadAt. The
// slice aliases the caller's memory: the loopback path copies from it once
// instead of staging the payload in a packet buffer.
func (mr *MR) View(iova uint64, n uint64) (b []byte, ok bool) {
	m := mr.mem.Load()
	off, in := m.offset(iova, n)
	if !in {
		return nil, false
	}
	if m.pages == nil {
		if m.acc != nil {
			return nil, false // no slice: the caller copies with ReadAt
		}
		return m.buf[off : off+n : off+n], true
	}
	pos := off + m.first
	i := pos >> m.shift
	if i >= uint64(len(m.pages)) {
		return nil, false
	}
	pg := m.pages[i]
	start := pos & (1<<m.shift - 1)
	if start+n > uint64(len(pg)) {
		return nil, false
	}
	return pg[start : start+n : start+n], true
}

package keys

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Lock order: Table.mu is the only lock in this package; nothing else is
// acquired while holding it. Methods named ...Locked need t.mu held.

// Table bounds for NewTable.
const (
	MinTableBits = 4
	MaxTableBits = 20
)

// Table is a device's lkey/rkey table: every MR and MW owns one slot. It is
// safe for concurrent use.
type Table struct {
	bits    uint   // index width
	shift   uint   // 32 - bits: index position in a key
	genMask uint32 // generation field mask, before shifting by 8
	size    int    // 1 << bits

	// epoch moves whenever a valid MR's grant is replaced or cleared (see
	// publishLocked), the only change that can make a passing CheckLocal
	// fail: a caller that read it, then checked a key and kept the MR, may
	// reuse the MR while Epoch is unchanged.
	epoch atomic.Uint64

	// grants is the read side of the MR slots, for CheckLocal and
	// CheckRemote without a lock (rdmavt reads its lkey table under RCU):
	// entry i is the grant of the valid MR in slot i, or nil. Writers
	// replace entries, and the array when it grows, under mu.
	grants atomic.Pointer[[]atomic.Pointer[grant]]

	mu sync.RWMutex
	// guarded by mu
	onPublish func()   // tests: called after each grant is published
	slots     []slot   // slots[0] is reserved; grows on demand up to size
	free      []uint32 // FIFO of freed indices, from freeHead on
	freeHead  int
	live      int
}

// grant is an immutable copy of what a valid MR allows: its key, PD and
// access flags (its memory is MR.mem).
type grant struct {
	mr     *MR
	key    uint32
	pd     *PD
	access Access
}

// publishLocked updates the grant of slot idx after a change to it. When
// it replaces or clears a grant it moves the epoch, after the store and
// before the caller unlocks: a caller that reads the epoch and then checks
// a key must not see the new epoch with the old grant, or it would keep a
// stale result as current. Making an MR valid (RegMR, FastReg) makes no
// passing check fail and leaves the epoch alone.
func (t *Table) publishLocked(idx uint32) {
	var g *grant
	if mr := t.slots[idx].mr; mr != nil && mr.valid {
		g = &grant{mr: mr, key: mr.Lkey, pd: mr.PD, access: mr.Access}
	}
	gs := t.grants.Load()
	if gs == nil || int(idx) >= len(*gs) {
		if g == nil {
			return // nothing to clear
		}
		n := 64
		if gs != nil {
			n = 2 * len(*gs)
		}
		grown := make([]atomic.Pointer[grant], min(max(n, int(idx)+1), t.size))
		if gs != nil {
			for i := range *gs {
				grown[i].Store((*gs)[i].Load())
			}
		}
		t.grants.Store(&grown)
		gs = &grown
	}
	old := (*gs)[idx].Swap(g)
	if t.onPublish != nil {
		t.onPublish()
	}
	if old != nil {
		t.epoch.Add(1)
	}
}

// grantOf returns the grant of the valid MR in the slot key indexes, if any.
// It does not compare the key.
func (t *Table) grantOf(key uint32) *grant {
	gs := t.grants.Load()
	if gs == nil {
		return nil
	}
	idx := key >> t.shift
	if int(idx) >= len(*gs) {
		return nil
	}
	return (*gs)[idx].Load()
}

// slot is one table entry: at most one of mr and mw is set.
type slot struct {
	gen uint32 // bumped when the slot is freed
	mr  *MR
	mw  *MW
}

// NewTable returns a table with 2^bits slots; slot 0 is reserved, so it holds
// at most 2^bits-1 objects. bits outside [MinTableBits, MaxTableBits] is a
// programming error and panics. The generation field is 24-bits wide, so a
// small table detects stale keys over more reuses of a slot.
func NewTable(bits int) *Table {
	if bits < MinTableBits || bits > MaxTableBits {
		panic(fmt.Sprintf("keys: table bits %d outside [%d, %d]", bits, MinTableBits, MaxTableBits))
	}
	t := &Table{
		bits:    uint(bits),
		shift:   32 - uint(bits),
		genMask: 1<<(24-uint(bits)) - 1,
		size:    1 << bits,
	}
	t.slots = make([]slot, 1, min(t.size, 64))
	return t
}

// Epoch returns the table's change count. Results of CheckLocal stay valid
// while it is unchanged: the transport checks lkeys when a WR is posted and
// checks again at execution only if it moved. (Nothing keeps results of
// CheckRemote, which memory windows change without moving it.)
func (t *Table) Epoch() uint64 { return t.epoch.Load() }

// Bits returns the index width the table was created with.
func (t *Table) Bits() int { return int(t.bits) }

// Len returns the number of live MRs and MWs.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.live
}

// Index returns the table index of key.
func (t *Table) Index(key uint32) uint32 { return key >> t.shift }

// Generation returns the generation field of key.
func (t *Table) Generation(key uint32) uint32 { return key >> 8 & t.genMask }

// makeKey assembles a key from its fields.
func (t *Table) makeKey(idx, gen uint32, kb uint8) uint32 {
	return idx<<t.shift | (gen&t.genMask)<<8 | uint32(kb)
}

// allocLocked takes a slot: the oldest freed one, else a never-used one.
func (t *Table) allocLocked() (uint32, error) {
	if t.freeHead < len(t.free) {
		idx := t.free[t.freeHead]
		t.freeHead++
		if t.freeHead >= 64 && 2*t.freeHead >= len(t.free) {
			n := copy(t.free, t.free[t.freeHead:])
			t.free = t.free[:n]
			t.freeHead = 0
		}
		t.live++
		return idx, nil
	}
	if len(t.slots) < t.size {
		t.slots = append(t.slots, slot{})
		t.live++
		return uint32(len(t.slots) - 1), nil
	}
	return 0, fmt.Errorf("key table of %d slots is full: %w", t.size-1, ErrNoResources)
}

// freeLocked empties slot idx and bumps its generation.
func (t *Table) freeLocked(idx uint32) {
	s := &t.slots[idx]
	s.mr, s.mw = nil, nil
	s.gen++
	t.free = append(t.free, idx)
	t.live--
	t.publishLocked(idx)
}

// lookupLocked returns the slot that key indexes, if it holds an object. It
// does not compare generation or key byte.
func (t *Table) lookupLocked(key uint32) (*slot, error) {
	idx := key >> t.shift
	if idx == 0 {
		return nil, errKeyReserved
	}
	if int(idx) >= len(t.slots) {
		return nil, errNoSuchKey
	}
	s := &t.slots[idx]
	if s.mr == nil && s.mw == nil {
		return nil, errNoSuchKey
	}
	return s, nil
}

// matchKey compares an object's current key with the key presented.
func matchKey(have, want uint32) error {
	switch {
	case have == want:
		return nil
	case have>>8 != want>>8:
		return errStaleKey
	default:
		return errKeyByte
	}
}

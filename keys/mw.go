package keys

import "fmt"

// MWType is a memory window type, with the kernel's IB_MW_TYPE_* values.
type MWType uint8

// Memory window types.
const (
	// MWType1 windows are bound and unbound by the bind verb; a zero-length
	// bind unbinds. They cannot be invalidated.
	MWType1 MWType = 1
	// MWType2 windows are bound by the BIND_MW work request, only while
	// unbound, and unbound by LOCAL_INV or SEND_WITH_INV.
	MWType2 MWType = 2
)

// String returns "type1" or "type2".
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type1"
	case MWType2:
		return "type2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MW is a memory window: a remote-access view of part of an MR, with its own
// rkey. Rkey changes (key byte only) on every bind.
type MW struct {
	Rkey uint32
	PD   *PD
	Type MWType

	table *Table

	// guarded by table.mu
	mr     *MR  // bound MR, nil when unbound
	win    span // the bound range, in mr's addresses
	access Access
	dead   bool
}

// AllocMW allocates an unbound memory window of pd and takes a reference on
// pd. Its rkey has key byte 0 and fails checks until the window is bound.
//
// Errors: ErrInvalidArgument (nil or freed pd, unknown type), ErrNoResources.
func (t *Table) AllocMW(pd *PD, typ MWType) (*MW, error) {
	if pd == nil {
		return nil, fmt.Errorf("alloc mw: nil pd: %w", ErrInvalidArgument)
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("alloc mw: %s: %w", typ, ErrInvalidArgument)
	}
	if err := pd.TryRef(); err != nil {
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	mw := &MW{PD: pd, Type: typ, table: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, err := t.allocLocked()
	if err != nil {
		pd.Unref()
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	s := &t.slots[idx]
	s.mw = mw
	mw.Rkey = t.makeKey(idx, s.gen, 0)
	return mw, nil
}

// BindMW binds mw to [addr, addr+length) of mr with the given remote access,
// sets the window's key byte to key, and returns the new rkey. Addresses are
// those of mr (mr must not be ZeroBased, and zero-based windows are not
// supported).
//
// A type-1 window may be rebound while bound (the old binding and its rkey
// are dropped); a type-1 bind with length 0 unbinds it (mr may then be nil).
// A type-2 window can be bound only while unbound (invalidate it first) and
// never with length 0 or a nil mr. The check that the posting QP's PD is the
// window's (type 2, C10-72) is the caller's; here mw and mr must share a PD.
//
// Errors: ErrInvalidArgument (nil or foreign arguments, access with ZeroBased,
// MWBind or unknown flags, a type-2 bind with length 0 or nil mr, a ZeroBased
// mr), ErrInvalidState (mw deallocated, mr deregistered or invalid, type-2 mw
// already bound), ErrPDMismatch, ErrAccess (mr lacks MWBind, or the window
// grants RemoteWrite or RemoteAtomic and mr lacks LocalWrite), ErrBounds
// (window not inside mr, or addr+length overflows).
func (t *Table) BindMW(mw *MW, mr *MR, addr, length uint64, access Access, key uint8) (uint32, error) {
	return t.bindMW(mw, mr, addr, length, access, key, false)
}

// BindMWNextKey binds a type-1 window as the bind verb does (ibv_bind_mw):
// as BindMW, with the key byte moved on by one from the window's current
// rkey, as ibv_inc_rkey does, so a key handed out for the old binding stops
// working. The current key byte is read under the table lock, so binds that
// race each other still give every binding its own key byte.
//
// Errors: those of BindMW, and ErrInvalidArgument for a type-2 window
// (those are bound by a BIND_MW work request, with the key byte its
// poster chose).
func (t *Table) BindMWNextKey(mw *MW, mr *MR, addr, length uint64, access Access) (uint32, error) {
	return t.bindMW(mw, mr, addr, length, access, 0, true)
}

// bindMW is BindMW; with next it ignores key and uses the window's key byte
// plus one, and refuses type-2 windows.
func (t *Table) bindMW(mw *MW, mr *MR, addr, length uint64, access Access, key uint8, next bool) (uint32, error) {
	if mw == nil || mw.table != t || (mr != nil && mr.table != t) {
		return 0, fmt.Errorf("bind mw: nil or foreign argument: %w", ErrInvalidArgument)
	}
	if bad := access & (ZeroBased | MWBind | ^allAccess); bad != 0 {
		return 0, fmt.Errorf("bind mw: window access %s: %w", bad, ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if mw.dead {
		return 0, fmt.Errorf("bind mw %#x: window deallocated: %w", mw.Rkey, ErrInvalidState)
	}
	if mw.Type == MWType2 {
		switch {
		case next:
			return 0, fmt.Errorf("bind mw %#x: %s window: %w: type 2 windows are bound with a BIND_MW work request", mw.Rkey, mw.Type, ErrInvalidArgument)
		case mw.mr != nil:
			return 0, fmt.Errorf("bind mw %#x: type 2 window is bound, invalidate it first: %w", mw.Rkey, ErrInvalidState)
		case mr == nil || length == 0:
			return 0, fmt.Errorf("bind mw %#x: type 2 bind needs an mr and a length: %w", mw.Rkey, ErrInvalidArgument)
		}
	} else if next {
		key = uint8(mw.Rkey) + 1
	}
	if mw.Type == MWType1 && length == 0 {
		mw.unbindLocked()
		mw.Rkey = mw.Rkey&^0xff | uint32(key)
		return mw.Rkey, nil
	}
	switch {
	case mr == nil:
		return 0, fmt.Errorf("bind mw %#x: nil mr: %w", mw.Rkey, ErrInvalidArgument)
	case mr.dead:
		return 0, fmt.Errorf("bind mw %#x: mr deregistered: %w", mw.Rkey, ErrInvalidState)
	case !mr.valid:
		return 0, fmt.Errorf("bind mw %#x: mr %#x is invalid: %w", mw.Rkey, mr.Lkey, ErrInvalidState)
	case mw.PD != mr.PD:
		return 0, fmt.Errorf("bind mw %#x: mr %#x: %w", mw.Rkey, mr.Lkey, ErrPDMismatch)
	case mr.Access&MWBind == 0:
		return 0, fmt.Errorf("bind mw %#x: mr %#x lacks MWBind: %w", mw.Rkey, mr.Lkey, ErrAccess)
	case mr.Access&ZeroBased != 0:
		return 0, fmt.Errorf("bind mw %#x: zero-based mr %#x: %w", mw.Rkey, mr.Lkey, ErrInvalidArgument)
	case access&(RemoteWrite|RemoteAtomic) != 0 && mr.Access&LocalWrite == 0:
		return 0, fmt.Errorf("bind mw %#x: window %s needs LocalWrite on mr %#x: %w", mw.Rkey, access, mr.Lkey, ErrAccess)
	}
	if err := mr.mem.Load().contains(addr, length); err != nil {
		return 0, fmt.Errorf("bind mw %#x: window %#x+%d in mr %#x: %w", mw.Rkey, addr, length, mr.Lkey, err)
	}
	mw.unbindLocked()
	mw.mr, mw.win, mw.access = mr, span{addr, length}, access
	mr.windows++
	mw.Rkey = mw.Rkey&^0xff | uint32(key)
	return mw.Rkey, nil
}

// unbindLocked drops the window's binding, if any.
func (mw *MW) unbindLocked() {
	if mw.mr == nil {
		return
	}
	mw.mr.windows--
	mw.mr = nil
	mw.win, mw.access = span{}, 0
}

// DeallocMW unbinds mw if bound, frees its slot and drops its PD reference.
//
// Errors: ErrInvalidArgument (nil or foreign mw), ErrInvalidState (already
// deallocated).
func (t *Table) DeallocMW(mw *MW) error {
	if mw == nil || mw.table != t {
		return fmt.Errorf("dealloc mw: nil or foreign mw: %w", ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if mw.dead {
		return fmt.Errorf("dealloc mw %#x: already deallocated: %w", mw.Rkey, ErrInvalidState)
	}
	mw.unbindLocked()
	t.freeLocked(t.Index(mw.Rkey))
	mw.dead = true
	mw.PD.Unref()
	return nil
}

// Binding returns the window's current binding; ok is false when unbound.
func (mw *MW) Binding() (mr *MR, addr, length uint64, access Access, ok bool) {
	mw.table.mu.RLock()
	defer mw.table.mu.RUnlock()
	if mw.mr == nil {
		return nil, 0, 0, 0, false
	}
	return mw.mr, mw.win.base, mw.win.length, mw.access, true
}

package keys

// CheckLocal validates a local SGE: lkey must name, exactly, a valid MR of pd
// that grants access (0 for a local read, LocalWrite for a write into memory)
// and contains [iova, iova+length). It returns the MR for ReadAt/WriteAt. A
// zero length succeeds with a nil MR and checks nothing. It does not allocate.
//
// Errors: ErrInvalidKey (key 0, no such key, stale generation, wrong key byte,
// an invalidated MR, an MW's key), ErrPDMismatch, ErrAccess, ErrBounds (outside
// the MR, or iova+length overflows).
func (t *Table) CheckLocal(pd *PD, lkey uint32, iova uint64, length uint32, access Access) (*MR, error) {
	if length == 0 {
		return nil, nil
	}
	if g := t.grantOf(lkey); g.allows(pd, lkey, iova, uint64(length), access) {
		return g.mr, nil
	}
	return t.checkLocalSlow(pd, lkey, iova, length, access)
}

// allows is the lock-free check of CheckLocal and CheckRemote: g (which may
// be nil) is the published grant of an MR with exactly key, pd and access
// that contains [addr, addr+n). When it is not, the caller checks again under
// the lock, which also finds the error. Small enough to be inlined.
func (g *grant) allows(pd *PD, key uint32, addr, n uint64, access Access) bool {
	if g == nil || g.key != key || g.pd != pd || access&^g.access != 0 {
		return false
	}
	_, in := g.mr.mem.Load().offset(addr, n)
	return in
}

// checkLocalSlow is CheckLocal under the lock, which also finds the exact
// error of a failed check.
func (t *Table) checkLocalSlow(pd *PD, lkey uint32, iova uint64, length uint32, access Access) (*MR, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s, err := t.lookupLocked(lkey)
	if err != nil {
		return nil, err
	}
	mr := s.mr
	if mr == nil {
		return nil, errMWAsLkey
	}
	if err := checkMRLocked(mr, mr.Lkey, pd, lkey, access); err != nil {
		return nil, err
	}
	if err := mr.mem.Load().contains(iova, uint64(length)); err != nil {
		return nil, err
	}
	return mr, nil
}

// CheckRemote validates the rkey, address and length of an incoming RDMA
// READ, WRITE or atomic: access must hold the remote flags the operation needs
// (RemoteRead, RemoteWrite or RemoteAtomic), and rkey must name, exactly,
// either a valid MR of pd that grants them and contains [va, va+length), or a
// bound MW of pd whose window grants them and contains the range, in which
// case the window's MR is returned. A zero length succeeds with a nil MR and
// checks nothing. It does not allocate.
//
// Errors: ErrInvalidKey (key 0, no such key, stale generation, wrong key byte,
// an invalidated MR or unbound MW), ErrPDMismatch, ErrAccess (also when access
// holds no remote flag), ErrBounds (outside the MR or window, or va+length
// overflows).
func (t *Table) CheckRemote(pd *PD, rkey uint32, va uint64, length uint32, access Access) (*MR, error) {
	if length == 0 {
		return nil, nil
	}
	if access&RemoteAccess == 0 {
		return nil, errNoRemote
	}
	if g := t.grantOf(rkey); g.allows(pd, rkey, va, uint64(length), access) {
		return g.mr, nil
	}
	return t.checkRemoteSlow(pd, rkey, va, length, access)
}

// checkRemoteSlow is CheckRemote under the lock: MWs, and the exact error.
func (t *Table) checkRemoteSlow(pd *PD, rkey uint32, va uint64, length uint32, access Access) (*MR, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s, err := t.lookupLocked(rkey)
	if err != nil {
		return nil, err
	}
	if mr := s.mr; mr != nil {
		if err := checkMRLocked(mr, mr.Rkey, pd, rkey, access); err != nil {
			return nil, err
		}
		if err := mr.mem.Load().contains(va, uint64(length)); err != nil {
			return nil, err
		}
		return mr, nil
	}
	mw := s.mw
	switch {
	case matchKey(mw.Rkey, rkey) != nil:
		return nil, matchKey(mw.Rkey, rkey)
	case mw.mr == nil || !mw.mr.valid:
		return nil, errUnbound
	case mw.PD != pd:
		return nil, errPD
	case access&^mw.access != 0:
		return nil, errAccess
	}
	if err := mw.win.contains(va, uint64(length)); err != nil {
		return nil, err
	}
	return mw.mr, nil
}

// checkMRLocked checks key, validity, PD and access of an MR.
func checkMRLocked(mr *MR, have uint32, pd *PD, key uint32, access Access) error {
	switch {
	case have != key:
		return matchKey(have, key)
	case !mr.valid:
		return errInvalidated
	case mr.PD != pd:
		return errPD
	case access&^mr.Access != 0:
		return errAccess
	}
	return nil
}

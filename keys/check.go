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
	if s.mr == nil {
		return nil, errMWAsLkey
	}
	return checkMRLocked(s.mr, s.mr.Lkey, pd, lkey, iova, length, access)
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
	if s.mr != nil {
		return checkMRLocked(s.mr, s.mr.Rkey, pd, rkey, va, length, access)
	}
	mw := s.mw
	if err := matchKey(mw.Rkey, rkey); err != nil {
		return nil, err
	}
	switch {
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

// checkMRLocked checks key, validity, PD, access and range of an MR whose
// key (lkey or rkey) is have, and returns it if all hold.
func checkMRLocked(mr *MR, have uint32, pd *PD, key uint32, addr uint64, length uint32, access Access) (*MR, error) {
	switch {
	case have != key:
		return nil, matchKey(have, key)
	case !mr.valid:
		return nil, errInvalidated
	case mr.PD != pd:
		return nil, errPD
	case access&^mr.Access != 0:
		return nil, errAccess
	}
	if err := mr.mem.Load().contains(addr, uint64(length)); err != nil {
		return nil, err
	}
	return mr, nil
}

package keys

// Mirror returns an MR that stands for a region registered elsewhere: a
// region rvtd registered for a client process (rvt.Dial), whose keys the
// daemon chose. buf is this process's view of the region's memory (a
// shared-memory mapping), so ReadAt, WriteAt, Word and View work on it;
// nil when the process has none. The MR is not in t's key table (no
// check finds its keys here); t only answers Valid and Windows for it.
// Unmirror ends it.
func (t *Table) Mirror(pd *PD, buf []byte, lkey, rkey uint32, iova uint64, access Access) *MR {
	mr := &MR{Lkey: lkey, Rkey: rkey, PD: pd, IOVA: iova, Length: uint64(len(buf)), Access: access, table: t, valid: true}
	mr.mem.Store(&mapping{span: span{base: iova, length: uint64(len(buf))}, buf: buf})
	return mr
}

// Unmirror marks a mirrored MR deregistered: Valid reports false and its
// memory reads as nothing.
func (t *Table) Unmirror(mr *MR) {
	t.mu.Lock()
	mr.valid, mr.dead = false, true
	t.mu.Unlock()
	mr.mem.Store(emptyMapping)
}

// MirrorMW returns a memory window that stands for one allocated
// elsewhere (rvtd's), with its rkey; Binding reports it unbound.
func (t *Table) MirrorMW(pd *PD, typ MWType, rkey uint32) *MW {
	return &MW{Rkey: rkey, PD: pd, Type: typ, table: t}
}

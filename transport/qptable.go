package transport

import "sync/atomic"

// qpTable finds a QP's Conn by number for every packet. A lookup is two
// loads, the page and then the slot, and takes no lock; the writers hold
// Engine.mu. QP numbers have 24 bits, and a device gives them out in
// sequence (rvt: from 0x11), so the pages in use are few and full: 10,000
// QPs take ten pages of 8 KiB. A page is made at its first QP and dropped
// at its last, so QPs made and destroyed over time, whose numbers move on,
// leave no pages behind. The list of pages is replaced whole when one is
// added or dropped, so a reader never sees it change under it (a reader
// holding a dropped page finds its slots empty).
//
// It replaced maps (sharded by number, each copied on write): at 10,000
// QPs their lookups missed the cache on the hash groups (7.7% of the
// samples, flat), and without them a message on the fabric takes 22% less
// CPU time (BenchmarkFabricScale on the Inline executor, 4,183 -> 3,264 ns).
type qpTable struct {
	pages atomic.Pointer[[]*qpPage]
}

const qpPageBits = 10

type qpPage struct {
	slots [1 << qpPageBits]atomic.Pointer[Conn]
	live  int // QPs in slots; the writers', under Engine.mu
}

// get returns the Conn of QP qpn, or nil.
func (t *qpTable) get(qpn uint32) *Conn {
	ps := t.pages.Load()
	if ps == nil {
		return nil
	}
	i := qpn >> qpPageBits
	if i >= uint32(len(*ps)) {
		return nil
	}
	p := (*ps)[i]
	if p == nil {
		return nil
	}
	return p.slots[qpn&(1<<qpPageBits-1)].Load()
}

// set makes c (nil: none) the Conn of QP qpn, at most qp.MaxQPN (qp.New
// makes no other). The caller holds Engine.mu.
func (t *qpTable) set(qpn uint32, c *Conn) {
	var ps []*qpPage
	if old := t.pages.Load(); old != nil {
		ps = *old
	}
	i := int(qpn >> qpPageBits)
	if i >= len(ps) || ps[i] == nil {
		if c == nil {
			return
		}
		grown := make([]*qpPage, max(len(ps), i+1))
		copy(grown, ps)
		grown[i] = new(qpPage)
		ps = grown
		t.pages.Store(&ps)
	}
	p := ps[i]
	slot := &p.slots[qpn&(1<<qpPageBits-1)]
	switch old := slot.Load(); {
	case old == nil && c != nil:
		p.live++
	case old != nil && c == nil:
		p.live--
	}
	slot.Store(c)
	if p.live == 0 {
		// The page's last QP: a new list without it (and without the
		// empty pages at the end).
		n := len(ps)
		if i == n-1 {
			for n = i; n > 0 && ps[n-1] == nil; n-- {
			}
		}
		shrunk := make([]*qpPage, n)
		copy(shrunk, ps)
		if i < n {
			shrunk[i] = nil
		}
		t.pages.Store(&shrunk)
	}
}

// each calls f with every Conn in the table.
func (t *qpTable) each(f func(*Conn)) {
	ps := t.pages.Load()
	if ps == nil {
		return
	}
	for _, p := range *ps {
		if p == nil {
			continue
		}
		for i := range p.slots {
			if c := p.slots[i].Load(); c != nil {
				f(c)
			}
		}
	}
}

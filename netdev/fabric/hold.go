package fabric

import "github.com/softverbs/softverbs/netdev"

// Holds: delivery at Flush (netdev.HereReceiver).
//
// A port's user that sends between Hold and Flush holds its locks while it
// sends (the transport sends from inside its runs), so a frame delivered
// there must have its work handed to another goroutine. A frame for a
// port with a here handler waits on the sending port instead, and the
// next Flush of that port delivers it on the flushing goroutine, which
// holds no lock of its caller. A Flush that carries one frame gives it to
// the here handler, which does its work right there, with no hand-off: a
// request waiting for its answer. A burst goes to the ordinary handlers,
// whose work runs on the receivers' own goroutines beside the sender's, as
// rxe runs its responder in the caller's context unless packets queue up.
//
// One goroutine at a time delivers a port's kept frames (the drainer), in
// the order they were sent; a Flush that finds a drainer at work leaves
// its frames to it. Delivery may recurse (the receiver's own run sends
// and flushes on its port), never without bound: a port whose drainer is
// up the stack only queues. A frame kept when no hold is left, by a
// sender that held none (nothing in this repository does), is delivered
// at once the ordinary way, so none waits for a Flush that will not come.

// keptFrame is a frame waiting on the sending port for Flush: a buffer of
// the fabric's, owned by the receiving port to.
type keptFrame struct {
	to    *Port
	frame []byte
}

// SetHandlerHere sets the handler for frames delivered by Flush
// (netdev.HereReceiver); nil: those frames go to the ordinary handler,
// inside Send.
func (p *Port) SetHandlerHere(h netdev.Handler) {
	if h == nil {
		p.here.Store(nil)
		return
	}
	p.here.Store(&h)
}

// Hold makes frames p sends to ports with a here handler wait for Flush
// (netdev.Holder).
func (p *Port) Hold() { p.holders.Add(1) }

// Flush ends a Hold and delivers the frames waiting on p, unless another
// goroutine is delivering them.
func (p *Port) Flush() {
	p.holders.Add(-1)
	if p.held.Load() != 0 {
		p.drain(true)
	}
}

// FlushLazy is Flush: delivery costs no system call worth saving.
func (p *Port) FlushLazy() { p.Flush() }

// keeps reports whether a frame p sends to `to` now waits for Flush.
func (p *Port) keeps(to *Port) bool {
	return p.holders.Load() != 0 && to.here.Load() != nil
}

// keep queues frame for to until a Flush of p.
func (p *Port) keep(to *Port, frame []byte) {
	p.keptMu.Lock()
	p.kept = append(p.kept, keptFrame{to, frame})
	p.held.Add(1)
	p.keptMu.Unlock()
	// The last holder may have flushed since keeps: then nobody will
	// (Flush decrements before it looks at held; we add before we look).
	if p.holders.Load() == 0 {
		p.drain(false)
	}
}

// drain delivers the frames waiting on p, in order, until none is left,
// unless another goroutine is at it. here says the caller holds no lock
// (a Flush): frames go to their ports' here handlers; else to the
// ordinary ones.
func (p *Port) drain(here bool) {
	p.keptMu.Lock()
	if p.drainer {
		p.keptMu.Unlock()
		return
	}
	p.drainer = true
	for len(p.kept) > 0 {
		batch := p.kept
		p.kept, p.spare = p.spare[:0], nil
		p.held.Store(0)
		p.keptMu.Unlock()
		one := here && len(batch) == 1
		for i, k := range batch {
			var h *netdev.Handler // the ordinary one
			if one {
				h = k.to.here.Load()
			}
			k.to.takeWith(h, k.frame)
			batch[i] = keptFrame{}
		}
		p.keptMu.Lock()
		p.spare = batch[:0]
	}
	p.drainer = false
	p.keptMu.Unlock()
}

package faults

// Lending frames through a fault link (netdev.FrameLender).
//
// A fault link used to be a link that does not lend: the engine then built
// every frame in a buffer of its own and the fabric copied it into one of
// its buffers (the copy the fabric saves for a lending port), and a lossy
// pair paid that copy on every frame besides the loss, where the lossless
// pair it is compared with did not (issue 19's loss benchmark: the same
// pair through a fault link with no loss ran at about 0.77 of the bare
// pair). When its inner link lends for itself and the profile only loses
// frames (no duplicates, corruption, reordering, delay or bandwidth cap,
// which need a frame kept or changed), the fault link lends the inner
// link's buffers: SendOwned draws the same decision Send draws, in the
// same order, and either hands the buffer on to the inner SendOwned or
// gives it back with Release. With any other profile, Lender returns nil
// and the link is used through Send as before.

import "github.com/softverbs/softverbs/netdev"

var _ netdev.FrameLender = (*Link)(nil)

// lenderFor returns l's lending interface if a fault link with profile fl
// may lend through it: l lends for itself and fl only loses frames.
func lenderFor(l netdev.Link, fl Profile) netdev.FrameLender {
	lo := fl
	lo.Loss, lo.ReorderHold = 0, 0
	if lo != (Profile{}) {
		return nil
	}
	if fl2, ok := l.(netdev.FrameLender); ok && fl2.Lender() == l {
		return fl2
	}
	return nil
}

// Lender returns f when it lends the inner link's buffers (see lenderFor),
// else nil: then the engine does not use TxFrame and SendOwned.
func (f *Link) Lender() netdev.Link {
	if f.lend == nil {
		return nil
	}
	return f
}

// RecyclesFrames reports whether f lends the buffers of an inner link that
// recycles frames (netdev.FrameRecycler): a frame f delivers is then one
// of them, and SendOwned takes it.
func (f *Link) RecyclesFrames() bool {
	r, ok := f.lend.(netdev.FrameRecycler)
	return ok && r.RecyclesFrames()
}

// TxFrame returns a buffer of the inner link's, or nil when f does not lend.
func (f *Link) TxFrame(n int) []byte {
	if f.lend == nil {
		return nil
	}
	return f.lend.TxFrame(n)
}

// SendOwned is Send for a frame in a buffer from TxFrame: lost (the
// buffer goes back to the inner link) or handed to the inner SendOwned.
func (f *Link) SendOwned(frame []byte) error {
	if f.lend == nil {
		return f.Send(frame) // not lent (Lender is nil): a plain send
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.lend.Release(frame)
		return netdev.ErrClosed
	}
	f.stats.Frames++
	if f.hitLocked(f.fl.Loss) {
		f.stats.Lost++
		f.mu.Unlock()
		f.lend.Release(frame)
		return nil
	}
	f.stats.Delivered++ // taken back below if the inner link fails
	f.mu.Unlock()
	err := f.lend.SendOwned(frame)
	if err != nil {
		f.mu.Lock()
		f.stats.Delivered--
		f.stats.Errors++
		f.mu.Unlock()
	}
	return err
}

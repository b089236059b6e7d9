package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/netdev"
)

// lenderStub is a FrameLender that records the buffers given back.
type lenderStub struct{ released [][]byte }

func (l *lenderStub) Release(b []byte)       { l.released = append(l.released, b) }
func (l *lenderStub) Lender() netdev.Link    { return nil }
func (l *lenderStub) TxFrame(int) []byte     { return nil }
func (l *lenderStub) SendOwned([]byte) error { return nil }
func (l *lenderStub) RecyclesFrames() bool   { return true }

// TestBufCacheKeepsRecycledFrames: a goroutine's stock keeps the frames of
// its engine's link when that link recycles them, whole, up to maxKept,
// and hands them out only for that link and only if long enough; a frame
// from another link goes back to it, and a change of link gives the kept
// frames back to the old one.
func TestBufCacheKeepsRecycledFrames(t *testing.T) {
	l1, l2 := &lenderStub{}, &lenderStub{}
	e := &Engine{}
	setPort := func(l *lenderStub, recycle bool) {
		e.port.Store(&portState{rel: l, lend: l, recycle: recycle})
	}
	frame := func(l *lenderStub, n, c int) *pktBuf {
		return &pktBuf{frame: make([]byte, n, c), rel: l}
	}
	bc := &bufCache{}

	setPort(l1, false)
	bc.put(e, frame(l1, 60, 256))
	require.Len(t, l1.released, 1, "a link that does not recycle gets its frame back")
	require.Nil(t, bc.kept.take(l1, 10))

	setPort(l1, true)
	for range maxKept + 1 {
		bc.put(e, frame(l1, 60, 256))
	}
	require.Len(t, l1.released, 2, "kept up to maxKept, the rest given back")
	bc.put(e, frame(l2, 60, 256))
	require.Len(t, l2.released, 1, "a frame from another link than the port's goes back to it")

	require.Nil(t, bc.kept.take(l2, 10), "only for the link the frames are from")
	require.Nil(t, bc.kept.take(l1, 257), "only if long enough")
	buf := bc.kept.take(l1, 256)
	require.Len(t, buf, 256, "the buffer whole")
	require.Len(t, bc.kept.frames, maxKept-1)

	setPort(l2, true)
	bc.put(e, frame(l2, 60, 9000))
	require.Len(t, l1.released, 2+maxKept-1, "a new link: the old one's frames go back to it")
	require.Len(t, bc.kept.take(l2, 4096), 9000)
	require.Nil(t, bc.kept.take(l2, 1))

	// An Inline engine's tasks keep frames in the engine (putBuf on the
	// drainer); elsewhere putBuf gives them back.
	e.inline = task.NewInline()
	released := len(l2.released)
	e.putBuf(frame(l2, 60, 256), wakeSchedule)
	require.Len(t, l2.released, released+1, "off the drainer: given back")
	e.putBuf(frame(l2, 60, 256), wakeChain)
	require.Len(t, l2.released, released+1, "on the drainer: kept")
	var none *bufCache
	require.Len(t, none.keptFor(e).take(l2, 100), 256, "an Inline engine's batch takes the engine's")

	// A full stack, then a new link: the old link's frames go back and
	// the new one's are kept.
	e.inline = nil
	for range maxKept {
		bc.put(e, frame(l2, 60, 256))
	}
	l3 := &lenderStub{}
	setPort(l3, true)
	released2 := len(l2.released)
	bc.put(e, frame(l3, 60, 512))
	require.Len(t, l2.released, released2+maxKept, "the full stack went back")
	require.Len(t, bc.kept.take(l3, 300), 512)
	// A link that does not recycle: what is kept goes back at once.
	bc.put(e, frame(l3, 60, 512))
	setPort(l1, false)
	released3 := len(l3.released)
	bc.put(e, frame(l1, 60, 256))
	require.Len(t, l3.released, released3+1)
	require.Nil(t, bc.kept.take(l3, 1))
}

package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/qp"
)

// TestBufCache: a task's stock hands back the buffers it was given, last
// first, cleared; it trades only whole magazines with the depot, and only
// when both of its magazines are full (freeing) or empty (taking), so a
// task freeing and taking around a magazine's edge never goes to it; and
// what one task frees, another takes.
func TestBufCache(t *testing.T) {
	e, err := NewEngine(Config{Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	// A sync.Pool may drop what it is given (at a GC; at random under the
	// race detector): these keep everything.
	e.fullMags, e.emptyMags = new(stack), new(stack)
	depot := func() (n int) { // full magazines in the depot; takes them out
		for m, _ := e.fullMags.Get().(*magazine); m != nil; m, _ = e.fullMags.Get().(*magazine) {
			require.Equal(t, magSize, m.n, "a magazine in the depot is not full")
			n++
		}
		return n
	}

	var bc bufCache
	pb := bc.get(e) // nothing stocked: from the engine's pool
	pb.own = append(pb.own, 1, 2, 3)
	bc.put(e, pb)
	require.Empty(t, pb.own, "a returned buffer is cleared")
	require.Same(t, pb, bc.get(e))
	require.Zero(t, depot())

	// Around a magazine's edge, freeing and taking trade nothing.
	bufs := make([]*pktBuf, 2*magSize+1)
	ours := make(map[*pktBuf]bool) // by identity: fresh buffers are all alike
	for i := range bufs {
		bufs[i] = e.getBuf()
		ours[bufs[i]] = true
	}
	for _, b := range bufs[:magSize+1] {
		bc.put(e, b)
	}
	for range 3 {
		b1, b2 := bc.get(e), bc.get(e)
		bc.put(e, b1)
		bc.put(e, b2)
	}
	require.Zero(t, depot(), "traded a magazine at the edge")

	// Two full magazines stay in the cache; one more buffer sends the
	// older one to the depot, and another task takes its buffers.
	for _, b := range bufs[magSize+1 : 2*magSize] {
		bc.put(e, b)
	}
	require.Zero(t, depot(), "traded a magazine while one had room")
	bc.put(e, bufs[2*magSize])
	var other bufCache
	for range magSize {
		require.True(t, ours[other.get(e)], "another task did not get the freed buffers")
	}
	require.Zero(t, depot())

	// Taking: the cache empties what it holds before it asks the depot.
	for range magSize + 1 {
		require.True(t, ours[bc.get(e)], "a buffer the cache held was not handed out")
	}
	require.Zero(t, bc.cur.n+bc.prev.n, "buffers left in the cache")
	require.Nil(t, bc.cur.b[0], "an empty magazine still points at a buffer")
}

// stack is a depot that keeps what it is given.
type stack []any

func (s *stack) Put(x any) { *s = append(*s, x) }

func (s *stack) Get() any {
	if len(*s) == 0 {
		return nil
	}
	x := (*s)[len(*s)-1]
	*s = (*s)[:len(*s)-1]
	return x
}

func TestPktListFIFO(t *testing.T) {
	e, err := NewEngine(Config{Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	var l pktList
	bufs := []*pktBuf{e.getBuf(), e.getBuf(), e.getBuf()}
	for _, pb := range bufs {
		l.push(pb)
	}
	got := l.takeAll(nil)
	require.Equal(t, bufs, got, "oldest first")
	require.Nil(t, l.head)
	require.Nil(t, l.tail)
	l.push(bufs[0])
	l.drain(e)
	require.Nil(t, l.head)
}

// TestResetDropsLocalPackets: packets another task listed for a QP before
// the QP was reset are dropped by the task they were listed for, not
// processed; one listed after the reset is kept. Each task drops only
// from its own list: on a Pool the other task's list may be in use by
// the goroutine carrying that task (task.TryCarry).
func TestResetDropsLocalPackets(t *testing.T) {
	h := newRCHarness(t)
	list := func(l *pktList) *pktBuf { // as Conn.enqueue lists them
		pb := h.e.getBuf()
		h.c.list(l, pb)
		return pb
	}
	list(&h.c.reqLocal)
	list(&h.c.respLocal)
	require.NoError(t, h.c.Modify(&qp.Attr{State: qp.Reset}, qp.AttrState))
	require.NotNil(t, h.c.reqLocal.head, "Modify runs outside the tasks: it must not touch the lists")
	after := list(&h.c.reqLocal)
	h.c.qp.Lock()
	got := h.c.popReq()
	again := h.c.popReq()
	h.c.qp.Unlock()
	require.Same(t, after, got, "the packet listed after the reset was not the one taken")
	require.Nil(t, again, "a packet from before the reset was taken")
	require.NotNil(t, h.c.respLocal.head, "the responder emptied the completer's list")
	h.c.qp.Lock()
	resp := h.c.popResp()
	h.c.qp.Unlock()
	require.Nil(t, resp, "a response from before the reset was taken")
	require.Nil(t, h.c.respLocal.head, "a response from before the reset is still listed")
}

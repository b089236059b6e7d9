package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/qp"
)

// TestTaskFreeList: buffers that tasks of an Inline engine return go on
// the tasks' own list, up to maxFree, and come back from it; buffers
// returned elsewhere, and every buffer of an engine on a Pool, go to the
// sync.Pool.
func TestTaskFreeList(t *testing.T) {
	newEngine := func(ex task.Executor) *Engine {
		e, err := NewEngine(Config{Exec: ex, Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
		require.NoError(t, err)
		return e
	}
	t.Run("inline", func(t *testing.T) {
		e := newEngine(task.NewInline())
		pb := e.getBuf(wakeChain)
		pb.own = append(pb.own, 1, 2, 3)
		e.putBuf(pb, wakeChain)
		require.Len(t, e.free, 1)
		require.Empty(t, pb.own, "a returned buffer is cleared")
		require.Same(t, pb, e.getBuf(wakeChain))
		require.Empty(t, e.free)

		e.putBuf(pb, wakeSchedule) // not from a task: to the sync.Pool
		require.Empty(t, e.free)

		for _, b := range takeBufs(e, maxFree+3, wakeChain) {
			e.putBuf(b, wakeChain)
		}
		require.Len(t, e.free, maxFree, "the list is bounded")
	})
	t.Run("pool", func(t *testing.T) {
		p := task.NewPool(1)
		defer p.Close()
		e := newEngine(p)
		pb := e.getBuf(wakeChain)
		e.putBuf(pb, wakeChain)
		require.Empty(t, e.free, "an engine on a Pool kept a buffer on the tasks' free list")
	})
}

func TestPktListFIFO(t *testing.T) {
	e, err := NewEngine(Config{Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	var l pktList
	bufs := []*pktBuf{e.getBuf(wakeChain), e.getBuf(wakeChain), e.getBuf(wakeChain)}
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
	require.Len(t, e.free, 1, "a drained packet goes back to the tasks' list")
}

// TestResetDropsLocalPackets: packets another task listed for a QP before
// the QP was reset are dropped by the task they were listed for, not
// processed; one listed after the reset is kept. Each task drops only
// from its own list: on a Pool the other task's list may be in use by
// the goroutine carrying that task (task.TryCarry).
func TestResetDropsLocalPackets(t *testing.T) {
	h := newRCHarness(t)
	list := func(l *pktList) *pktBuf { // as Conn.enqueue lists them
		pb := h.e.getBuf(wakeChain)
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

// TestCarriedAfterQueued: on a Pool, a sender's packet that went to the
// receiver's queue while its task was busy elsewhere, followed by Carry
// once that task went idle, stays ahead of the sender's next packet, which
// TryCarry would otherwise list (and the task takes its list first).
func TestCarriedAfterQueued(t *testing.T) {
	p := task.NewPool(1)
	p.Close() // no worker runs anything: the test drives the tasks
	e, err := NewEngine(Config{Exec: p, Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	c := newTestConn(t, e)
	src := task.New(p, "src", func() bool { return false })
	pkt := func() *pktBuf {
		pb := e.getBuf(wakeChain)
		pb.pkt.Info = RCSendOnly.Info()
		return pb
	}
	p1, p2 := pkt(), pkt()
	c.reqQ.push(p1)       // enqueue's queue path, the responder busy ...
	c.recvTask.Carry(src) // ... and idle again by the time it carries it
	c.enqueue(p2, wakeChain, src)
	c.qp.Lock()
	first, second := c.popReq(), c.popReq()
	c.qp.Unlock()
	require.Same(t, p1, first, "the later packet overtook the queued one")
	require.Same(t, p2, second)
}

// TestBufCache: a goroutine's stock gives back the buffers it was given,
// last first, cleared; it holds at most maxStock and hands the rest to the
// engine; a nil stock is the engine's own buffers. On a Pool a task's
// batch gets the stock of the goroutine running it, and a task between
// batches holds none.
func TestBufCache(t *testing.T) {
	p := task.NewPool(1)
	defer p.Close()
	e, err := NewEngine(Config{Exec: p, Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)

	var bc bufCache
	pb := bc.get(e) // empty: from the engine
	pb.own = append(pb.own, 1, 2, 3)
	bc.put(e, pb)
	require.Empty(t, pb.own, "a returned buffer is cleared")
	require.Same(t, pb, bc.get(e))

	bufs := takeBufs(e, maxStock+3, wakeSchedule)
	for _, b := range bufs {
		bc.put(e, b)
	}
	require.Len(t, bc.b, maxStock, "the stock is bounded")
	require.Same(t, bufs[maxStock-1], bc.get(e), "last in, first out")

	var none *bufCache
	none.put(e, pb) // the engine's: no panic
	require.NotNil(t, none.get(e))

	var stocks []*bufCache
	var tk *task.Task
	tk = task.New(p, "t", func() bool {
		stocks = append(stocks, stockFor(tk))
		return false
	})
	tk.RunHere()
	require.Len(t, stocks, 1, "RunHere did not run the batch")
	require.NotNil(t, stocks[0], "RunHere's batch got no stock")
	require.Nil(t, tk.Local(), "an idle task still holds its goroutine's stock")

	ran := false
	var got *bufCache
	var it *task.Task
	it = task.New(task.NewInline(), "i", func() bool { ran, got = true, stockFor(it); return false })
	it.Schedule()
	require.True(t, ran, "the Inline task did not run")
	require.Nil(t, got, "a batch on an Inline executor got a stock: it uses the engine's free list")
}

// takeBufs takes n buffers from e as w says.
func takeBufs(e *Engine, n int, w wake) []*pktBuf {
	bufs := make([]*pktBuf, n)
	for i := range bufs {
		bufs[i] = e.getBuf(w)
	}
	return bufs
}

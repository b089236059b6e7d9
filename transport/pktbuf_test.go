package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
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

		bufs := make([]*pktBuf, maxFree+3)
		for i := range bufs {
			bufs[i] = e.getBuf(wakeChain)
		}
		for _, b := range bufs {
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
		require.Empty(t, e.free, "tasks on a Pool run at once: no shared list")
	})
}

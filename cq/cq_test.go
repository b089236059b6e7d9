package cq

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func push(t *testing.T, c *CQ, wc WC) {
	t.Helper()
	require.True(t, c.Push(&wc), "push wrid %d", wc.WRID)
}

func pollAll(c *CQ) []WC {
	out := make([]WC, c.Depth()+1)
	return out[:c.Poll(out)]
}

func wrids(wcs []WC) []uint64 {
	ids := make([]uint64, len(wcs))
	for i := range wcs {
		ids[i] = wcs[i].WRID
	}
	return ids
}

func TestNewDepth(t *testing.T) {
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{-1, false}, {0, false}, {1, true}, {MaxDepth, true}, {MaxDepth + 1, false}} {
		c, err := New(tc.depth)
		if !tc.ok {
			require.ErrorIs(t, err, ErrInvalidArgument, "depth %d", tc.depth)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.depth, c.Depth())
		require.Zero(t, c.Len())
	}
}

func TestRingWrap(t *testing.T) {
	c, err := New(4)
	require.NoError(t, err)
	next, want := uint64(0), uint64(0)
	out := make([]WC, 3)
	for round := 0; round < 10; round++ {
		for c.Len() < 4 {
			push(t, c, WC{WRID: next, ByteLen: uint32(next)})
			next++
		}
		n := c.Poll(out)
		require.Equal(t, 3, n)
		for _, wc := range out[:n] {
			require.Equal(t, want, wc.WRID)
			require.Equal(t, uint32(want), wc.ByteLen)
			want++
		}
	}
	rest := pollAll(c)
	require.Len(t, rest, 1)
	require.Equal(t, want, rest[0].WRID)
}

func TestBatchPoll(t *testing.T) {
	c, err := New(8)
	require.NoError(t, err)
	require.Zero(t, c.Poll(make([]WC, 4)))
	for i := range 5 {
		push(t, c, WC{WRID: uint64(i), Opcode: Recv, Status: Success})
	}
	require.Zero(t, c.Poll(nil))
	out := make([]WC, 2)
	require.Equal(t, 2, c.Poll(out))
	require.Equal(t, []uint64{0, 1}, wrids(out))
	out = make([]WC, 10)
	n := c.Poll(out)
	require.Equal(t, []uint64{2, 3, 4}, wrids(out[:n]))
	require.Zero(t, c.Len())
}

func TestPushCopies(t *testing.T) {
	c, err := New(2)
	require.NoError(t, err)
	wc := WC{WRID: 1, ImmData: 0xdeadbeef, Flags: WithImm}
	require.True(t, c.Push(&wc))
	wc.WRID = 2
	got := pollAll(c)
	require.Equal(t, []WC{{WRID: 1, ImmData: 0xdeadbeef, Flags: WithImm}}, got)
}

func TestOverflow(t *testing.T) {
	c, err := New(2)
	require.NoError(t, err)
	var errCalls, compCalls atomic.Int32
	c.SetHandlers(func(*CQ) { compCalls.Add(1) }, func(got *CQ) {
		require.Same(t, c, got)
		errCalls.Add(1)
	})
	push(t, c, WC{WRID: 1})
	push(t, c, WC{WRID: 2})
	require.NoError(t, c.Arm(false))
	require.False(t, c.Push(&WC{WRID: 3}))
	require.Equal(t, int32(1), errCalls.Load())
	require.ErrorIs(t, c.Err(), ErrOverflow)

	// Further pushes fail, even once there is room, and do not raise again.
	require.Equal(t, []uint64{1, 2}, wrids(pollAll(c)), "queued entries are still drained")
	require.False(t, c.Push(&WC{WRID: 4}))
	require.False(t, c.Push(&WC{WRID: 5}))
	require.Equal(t, int32(1), errCalls.Load())
	require.Zero(t, compCalls.Load(), "an overflow is not a completion")
	require.Zero(t, c.Len())
	require.ErrorIs(t, c.Arm(false), ErrOverflow)
	require.ErrorIs(t, c.Resize(8), ErrOverflow)
	require.NoError(t, c.Destroy())
}

func TestPushBatch(t *testing.T) {
	tests := []struct {
		name      string
		depth     int
		solicited bool // arm for solicited completions only
		batch     []WC
		queued    int
		comp      int32 // completion handler calls
		fail      int32 // error handler calls
	}{
		{"armed next: one call for the batch", 8, false, []WC{{WRID: 1}, {WRID: 2}, {WRID: 3}}, 3, 1, 0},
		{"armed solicited: fires on the solicited one", 8, true, []WC{{WRID: 1}, {WRID: 2, Solicited: true}, {WRID: 3}}, 3, 1, 0},
		{"armed solicited: plain ones do not fire", 8, true, []WC{{WRID: 1}, {WRID: 2}}, 2, 0, 0},
		{"overflow in the middle: the rest is lost", 2, false, []WC{{WRID: 1}, {WRID: 2}, {WRID: 3}, {WRID: 4}}, 2, 1, 1},
		{"empty", 2, false, nil, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.depth)
			require.NoError(t, err)
			var comp, fail atomic.Int32
			c.SetHandlers(func(got *CQ) {
				require.Same(t, c, got)
				require.Equal(t, tc.queued, c.Len(), "the handler runs after the whole batch is queued")
				comp.Add(1)
			}, func(*CQ) { fail.Add(1) })
			require.NoError(t, c.Arm(tc.solicited))
			require.Equal(t, tc.queued, c.PushBatch(tc.batch))
			require.Equal(t, tc.comp, comp.Load())
			require.Equal(t, tc.fail, fail.Load())
			got := pollAll(c)
			require.Equal(t, wrids(tc.batch[:tc.queued]), wrids(got), "queued in order")
		})
	}
	t.Run("after overflow nothing is queued", func(t *testing.T) {
		c, err := New(1)
		require.NoError(t, err)
		require.Equal(t, 1, c.PushBatch([]WC{{WRID: 1}, {WRID: 2}}))
		require.Zero(t, c.PushBatch([]WC{{WRID: 3}}))
		require.NoError(t, c.Destroy())
		require.Zero(t, c.PushBatch([]WC{{WRID: 4}}), "destroyed")
	})
}

func TestArm(t *testing.T) {
	tests := []struct {
		name          string
		solicitedOnly bool
		wc            WC
		fires         bool
	}{
		{"next/plain", false, WC{}, true},
		{"next/solicited", false, WC{Solicited: true}, true},
		{"next/error", false, WC{Status: RemAccessErr}, true},
		{"solicited/plain", true, WC{}, false},
		{"solicited/solicited", true, WC{Solicited: true}, true},
		{"solicited/error", true, WC{Status: RemAccessErr}, true},
		{"solicited/flush", true, WC{Status: WRFlushErr}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(8)
			require.NoError(t, err)
			var calls int
			c.SetHandlers(func(got *CQ) {
				require.Same(t, c, got)
				calls++
			}, nil)
			push(t, c, tc.wc) // not armed yet: never fires
			require.Zero(t, calls)
			require.NoError(t, c.Arm(tc.solicitedOnly))
			push(t, c, tc.wc)
			if !tc.fires {
				require.Zero(t, calls)
				return
			}
			require.Equal(t, 1, calls)
			// One-shot: the next matching completion does not fire again.
			push(t, c, tc.wc)
			push(t, c, WC{Solicited: true, Status: GeneralErr})
			require.Equal(t, 1, calls)
			// Re-arming fires again.
			require.NoError(t, c.Arm(tc.solicitedOnly))
			push(t, c, tc.wc)
			require.Equal(t, 2, calls)
		})
	}
}

func TestArmNextNotNarrowed(t *testing.T) {
	c, err := New(8)
	require.NoError(t, err)
	var calls int
	c.SetHandlers(func(*CQ) { calls++ }, nil)
	require.NoError(t, c.Arm(false))
	require.NoError(t, c.Arm(true))
	push(t, c, WC{})
	require.Equal(t, 1, calls, "a pending NEXT arm stays NEXT")

	// SOLICITED then NEXT widens.
	require.NoError(t, c.Arm(true))
	require.NoError(t, c.Arm(false))
	push(t, c, WC{})
	require.Equal(t, 2, calls)
}

func TestArmAndCheck(t *testing.T) {
	c, err := New(4)
	require.NoError(t, err)
	queued, err := c.ArmAndCheck(false)
	require.NoError(t, err)
	require.False(t, queued)
	push(t, c, WC{})
	queued, err = c.ArmAndCheck(false)
	require.NoError(t, err)
	require.True(t, queued)
}

func TestHandlerMayUseCQ(t *testing.T) {
	// Handlers run without the lock: polling and re-arming from inside must
	// not deadlock.
	c, err := New(4)
	require.NoError(t, err)
	var got []uint64
	c.SetHandlers(func(c *CQ) {
		got = append(got, wrids(pollAll(c))...)
		require.NoError(t, c.Arm(false))
	}, nil)
	require.NoError(t, c.Arm(false))
	for i := range 10 {
		push(t, c, WC{WRID: uint64(i)})
	}
	require.Equal(t, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got)
}

func TestResize(t *testing.T) {
	c, err := New(4)
	require.NoError(t, err)
	// Wrap the ring so the kept entries straddle the end.
	for i := range 3 {
		push(t, c, WC{WRID: uint64(i)})
	}
	require.Equal(t, 2, c.Poll(make([]WC, 2)))
	for i := 3; i < 6; i++ {
		push(t, c, WC{WRID: uint64(i)})
	}
	require.Equal(t, 4, c.Len())

	t.Run("up", func(t *testing.T) {
		require.NoError(t, c.Resize(16))
		require.Equal(t, 16, c.Depth())
		require.Equal(t, 4, c.Len())
		for i := 6; i < 10; i++ {
			push(t, c, WC{WRID: uint64(i)})
		}
	})
	t.Run("refused", func(t *testing.T) {
		require.ErrorIs(t, c.Resize(7), ErrInvalidArgument)
		require.ErrorIs(t, c.Resize(0), ErrInvalidArgument)
		require.ErrorIs(t, c.Resize(MaxDepth+1), ErrInvalidArgument)
		require.Equal(t, 16, c.Depth())
	})
	t.Run("down", func(t *testing.T) {
		require.NoError(t, c.Resize(8))
		require.Equal(t, 8, c.Depth())
		require.Equal(t, []uint64{2, 3, 4, 5, 6, 7, 8, 9}, wrids(pollAll(c)))
		require.NoError(t, c.Resize(1))
		push(t, c, WC{WRID: 10})
		require.False(t, c.Push(&WC{WRID: 11}))
	})
}

func TestDestroy(t *testing.T) {
	c, err := New(4)
	require.NoError(t, err)
	push(t, c, WC{WRID: 1})
	require.NoError(t, c.TryRef())
	require.NoError(t, c.TryRef())
	require.Equal(t, 2, c.Refs())
	require.ErrorIs(t, c.Destroy(), ErrBusy)
	c.Unref()
	require.ErrorIs(t, c.Destroy(), ErrBusy)
	c.Unref()
	require.Panics(t, c.Unref)
	require.NoError(t, c.Destroy())

	require.ErrorIs(t, c.Destroy(), ErrDestroyed)
	require.ErrorIs(t, c.Err(), ErrDestroyed)
	require.False(t, c.Push(&WC{WRID: 2}))
	require.Zero(t, c.Poll(make([]WC, 4)))
	require.ErrorIs(t, c.Arm(false), ErrDestroyed)
	require.ErrorIs(t, c.Resize(8), ErrDestroyed)
	require.ErrorIs(t, c.TryRef(), ErrDestroyed)
}

func TestChannel(t *testing.T) {
	ch := NewChannel(4)
	a, err := New(8)
	require.NoError(t, err)
	b, err := New(8)
	require.NoError(t, err)
	a.Attach(ch)
	b.Attach(ch)

	// Not armed: no event.
	push(t, a, WC{})
	_, ok := ch.TryGet()
	require.False(t, ok)

	t.Run("delivery", func(t *testing.T) {
		require.NoError(t, a.Arm(false))
		require.NoError(t, b.Arm(true))
		push(t, b, WC{}) // does not meet SOLICITED
		push(t, a, WC{})
		push(t, b, WC{Solicited: true})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := ch.Get(ctx)
		require.NoError(t, err)
		require.Same(t, a, got)
		got, err = ch.Get(ctx)
		require.NoError(t, err)
		require.Same(t, b, got)
		_, ok := ch.TryGet()
		require.False(t, ok)
	})

	t.Run("coalescing", func(t *testing.T) {
		for range 3 {
			require.NoError(t, a.Arm(false))
			push(t, a, WC{})
		}
		got, ok := ch.TryGet()
		require.True(t, ok)
		require.Same(t, a, got)
		_, ok = ch.TryGet()
		require.False(t, ok, "three events for one CQ coalesce into one")
		// Once taken, the next event is queued again.
		require.NoError(t, a.Arm(false))
		push(t, a, WC{})
		got, ok = ch.TryGet()
		require.True(t, ok)
		require.Same(t, a, got)
	})

	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := ch.Get(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("ack before destroy", func(t *testing.T) {
		// a: 3 events taken, b: 1.
		require.ErrorIs(t, a.Destroy(), ErrBusy)
		a.AckEvents(2)
		require.ErrorIs(t, a.Destroy(), ErrBusy)
		a.AckEvents(1)
		require.NoError(t, a.Destroy())
		b.AckEvents(1)
	})

	t.Run("stale events skipped", func(t *testing.T) {
		require.NoError(t, b.Arm(false))
		push(t, b, WC{})
		require.NoError(t, b.Destroy())
		_, ok := ch.TryGet()
		require.False(t, ok)
	})

	t.Run("full channel drops", func(t *testing.T) {
		small := NewChannel(1)
		var cqs [3]*CQ
		for i := range cqs {
			cqs[i], err = New(2)
			require.NoError(t, err)
			cqs[i].Attach(small)
			require.NoError(t, cqs[i].Arm(false))
			push(t, cqs[i], WC{})
		}
		require.Equal(t, uint64(2), small.Dropped())
		got, ok := small.TryGet()
		require.True(t, ok)
		require.Same(t, cqs[0], got)
	})

	t.Run("detach", func(t *testing.T) {
		c, err := New(2)
		require.NoError(t, err)
		c.Attach(ch)
		require.NoError(t, c.Arm(false))
		push(t, c, WC{})
		c.Attach(nil)
		_, ok := ch.TryGet()
		require.False(t, ok, "event for a detached CQ is skipped")
	})
}

func TestChannelWakesWaiter(t *testing.T) {
	ch := NewChannel(1)
	c, err := New(16)
	require.NoError(t, err)
	c.Attach(ch)
	require.NoError(t, c.Arm(false))
	done := make(chan *CQ)
	go func() {
		got, err := ch.Get(context.Background())
		if err != nil {
			got = nil
		}
		done <- got
	}()
	push(t, c, WC{WRID: 7})
	require.Same(t, c, <-done)
	c.AckEvents(1)
}

// TestConcurrent runs producers and a consumer that waits on a channel,
// polls, and re-arms, as a verbs application does. Run with -race.
func TestConcurrent(t *testing.T) {
	const producers, perProducer = 4, 5000
	c, err := New(64)
	require.NoError(t, err)
	ch := NewChannel(1)
	c.Attach(ch)

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				wc := WC{WRID: uint64(p)<<32 | uint64(i), QPNum: uint32(p), Solicited: i%7 == 0}
				for !c.Push(&wc) {
					t.Error("push failed: CQ overflowed")
					return
				}
				// Back off when the CQ is nearly full, so it never overflows.
				for c.Len() > c.Depth()-producers {
					time.Sleep(time.Microsecond)
				}
			}
		})
	}

	next := make([]uint64, producers)
	got := 0
	out := make([]WC, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := 0
	for got < producers*perProducer {
		n := c.Poll(out)
		for _, wc := range out[:n] {
			p := wc.WRID >> 32
			require.Equal(t, next[p], wc.WRID&0xffffffff, "per-producer order")
			next[p]++
		}
		got += n
		if n > 0 {
			continue
		}
		queued, err := c.ArmAndCheck(false)
		require.NoError(t, err)
		if queued {
			continue
		}
		_, err = ch.Get(ctx)
		require.NoError(t, err)
		events++
	}
	wg.Wait()
	c.AckEvents(events)
	for p := range next {
		require.Equal(t, uint64(perProducer), next[p])
	}
	require.NoError(t, c.Err())
	require.NoError(t, c.Destroy())
}

func TestConcurrentOverflowOnce(t *testing.T) {
	c, err := New(8)
	require.NoError(t, err)
	var errs atomic.Int32
	c.SetHandlers(nil, func(*CQ) { errs.Add(1) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Push(&WC{})
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), errs.Load())
}

func TestPushAllocs(t *testing.T) {
	c, err := New(16)
	require.NoError(t, err)
	ch := NewChannel(1)
	c.Attach(ch)
	c.SetHandlers(func(*CQ) {}, nil)
	out := make([]WC, 4)
	wc := WC{WRID: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.Arm(false)
		c.Push(&wc)
		c.Poll(out)
		ch.TryGet()
		c.AckEvents(1)
	})
	require.Zero(t, allocs)
}

func BenchmarkPushPoll(b *testing.B) {
	c, err := New(256)
	require.NoError(b, err)
	out := make([]WC, 16)
	wc := WC{Opcode: RDMAWrite, ByteLen: 4096}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		wc.WRID = uint64(i)
		c.Push(&wc)
		if c.Len() >= len(out) {
			c.Poll(out)
		}
	}
}

// TestPushPairDeferred: a pair push queues what PushBatchDeferred of each
// part in a row queues, and reports each part's due handlers apart: the
// arm goes to the first completion that meets it, the error handler to
// the part that overflowed.
func TestPushPairDeferred(t *testing.T) {
	wcs := func(ids ...uint64) []WC {
		out := make([]WC, len(ids))
		for i, id := range ids {
			out[i] = WC{WRID: id}
		}
		return out
	}
	ids := func(ws []WC) []uint64 {
		var out []uint64
		for _, w := range ws {
			out = append(out, w.WRID)
		}
		return out
	}
	tests := []struct {
		name         string
		depth        int
		arm          int // 0 none, 1 next, 2 solicited only
		a, b         []WC
		want         []uint64
		compA, compB bool
		failA, failB bool
	}{
		{name: "unarmed", depth: 8, a: wcs(1, 2), b: wcs(3), want: []uint64{1, 2, 3}},
		{name: "armed: the first part", depth: 8, arm: 1, a: wcs(1), b: wcs(2), want: []uint64{1, 2}, compA: true},
		{name: "armed, first part empty", depth: 8, arm: 1, b: wcs(2, 3), want: []uint64{2, 3}, compB: true},
		{name: "solicited in the second part", depth: 8, arm: 2, a: wcs(1),
			b: []WC{{WRID: 2}, {WRID: 3, Solicited: true}}, want: []uint64{1, 2, 3}, compB: true},
		{name: "overflow in the first part", depth: 2, a: wcs(1, 2, 3), b: wcs(4), want: []uint64{1, 2}, failA: true},
		{name: "overflow in the second part", depth: 2, a: wcs(1), b: wcs(2, 3), want: []uint64{1, 2}, failB: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The same pushes as two calls, for the reference.
			var ref []uint64
			var refA, refB Due
			for _, pair := range []bool{false, true} {
				c, err := New(tt.depth)
				require.NoError(t, err)
				c.SetHandlers(func(*CQ) {}, func(*CQ) {})
				if tt.arm != 0 {
					require.NoError(t, c.Arm(tt.arm == 2))
				}
				var da, db Due
				if pair {
					da, db = c.PushPairDeferred(tt.a, tt.b)
				} else {
					_, da = c.PushBatchDeferred(tt.a)
					_, db = c.PushBatchDeferred(tt.b)
				}
				got := ids(pollAll(c))
				require.Equal(t, tt.want, got)
				require.Equal(t, tt.compA, da.comp != nil, "first part's completion handler")
				require.Equal(t, tt.compB, db.comp != nil, "second part's completion handler")
				require.Equal(t, tt.failA, da.fail != nil, "first part's error handler")
				require.Equal(t, tt.failB, db.fail != nil, "second part's error handler")
				if !pair {
					ref, refA, refB = got, da, db
					continue
				}
				require.Equal(t, ref, got)
				require.Equal(t, refA.Any(), da.Any())
				require.Equal(t, refB.Any(), db.Any())
			}
		})
	}
}

// TestEmptyRestartsAtStart: a CQ polled empty starts again at its ring's
// first slot; what is queued comes out in order, and a full ring still
// holds depth completions, whatever the slot it stopped at.
func TestEmptyRestartsAtStart(t *testing.T) {
	c, err := New(4)
	require.NoError(t, err)
	id := uint64(0)
	var want []uint64
	for _, step := range []struct{ push, poll int }{{3, 2}, {3, 0}, {0, 4}, {4, 4}, {1, 1}, {4, 0}} {
		for range step.push {
			id++
			push(t, c, WC{WRID: id})
			want = append(want, id)
		}
		out := make([]WC, step.poll)
		n := c.Poll(out)
		require.Equal(t, step.poll, n)
		for i := range n {
			require.Equal(t, want[i], out[i].WRID)
		}
		want = want[n:]
		require.Equal(t, len(want), c.Len())
	}
	require.Equal(t, 4, c.Len(), "full")
	require.False(t, c.Push(&WC{WRID: 99}), "a fifth overflows")
}

package clock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
)

var epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

func TestNewManualEpoch(t *testing.T) {
	m := clock.NewManual()
	require.True(t, m.Now().Equal(epoch))
	require.Equal(t, time.UTC, m.Now().Location())
	require.Zero(t, m.Pending())
}

// firing records which timers fired and the clock's time at each call.
type firing struct {
	name string
	at   time.Duration // Now() - epoch while the callback ran
}

func TestManualAdvanceOrder(t *testing.T) {
	type timer struct {
		name string
		d    time.Duration
	}
	tests := []struct {
		name    string
		timers  []timer // created in this order
		advance []time.Duration
		want    []firing
		pending int
	}{
		{
			name:    "by deadline",
			timers:  []timer{{"c", 30 * time.Millisecond}, {"a", 10 * time.Millisecond}, {"b", 20 * time.Millisecond}},
			advance: []time.Duration{time.Second},
			want:    []firing{{"a", 10 * time.Millisecond}, {"b", 20 * time.Millisecond}, {"c", 30 * time.Millisecond}},
		},
		{
			name:    "ties by creation order",
			timers:  []timer{{"x", 5 * time.Millisecond}, {"first", time.Millisecond}, {"second", time.Millisecond}, {"third", time.Millisecond}},
			advance: []time.Duration{10 * time.Millisecond},
			want: []firing{
				{"first", time.Millisecond}, {"second", time.Millisecond}, {"third", time.Millisecond},
				{"x", 5 * time.Millisecond},
			},
		},
		{
			name:    "deadline equal to target fires",
			timers:  []timer{{"a", 10 * time.Millisecond}, {"b", 11 * time.Millisecond}},
			advance: []time.Duration{10 * time.Millisecond},
			want:    []firing{{"a", 10 * time.Millisecond}},
			pending: 1,
		},
		{
			name:    "in steps",
			timers:  []timer{{"a", 10 * time.Millisecond}, {"b", 25 * time.Millisecond}},
			advance: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
			want:    []firing{{"a", 10 * time.Millisecond}, {"b", 25 * time.Millisecond}},
		},
		{
			name:    "zero and negative durations are due now",
			timers:  []timer{{"later", time.Nanosecond}, {"zero", 0}, {"neg", -time.Second}},
			advance: []time.Duration{0},
			want:    []firing{{"zero", 0}, {"neg", 0}},
			pending: 1,
		},
		{
			name:    "nothing due",
			timers:  []timer{{"a", time.Hour}},
			advance: []time.Duration{time.Minute},
			pending: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := clock.NewManual()
			var got []firing
			for _, tm := range tc.timers {
				name := tm.name
				m.AfterFunc(tm.d, func() {
					got = append(got, firing{name, m.Now().Sub(epoch)})
				})
			}
			var total time.Duration
			for _, d := range tc.advance {
				m.Advance(d)
				total += d
				require.Equal(t, total, m.Now().Sub(epoch))
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.pending, m.Pending())
		})
	}
}

func TestManualTimersAddedByCallbacks(t *testing.T) {
	m := clock.NewManual()
	var got []firing
	record := func(name string) func() {
		return func() { got = append(got, firing{name, m.Now().Sub(epoch)}) }
	}
	m.AfterFunc(10*time.Millisecond, func() {
		record("parent")()
		// Relative to the parent's deadline, not to the Advance target.
		m.AfterFunc(5*time.Millisecond, record("child+5"))
		m.AfterFunc(0, record("child+0"))
		m.AfterFunc(100*time.Millisecond, record("child+100"))
	})
	m.AfterFunc(12*time.Millisecond, record("sibling"))

	m.Advance(50 * time.Millisecond)
	require.Equal(t, []firing{
		{"parent", 10 * time.Millisecond},
		{"child+0", 10 * time.Millisecond},
		{"sibling", 12 * time.Millisecond},
		{"child+5", 15 * time.Millisecond},
	}, got)
	require.Equal(t, 1, m.Pending())
	require.Equal(t, 50*time.Millisecond, m.Now().Sub(epoch))

	m.Advance(60 * time.Millisecond)
	require.Equal(t, firing{"child+100", 110 * time.Millisecond}, got[len(got)-1])
	require.Zero(t, m.Pending())
}

func TestManualPeriodicRearm(t *testing.T) {
	m := clock.NewManual()
	var ticks []time.Duration
	var tick func()
	tick = func() {
		ticks = append(ticks, m.Now().Sub(epoch))
		m.AfterFunc(time.Second, tick)
	}
	m.AfterFunc(time.Second, tick)
	m.Advance(3500 * time.Millisecond)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, ticks)
	require.Equal(t, 1, m.Pending())
}

func TestManualStop(t *testing.T) {
	m := clock.NewManual()
	var fired []string
	a := m.AfterFunc(time.Second, func() { fired = append(fired, "a") })
	b := m.AfterFunc(2*time.Second, func() { fired = append(fired, "b") })
	var c clock.Timer
	m.AfterFunc(500*time.Millisecond, func() {
		fired = append(fired, "stopper")
		require.True(t, c.Stop(), "stop from a callback")
	})
	c = m.AfterFunc(time.Second, func() { fired = append(fired, "c") })
	require.Equal(t, 4, m.Pending())

	require.True(t, a.Stop())
	require.False(t, a.Stop(), "second stop")
	require.Equal(t, 3, m.Pending())

	m.Advance(3 * time.Second)
	require.Equal(t, []string{"stopper", "b"}, fired)
	require.False(t, b.Stop(), "stop after firing")
	require.False(t, c.Stop(), "stop after stop")
	require.Zero(t, m.Pending())
}

func TestManualAdvanceToNext(t *testing.T) {
	m := clock.NewManual()
	require.False(t, m.AdvanceToNext())
	require.True(t, m.Now().Equal(epoch), "no move without timers")

	var got []firing
	rec := func(name string) func() {
		return func() { got = append(got, firing{name, m.Now().Sub(epoch)}) }
	}
	m.AfterFunc(3*time.Second, rec("c"))
	m.AfterFunc(time.Second, rec("a1"))
	m.AfterFunc(time.Second, rec("a2"))
	m.AfterFunc(2*time.Second, func() {
		rec("b")()
		m.AfterFunc(0, rec("b-now")) // due at the same instant: fires in this step
	})

	steps := []struct {
		want []firing
		now  time.Duration
	}{
		{[]firing{{"a1", time.Second}, {"a2", time.Second}}, time.Second},
		{[]firing{{"b", 2 * time.Second}, {"b-now", 2 * time.Second}}, 2 * time.Second},
		{[]firing{{"c", 3 * time.Second}}, 3 * time.Second},
	}
	for i, s := range steps {
		got = nil
		require.True(t, m.AdvanceToNext(), "step %d", i)
		require.Equal(t, s.want, got, "step %d", i)
		require.Equal(t, s.now, m.Now().Sub(epoch), "step %d", i)
	}
	require.False(t, m.AdvanceToNext())
	require.Equal(t, 3*time.Second, m.Now().Sub(epoch))
}

func TestManualConcurrent(t *testing.T) {
	m := clock.NewManual()
	const goroutines, perG = 8, 100
	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				tm := m.AfterFunc(time.Duration(i)*time.Millisecond, func() {
					mu.Lock()
					fired++
					mu.Unlock()
				})
				if (g+i)%4 == 0 {
					tm.Stop()
				}
				_ = m.Now()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			m.Advance(time.Millisecond)
			_ = m.Pending()
		}
	}()
	wg.Wait()
	for m.AdvanceToNext() {
	}
	require.Zero(t, m.Pending())
	mu.Lock()
	defer mu.Unlock()
	stopped := 0
	for g := range goroutines {
		for i := range perG {
			if (g+i)%4 == 0 {
				stopped++
			}
		}
	}
	// A timer stopped after it fired counted as fired; none may be lost or doubled.
	require.GreaterOrEqual(t, fired, goroutines*perG-stopped)
	require.LessOrEqual(t, fired, goroutines*perG)
}

func TestReal(t *testing.T) {
	c := clock.Real()
	before := time.Now()
	require.False(t, c.Now().Before(before))

	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("real timer did not fire")
	}

	tm := c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	require.True(t, tm.Stop())
	require.False(t, tm.Stop())
}

func TestOrReal(t *testing.T) {
	m := clock.NewManual()
	require.Same(t, m, clock.OrReal(m))
	require.NotNil(t, clock.OrReal(nil))
	require.IsType(t, clock.Real(), clock.OrReal(nil))
}

func ExampleManual() {
	m := clock.NewManual()
	m.AfterFunc(2*time.Second, func() { fmt.Println("retransmit at", m.Now().Format(time.TimeOnly)) })
	m.AfterFunc(time.Second, func() { fmt.Println("ack timeout at", m.Now().Format(time.TimeOnly)) })
	m.Advance(5 * time.Second)
	fmt.Println("now", m.Now().Format(time.TimeOnly), "pending", m.Pending())
	// Output:
	// ack timeout at 00:00:01
	// retransmit at 00:00:02
	// now 00:00:05 pending 0
}

package traffic

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvt"
)

// TestLatencyQuantile checks the quantiles of a run's round trips, which
// the run sorts once when it ends.
func TestLatencyQuantile(t *testing.T) {
	lat := Latency{RTTs: []time.Duration{50, 10, 40, 20, 30}}.Sorted()
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 10}, {0.5, 30}, {0.99, 50}, {1, 50},
	} {
		if got := lat.Quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (Latency{}).Quantile(0.5); got != 0 {
		t.Errorf("quantile of no samples = %v, want 0", got)
	}
}

// TestCQWaiterWait checks CQWaiter.Wait's wake-ups, its deadline and stop,
// and that waits reuse one timer: a wait that timed out, or a timer that
// fired with nobody waiting, leaves no tick behind for the next, and a
// wait allocates nothing.
func TestCQWaiterWait(t *testing.T) {
	w := NewCQWaiter()
	long := time.Now().Add(time.Hour)
	if err := w.Wait(time.Now().Add(-time.Second), nil); err != ErrTimeout {
		t.Errorf("wait past the deadline: %v, want ErrTimeout", err)
	}
	if err := w.Wait(time.Now().Add(10*time.Millisecond), nil); err != ErrTimeout {
		t.Errorf("wait with no event: %v, want ErrTimeout", err)
	}
	timer := w.timer
	if timer == nil {
		t.Fatal("a wait with a deadline made no timer")
	}
	w.Notify(nil)
	w.Notify(nil) // a second notification before the wait is one wake-up
	if err := w.Wait(long, nil); err != nil {
		t.Errorf("wait after notify: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if err := w.Wait(long, stop); err != context.Canceled {
		t.Errorf("wait with stop closed: %v, want context.Canceled", err)
	}
	// A tick the timed-out wait left behind would end this one early
	// (timers never fire early, so the bound cannot fail otherwise).
	start := time.Now()
	if err := w.Wait(start.Add(10*time.Millisecond), nil); err != ErrTimeout {
		t.Errorf("wait after a timeout: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Errorf("wait with a 10ms deadline after a timeout returned after %v", d)
	}
	if w.timer != timer {
		t.Error("a later wait made a new timer")
	}
	w.Notify(nil)
	if err := w.Wait(time.Time{}, nil); err != nil {
		t.Errorf("wait with no deadline after notify: %v", err)
	}
	// A wait that a notification ended leaves the timer running for its
	// deadline; when it fires with nobody waiting, a wait with another
	// deadline must not take that tick.
	w.Notify(nil)
	if err := w.Wait(time.Now().Add(time.Millisecond), nil); err != nil {
		t.Errorf("wait after notify: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	start = time.Now()
	if err := w.Wait(start.Add(10*time.Millisecond), nil); err != ErrTimeout {
		t.Errorf("wait after an unheard tick: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Errorf("wait with a 10ms deadline after an unheard tick returned after %v", d)
	}
	if n := testing.AllocsPerRun(100, func() {
		w.Notify(nil)
		_ = w.Wait(long, nil)
	}); n != 0 {
		t.Errorf("notify and wait: %v allocations, want 0", n)
	}
}

// TestSlotSGL checks the receive slots the ping-pong and message-rate
// loops repost: one SGE per slot, each a one-entry SGL capped at one
// entry, so an append cannot write into the next slot.
func TestSlotSGL(t *testing.T) {
	mr := &rvt.MR{IOVA: 0x1000, Lkey: 0x42}
	slots := SlotSGEs(mr, 4, 8)
	for i := range uint64(4) {
		want := []rvt.SGE{{Addr: 0x1000 + i*8, Length: 8, Lkey: 0x42}}
		if got := SlotSGL(slots, i); !slices.Equal(got, want) || cap(got) != 1 {
			t.Errorf("slot %d: %+v (cap %d), want %+v (cap 1)", i, got, cap(got), want)
		}
	}
}

package cq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeSource records what an external CQ passes to it.
type fakeSource struct {
	wcs       []WC
	armed     []bool
	depth     int
	resized   int
	destroyed int
	failWith  error
}

func (f *fakeSource) Poll(out []WC) int {
	n := copy(out, f.wcs)
	f.wcs = f.wcs[n:]
	return n
}
func (f *fakeSource) Len() int   { return len(f.wcs) }
func (f *fakeSource) Depth() int { return f.depth }
func (f *fakeSource) Arm(s bool) (bool, error) {
	f.armed = append(f.armed, s)
	return len(f.wcs) > 0, nil
}
func (f *fakeSource) Resize(d int) error { f.resized = d; f.depth = d; return f.failWith }
func (f *fakeSource) Destroy() error {
	if f.failWith != nil {
		return f.failWith
	}
	f.destroyed++
	return nil
}

func TestExternal(t *testing.T) {
	src := &fakeSource{wcs: []WC{{WRID: 1}, {WRID: 2}, {WRID: 3}}, depth: 8}
	c := NewExternal(src)
	if c.External() != src {
		t.Fatal("External() is not the source")
	}
	if c.Len() != 3 || c.Depth() != 8 {
		t.Fatalf("Len %d Depth %d", c.Len(), c.Depth())
	}
	out := make([]WC, 2)
	if n := c.Poll(out); n != 2 || out[0].WRID != 1 || out[1].WRID != 2 {
		t.Fatalf("Poll %d %+v", n, out)
	}
	if q, err := c.ArmAndCheck(true); !q || err != nil {
		t.Fatalf("ArmAndCheck %v %v", q, err)
	}
	if err := c.Arm(false); err != nil || len(src.armed) != 2 || !src.armed[0] || src.armed[1] {
		t.Fatalf("arms %v, %v", src.armed, err)
	}
	if err := c.Resize(16); err != nil || src.resized != 16 || c.Depth() != 16 {
		t.Fatalf("Resize: %v, source %d", err, src.resized)
	}

	// Notify: the handler and the channel, as a push meeting the arm.
	calls := 0
	var errs int
	c.SetHandlers(func(*CQ) { calls++ }, func(*CQ) { errs++ })
	ch := NewChannel(2)
	c.Attach(ch)
	c.Notify()
	if calls != 1 {
		t.Fatalf("handler calls %d", calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got, err := ch.Get(ctx); got != c || err != nil {
		t.Fatalf("channel: %v %v", got, err)
	}

	// Destroy waits for the event's acknowledgement and for references.
	if err := c.TryRef(); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(); !errors.Is(err, ErrBusy) || src.destroyed != 0 {
		t.Fatalf("Destroy with a reference: %v (source destroyed %d)", err, src.destroyed)
	}
	c.Unref()
	if err := c.Destroy(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Destroy with an unacknowledged event: %v", err)
	}
	c.AckEvents(1)

	// Fail: the error state once, the error handler once.
	c.Fail()
	c.Fail()
	if errs != 1 || !errors.Is(c.Err(), ErrOverflow) {
		t.Fatalf("error handler calls %d, Err %v", errs, c.Err())
	}
	if _, err := c.ArmAndCheck(false); !errors.Is(err, ErrOverflow) {
		t.Fatalf("ArmAndCheck after Fail: %v", err)
	}

	// A source that refuses destruction leaves the CQ alive.
	src.failWith = errors.New("daemon says no")
	if err := c.Destroy(); err == nil || c.Err() == nil || errors.Is(c.Err(), ErrDestroyed) {
		t.Fatalf("Destroy refused by the source: %v, Err %v", err, c.Err())
	}
	src.failWith = nil
	if err := c.Destroy(); err != nil || src.destroyed != 1 {
		t.Fatalf("Destroy: %v, source destroyed %d", err, src.destroyed)
	}
	c.Notify() // a late event for a destroyed CQ is ignored
	if calls != 1 {
		t.Fatalf("handler called after Destroy")
	}
}

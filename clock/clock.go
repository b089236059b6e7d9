package clock

import "time"

// Clock is a source of time and timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, after at least d has passed, on a goroutine of
	// the clock's choosing. It returns a Timer that can cancel the call.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call created by Clock.AfterFunc.
type Timer interface {
	// Stop cancels the call. It returns true if it stopped a pending timer,
	// false if the timer had already fired or been stopped.
	Stop() bool
}

// Real returns the clock backed by package time.
func Real() Clock { return realClock{} }

// OrReal returns c, or the real clock if c is nil. Constructors that accept
// an optional Clock use it so that nil means "the real one".
func OrReal(c Clock) Clock {
	if c == nil {
		return realClock{}
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

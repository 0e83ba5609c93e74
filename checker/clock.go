package checker

import (
	"context"
	"time"
)

// Clock is the checker's source of time. The scheduler, probe timeouts and
// result timestamps all go through it, so tests can move time by hand
// (see package fakeclock) instead of sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// TimerAt returns a timer that fires once the clock reaches at (at
	// once if it already has).
	TimerAt(at time.Time) Timer
	// WithTimeout returns a copy of ctx that is done d from now, with
	// context.DeadlineExceeded as its error.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// Timer is the part of *time.Timer the checker uses.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// RealClock is the Clock of the wall: package time and context. Its zero
// value is ready to use.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// TimerAt wraps time.NewTimer.
func (RealClock) TimerAt(at time.Time) Timer { return realTimer{time.NewTimer(time.Until(at))} }

// WithTimeout is context.WithTimeout.
func (RealClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

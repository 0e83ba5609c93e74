package oneshot

import (
	"context"
	"time"
)

// Clock is the time source of a run and of each target's check: it reads
// the time, sleeps between attempts and bounds each attempt. Tests pass a
// fake that moves only when told, so backoff costs no real time.
//
// A Clock must be safe for concurrent use when it is shared by several
// targets' checks (Options.Clock without Options.TargetClock).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, whichever comes first; it
	// returns ctx.Err() in the second case and nil otherwise.
	Sleep(ctx context.Context, d time.Duration) error
	// WithTimeout returns a copy of ctx that ends d from now with
	// context.DeadlineExceeded; its Deadline reports that time.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// realClock is the wall clock: package time and context.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (realClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

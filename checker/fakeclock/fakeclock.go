// Package fakeclock is a checker.Clock that only moves when a test says so.
package fakeclock

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// Clock is a manual checker.Clock. Timers and timeouts fire, in deadline
// order, when Advance moves the time past them. It is safe for concurrent
// use. Create it with New.
type Clock struct {
	mu      sync.Mutex // protects now, waiters and seq
	now     time.Time
	waiters []*waiter
	seq     int
}

type waiter struct {
	at   time.Time
	seq  int
	fire func(time.Time)
	done bool
}

// New returns a Clock set to start.
func New(start time.Time) *Clock { return &Clock{now: start} }

var _ checker.Clock = (*Clock)(nil)

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires, in deadline order, every
// timer and timeout whose deadline is now reached.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*waiter
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case w.done:
		case !w.at.After(now):
			w.done = true
			due = append(due, w)
		default:
			keep = append(keep, w)
		}
	}
	c.waiters = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if !due[i].at.Equal(due[j].at) {
			return due[i].at.Before(due[j].at)
		}
		return due[i].seq < due[j].seq
	})
	for _, w := range due {
		w.fire(w.at)
	}
}

// Waiters returns how many timers and timeouts are pending. Tests poll it to
// know that a goroutine has armed its timer before they advance the clock.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waiters {
		if !w.done {
			n++
		}
	}
	return n
}

func (c *Clock) add(d time.Duration, fire func(time.Time)) *waiter {
	c.mu.Lock()
	at := c.now.Add(d)
	c.mu.Unlock()
	return c.addAt(at, fire)
}

func (c *Clock) addAt(at time.Time, fire func(time.Time)) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	w := &waiter{at: at, seq: c.seq, fire: fire}
	if !at.After(c.now) {
		w.done = true
		go fire(w.at)
		return w
	}
	c.waiters = append(c.waiters, w)
	return w
}

func (c *Clock) stop(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	return true
}

// TimerAt returns a timer that fires when the clock reaches at.
func (c *Clock) TimerAt(at time.Time) checker.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.w = c.addAt(at, func(at time.Time) {
		select {
		case t.ch <- at:
		default:
		}
	})
	return t
}

type timer struct {
	c  *Clock
	w  *waiter
	ch chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }
func (t *timer) Stop() bool          { return t.c.stop(t.w) }

// WithTimeout returns a context that is cancelled with
// context.DeadlineExceeded when the clock reaches now+d.
func (c *Clock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	tctx := &timeoutCtx{Context: ctx}
	w := c.add(d, func(time.Time) {
		if ctx.Err() == nil {
			tctx.expire()
			cancel(context.DeadlineExceeded)
		}
	})
	return tctx, func() {
		c.stop(w)
		cancel(context.Canceled)
	}
}

// timeoutCtx reports context.DeadlineExceeded from Err once the fake
// deadline passed, as a context from context.WithTimeout does.
type timeoutCtx struct {
	context.Context
	mu      sync.Mutex
	expired bool
}

func (t *timeoutCtx) expire() {
	t.mu.Lock()
	t.expired = true
	t.mu.Unlock()
}

func (t *timeoutCtx) Err() error {
	err := t.Context.Err()
	if err == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expired {
		return context.DeadlineExceeded
	}
	return err
}

package checker

import (
	"context"
	"log/slog"
	"time"
)

// AddUnchecked registers a new target as Add does, but skips WithDefaults
// and Validate and makes its first probe due at first: it is how a spec
// that no rule bounded (a bug, or data from elsewhere) would reach the
// scheduler, for tests that show the scheduler survives it.
func (c *Checker) AddUnchecked(spec Spec, first time.Time) error {
	p, err := c.reg.newProber(spec.Probe)
	if err != nil {
		return err
	}
	c.reg.mu.Lock()
	defer c.reg.unlockAndReport()
	t := newTarget(spec, p, StateUnhealthy)
	c.reg.targets[spec.Name] = t
	c.reg.joinPoolLocked(t)
	c.sched.addLocked(t, first)
	return nil
}

// Hub is the watch hub, exported for its unit tests.
type Hub = hub

// NewHub returns a watch hub on its own: a history of size events after
// rev, and at most maxWatchers watchers (0: no limit).
func NewHub(size int, rev uint64, maxWatchers int) *Hub { return newHub(size, rev, maxWatchers, 0) }

// Publish publishes events, in revision order.
func (h *hub) Publish(evs ...Event) { h.publish(evs...) }

// Advance moves the newest revision to rev without an event.
func (h *hub) Advance(rev uint64) { h.advance(rev) }

// Watch adds a watcher of f from start; snapshot says start is a
// snapshot's revision rather than a resume.
func (h *hub) Watch(f Filter, start uint64, snapshot bool) (*Watcher, error) {
	w := h.newWatcher(f)
	if err := h.watch(w, nil, start, snapshot); err != nil {
		return nil, err
	}
	return w, nil
}

// Wait waits until rev is published, ctx ends or the hub closes.
func (h *hub) Wait(ctx context.Context, rev uint64) error { return h.wait(ctx, rev, nil) }

// Close ends every watcher.
func (h *hub) Close() { h.close() }

// Count returns the live watchers.
func (h *hub) Count() int { return h.count() }

// Revision returns the newest published revision.
func (h *hub) Revision() uint64 { return h.revision() }

// Committer is the committer, exported for its unit tests.
type Committer = committer

// NewCommitter starts a committer of store's state changes to h; after is
// its backoff's timer.
func NewCommitter(store Store, h *Hub, clock Clock, after func(time.Duration) <-chan time.Time) *Committer {
	return newCommitter(store, h, 0, clock, slog.New(slog.DiscardHandler), after)
}

// Queue queues an event with the record it changes as the event alone
// tells it, as the registry's sink does.
func (c *committer) Queue(e Event) {
	w, ok := writeOf(e)
	c.add(e, w, ok)
}

// Write queues a record that changed without an event.
func (c *committer) Write(st StoredState) { c.write(st) }

// Err returns the last error storing.
func (c *committer) Err() error { return c.err() }

// Close flushes and stops the committer.
func (c *committer) Close() { c.close() }

// Due returns when the committer was due to make progress; ok is false
// while it owes none.
func (c *committer) Due() (due time.Time, ok bool) { return c.stamp.Due() }

// GroupWritesIdle reports whether the checker's group writer has no group
// marked nor a write in flight (always, without group guards).
func (c *Checker) GroupWritesIdle() bool {
	return c.repl == nil || c.repl.guard == nil || c.repl.guard.idle()
}

// SchedulerAtRest reports, in one look under the registry's lock, whether
// no probe is queued, running or in flight for any target, and the
// scheduler waits for a wake-up it has armed no later than the first start
// due, with no change of the schedule pending: a test that advances a fake
// clock then cannot step past a start the scheduler has not seen, nor past
// a probe a worker has yet to start. Looking at the targets and at the
// scheduler under separate locks would not do: a pass between the two
// looks queues probes the first look did not see.
//
// While a pass runs, or a wake-up is pending or being taken, it is false: a
// pass stamps the time it runs at (see scheduler.schedule), which is no
// later than the clock, where an armed wake-up is always after it.
func (c *Checker) SchedulerAtRest() bool {
	s := c.sched
	s.reg.lock()
	defer s.reg.unlock()
	if len(s.wake) > 0 || s.pool.queued() > 0 || s.pool.running > 0 {
		return false
	}
	busy := false
	s.reg.eachLocked(func(t *target) { busy = busy || t.inFlight })
	if busy {
		return false
	}
	armed, ok := s.stamp.Due()
	if len(s.due) == 0 {
		return !ok
	}
	return ok && armed.After(s.clock.Now()) && !armed.After(time.Unix(0, s.due[0].startNs))
}

// Workers returns how many probe workers run, and how many of them wait
// for a job.
func (c *Checker) Workers() (workers, idle int) {
	c.sched.reg.lock()
	defer c.sched.reg.unlock()
	return c.sched.pool.workers, c.sched.pool.idle
}

// MaxIdleWorkers is maxIdleWorkers.
const MaxIdleWorkers = maxIdleWorkers

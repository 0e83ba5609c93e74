package checker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
)

// committer stores the registry's state changes and only then publishes
// their events to the hub, in revision order, so that no watcher ever sees
// a change a restart would lose. The registry queues each event as it
// emits it (queue, with the registry's lock held); one goroutine (run)
// takes everything queued at once, stores it in one CommitStates
// transaction, and publishes it. A failing store is retried with backoff;
// meanwhile the events wait and err reports the failure.
//
// Its lock, mu, guards only the queue and the last error: it comes after
// the registry's in the lock order and is never held while storing or
// publishing.
type committer struct {
	store  Store
	hub    *hub
	clock  Clock
	logger *slog.Logger
	stamp  liveness.Stamp // see package liveness
	// after is the backoff's timer: time.After. The backoff is on the
	// wall's time, not the Clock's: a store that fails is retried while a
	// test's fake clock stands still.
	after func(time.Duration) <-chan time.Time

	wake chan struct{} // there is work
	stop chan struct{} // closed by close
	done chan struct{} // closed when run has returned

	mu      sync.Mutex // protects queued, spare and lastErr
	queued  []Event    // events waiting to be stored, in revision order
	spare   []Event    // the last batch's buffer, for the next one
	lastErr error
}

// committerBackoff bounds the committer's retries of a failing store.
const (
	committerMinBackoff = 50 * time.Millisecond
	committerMaxBackoff = 5 * time.Second
)

// newCommitter returns a committer of store's state changes to h, and
// starts it. after is the backoff's timer; if nil, time.After.
func newCommitter(store Store, h *hub, clock Clock, logger *slog.Logger, after func(time.Duration) <-chan time.Time) *committer {
	if after == nil {
		after = time.After
	}
	c := &committer{
		store:  store,
		hub:    h,
		clock:  clock,
		logger: logger,
		after:  after,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	c.stamp.Start(clock.Now())
	go c.run()
	return c
}

// queue hands e, numbered after every event queued before, to the
// committer. The registry calls it with its lock held.
func (c *committer) queue(e Event) {
	c.mu.Lock()
	c.queued = append(c.queued, e)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run stores and publishes what is queued until close.
func (c *committer) run() {
	defer close(c.done)
	defer c.stamp.Set(time.Time{})
	backoff := committerMinBackoff
	for {
		c.stamp.Set(time.Time{}) // idle: see package liveness
		select {
		case <-c.wake:
		case <-c.stop:
			c.commitOnce() // flush what the last probes queued
			return
		}
		c.stamp.Set(c.clock.Now())
		for c.commitOnce() != nil {
			c.stamp.Set(c.clock.Now().Add(backoff)) // due again after the backoff
			select {
			case <-c.after(backoff):
				backoff = min(2*backoff, committerMaxBackoff)
			case <-c.stop:
				return
			}
		}
		backoff = committerMinBackoff
	}
}

// commitOnce stores and publishes everything queued now.
func (c *committer) commitOnce() error {
	c.mu.Lock()
	batch := c.queued
	c.queued, c.spare = c.spare, nil
	c.mu.Unlock()
	if len(batch) == 0 {
		c.mu.Lock()
		c.spare = batch
		c.mu.Unlock()
		return nil
	}
	var states []StoredState
	var deleted []string
	for i := range batch {
		switch e := &batch[i]; e.Kind {
		case EventAdded:
			states = append(states, StoredState{Name: e.Status.Spec.Name, State: e.Status.State, LastTransition: e.Status.LastTransition})
		case EventTransition:
			states = append(states, StoredState{Name: e.Transition.Target, State: e.Transition.To, LastTransition: e.Transition.Time})
		case EventRemoved:
			deleted = append(deleted, e.Status.Spec.Name)
		}
	}
	if err := c.store.CommitStates(states, deleted, batch[len(batch)-1].Revision); err != nil {
		c.logger.Error("storing state changes failed; their events wait until it works", "error", err, "events", len(batch))
		c.mu.Lock()
		c.queued = append(batch, c.queued...)
		c.lastErr = err
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	c.lastErr = nil
	c.mu.Unlock()
	c.hub.publish(batch...)
	clear(batch) // the hub keeps copies
	c.mu.Lock()
	if c.spare == nil && cap(batch) <= maxKeptQueue {
		c.spare = batch[:0]
	}
	c.mu.Unlock()
	return nil
}

// progress returns the committer's progress stamp, for a Watchdog.
func (c *committer) progress() *liveness.Stamp { return &c.stamp }

// err returns the last error storing state changes, or nil once a commit
// succeeded again.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// close stores what is queued, once more, and stops; the caller calls it
// once, after the last event is queued.
func (c *committer) close() {
	close(c.stop)
	<-c.done
}

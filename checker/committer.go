package checker

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
)

// committer stores the registry's state records and only then publishes
// their events to the hub, in revision order, so that no watcher ever sees
// a change a restart would lose. The registry queues each event as it
// emits it, with the record it changes (add, with the registry's lock
// held), and the records that change without an event (write: a verdict
// or a hold that changes no state); one goroutine (run) takes everything
// queued at once, stores it in one CommitStates transaction, and publishes
// it. A failing store is retried with backoff; meanwhile the events wait
// and err reports the failure. The registry's own writes (specs, removals,
// policies) report their outcome to it too (wrote), so that err says
// whether the store's last write of any kind failed.
//
// Its lock, mu, guards only the queues and the last errors: it comes after
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

	mu      sync.Mutex   // protects the fields below
	queued  []Event      // events waiting to be stored, in revision order
	spare   []Event      // the last batch's buffer, for the next one
	writes  []stateWrite // the records to store with them, in the order written
	rev     uint64       // the revision of the last event queued: a batch of records alone stores it
	lastErr error        // the last batch's error, nil once one is stored
	// writeErr is the last spec, removal or policy write's error (see
	// wrote), nil once any write, a batch of records included, succeeds.
	writeErr error
}

// stateWrite is a target's record to store, or its removal.
type stateWrite struct {
	st      StoredState
	deleted bool
}

// writeOf returns the record e changes, as the event alone tells it (no
// flap log, no hold), and whether it changes one.
func writeOf(e Event) (stateWrite, bool) {
	switch e.Kind {
	case EventAdded:
		return stateWrite{st: StoredState{Name: e.Status.Spec.Name, State: e.Status.State, LastTransition: e.Status.LastTransition}}, true
	case EventTransition:
		return stateWrite{st: StoredState{Name: e.Transition.Target, State: e.Transition.To, LastTransition: e.Transition.Time}}, true
	case EventRemoved:
		return stateWrite{st: StoredState{Name: e.Status.Spec.Name}, deleted: true}, true
	}
	return stateWrite{}, false
}

// committerBackoff bounds the committer's retries of a failing store.
const (
	committerMinBackoff = 50 * time.Millisecond
	committerMaxBackoff = 5 * time.Second
)

// newCommitter returns a committer of store's state changes to h, and
// starts it; rev is the store's revision. after is the backoff's timer; if
// nil, time.After.
func newCommitter(store Store, h *hub, rev uint64, clock Clock, logger *slog.Logger, after func(time.Duration) <-chan time.Time) *committer {
	if after == nil {
		after = time.After
	}
	c := &committer{
		store:  store,
		hub:    h,
		clock:  clock,
		logger: logger,
		after:  after,
		rev:    rev,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	c.stamp.Start(clock.Now())
	go c.run()
	return c
}

// add hands e, numbered after every event queued before, to the
// committer, and w, if ok, to store with it. The registry calls it with
// its lock held.
func (c *committer) add(e Event, w stateWrite, ok bool) {
	c.mu.Lock()
	c.queued = append(c.queued, e)
	c.rev = e.Revision
	if ok {
		c.writeMuLocked(w)
	}
	c.mu.Unlock()
	c.poke()
}

// write hands the committer a target's record that changed without an
// event, to store with the next batch. The registry calls it with its lock
// held.
func (c *committer) write(st StoredState) {
	c.mu.Lock()
	c.writeMuLocked(stateWrite{st: st})
	c.mu.Unlock()
	c.poke()
}

// writeMuLocked queues w; one that follows a write of the same target
// replaces it (an applied record often follows the transition it made).
func (c *committer) writeMuLocked(w stateWrite) {
	if n := len(c.writes); n > 0 && c.writes[n-1].st.Name == w.st.Name && !c.writes[n-1].deleted && !w.deleted {
		c.writes[n-1] = w
		return
	}
	c.writes = append(c.writes, w)
}

// poke wakes run.
func (c *committer) poke() {
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
			c.final() // flush what the last probes queued
			return
		}
		c.stamp.Set(c.clock.Now())
		for c.commitOnce() != nil {
			c.stamp.Set(c.clock.Now().Add(backoff)) // due again after the backoff
			select {
			case <-c.after(backoff):
				backoff = min(2*backoff, committerMaxBackoff)
			case <-c.stop:
				c.final() // the store may work again: try before giving up
				return
			}
		}
		backoff = committerMinBackoff
	}
}

// final stores and publishes what is queued, once more, as the committer
// stops. What the store still refuses is lost, as in a crash, and logged:
// the next start carries those targets over from their stored states.
func (c *committer) final() {
	if err := c.commitOnce(); err != nil {
		c.mu.Lock()
		n := len(c.queued)
		c.mu.Unlock()
		c.logger.Error("stopping with state changes the store refused: they are lost, and the next start carries their targets over from their stored states", "error", err, "events", n)
	}
}

// commitOnce stores and publishes everything queued now.
func (c *committer) commitOnce() error {
	c.mu.Lock()
	batch, writes, rev := c.queued, c.writes, c.rev
	c.queued, c.spare, c.writes = c.spare, nil, nil
	c.mu.Unlock()
	if len(batch) == 0 && len(writes) == 0 {
		c.mu.Lock()
		c.spare = batch
		c.mu.Unlock()
		return nil
	}
	states, deleted := storedOf(writes)
	if err := c.store.CommitStates(states, deleted, rev); err != nil {
		c.logger.Error("storing state changes failed; their events wait until it works", "error", err, "events", len(batch))
		c.mu.Lock()
		c.queued = append(batch, c.queued...)
		c.writes = append(writes, c.writes...)
		c.lastErr = err
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	c.lastErr, c.writeErr = nil, nil // the store takes writes again
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	c.hub.publish(batch...)
	clear(batch) // the hub keeps copies
	c.mu.Lock()
	if c.spare == nil && cap(batch) <= maxKeptQueue {
		c.spare = batch[:0]
	}
	c.mu.Unlock()
	return nil
}

// storedOf returns the records writes leave stored and the targets they
// leave removed: a target removed and added again in one batch is stored.
func storedOf(writes []stateWrite) (states []StoredState, deleted []string) {
	var last map[string]int // the index of each target's last write; only when one removes
	if slices.ContainsFunc(writes, func(w stateWrite) bool { return w.deleted }) {
		last = make(map[string]int, len(writes))
		for i, w := range writes {
			last[w.st.Name] = i
		}
	}
	for i, w := range writes {
		switch {
		case last == nil:
			states = append(states, w.st)
		case w.deleted:
			if last[w.st.Name] == i {
				deleted = append(deleted, w.st.Name)
			}
		case !writes[last[w.st.Name]].deleted:
			states = append(states, w.st)
		}
	}
	return states, deleted
}

// progress returns the committer's progress stamp, for a Watchdog.
func (c *committer) progress() *liveness.Stamp { return &c.stamp }

// err returns the error of the batch of state changes waiting to be
// stored, else that of the registry's last write if no write has succeeded
// since, else nil.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil {
		return c.lastErr
	}
	return c.writeErr
}

// wrote records the outcome of one of the registry's own writes to the
// store (a spec, a removal, a policy): a failure is reported by err until
// a write of any kind succeeds. A batch of state changes stored since
// shows the store takes writes again, though no spec was written.
func (c *committer) wrote(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeErr = err
}

// close stores what is queued, once more, and stops; the caller calls it
// once, after the last event is queued.
func (c *committer) close() {
	close(c.stop)
	<-c.done
}

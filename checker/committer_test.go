package checker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// The committer on its own: events queued in, stored, then published to a
// hub.

func addedEvent(clock *fakeclock.Clock, rev uint64, name string, state checker.State) checker.Event {
	return checker.Event{Revision: rev, Kind: checker.EventAdded, Time: clock.Now(), Status: checker.Status{
		Spec: checker.Spec{Name: name}, State: state,
	}}
}

func removedEvent(clock *fakeclock.Clock, rev uint64, name string) checker.Event {
	return checker.Event{Revision: rev, Kind: checker.EventRemoved, Time: clock.Now(), Status: checker.Status{Spec: checker.Spec{Name: name}}}
}

func waitHub(t *testing.T, h *checker.Hub, rev uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.Wait(ctx, rev); err != nil {
		t.Fatalf("revision %d not published: %v", rev, err)
	}
}

// gatedCommitter starts a committer of a store holding targets a and b
// whose commits wait for gate to close.
func gatedCommitter(t *testing.T) (c *checker.Committer, h *checker.Hub, st *memStore, clock *fakeclock.Clock, gate chan struct{}) {
	clock = fakeclock.New(epoch)
	st = newMemStore()
	st.specs["a"], st.specs["b"] = checker.Spec{Name: "a"}, checker.Spec{Name: "b"}
	gate = make(chan struct{})
	st.gate = gate
	h = checker.NewHub(10, 0, 0)
	t.Cleanup(h.Close)
	c = checker.NewCommitter(st, h, clock, nil)
	t.Cleanup(c.Close)
	return c, h, st, clock, gate
}

func TestCommitterPublishesOnlyWhatIsStored(t *testing.T) {
	c, h, st, clock, gate := gatedCommitter(t)
	w, _ := h.Watch(checker.Filter{}, 0, true)

	c.Queue(addedEvent(clock, 1, "a", checker.StateUnhealthy))
	c.Queue(hubEvent(clock, 2, "", "a")) // a: healthy -> unhealthy
	c.Queue(addedEvent(clock, 3, "b", checker.StateHealthy))
	waitFor(t, "the committer to take a batch", func() bool { _, owing := c.Due(); return owing })
	if due, _ := c.Due(); !due.Equal(clock.Now()) {
		t.Errorf("due at %v while storing, want now (%v)", due, clock.Now())
	}
	if got, _ := w.Next(10); len(got) != 0 || h.Revision() != 0 {
		t.Fatalf("published before stored: %v", revisions(got))
	}
	close(gate)
	waitHub(t, h, 3)
	got, _ := w.Next(10)
	if diff := cmp.Diff([]uint64{1, 2, 3}, revisions(got)); diff != "" {
		t.Fatalf("published (-want +got):\n%s", diff)
	}
	if st.state("a") != checker.StateUnhealthy || st.state("b") != checker.StateHealthy || st.rev != 3 {
		t.Fatalf("stored a=%v b=%v at revision %d; want unhealthy, healthy, 3", st.state("a"), st.state("b"), st.rev)
	}

	c.Queue(removedEvent(clock, 4, "b"))
	waitHub(t, h, 4)
	st.mu.Lock()
	_, kept := st.states["b"]
	st.mu.Unlock()
	if kept {
		t.Fatal("a removed target's state is still stored")
	}
	waitFor(t, "the committer to be idle", func() bool { _, owing := c.Due(); return !owing })
}

// Of a batch's writes of one target the last counts: a target removed and
// added again before its removal was stored keeps the state it was added
// with. A record that changed without an event (a verdict a drain holds)
// is stored too, at the revision of the last event.
func TestCommitterStoresTheLastWriteOfEachTarget(t *testing.T) {
	c, h, st, clock, gate := gatedCommitter(t)

	c.Queue(addedEvent(clock, 1, "b", checker.StateHealthy))
	waitFor(t, "the committer to take a batch", func() bool { _, owing := c.Due(); return owing })
	c.Queue(removedEvent(clock, 2, "a"))
	c.Queue(addedEvent(clock, 3, "a", checker.StateUnhealthy)) // the same batch
	close(gate)
	waitHub(t, h, 3)
	if got := st.state("a"); got != checker.StateUnhealthy {
		t.Errorf("a removed and added again in one batch: stored %v, want unhealthy", got)
	}

	c.Write(checker.StoredState{Name: "b", State: checker.StateHealthy, Flap: &checker.FlapRecord{Verdict: checker.StateUnhealthy}})
	waitFor(t, "b's record to be stored", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.states["b"].Flap != nil
	})
	st.mu.Lock()
	rev, verdict := st.rev, st.states["b"].Flap.Verdict
	st.mu.Unlock()
	if rev != 3 || verdict != checker.StateUnhealthy {
		t.Errorf("a record alone: stored at revision %d with verdict %v; want 3, unhealthy", rev, verdict)
	}
}

func TestCommitterRetriesAFailingStoreWithBackoff(t *testing.T) {
	clock := fakeclock.New(epoch)
	st := newMemStore()
	st.specs["a"] = checker.Spec{Name: "a"}
	st.failCommit = errors.New("no space left on device")
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	backoffs := make(chan time.Duration, 10)
	ticks := make(chan time.Time)
	c := checker.NewCommitter(st, h, clock, func(d time.Duration) <-chan time.Time {
		backoffs <- d
		return ticks
	})
	defer c.Close()

	c.Queue(addedEvent(clock, 1, "a", checker.StateHealthy))
	if d := <-backoffs; d != 50*time.Millisecond {
		t.Fatalf("first backoff %v, want 50ms", d)
	}
	if err := c.Err(); err == nil || err.Error() != "no space left on device" {
		t.Fatalf("Err = %v, want the store's error", err)
	}
	if due, ok := c.Due(); !ok || !due.Equal(clock.Now().Add(50*time.Millisecond)) {
		t.Fatalf("due at %v, %v; want the end of the backoff", due, ok)
	}
	c.Queue(hubEvent(clock, 2, "", "a")) // queued behind the failing batch
	clock.Advance(time.Second)           // the backoff is not on the clock: nothing moves
	ticks <- clock.Now()
	if d := <-backoffs; d != 100*time.Millisecond {
		t.Fatalf("second backoff %v, want 100ms (doubled)", d)
	}
	if h.Revision() != 0 {
		t.Fatalf("revision %d published while the store fails", h.Revision())
	}

	st.mu.Lock()
	st.failCommit = nil
	st.mu.Unlock()
	ticks <- clock.Now()
	waitHub(t, h, 2)
	if err := c.Err(); err != nil {
		t.Fatalf("Err after a commit worked: %v", err)
	}
	if st.rev != 2 || st.state("a") != checker.StateUnhealthy {
		t.Fatalf("stored revision %d, a=%v; want 2, unhealthy", st.rev, st.state("a"))
	}
}

func TestCommitterCloseStoresWhatIsQueued(t *testing.T) {
	clock := fakeclock.New(epoch)
	st := newMemStore()
	st.specs["a"] = checker.Spec{Name: "a"}
	gate := make(chan struct{})
	st.gate = gate
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	c := checker.NewCommitter(st, h, clock, nil)
	c.Queue(addedEvent(clock, 1, "a", checker.StateHealthy))
	waitFor(t, "the committer to take the batch", func() bool { _, owing := c.Due(); return owing })
	c.Queue(hubEvent(clock, 2, "", "a"))
	close(gate)
	c.Close()
	if h.Revision() != 2 || st.rev != 2 {
		t.Fatalf("after Close: published %d, stored %d; want both 2", h.Revision(), st.rev)
	}
}

// A store that recovers while the committer waits out a backoff, and a
// pulsed stopped then (an operator who freed the disk restarts it), stores
// what is queued at Close rather than lose it: the backoff is up to 5s.
func TestCommitterCloseDuringABackoffStoresWhatIsQueued(t *testing.T) {
	clock := fakeclock.New(epoch)
	st := newMemStore()
	st.specs["a"] = checker.Spec{Name: "a"}
	st.failCommit = errors.New("no space left on device")
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	backoffs := make(chan time.Duration, 10)
	c := checker.NewCommitter(st, h, clock, func(d time.Duration) <-chan time.Time {
		backoffs <- d
		return nil // the backoff never ends
	})
	c.Queue(addedEvent(clock, 1, "a", checker.StateHealthy))
	<-backoffs
	st.mu.Lock()
	st.failCommit = nil
	st.mu.Unlock()
	c.Close()
	if h.Revision() != 1 || st.rev != 1 || st.state("a") != checker.StateHealthy {
		t.Fatalf("after Close: published %d, stored %d, a=%v; want 1, 1, healthy", h.Revision(), st.rev, st.state("a"))
	}
}

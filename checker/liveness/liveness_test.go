package liveness

import (
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manual is a clock that moves only when the test says so.
type manual struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manual) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func stalled(stalls []Stall) []string {
	var out []string
	for _, s := range stalls {
		out = append(out, s.Component)
	}
	return out
}

// A stamp that owes progress past the timeout, a write lock held past it
// and a probed lock that does not let go are stalled, in the order of
// Components; each clears once it progresses.
func TestWatchdogStallsAndClears(t *testing.T) {
	clock := &manual{now: time.Unix(1e9, 0)}
	var sched Stamp
	sched.Start(clock.Now())
	var wl WriteLock
	wl.Init(clock.Now)
	var mu sync.Mutex
	var changes [][]string
	w, err := New(Parts{
		Scheduler: &sched,
		WriteLock: wl.Held(),
		Locks:     []Lock{{Component: ComponentLock, Locker: &mu}},
		Now:       clock.Now,
		Timer:     func(time.Time) (<-chan time.Time, func() bool) { return nil, func() bool { return true } },
	}, Config{Timeout: 10 * time.Second, OnChange: func(s []Stall) { changes = append(changes, stalled(s)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, want := w.Components(), []string{ComponentScheduler, ComponentWriteLock, ComponentLock}; !slices.Equal(got, want) {
		t.Fatalf("Components() = %v, want %v", got, want)
	}

	mu.Lock()
	wl.Lock()
	sched.Set(clock.Now())
	w.Check(clock.Now()) // starts the lock's probe, which waits
	clock.advance(10 * time.Second)
	if got := w.Check(clock.Now()); len(got) != 0 {
		t.Fatalf("at the timeout: stalled %v, want none", stalled(got))
	}
	clock.advance(time.Second)
	got := w.Check(clock.Now())
	if want := []string{ComponentScheduler, ComponentWriteLock, ComponentLock}; !slices.Equal(stalled(got), want) {
		t.Fatalf("past the timeout: stalled %v, want %v", stalled(got), want)
	}
	if got[0].For != 11*time.Second || got[0].String() != "scheduler: no progress for 11s" {
		t.Errorf("scheduler stall = %v (%v), want 11s", got[0], got[0].For)
	}

	sched.Set(time.Time{})
	wl.Unlock()
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for w.Probing(ComponentLock) {
		if time.Now().After(deadline) {
			t.Fatal("the lock's probe never got the lock")
		}
		time.Sleep(time.Millisecond)
	}
	if got := w.Check(clock.Now()); len(got) != 0 {
		t.Fatalf("after progress: stalled %v, want none", stalled(got))
	}
	want := [][]string{{ComponentScheduler, ComponentWriteLock, ComponentLock}, nil}
	if !slices.EqualFunc(changes, want, slices.Equal) {
		t.Errorf("OnChange got %v, want %v", changes, want)
	}
}

func TestNewRejectsNegative(t *testing.T) {
	for _, cfg := range []Config{{Timeout: -1}, {Interval: -1}} {
		if _, err := New(Parts{Now: time.Now}, cfg); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}

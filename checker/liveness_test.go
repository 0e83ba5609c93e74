package checker_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/liveness"
)

const liveTimeout = 30 * time.Second

// watchdogEnv is a Watchdog of a test checker that records its logs and
// what it told OnChange.
type watchdogEnv struct {
	*testEnv
	w    *liveness.Watchdog
	logs *lockedBuffer

	mu      sync.Mutex
	changes [][]string // the stalled components at each OnChange
}

func newWatchdogEnv(t *testing.T, e *testEnv) *watchdogEnv {
	t.Helper()
	we := &watchdogEnv{testEnv: e, logs: &lockedBuffer{}}
	w, err := checker.NewWatchdog(e.c, liveness.Config{
		Timeout: liveTimeout,
		Logger:  slog.New(slog.NewTextHandler(we.logs, nil)),
		OnChange: func(stalls []liveness.Stall) {
			we.mu.Lock()
			defer we.mu.Unlock()
			we.changes = append(we.changes, components(stalls))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	we.w = w
	return we
}

// check runs one Check now and returns the stalled components.
func (we *watchdogEnv) check() []string { return components(we.w.Check(we.clock.Now())) }

// settleProbes starts the lock probes and waits for those of locks not
// held to finish, so that advancing the clock next stalls only what is
// held.
func (we *watchdogEnv) settleProbes(t *testing.T, held ...string) {
	t.Helper()
	we.check()
	for _, comp := range we.w.Components() { // Probing is false for a component that is not a probed lock
		if !slices.Contains(held, comp) {
			waitFor(t, comp+"'s probe to get its lock", func() bool { return !we.w.Probing(comp) })
		}
	}
}

// waitClear polls Check until nothing is stalled.
func (we *watchdogEnv) waitClear(t *testing.T) {
	t.Helper()
	waitFor(t, "the stall to clear", func() bool { return len(we.check()) == 0 })
}

func (we *watchdogEnv) changeLog() [][]string {
	we.mu.Lock()
	defer we.mu.Unlock()
	return slices.Clone(we.changes)
}

func components(stalls []liveness.Stall) []string {
	var out []string
	for _, s := range stalls {
		out = append(out, s.Component)
	}
	return out
}

// waitPassStarted waits until the scheduler has started a pass at the
// clock's time now: it owes progress since now.
func waitPassStarted(t *testing.T, e *testEnv) {
	t.Helper()
	waitFor(t, "the scheduler to start a pass", func() bool {
		due, ok := checker.ProgressDue(e.c, liveness.ComponentScheduler)
		return ok && due.Equal(e.clock.Now())
	})
}

// An idle checker (no target due, nothing to commit, locks free) is not
// stalled however long nothing happens.
func TestLivenessIdleIsNotStalled(t *testing.T) {
	e := storeEnv(t, newMemStore(), checker.Config{})
	we := newWatchdogEnv(t, e)
	e.c.Start()
	<-e.c.Scheduled()
	waitFor(t, "the scheduler to go idle", func() bool {
		_, owing := checker.ProgressDue(e.c, liveness.ComponentScheduler)
		return !owing
	})
	we.settleProbes(t)
	e.clock.Advance(time.Hour)
	if got := we.check(); got != nil {
		t.Fatalf("an idle checker an hour on: stalled %q", got)
	}
	if got := we.changeLog(); got != nil {
		t.Errorf("OnChange was called: %q", got)
	}
	if got := we.w.Components(); !slices.Equal(got, []string{"scheduler", "committer", "write_lock", "watch_hub", "checker_lock", "commit_queue"}) {
		t.Errorf("Components() = %q", got)
	}
}

// The lock held too long stalls the scheduler (which waits for it) and the
// lock probe; once released, both recover. One error per component and
// episode, one info line when it ends.
func TestLivenessSchedulerAndLockStall(t *testing.T) {
	e := newEnv(t, checker.Config{})
	we := newWatchdogEnv(t, e)
	e.add(t, spec("a"))
	e.c.Start()
	<-e.c.Scheduled()
	// Take the lock only once the scheduler has armed its wake-up for a's
	// first probe: taken earlier, it can hold the scheduler before the timer
	// exists, and advancing the clock then wakes nothing.
	waitFor(t, "the scheduler to arm its wake-up", func() bool {
		due, ok := checker.ProgressDue(e.c, liveness.ComponentScheduler)
		return ok && due.After(e.clock.Now())
	})

	release := checker.HoldLock(e.c)
	defer func() { release() }()
	e.clock.Advance(checker.StandardDefaults().Interval) // a's first probe is due: the scheduler wakes and waits for the lock
	waitPassStarted(t, e)
	we.settleProbes(t, liveness.ComponentLock)

	e.clock.Advance(liveTimeout + time.Second)
	stalls := we.w.Check(e.clock.Now())
	want := []liveness.Stall{
		{Component: liveness.ComponentScheduler, For: liveTimeout + time.Second},
		{Component: liveness.ComponentLock, For: liveTimeout + time.Second},
	}
	if diff := cmp.Diff(want, stalls); diff != "" {
		t.Fatalf("stalls (-want +got):\n%s", diff)
	}
	if got, want := stalls[0].String(), "scheduler: no progress for 31s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := stalls[1].String(), "checker_lock: lock held for 31s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	e.clock.Advance(time.Second)
	if got := we.check(); !slices.Equal(got, []string{"scheduler", "checker_lock"}) {
		t.Fatalf("a second later: stalled %q", got)
	}
	if got := components(we.w.Stalls()); !slices.Equal(got, []string{"scheduler", "checker_lock"}) {
		t.Errorf("Stalls() = %q", got)
	}

	release()
	release = func() {}
	we.waitClear(t)
	if got := we.w.Stalls(); got != nil {
		t.Errorf("Stalls() after the lock was released = %v", got)
	}
	// The two may recover one after the other: then OnChange hears of the
	// one left in between.
	if got := we.changeLog(); len(got) < 2 || !slices.Equal(got[0], []string{"scheduler", "checker_lock"}) || got[len(got)-1] != nil {
		t.Errorf("OnChange calls: %q, want the two stalled first and none last", got)
	}
	logs := we.logs.String()
	for _, line := range []string{
		`level=ERROR msg="pulsed is not live: scheduler: no progress for 31s" part=scheduler`,
		`level=ERROR msg="pulsed is not live: checker_lock: lock held for 31s" part=checker_lock`,
		`level=INFO msg="pulsed is live again: scheduler progresses" part=scheduler`,
		`level=INFO msg="pulsed is live again: checker_lock progresses" part=checker_lock`,
	} {
		if n := strings.Count(logs, line); n != 1 {
			t.Errorf("logged %d times, want once: %s\nlogs:\n%s", n, line, logs)
		}
	}
}

// A store that does not return stalls the committer alone.
func TestLivenessCommitterStall(t *testing.T) {
	st := newMemStore()
	gate := make(chan struct{})
	st.gate = gate
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release()
	e := storeEnv(t, st, checker.Config{})
	we := newWatchdogEnv(t, e)
	e.add(t, spec("a")) // its ADDED event waits for the store
	waitFor(t, "the committer to take the batch", func() bool {
		_, owing := checker.ProgressDue(e.c, liveness.ComponentCommitter)
		return owing
	})
	we.settleProbes(t)

	e.clock.Advance(liveTimeout)
	if got := we.check(); got != nil {
		t.Fatalf("at the timeout itself: stalled %q", got)
	}
	e.clock.Advance(time.Millisecond)
	want := []liveness.Stall{{Component: liveness.ComponentCommitter, For: liveTimeout + time.Millisecond}}
	if diff := cmp.Diff(want, we.w.Check(e.clock.Now())); diff != "" {
		t.Fatalf("stalls (-want +got):\n%s", diff)
	}

	release()
	we.waitClear(t)
	if diff := cmp.Diff([][]string{{"committer"}, nil}, we.changeLog()); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
}

// A spec write that does not return (a store that hangs, whatever keeps
// it) holds the write lock: the write lock stalls, and nothing else does,
// though every other writer waits behind it. Once the store returns, the
// writes complete and the stall clears.
func TestLivenessStuckSpecWriteStallsTheWriteLock(t *testing.T) {
	st := newMemStore()
	gate := make(chan struct{})
	st.specGate = gate
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release()
	e := storeEnv(t, st, checker.Config{})
	we := newWatchdogEnv(t, e)
	we.settleProbes(t)

	added := make(chan error, 2)
	go func() { _, _, err := e.c.Add(spec("a")); added <- err }()
	waitFor(t, "the write to hold the write lock", func() bool {
		due, ok := checker.ProgressDue(e.c, liveness.ComponentWriteLock)
		return ok && due.Equal(e.clock.Now())
	})
	go func() { _, _, err := e.c.Add(spec("b")); added <- err }() // queues behind a

	e.clock.Advance(liveTimeout)
	if got := we.check(); got != nil {
		t.Fatalf("at the timeout itself: stalled %q", got)
	}
	e.clock.Advance(time.Millisecond)
	want := []liveness.Stall{{Component: liveness.ComponentWriteLock, For: liveTimeout + time.Millisecond}}
	stalls := we.w.Check(e.clock.Now())
	if diff := cmp.Diff(want, stalls); diff != "" {
		t.Fatalf("stalls (-want +got):\n%s", diff)
	}
	if got, want := stalls[0].String(), "write_lock: lock held for 30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	release()
	for range 2 {
		if err := <-added; err != nil {
			t.Errorf("Add once the store returned: %v", err)
		}
	}
	we.waitClear(t)
	if diff := cmp.Diff([][]string{{"write_lock"}, nil}, we.changeLog()); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
	logs := we.logs.String()
	if want := `level=ERROR msg="pulsed is not live: write_lock: lock held for 30s" part=write_lock`; strings.Count(logs, want) != 1 {
		t.Errorf("the log does not say once: %s\nlogs:\n%s", want, logs)
	}
}

// Writers that each finish hand the write lock on: however long the
// queue, only the current write's age counts.
func TestLivenessWriteLockHandedOnIsProgress(t *testing.T) {
	e := storeEnv(t, newMemStore(), checker.Config{})
	we := newWatchdogEnv(t, e)
	we.settleProbes(t)
	release := checker.HoldWriteLock(e.c)
	e.clock.Advance(liveTimeout - time.Second)
	release()
	release = checker.HoldWriteLock(e.c) // the next writer
	defer release()
	e.clock.Advance(liveTimeout - time.Second)
	if got := we.check(); got != nil {
		t.Errorf("two writes of %v each: stalled %q", liveTimeout-time.Second, got)
	}
	e.clock.Advance(2 * time.Second)
	if got := we.check(); !slices.Equal(got, []string{"write_lock"}) {
		t.Errorf("the second write %v on: stalled %q", liveTimeout+time.Second, got)
	}
}

// The committer's queue lock held too long stalls it (and the committer
// is not blamed, having no work it could see).
func TestLivenessCommitQueueStall(t *testing.T) {
	e := storeEnv(t, newMemStore(), checker.Config{})
	we := newWatchdogEnv(t, e)
	release := checker.HoldCommitQueue(e.c)
	defer func() { release() }()
	we.settleProbes(t, liveness.ComponentCommitQueue)

	e.clock.Advance(liveTimeout + time.Second)
	want := []liveness.Stall{{Component: liveness.ComponentCommitQueue, For: liveTimeout + time.Second}}
	if diff := cmp.Diff(want, we.w.Check(e.clock.Now())); diff != "" {
		t.Fatalf("stalls (-want +got):\n%s", diff)
	}
	if got, want := want[0].String(), "commit_queue: lock held for 31s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	release()
	release = func() {}
	we.waitClear(t)
	if diff := cmp.Diff([][]string{{"commit_queue"}, nil}, we.changeLog()); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
}

// The watch hub's lock held too long stalls the hub alone.
func TestLivenessWatchHubStall(t *testing.T) {
	e := newEnv(t, checker.Config{})
	we := newWatchdogEnv(t, e)
	release := checker.HoldHubLock(e.c)
	defer func() { release() }()
	we.settleProbes(t, liveness.ComponentWatchHub)

	e.clock.Advance(liveTimeout + 5*time.Second)
	want := []liveness.Stall{{Component: liveness.ComponentWatchHub, For: liveTimeout + 5*time.Second}}
	if diff := cmp.Diff(want, we.w.Check(e.clock.Now())); diff != "" {
		t.Fatalf("stalls (-want +got):\n%s", diff)
	}
	if got, want := want[0].String(), "watch_hub: lock held for 35s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	release()
	release = func() {}
	we.waitClear(t)
	if diff := cmp.Diff([][]string{{"watch_hub"}, nil}, we.changeLog()); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
}

// Start checks on the checker's clock: a stall is found and cleared
// without anyone calling Check.
func TestWatchdogLoopOnTheClock(t *testing.T) {
	e := newEnv(t, checker.Config{})
	we := newWatchdogEnv(t, e)
	release := checker.HoldLock(e.c)
	defer func() { release() }()
	we.w.Start()
	// Each step moves the clock by the interval (a tenth of the timeout)
	// and gives the loop a moment to look.
	step := func() { e.clock.Advance(liveTimeout / 10) }
	waitFor(t, "the loop to report the lock", func() bool {
		step()
		return slices.Equal(components(we.w.Stalls()), []string{"checker_lock"})
	})
	release()
	release = func() {}
	waitFor(t, "the loop to clear the stall", func() bool {
		step()
		return we.w.Stalls() == nil
	})
	we.w.Close()
	if diff := cmp.Diff([][]string{{"checker_lock"}, nil}, we.changeLog()); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
}

func TestNewWatchdogRejectsNegative(t *testing.T) {
	e := newEnv(t, checker.Config{})
	if _, err := checker.NewWatchdog(e.c, liveness.Config{Timeout: -time.Second}); err == nil {
		t.Error("a negative Timeout was accepted")
	}
	w, err := checker.NewWatchdog(e.c, liveness.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Timeout() != liveness.DefaultTimeout {
		t.Errorf("NewWatchdog with no timeout: timeout %v, want %v", w.Timeout(), liveness.DefaultTimeout)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

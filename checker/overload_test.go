package checker_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// totals sums the result counts of every target.
func totals(c *checker.Checker) (active, ignored uint64) {
	list, _ := c.List("")
	for _, st := range list {
		active += st.ActiveResults
		ignored += st.IgnoredTimeouts
	}
	return active, ignored
}

func (f *fakeProbers) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// quiet reports whether the checker is at rest until the clock moves:
// every due probe was taken, and every probe taken is waiting for a slot,
// running in the fake prober (and not about to return), or applied.
func quiet(e *testEnv) bool {
	now := e.clock.Now()
	list, _ := e.c.List("")
	probing := 0
	for _, st := range list {
		if !st.NextProbe.After(now) {
			return false
		}
		if st.Probing {
			probing++
		}
	}
	ov := e.c.Overload()
	return probing == ov.InFlight+ov.Waiting && e.probes.inFlight() == ov.InFlight && e.probes.ending() == 0
}

func step(t *testing.T, e *testEnv, d time.Duration) {
	t.Helper()
	e.clock.Advance(d)
	waitFor(t, "the checker at rest", func() bool { return quiet(e) })
}

// addHung adds n healthy targets, t00 on, whose probes hang: interval and
// timeout 1s, fall 2.
func addHung(t *testing.T, e *testEnv, n int) {
	t.Helper()
	for i := range n {
		s := spec(fmt.Sprintf("t%02d", i))
		s.Interval, s.Timeout, s.Fall, s.InitialState = time.Second, time.Second, 2, checker.StateHealthy
		e.add(t, s)
		e.probes.set(s.Name, outcome{hang: true})
	}
}

// The checker stalls: twelve healthy targets' probes time out while the
// process keeps its runnable goroutines waiting longer than MaxStall (as
// liveness.SampleStalls reports it), so it may not have heard their answers. A
// checker that counted its own timeouts marks the whole fleet down (the
// control, with detection off); an overloaded one says so
// (CHECKER_DEGRADED, Overload().Degraded) and marks nobody down. Once it
// keeps up again it recovers (CHECKER_RECOVERED), and timeouts count again.
func TestOverloadedCheckerMarksNoMassTransition(t *testing.T) {
	const targets, steps = 12, 12
	for _, detect := range []bool{true, false} {
		t.Run(fmt.Sprintf("detection %v", detect), func(t *testing.T) {
			e := newEnv(t, checker.Config{Overload: checker.OverloadPolicy{Disabled: !detect, MaxStall: 200 * time.Millisecond, RecoverAfter: 3 * time.Second}})
			addHung(t, e, targets)
			w := watchNow(t, e.c, checker.Filter{})
			// The checker's own events go to every watcher, whatever its
			// filter: one of a group with no targets here too.
			wg := watchNow(t, e.c, checker.Filter{Group: "edge"})
			e.c.Start()
			for range steps {
				e.c.NoteStall(300 * time.Millisecond)
				step(t, e, time.Second) // times out the running probes; the next ones start
			}
			evs := policyKinds(next(t, w))
			ov := e.c.Overload()
			if !detect {
				if len(evs) != targets || len(e.c.Healthy("")) != 0 {
					t.Fatalf("without detection: %d events %v, want the whole fleet down", len(evs), evs)
				}
				return
			}
			if len(evs) != 1 || !strings.HasPrefix(evs[0], "checker degraded: ") {
				t.Fatalf("events %v, want only CHECKER_DEGRADED", evs)
			}
			if got := policyKinds(next(t, wg)); len(got) != 1 || !strings.HasPrefix(got[0], "checker degraded: ") {
				t.Errorf("a group's watcher got %v, want CHECKER_DEGRADED", got)
			}
			active, ignored := totals(e.c)
			if !ov.Degraded || active != 0 || ov.IgnoredTimeouts != ignored || ignored < targets*(steps/2-1) || ov.Reason != "runnable goroutines waited 300ms to run (threshold 200ms)" {
				t.Errorf("overload %+v", ov)
			}
			if got := e.c.Healthy(""); len(got) != targets {
				t.Errorf("%d targets routable, want all %d", len(got), targets)
			}
			st, _ := e.c.Status("t00")
			if st.IgnoredTimeouts == 0 || st.LastResult == nil || !st.LastResult.Ignored || st.FailStreak != 0 || st.ActiveResults != 0 {
				t.Errorf("t00 %+v: want ignored timeouts, none counted", st)
			}

			// The targets answer again and the process keeps up: with no
			// sign for RecoverAfter the checker recovers.
			for i := range targets {
				e.probes.set(fmt.Sprintf("t%02d", i), pass)
			}
			select { // the group's watcher has read all; it waits to be told
			case <-wg.Ready():
			default:
			}
			step(t, e, time.Second) // the last hung probes time out
			for i := 0; e.c.Overload().Degraded; i++ {
				if i == 100 {
					t.Fatalf("still degraded after 10s: %+v", e.c.Overload())
				}
				step(t, e, 100*time.Millisecond)
			}
			if got := policyKinds(next(t, w)); len(got) != 1 || !strings.HasPrefix(got[0], "checker recovered: ") {
				t.Errorf("events %v, want only CHECKER_RECOVERED", got)
			}
			select {
			case <-wg.Ready():
			default:
				t.Error("a group's watcher was not woken for CHECKER_RECOVERED")
			}
			if got := policyKinds(next(t, wg)); len(got) != 1 || !strings.HasPrefix(got[0], "checker recovered: ") {
				t.Errorf("a group's watcher got %v, want CHECKER_RECOVERED", got)
			}
			// Its own timeouts count again.
			e.probes.set("t00", outcome{hang: true})
			for i := 0; ; i++ {
				if st, _ := e.c.Status("t00"); st.State == checker.StateUnhealthy {
					break
				}
				if i == 100 {
					t.Fatal("t00 never fell")
				}
				step(t, e, 100*time.Millisecond)
			}
			if got := policyKinds(next(t, w)); len(got) != 1 || got[0] != "t00: healthy -> unhealthy" {
				t.Errorf("events %v, want t00 down", got)
			}
		})
	}
}

// Hung targets fill every slot: twelve healthy targets whose probes hang
// share four slots, each holding one for its whole timeout, so the others
// wait in line. That is the targets' doing, not the checker's: a probe's
// timeout starts when it gets its slot. The checker is not degraded, and
// every target is marked down (a blackholed rack must not stay routable).
func TestHungTargetsThatFillTheSlotsGoDown(t *testing.T) {
	const targets, slots = 12, 4
	e := newEnv(t, checker.Config{MaxConcurrentProbes: slots, Overload: checker.OverloadPolicy{MaxStall: 200 * time.Millisecond}})
	addHung(t, e, targets)
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	waited := 0
	for i := 0; len(e.c.Healthy("")) > 0; i++ {
		if i == 20 {
			t.Fatalf("after 20s, %d of %d hung targets still routable: %+v", len(e.c.Healthy("")), targets, e.c.Overload())
		}
		e.c.NoteStall(200 * time.Millisecond) // at the threshold: no sign
		step(t, e, time.Second)
		waited = max(waited, e.c.Overload().Waiting)
	}
	if waited == 0 {
		t.Error("no probe ever waited for a slot: the test saturates nothing")
	}
	evs := policyKinds(next(t, w))
	if len(evs) != targets {
		t.Errorf("events %v, want the %d targets down and nothing else", evs, targets)
	}
	for _, ev := range evs {
		if !strings.HasSuffix(ev, ": healthy -> unhealthy") {
			t.Errorf("event %q, want only targets going down", ev)
		}
	}
	if ov := e.c.Overload(); ov.Degraded || ov.IgnoredTimeouts != 0 {
		t.Errorf("overload %+v, want not degraded and no timeout ignored", ov)
	}
}

// Hung targets hold at most half the slots while other probes wait:
// eight targets whose probes hang and four that answer share four slots.
// Once the hung ones have timed out, the answering ones are probed every
// interval, as if the rack were not there, and the hung ones still go down
// on the other half. In one queue the answering targets' probes waited
// behind the hung ones' and were probed about every other interval.
func TestHungTargetsLeaveSlotsToTheOthers(t *testing.T) {
	const hung, answering, slots, steps = 8, 4, 4, 12
	e := newEnv(t, checker.Config{MaxConcurrentProbes: slots})
	addHung(t, e, hung)
	for i := range answering {
		s := spec(fmt.Sprintf("ok%d", i))
		s.Interval, s.Timeout, s.InitialState = time.Second, time.Second, checker.StateHealthy
		e.add(t, s)
		e.probes.set(s.Name, pass)
	}
	e.c.Start()
	for range 3 { // every hung target's first probe times out
		step(t, e, time.Second)
	}
	before := make([]int, answering)
	for i := range answering {
		before[i] = e.probes.callCount(fmt.Sprintf("ok%d", i))
	}
	for range steps {
		step(t, e, time.Second)
	}
	for i := range answering {
		if n := e.probes.callCount(fmt.Sprintf("ok%d", i)) - before[i]; n < steps-1 {
			t.Errorf("ok%d probed %d times in %d intervals, want one an interval", i, n, steps)
		}
	}
	if got := e.c.Healthy(""); len(got) != answering {
		t.Errorf("routable %v, want only the %d answering targets", got, answering)
	}
	if ov := e.c.Overload(); ov.Degraded {
		t.Errorf("overload %+v, want not degraded", ov)
	}
}

// With a single slot a hung target cannot have half of it: its probes take
// the slot only when no other probe waits, and the target that answers is
// probed every interval.
func TestHungTargetOnOneSlotLeavesItToTheOther(t *testing.T) {
	const steps = 10
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1})
	addHung(t, e, 1)
	s := spec("ok0")
	s.Interval, s.Timeout, s.InitialState = time.Second, time.Second, checker.StateHealthy
	e.add(t, s)
	e.probes.set("ok0", pass)
	e.c.Start()
	for range 3 {
		step(t, e, time.Second)
	}
	before := e.probes.callCount("ok0")
	for range steps {
		step(t, e, time.Second)
	}
	if n := e.probes.callCount("ok0") - before; n < steps-1 {
		t.Errorf("ok0 probed %d times in %d intervals, want one an interval", n, steps)
	}
	if st, _ := e.c.Status("t00"); st.State != checker.StateUnhealthy {
		t.Errorf("t00 %v, want unhealthy: its probes still run", st.State)
	}
}

// A burst of probes that each hold a worker (synchronous probes, here
// hanging until their timeout) starts a worker for each, up to the slots;
// once the burst is over, all but MaxIdleWorkers of them end rather than
// keep their stacks until Close.
func TestABurstsWorkersEnd(t *testing.T) {
	const n = 40
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 64})
	addHung(t, e, n)
	e.c.Start()
	for i := 0; e.probes.inFlight() < n; i++ {
		if i == 100 {
			t.Fatalf("%d probes in flight, want %d", e.probes.inFlight(), n)
		}
		step(t, e, 100*time.Millisecond)
	}
	if w, _ := e.c.Workers(); w < n {
		t.Fatalf("%d workers for %d hanging probes", w, n)
	}
	for i := range n {
		e.probes.set(fmt.Sprintf("t%02d", i), pass)
	}
	step(t, e, time.Second) // every hung probe times out; the next ones pass at once
	waitFor(t, "the burst's workers ended", func() bool {
		w, idle := e.c.Workers()
		return w <= checker.MaxIdleWorkers && idle == w
	})
}

// An explicit failure is the target's answer, not the checker's slowness:
// it counts even while the checker is degraded. Here the sign is lag: with
// MaxLag 1ns, probes that start after their slot (the fake clock jumps past
// it) make the checker degraded.
func TestOverloadedCheckerStillCountsExplicitFailures(t *testing.T) {
	e := newEnv(t, checker.Config{Overload: checker.OverloadPolicy{MaxLag: time.Nanosecond}})
	for _, n := range []string{"a-hangs", "b-refuses"} {
		s := spec(n)
		s.Interval, s.Timeout, s.Fall, s.InitialState = time.Second, time.Second, 1, checker.StateHealthy
		e.add(t, s)
	}
	e.probes.set("a-hangs", outcome{hang: true})
	e.probes.set("b-refuses", fail)
	e.c.Start()
	e.clock.Advance(time.Second) // both due, and late
	waitFor(t, "both probed", func() bool {
		return e.probes.callCount("a-hangs") == 1 && e.probes.callCount("b-refuses") == 1 && e.c.Overload().Degraded
	})
	e.clock.Advance(time.Second) // a's timeout
	waitFor(t, "both results", func() bool {
		a, _ := e.c.Status("a-hangs")
		b, _ := e.c.Status("b-refuses")
		return a.IgnoredTimeouts == 1 && b.ActiveResults >= 1
	})
	if got := e.c.Healthy(""); len(got) != 1 || got[0] != "a-hangs" {
		t.Errorf("routable %v, want only a-hangs: its timeout did not count, b's refusal did", got)
	}
	if ov := e.c.Overload(); !ov.Degraded || !strings.Contains(ov.Reason, "late (threshold 1ns)") {
		t.Errorf("overload %+v, want degraded by lag", ov)
	}
}

// The saturation sign is inclusive: with MaxWaiting 1, one probe waiting
// for the only slot makes the checker degraded (lag is no sign here).
func TestOverloadWaitingThresholdIsInclusive(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{MaxWaiting: 1, MaxLag: -1}})
	g1 := watchNow(t, e.c, checker.Filter{Group: "g1"}) // the checker's own events reach every watcher
	for _, n := range []string{"a", "b"} {
		s := spec(n)
		s.Interval, s.Timeout, s.InitialState = 5*time.Second, 5*time.Second, checker.StateHealthy
		e.add(t, s)
		e.probes.set(n, outcome{hang: true})
	}
	e.c.Start()
	for i := 0; ; i++ {
		if ov := e.c.Overload(); ov.Waiting == 1 && ov.InFlight == 1 {
			break
		}
		if i == 100 {
			t.Fatalf("never one probe running and one waiting: %+v", e.c.Overload())
		}
		step(t, e, 100*time.Millisecond)
	}
	if ov := e.c.Overload(); !ov.Degraded || !strings.Contains(ov.Reason, "1 probe waiting for a slot (threshold 1)") {
		t.Errorf("one probe waiting at threshold 1: %+v, want degraded", ov)
	}
	select {
	case <-g1.Ready():
	case <-time.After(testscale.D(5 * time.Second)):
		t.Fatal("a watcher of another group was not signalled of CHECKER_DEGRADED")
	}
	if got := policyKinds(next(t, g1)); len(got) != 1 || !strings.HasPrefix(got[0], "checker degraded: ") {
		t.Errorf("the watcher of g1 got %v, want CHECKER_DEGRADED", got)
	}
}

// Workers are started up to MaxConcurrentProbes when probes pile up, even
// after a single worker has been idling: five hanging targets over four
// slots have four probes in flight and one waiting.
func TestWorkersStartWhenIdleOnesAreBusy(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 4, Overload: checker.OverloadPolicy{Disabled: true}})
	a := spec("a")
	a.Interval, a.Timeout = time.Second, time.Second
	e.add(t, a)
	e.probes.set("a", pass)
	e.c.Start()
	for range 5 { // one worker probes a, goes idle, wakes, ...
		step(t, e, time.Second)
	}
	if st, _ := e.c.Status("a"); st.ActiveResults < 3 {
		t.Fatalf("a probed %d times in 5s", st.ActiveResults)
	}
	for _, n := range []string{"b", "c", "d", "e"} {
		s := spec(n)
		s.Interval, s.Timeout = 5*time.Second, 5*time.Second
		e.add(t, s)
		e.probes.set(n, outcome{hang: true})
	}
	e.probes.set("a", outcome{hang: true})
	for i := 0; ; i++ {
		if ov := e.c.Overload(); ov.InFlight == 4 && ov.Waiting == 1 {
			break
		}
		if i == 100 {
			t.Fatalf("after 10s: %+v, want 4 probes in flight and 1 waiting", e.c.Overload())
		}
		step(t, e, 100*time.Millisecond)
	}
}

// A queued probe whose target got a new probe spec meanwhile is dropped,
// and the target is probed again with the new spec: the dropped job does
// not leave it marked as probing forever.
func TestQueuedProbeOfAnUpdatedTargetIsReplaced(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{Disabled: true}})
	for _, n := range []string{"x", "y"} {
		s := spec(n)
		s.Interval, s.Timeout = time.Second, time.Second
		e.add(t, s)
		e.probes.set(n, outcome{hang: true})
	}
	e.c.Start()
	for i := 0; ; i++ {
		if ov := e.c.Overload(); ov.InFlight == 1 && ov.Waiting == 1 {
			break
		}
		if i == 30 {
			t.Fatalf("never one probe running and one queued: %+v", e.c.Overload())
		}
		step(t, e, 100*time.Millisecond)
	}
	queued := "x"
	if e.probes.callCount("x") == 1 {
		queued = "y"
	}
	s := spec(queued)
	s.Interval, s.Timeout = time.Second, time.Second
	s.Probe.TCP.Address = queued + "-new:80"
	e.probes.set(queued+"-new", pass)
	e.add(t, s)
	for i := 0; e.probes.callCount(queued+"-new") == 0; i++ {
		if i == 50 {
			st, _ := e.c.Status(queued)
			t.Fatalf("%s never probed with its new spec in 5s: %+v", queued, st)
		}
		step(t, e, 100*time.Millisecond)
	}
}

// A probe that starts exactly MaxLag late is no sign of overload; one
// nanosecond later is. The fake clock jumps past the probe's due time, as
// a checker too slow to start it would.
func TestOverloadLagThresholdIsExclusive(t *testing.T) {
	// The lag is fixed by the jump and the tick, and measured with
	// detection off.
	run := func(maxLag time.Duration) checker.OverloadStatus {
		e := newEnv(t, checker.Config{Overload: checker.OverloadPolicy{MaxLag: maxLag}})
		s := spec("b")
		s.Interval, s.Timeout, s.InitialState = 10*time.Second, time.Second, checker.StateHealthy
		e.add(t, s)
		e.probes.set("b", pass)
		b, _ := e.c.Status("b")
		e.c.Start()
		step(t, e, b.NextProbe.Add(1500*time.Millisecond).Sub(e.clock.Now()))
		if st, _ := e.c.Status("b"); st.ActiveResults != 1 {
			t.Fatalf("b probed %d times, want 1", st.ActiveResults)
		}
		return e.c.Overload()
	}
	ov := run(-1)
	lag := ov.Lag
	if lag <= 0 || ov.Degraded {
		t.Fatalf("with lag no sign: %+v, want a lag and not degraded", ov)
	}
	if ov := run(lag); ov.Degraded {
		t.Errorf("a probe exactly MaxLag (%v) late: %+v, want not degraded", lag, ov)
	}
	if ov := run(lag - time.Nanosecond); !ov.Degraded || !strings.Contains(ov.Reason, "a probe of b started "+lag.String()+" late") {
		t.Errorf("a probe 1ns more than MaxLag late: %+v, want degraded", ov)
	}
}

// Waiting for a slot is not lateness: two targets share one slot, a's
// probe hangs until its timeout, so b, due while a runs, starts when a's
// probe times out. Its lag is reported, but even with MaxLag 1ns it is no
// sign, since a slot was free for b only then.
func TestWaitingForASlotIsNotLate(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{MaxLag: time.Nanosecond}})
	for _, n := range []string{"a", "b"} {
		s := spec(n)
		s.Interval, s.Timeout, s.InitialState = 10*time.Second, 10*time.Second, checker.StateHealthy
		e.add(t, s)
	}
	e.probes.set("a", outcome{hang: true})
	e.probes.set("b", pass)
	a, _ := e.c.Status("a")
	b, _ := e.c.Status("b")
	if !a.NextProbe.Before(b.NextProbe) || !b.NextProbe.Before(a.NextProbe.Add(10*time.Second)) {
		t.Fatalf("first probes at a %v, b %v: b must be due while a's probe runs", a.NextProbe.Sub(epoch), b.NextProbe.Sub(epoch))
	}
	want := a.NextProbe.Add(10 * time.Second).Sub(b.NextProbe)
	e.c.Start()
	step(t, e, a.NextProbe.Sub(e.clock.Now()))
	step(t, e, b.NextProbe.Sub(e.clock.Now()))
	if ov := e.c.Overload(); ov.Waiting != 1 || ov.InFlight != 1 {
		t.Fatalf("b is not waiting for a's slot: %+v", ov)
	}
	step(t, e, a.NextProbe.Add(10*time.Second).Sub(e.clock.Now())) // a times out, b starts
	if st, _ := e.c.Status("b"); st.ActiveResults != 1 {
		t.Fatalf("b probed %d times, want 1", st.ActiveResults)
	}
	if ov := e.c.Overload(); ov.Lag != want || ov.Degraded {
		t.Errorf("overload %+v, want lag %v reported and not degraded", ov, want)
	}
}

// A stall of the process longer than MaxStall is a sign; one of exactly
// MaxStall is not, and nothing is with MaxStall unset or detection off.
func TestOverloadStallThresholdIsExclusive(t *testing.T) {
	for _, c := range []struct {
		policy   checker.OverloadPolicy
		stall    time.Duration
		degraded bool
	}{
		{checker.OverloadPolicy{MaxStall: 200 * time.Millisecond}, 200 * time.Millisecond, false},
		{checker.OverloadPolicy{MaxStall: 200 * time.Millisecond}, 200*time.Millisecond + 1, true},
		{checker.OverloadPolicy{}, time.Hour, false},
		{checker.OverloadPolicy{MaxStall: 200 * time.Millisecond, Disabled: true}, time.Hour, false},
	} {
		e := newEnv(t, checker.Config{Overload: c.policy})
		e.c.Start()
		e.c.NoteStall(c.stall)
		if ov := e.c.Overload(); ov.Degraded != c.degraded {
			t.Errorf("policy %+v, stall %v: %+v, want degraded %v", c.policy, c.stall, ov, c.degraded)
		} else if c.degraded && ov.Reason != "runnable goroutines waited 200.000001ms to run (threshold 200ms)" {
			t.Errorf("reason %q", ov.Reason)
		}
	}
}

// A probe that found no file descriptor free (the checker's open-file
// limit) says nothing of its target: it never counts toward fall, even with
// overload detection off, and with detection on it makes the checker
// degraded, naming the cause. A real failure of another target at the same
// time still counts.
func TestOwnFaultNeverCounts(t *testing.T) {
	noFiles := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
	for _, detect := range []bool{true, false} {
		t.Run(fmt.Sprintf("detection %v", detect), func(t *testing.T) {
			e := newEnv(t, checker.Config{Overload: checker.OverloadPolicy{Disabled: !detect, MaxLag: -1}})
			for _, n := range []string{"a-no-files", "b-refuses"} {
				s := spec(n)
				s.Interval, s.Timeout, s.Fall, s.InitialState = time.Second, time.Second, 1, checker.StateHealthy
				e.add(t, s)
			}
			e.probes.set("a-no-files", outcome{err: noFiles})
			e.probes.set("b-refuses", fail)
			e.c.Start()
			e.clock.Advance(time.Second)
			waitFor(t, "both results", func() bool {
				a, _ := e.c.Status("a-no-files")
				b, _ := e.c.Status("b-refuses")
				return a.IgnoredTimeouts == 1 && b.ActiveResults >= 1
			})
			if got := e.c.Healthy(""); len(got) != 1 || got[0] != "a-no-files" {
				t.Errorf("routable %v, want only a-no-files: the checker's own failure did not count, b's refusal did", got)
			}
			a, _ := e.c.Status("a-no-files")
			if !a.LastResult.Ignored || !strings.Contains(a.LastResult.Err, "too many open files") {
				t.Errorf("a's last result %+v, want it ignored, saying too many open files", a.LastResult)
			}
			ov := e.c.Overload()
			if detect && (!ov.Degraded || !strings.Contains(ov.Reason, "no file descriptor free")) {
				t.Errorf("overload %+v, want degraded for want of file descriptors", ov)
			}
			if !detect && ov.Degraded {
				t.Errorf("overload %+v with detection off", ov)
			}
		})
	}
}

// A target probed every millisecond starts a few milliseconds late
// whenever the machine is busy. With the default MaxLag (the interval)
// that is no sign of overload under DefaultOverloadLagFloor: otherwise
// one such target would keep the checker degraded, and no other target's
// own timeout would count. Past the floor, lag is a sign again.
func TestDefaultLagThresholdHasAFloor(t *testing.T) {
	e := newEnv(t, checker.Config{})
	fast := spec("fast")
	fast.Interval, fast.Timeout = time.Millisecond, time.Millisecond
	e.add(t, fast)
	e.probes.set("fast", pass)
	hung := spec("hung")
	hung.Interval, hung.Timeout, hung.Fall, hung.InitialState = time.Second, 500*time.Millisecond, 1, checker.StateHealthy
	e.add(t, hung)
	e.probes.set("hung", outcome{hang: true})
	e.c.Start()
	const late = 50 * time.Millisecond // under the floor, 50 of fast's intervals
	for range 40 {                     // 2s: hung's probe times out at least once
		step(t, e, late)
	}
	ov := e.c.Overload()
	if ov.Degraded {
		t.Fatalf("degraded by probes at most %v late, under the floor %v: %+v", late, checker.DefaultOverloadLagFloor, ov)
	}
	if ov.Lag <= fast.Interval {
		t.Fatalf("last lag %v, want more than fast's interval %v (what the threshold would be without the floor)", ov.Lag, fast.Interval)
	}
	if st, _ := e.c.Status("hung"); st.State != checker.StateUnhealthy || st.IgnoredTimeouts != 0 {
		t.Errorf("hung: %v with %d ignored timeouts, want unhealthy by its own timeout (fall 1), none ignored", st.State, st.IgnoredTimeouts)
	}

	step(t, e, checker.DefaultOverloadLagFloor+late)
	ov = e.c.Overload()
	if want := "late (threshold " + checker.DefaultOverloadLagFloor.String() + ")"; !ov.Degraded || !strings.Contains(ov.Reason, want) {
		t.Errorf("after a probe %v late: %+v, want degraded, %q", checker.DefaultOverloadLagFloor+late, ov, want)
	}
}

package checker_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// restarted starts a checker on the store e used, its clock going on from
// e's: pulsed restarted on the same data dir.
func restarted(t *testing.T, e *testEnv, st *memStore) *testEnv {
	t.Helper()
	e.c.Close()
	clock := fakeclock.New(e.clock.Now())
	fp := newFakeProbers(clock)
	c, err := checker.New(checker.Config{Store: st, Clock: clock, NewProber: fp.New,
		Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testEnv{c: c, clock: clock, probes: fp}
}

// A single pulsed stores flap damping with the state, as replicas on etcd
// do: a target flapping when pulsed stops is still flapping when it comes
// back, counts the transitions it had, and comes back into the pool only
// once stable for flap_stable_for since its last change, with no second
// FLAPPING_STARTED.
func TestStoreKeepsFlapDampingAcrossRestart(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	s := spec("web-2")
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 1, 1, checker.StateHealthy
	s.FlapWindow, s.FlapThreshold, s.FlapStableFor = 10*time.Second, 3, 3*time.Second
	e.add(t, s)
	if got, want := flapRun(t, e, flakyServer), "O x O x x x x x x x"; got != want {
		t.Fatalf("pool %q, want %q", got, want)
	}

	e2 := restarted(t, e, st)
	got, _ := e2.c.Status("web-2")
	if !got.Flapping || got.State != checker.StateUnhealthy || got.Verdict != checker.StateHealthy || got.Transitions != 6 || !got.CarriedOver {
		t.Fatalf("after a restart: flapping %v, state %v, verdict %v, %d transitions, carried over %v; want flapping, unhealthy, verdict healthy, 6, carried over",
			got.Flapping, got.State, got.Verdict, got.Transitions, got.CarriedOver)
	}
	w := watchNow(t, e2.c, checker.Filter{})
	if got := flapRun(t, e2, []bool{true, true, true}); got != "x x O" {
		t.Errorf("stable passes after the restart: pool %q, want back at the third", got)
	}
	e2.c.List("") // published once stored
	if diff := cmp.Diff([]string{
		"web-2: no longer flapping, stable for 3s after flapping",
		"web-2: unhealthy -> healthy",
	}, policyKinds(next(t, w))); diff != "" {
		t.Errorf("events after the restart (-want +got):\n%s", diff)
	}
}

// A drained target keeps its verdict across a restart, a verdict that
// changed while it drained (no transition: its state stays held) included:
// activated, it takes that verdict at once, as it would have without the
// restart.
func TestStoreKeepsADrainedTargetsVerdictAcrossRestart(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	s := modeSpec("web-1", "")
	s.Rise = 3
	e.add(t, s)
	e.probes.set("web-1", fail)
	e.c.RunRound(t.Context()) // fall 1: unhealthy
	setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy"})
	e.probes.set("web-1", pass)
	for range 3 { // rise 3: the verdict recovers while the drain holds the state
		e.clock.Advance(time.Second)
		e.c.RunRound(t.Context())
	}
	if got, _ := e.c.Status("web-1"); got.State != checker.StateUnhealthy || got.Verdict != checker.StateHealthy {
		t.Fatalf("draining: state %v, verdict %v; want unhealthy, verdict healthy", got.State, got.Verdict)
	}

	e2 := restarted(t, e, st)
	if got, _ := e2.c.Status("web-1"); got.State != checker.StateUnhealthy || got.Verdict != checker.StateHealthy || got.Spec.Admin().Mode != checker.ModeDraining {
		t.Fatalf("after a restart: state %v, verdict %v, mode %v; want unhealthy, verdict healthy, draining", got.State, got.Verdict, got.Spec.Admin().Mode)
	}
	setMode(t, e2.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeActive})
	if got, _ := e2.c.Status("web-1"); got.State != checker.StateHealthy || !got.Routable {
		t.Errorf("activated after a restart: state %v, routable %v; want healthy at once, as without the restart", got.State, got.Routable)
	}
}

// A hold is stored with the held target's state: after a restart the
// target is still routable and held, with its unhealthy verdict, and the
// same results move nothing: no transition, no second PANIC_ENTERED.
func TestStoreKeepsHoldsAcrossRestart(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.34}); err != nil {
		t.Fatal(err)
	}
	results := map[string]outcome{"a": fail, "b": fail, "c": pass}
	for n := range results {
		e.add(t, modeSpec(n, "edge"))
	}
	e.probes.setAll(results)
	e.c.RunRound(t.Context()) // at most 1 of 3 down: a out, b held
	if b, _ := e.c.Status("b"); !b.PanicHeld || !b.Routable {
		t.Fatalf("before the restart: b %+v; want held routable", b)
	}

	e2 := restarted(t, e, st)
	b, _ := e2.c.Status("b")
	if !b.PanicHeld || !b.Routable || b.Verdict != checker.StateUnhealthy {
		t.Fatalf("after a restart: b held %v, routable %v, verdict %v; want held, routable, verdict unhealthy", b.PanicHeld, b.Routable, b.Verdict)
	}
	w := watchNow(t, e2.c, checker.Filter{})
	e2.probes.setAll(results)
	e2.clock.Advance(time.Second)
	e2.c.RunRound(t.Context())
	e2.c.List("") // published once stored
	if got := policyKinds(next(t, w)); len(got) != 0 {
		t.Errorf("the same results after a restart: %q, want no event", got)
	}
}

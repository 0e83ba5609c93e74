package checker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// A group's slow member, on a single checker: with the fake clock, its
// probes take 40ms while the others' take none. At the group's next
// judgement it is a degraded outlier (routable, weight 10%) with an
// OUTLIER_STARTED event that gives the numbers; enforced, it is ejected
// (unhealthy, the transition says why) and, once it answers fast again,
// back on its own when its ejection time is up.
func TestSlowMemberIsAnOutlier(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1})
	addEdge(t, e)
	policy := checker.GroupPolicy{MaxUnhealthyFraction: 1, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second}}
	if _, err := e.c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	rounds := func(n int) {
		for range n {
			e.c.RunRound(context.Background())
		}
	}
	e.probes.set("d", outcome{advance: 40 * time.Millisecond})
	rounds(3)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d an outlier", func() bool { st, _ := e.c.Status("d"); return st.Outlier != nil })
	st, _ := e.c.Status("d")
	if st.Outlier.Ejected || st.Outlier.Reason != "p50 40ms vs group 0s" || !st.Routable || st.Weight != outlier.Weight {
		t.Errorf("d: outlier %+v, routable %v, weight %d; want degraded, p50 40ms vs group 0s, routable at %d%%", st.Outlier, st.Routable, st.Weight, outlier.Weight)
	}
	for _, n := range []string{"a", "b", "c"} {
		if st, _ := e.c.Status(n); st.Outlier != nil || st.Weight != 100 {
			t.Errorf("%s: outlier %+v, weight %d", n, st.Outlier, st.Weight)
		}
	}
	evs := outlierEvents(next(t, w))
	if len(evs) != 1 || evs[0].Kind != checker.EventOutlierStarted || evs[0].Policy.Target != "d" ||
		evs[0].Policy.Text != "d: outlier, degraded (routable at 10%): p50 40ms vs group 0s" {
		t.Fatalf("events %+v; want d's OUTLIER_STARTED", evs)
	}

	// Enforced: ejected at the next judgement.
	policy.Outlier.Enforce = true
	if _, err := e.c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	rounds(1)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d ejected", func() bool { st, _ := e.c.Status("d"); return st.Outlier != nil && st.Outlier.Ejected })
	st, _ = e.c.Status("d")
	if st.Routable || st.State != checker.StateUnhealthy || st.Verdict != checker.StateHealthy {
		t.Errorf("d ejected: %v (verdict %v), routable %v; want unhealthy with a healthy verdict", st.State, st.Verdict, st.Routable)
	}
	got := outlierEventLines(next(t, w))
	want := []string{
		"OUTLIER_ENDED d: no longer an outlier",
		"OUTLIER_STARTED d: outlier, ejected until 2026-01-01T00:00:50Z (1st in a row): p50 40ms vs group 0s",
		"d: healthy -> unhealthy (outlier ejected: p50 40ms vs group 0s)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Fast again; its ejection time up: back, routable at 100%.
	e.probes.set("d", pass)
	rounds(3)
	for range 3 {
		e.clock.Advance(10 * time.Second)
	}
	waitFor(t, "d back", func() bool { st, _ := e.c.Status("d"); return st.Outlier == nil && st.Routable })
	if st, _ := e.c.Status("d"); st.Weight != 100 || st.State != checker.StateHealthy {
		t.Errorf("d back: %v, weight %d", st.State, st.Weight)
	}
}

// outlierEvents keeps the outlier events and the transitions: one
// probe at a time, the checker calls itself overloaded, and says so.
func outlierEvents(evs []checker.Event) []checker.Event {
	var out []checker.Event
	for _, e := range evs {
		if e.Kind == checker.EventTransition || e.Kind == checker.EventOutlierStarted || e.Kind == checker.EventOutlierEnded {
			out = append(out, e)
		}
	}
	return out
}

// addEdge adds a to d to group edge, healthy from the start, rise and
// fall 1, probed when a test runs a round.
func addEdge(t *testing.T, e *testEnv) {
	t.Helper()
	for _, n := range []string{"a", "b", "c", "d"} {
		s := spec(n)
		s.Group, s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = "edge", time.Hour, time.Second, 1, 1, checker.StateHealthy
		e.add(t, s)
	}
}

// outlierEventLines is outlierEvents as lines: a transition with its
// reason, a policy event with its kind and text.
func outlierEventLines(evs []checker.Event) []string {
	var lines []string
	for _, ev := range outlierEvents(evs) {
		switch {
		case ev.Kind == checker.EventTransition:
			lines = append(lines, ev.Transition.String()+" ("+ev.Transition.Reason+")")
		case ev.Kind.IsPolicy():
			lines = append(lines, ev.Kind.String()+" "+ev.Policy.Text)
		}
	}
	return lines
}

// An ejection is a hold like flap damping's: the group's panic threshold
// has the last word. With one of four down already and at most one
// unhealthy, the ejected outlier stays routable, held, until there is
// room.
func TestOutlierEjectionUnderThePanicThreshold(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1})
	addEdge(t, e)
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.25, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: 10 * time.Second, Enforce: true, MaxEjectionPercent: 100}}); err != nil {
		t.Fatal(err)
	}
	e.c.Start()
	e.probes.set("d", outcome{advance: 40 * time.Millisecond})
	for range 3 {
		e.c.RunRound(context.Background())
	}
	e.probes.set("c", fail)
	e.c.RunRound(context.Background()) // c down: the one the threshold allows
	if st, _ := e.c.Status("c"); st.State != checker.StateUnhealthy {
		t.Fatalf("c: %v, want unhealthy", st.State)
	}
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d ejected", func() bool { st, _ := e.c.Status("d"); return st.Outlier != nil && st.Outlier.Ejected })
	if st, _ := e.c.Status("d"); !st.Routable || !st.PanicHeld {
		t.Errorf("d ejected with c down: routable %v, held %v; want routable, held by the panic threshold", st.Routable, st.PanicHeld)
	}
	// c comes back: room for d's ejection.
	e.probes.set("c", pass)
	e.c.RunRound(context.Background())
	waitFor(t, "d out", func() bool { st, _ := e.c.Status("d"); return !st.Routable })
	if st, _ := e.c.Status("c"); !st.Routable {
		t.Errorf("c back: %v", st.State)
	}
}

// A member in maintenance is not probed: the latency of its last probes
// says nothing of it now, so it is not judged, and neither is its
// latency part of its group's median; nor is a member its own probes find
// down. Here d and e answered slowly; e is then put in maintenance. At
// the next judgement d is an outlier and e is not.
func TestOutlierLeavesOutMembersNotProbed(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1})
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		s := spec(n)
		s.Group, s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = "edge", time.Hour, time.Second, 1, 1, checker.StateHealthy
		e.add(t, s)
	}
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 1, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: 10 * time.Second, MinMembers: 2}}); err != nil {
		t.Fatal(err)
	}
	e.c.Start()
	e.probes.set("d", outcome{advance: 40 * time.Millisecond})
	e.probes.set("e", outcome{advance: 40 * time.Millisecond})
	for range 3 {
		e.c.RunRound(context.Background())
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "e", Mode: checker.ModeMaintenance, Reason: "disk swap"}); err != nil {
		t.Fatal(err)
	}
	e.probes.set("f", fail)
	e.c.RunRound(context.Background()) // f down; e in maintenance is not probed
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d an outlier", func() bool { st, _ := e.c.Status("d"); return st.Outlier != nil })
	if st, _ := e.c.Status("d"); st.Outlier.Reason != "p50 40ms vs group 0s" {
		t.Errorf("d: %q, want p50 40ms vs group 0s (a, b, c and d compared)", st.Outlier.Reason)
	}
	for _, n := range []string{"e", "f"} {
		if st, _ := e.c.Status(n); st.Outlier != nil {
			t.Errorf("%s, not probed or down, is an outlier: %+v", n, st.Outlier)
		}
	}
}

// A policy out of its bounds is refused with a *FieldError that names the
// field under "outlier.", as the API reports it; the group keeps none.
func TestOutlierPolicyBounds(t *testing.T) {
	e := newEnv(t, checker.Config{})
	_, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{Outlier: outlier.Policy{LatencyFactor: 3, MinMembers: 1}})
	var fe *checker.FieldError
	if !errors.As(err, &fe) || err.Error() != "outlier.min_members: must be 0 (3) or at least 2, got 1" {
		t.Errorf("min_members 1: %v, want a FieldError on outlier.min_members", err)
	}
	if g := e.c.Groups("edge"); len(g) != 0 {
		t.Errorf("after a refused policy: %+v, want no group", g)
	}
}

// Turning a group's outlier detection off ends its ejections at once, and
// the event and the transition say that is why, not that the ejection
// time ran out.
func TestOutlierDetectionOffEndsEjections(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1})
	addEdge(t, e)
	policy := checker.GroupPolicy{MaxUnhealthyFraction: 1, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: 10 * time.Second, BaseEjectionTime: time.Hour, Enforce: true}}
	if _, err := e.c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	e.probes.set("d", outcome{advance: 40 * time.Millisecond})
	for range 3 {
		e.c.RunRound(context.Background())
	}
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d ejected", func() bool { st, _ := e.c.Status("d"); return st.Outlier != nil && st.Outlier.Ejected })
	next(t, w)

	policy.Outlier = outlier.Policy{}
	if _, err := e.c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "d routable", func() bool { st, _ := e.c.Status("d"); return st.Outlier == nil && st.Routable })
	got := outlierEventLines(next(t, w))
	want := []string{
		"OUTLIER_ENDED d: ejection over: the group's outlier detection is off",
		"d: unhealthy -> healthy (outlier ejection over: the group's outlier detection is off)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

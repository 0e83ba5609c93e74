package checker_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// policyKinds describes events as kinds does, with policy events by their
// text.
func policyKinds(evs []checker.Event) []string {
	out := []string{}
	for _, e := range evs {
		if e.Kind.IsPolicy() {
			out = append(out, e.Policy.Text)
			continue
		}
		out = append(out, kinds([]checker.Event{e})...)
	}
	return out
}

// poolEnv is a checker with a default panic threshold of 0.5 and the named
// healthy targets (rise 1, fall 1) in group edge.
func poolEnv(t *testing.T, cfg checker.Config, names ...string) *testEnv {
	t.Helper()
	cfg.MaxUnhealthyFraction = 0.5
	cfg.Defaults = checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	e := newEnv(t, cfg)
	for _, n := range names {
		s := spec(n)
		s.Group, s.InitialState = "edge", checker.StateHealthy
		e.add(t, s)
		e.probes.set(n, pass)
	}
	return e
}

func round(t *testing.T, e *testEnv, set map[string]outcome) []string {
	t.Helper()
	e.probes.setAll(set)
	return texts(e.c.RunRound(t.Context()))
}

func group(t *testing.T, c *checker.Checker, name string) checker.GroupStatus {
	t.Helper()
	gs := c.Groups(name)
	if len(gs) != 1 {
		t.Fatalf("Groups(%q) = %+v", name, gs)
	}
	return gs[0]
}

// Every backend of a group fails at once (the deep health check trap: one
// shared dependency down fails them all): at most half of them are marked unhealthy; the rest are held,
// stay routable and say so, and the group's PANIC_ENTERED goes on the
// stream and into the log.
func TestPanicAllBackendsFailAtOnce(t *testing.T) {
	var logs bytes.Buffer
	e := poolEnv(t, checker.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "a", "b", "c", "d")
	w := watchNow(t, e.c, checker.Filter{Group: "edge"})
	other := watchNow(t, e.c, checker.Filter{Group: "other"})
	named := watchNow(t, e.c, checker.Filter{Group: "edge", Names: []string{"a"}})

	got := round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail, "d": fail})
	if diff := cmp.Diff([]string{"a: healthy -> unhealthy", "b: healthy -> unhealthy"}, got); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c", "d"}, e.c.Healthy("edge")); diff != "" {
		t.Errorf("routable (-want +got):\n%s", diff)
	}
	for _, n := range []string{"c", "d"} {
		st, _ := e.c.Status(n)
		if !st.PanicHeld || !st.Routable || st.State != checker.StateHealthy || st.Verdict != checker.StateUnhealthy {
			t.Errorf("%s: held %v routable %v state %v verdict %v; want held, routable, healthy, verdict unhealthy", n, st.PanicHeld, st.Routable, st.State, st.Verdict)
		}
	}
	want := checker.GroupStatus{Group: "edge", MaxUnhealthyFraction: 0.5, Targets: 4, Unhealthy: 2, MaxUnhealthy: 2, Panic: true, Held: []string{"c", "d"}}
	if diff := cmp.Diff(want, group(t, e.c, "edge")); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	evs := next(t, w)
	if diff := cmp.Diff([]string{
		"a: healthy -> unhealthy", "b: healthy -> unhealthy",
		"edge: panic entered, holding c (2 of 4 down, at most 2)",
	}, policyKinds(evs)); diff != "" {
		t.Fatalf("stream (-want +got):\n%s", diff)
	}
	if pe := evs[2]; pe.Kind != checker.EventPanicEntered || pe.Group() != "edge" || pe.Revision != evs[1].Revision+1 {
		t.Errorf("panic event %+v: want PANIC_ENTERED of edge at the next revision", pe)
	}
	if got := policyKinds(next(t, named)); len(got) != 2 || !strings.Contains(got[1], "panic entered") {
		t.Errorf("a watcher of edge's a got %v, want a's fall and the group's panic", got)
	}
	if got := next(t, other); len(got) != 0 {
		t.Errorf("a watcher of another group got %v", policyKinds(got))
	}
	// The line names the group and, as the event has no target, no target.
	if !regexp.MustCompile(`level=WARN msg="edge: panic entered, holding c \(2 of 4 down, at most 2\)" event=PANIC_ENTERED revision=\d+ group=edge\n`).MatchString(logs.String()) {
		t.Errorf("log lacks the panic with its group:\n%s", logs.String())
	}

	// Still failing: nothing moves.
	if got := round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail, "d": fail}); len(got) != 0 {
		t.Errorf("a second failing round: %v", got)
	}
}

// Half the group fails: that is within the threshold, no panic.
func TestPanicHalfFailIsNoPanic(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b", "c", "d")
	w := watchNow(t, e.c, checker.Filter{})
	got := round(t, e, map[string]outcome{"a": pass, "b": fail, "c": pass, "d": fail})
	if diff := cmp.Diff([]string{"b: healthy -> unhealthy", "d: healthy -> unhealthy"}, got); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if g := group(t, e.c, "edge"); g.Panic || g.Unhealthy != 2 || len(g.Held) != 0 {
		t.Errorf("group %+v: want 2 unhealthy, no panic", g)
	}
	if got := policyKinds(next(t, w)); len(got) != 2 {
		t.Errorf("stream %v: want only the two transitions", got)
	}
	// A third failure would pass the threshold: held.
	if got := round(t, e, map[string]outcome{"a": fail}); len(got) != 0 {
		t.Errorf("third failure: %v, want it held", got)
	}
	if st, _ := e.c.Status("a"); !st.PanicHeld || !st.Routable {
		t.Errorf("a: %+v, want held and routable", st)
	}
}

// As targets recover, held targets are released in name order, whatever
// order they were held in; the group leaves panic when none is held.
func TestPanicRecoveryReleasesHeldTargetsInNameOrder(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b", "c", "d")
	round(t, e, map[string]outcome{"d": fail})
	round(t, e, map[string]outcome{"c": fail}) // c and d are unhealthy: the group is full
	w := watchNow(t, e.c, checker.Filter{Group: "edge"})
	if got := round(t, e, map[string]outcome{"b": fail}); len(got) != 0 {
		t.Fatalf("b's failure: %v, want it held", got)
	}
	if got := round(t, e, map[string]outcome{"a": fail}); len(got) != 0 { // a is held after b
		t.Fatalf("a's failure: %v, want it held", got)
	}
	if g := group(t, e.c, "edge"); !cmp.Equal(g.Held, []string{"a", "b"}) {
		t.Fatalf("held %v", g.Held)
	}

	// d recovers: one slot, and a (first by name, though held last) takes it.
	if diff := cmp.Diff([]string{"a: healthy -> unhealthy", "d: unhealthy -> healthy"}, round(t, e, map[string]outcome{"d": pass})); diff != "" {
		t.Errorf("d recovers (-want +got):\n%s", diff)
	}
	st, _ := e.c.Status("a")
	if st.PanicHeld || st.State != checker.StateUnhealthy {
		t.Errorf("a after release: %+v", st)
	}
	// c recovers: b is released, and the group leaves panic.
	if diff := cmp.Diff([]string{"b: healthy -> unhealthy", "c: unhealthy -> healthy"}, round(t, e, map[string]outcome{"c": pass})); diff != "" {
		t.Errorf("c recovers (-want +got):\n%s", diff)
	}
	evs := next(t, w)
	if diff := cmp.Diff([]string{
		"edge: panic entered, holding b (2 of 4 down, at most 2)",
		"d: unhealthy -> healthy", "a: healthy -> unhealthy",
		"c: unhealthy -> healthy", "b: healthy -> unhealthy",
		"edge: panic exited (2 of 4 down, at most 2)",
	}, policyKinds(evs)); diff != "" {
		t.Fatalf("stream (-want +got):\n%s", diff)
	}
	if r := evs[2].Transition.Reason; r != "released from group edge's panic hold (2 of 4 down, at most 2)" {
		t.Errorf("release reason %q", r)
	}
	if g := group(t, e.c, "edge"); g.Panic || len(g.Held) != 0 {
		t.Errorf("group %+v after recovery", g)
	}
}

// A held target whose own results recover is simply no longer held: no
// transition, and the group leaves panic.
func TestPanicHeldTargetRecoversInPlace(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b")
	round(t, e, map[string]outcome{"a": fail, "b": fail}) // a down, b held
	w := watchNow(t, e.c, checker.Filter{})
	if got := round(t, e, map[string]outcome{"a": fail, "b": pass}); len(got) != 0 {
		t.Errorf("b recovers while held: %v, want no transition", got)
	}
	if got := policyKinds(next(t, w)); !cmp.Equal(got, []string{"edge: panic exited (1 of 2 down, at most 1)"}) {
		t.Errorf("stream %v", got)
	}
	if st, _ := e.c.Status("b"); st.PanicHeld || st.State != checker.StateHealthy || st.Verdict != checker.StateHealthy {
		t.Errorf("b %+v", st)
	}
}

// A one-target group is always marked (at least one target of a group may
// be unhealthy), ungrouped targets are never a pool, and 1.0 disables the
// threshold.
func TestPanicThresholdBounds(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "solo")
	if got := round(t, e, map[string]outcome{"solo": fail}); !cmp.Equal(got, []string{"solo: healthy -> unhealthy"}) {
		t.Errorf("a one-target group: %v", got)
	}
	for _, n := range []string{"x", "y", "z"} {
		s := spec(n)
		s.InitialState = checker.StateHealthy
		e.add(t, s)
	}
	got := round(t, e, map[string]outcome{"solo": fail, "x": fail, "y": fail, "z": fail})
	if len(got) != 3 {
		t.Errorf("ungrouped targets: %v, want all three down", got)
	}

	e = poolEnv(t, checker.Config{}, "a", "b", "c")
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 1}); err != nil {
		t.Fatal(err)
	}
	if got := round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail}); len(got) != 3 {
		t.Errorf("threshold 1: %v, want all down", got)
	}
}

// SetGroupPolicy: raising the threshold releases held targets at once,
// lowering it marks nothing by itself; the zero policy goes back to the
// default; bad input names the field.
func TestSetGroupPolicy(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b", "c", "d")
	round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail, "d": fail}) // c, d held
	w := watchNow(t, e.c, checker.Filter{})
	g, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	if g.MaxUnhealthy != 3 || !cmp.Equal(g.Held, []string{"d"}) || g.Policy.MaxUnhealthyFraction != 0.75 {
		t.Errorf("after raising to 0.75: %+v", g)
	}
	if got := policyKinds(next(t, w)); !cmp.Equal(got, []string{"c: healthy -> unhealthy"}) {
		t.Errorf("stream %v", got)
	}
	if g, _ = e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.25}); g.Unhealthy != 3 || g.MaxUnhealthy != 1 {
		t.Errorf("after lowering to 0.25: %+v; want 3 still unhealthy", g)
	}
	if g, _ = e.c.SetGroupPolicy("edge", checker.GroupPolicy{}); g.MaxUnhealthyFraction != 0.5 || g.Policy != (checker.GroupPolicy{}) {
		t.Errorf("cleared: %+v, want the default 0.5", g)
	}
	if g, _ := e.c.SetGroupPolicy("later", checker.GroupPolicy{MaxUnhealthyFraction: 0.3}); g.Targets != 0 {
		t.Errorf("policy of an empty group: %+v", g)
	}
	if gs := e.c.Groups(""); len(gs) != 2 || gs[1].Group != "later" {
		t.Errorf("Groups() = %+v, want edge and later", gs)
	}
	for _, tt := range []struct {
		group string
		f     float64
		field string
	}{{"", 0.5, "group"}, {"a b", 0.5, "group"}, {"edge", 1.5, "max_unhealthy_fraction"}, {"edge", -0.1, "max_unhealthy_fraction"}} {
		_, err := e.c.SetGroupPolicy(tt.group, checker.GroupPolicy{MaxUnhealthyFraction: tt.f})
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("SetGroupPolicy(%q, %v): %v, want a FieldError on %s", tt.group, tt.f, err, tt.field)
		}
	}
	if _, err := checker.New(checker.Config{MaxUnhealthyFraction: 2}); err == nil {
		t.Error("New with MaxUnhealthyFraction 2 succeeded")
	}
}

// A held target that leaves the group (moved or removed) makes room for
// the others and takes its hold with it.
func TestPanicMovesAndRemovals(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b", "c", "d")
	round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail, "d": fail}) // c, d held
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Remove("a") // 3 targets, 1 unhealthy, 1 allowed: nothing released
	if g := group(t, e.c, "edge"); g.Unhealthy != 1 || g.MaxUnhealthy != 1 || !cmp.Equal(g.Held, []string{"c", "d"}) {
		t.Errorf("after removing a: %+v", g)
	}
	moved := spec("c")
	moved.Group = "solo"
	e.add(t, moved) // c's verdict is unhealthy: in its own group it is marked
	if st, _ := e.c.Status("c"); st.PanicHeld || st.State != checker.StateUnhealthy {
		t.Errorf("c moved out: %+v", st)
	}
	if diff := cmp.Diff([]string{"removed a", "updated c", "c: healthy -> unhealthy"}, policyKinds(next(t, w))); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	if g := group(t, e.c, "edge"); !cmp.Equal(g.Held, []string{"d"}) {
		t.Errorf("edge after c left: %+v", g)
	}
}

// policyRecorder is an Observer that keeps the policy events it is told.
type policyRecorder struct {
	recorder
	policies []string
}

func (r *policyRecorder) ObservePolicy(k checker.EventKind, at time.Time, p checker.PolicyChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies = append(r.policies, fmt.Sprintf("%s %s %s", k, at.Format(time.RFC3339), p.Text))
}

// A PolicyObserver is told of a group's panic, with the event's time and
// text, as the stream is.
func TestPolicyObserverSeesThePanic(t *testing.T) {
	rec := &policyRecorder{}
	e := poolEnv(t, checker.Config{Observer: rec}, "a", "b", "c", "d")
	round(t, e, map[string]outcome{"a": fail, "b": fail, "c": fail, "d": fail})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"PANIC_ENTERED " + e.clock.Now().Format(time.RFC3339) + " edge: panic entered, holding c (2 of 4 down, at most 2)"}
	if diff := cmp.Diff(want, rec.policies); diff != "" {
		t.Errorf("policy events observed (-want +got):\n%s", diff)
	}
}

func (r *policyRecorder) ObserveMode(s checker.Spec, from checker.Mode, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies = append(r.policies, fmt.Sprintf("%s %v -> %v %s", s.Name, from, s.Admin().Mode, s.Admin().Reason))
}

// A ModeObserver is told of every change of a target's mode, even one
// that changes no state.
func TestModeObserverSeesEveryModeChange(t *testing.T) {
	rec := &policyRecorder{}
	e := newEnv(t, checker.Config{Observer: rec})
	e.add(t, spec("a")) // unhealthy: a drain changes no state
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "a", Mode: checker.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff([]string{"a active -> draining deploy 4711"}, rec.policies); diff != "" {
		t.Errorf("mode changes observed (-want +got):\n%s", diff)
	}
}

// Raising the threshold releases every held target at once, however many:
// more than one group write on replicas holds.
func TestRaisingTheThresholdReleasesEveryHeldTarget(t *testing.T) {
	names := make([]string, 200)
	fails := make(map[string]outcome, len(names))
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
		fails[names[i]] = fail
	}
	e := poolEnv(t, checker.Config{}, names...)
	round(t, e, fails)
	if g := group(t, e.c, "edge"); g.Unhealthy != 100 || len(g.Held) != 100 {
		t.Fatalf("after every target failed: %d unhealthy, %d held; want 100 and 100", g.Unhealthy, len(g.Held))
	}
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 1}); err != nil {
		t.Fatal(err)
	}
	if g := group(t, e.c, "edge"); g.Unhealthy != 200 || len(g.Held) != 0 || g.Panic {
		t.Errorf("after the threshold was raised: %d unhealthy, %d held, panic %v; want 200, none held", g.Unhealthy, len(g.Held), g.Panic)
	}
}

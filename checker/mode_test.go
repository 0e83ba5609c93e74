package checker_test

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// modeSpec is a target probed every second, rise 2 and fall 1, starting
// healthy.
func modeSpec(name, group string) checker.Spec {
	s := spec(name)
	s.Group = group
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 2, 1, checker.StateHealthy
	return s
}

// events describes events for comparison: transitions with their reason
// and mode, mode changes, policy texts.
func events(evs []checker.Event) []string {
	out := []string{}
	for _, e := range evs {
		switch {
		case e.Kind == checker.EventTransition:
			s := e.Transition.String() + " (" + e.Transition.Mode.String()
			if e.Transition.Reason != "" {
				s += ", " + e.Transition.Reason
			}
			out = append(out, s+")")
		case e.Kind == checker.EventModeChanged:
			a := e.Status.Spec.Admin()
			out = append(out, "mode "+e.Target()+": "+e.Mode.From.String()+" -> "+a.Mode.String()+" ("+a.Reason+")")
		case e.Kind.IsPolicy():
			out = append(out, e.Kind.String()+" "+e.Policy.Text)
		default:
			out = append(out, e.Kind.String()+" "+e.Target())
		}
	}
	return out
}

func setMode(t *testing.T, c *checker.Checker, req checker.ModeRequest) []checker.Status {
	t.Helper()
	sts, err := c.SetMode(req)
	if err != nil {
		t.Fatalf("SetMode(%+v): %v", req, err)
	}
	return sts
}

// A drained target is still probed but never routable: its state is held
// unhealthy with a transition whose reason is the drain's, its verdict
// says what its probes say, and Healthy and GroupHealth leave it out.
// Back to ACTIVE, it takes its verdict again.
func TestModeDrainingHoldsTheStateWithItsReason(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, modeSpec("web-1", "edge"))
	e.add(t, modeSpec("web-2", "edge"))
	w := watchNow(t, e.c, checker.Filter{})

	sts := setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy 4711"})
	if len(sts) != 1 || sts[0].Routable || sts[0].State != checker.StateUnhealthy || sts[0].Verdict != checker.StateHealthy ||
		sts[0].Spec.Admin().Mode != checker.ModeDraining || sts[0].Spec.Admin().Reason != "deploy 4711" || !sts[0].Spec.Admin().Since.Equal(epoch) || sts[0].Weight != 0 {
		t.Fatalf("after SetMode: %+v; want draining since the epoch, held unhealthy, verdict healthy", sts)
	}
	if got := e.c.Healthy("edge"); !cmp.Equal(got, []string{"web-2"}) {
		t.Errorf("Healthy = %v, want only web-2", got)
	}
	if routable, total := e.c.GroupHealth("edge"); routable != 1 || total != 2 {
		t.Errorf("GroupHealth = %d of %d, want 1 of 2", routable, total)
	}
	calls := e.probes.callCount("web-1")
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())
	if e.probes.callCount("web-1") != calls+1 {
		t.Error("a draining target was not probed")
	}
	if st, _ := e.c.Status("web-1"); st.Routable || st.Verdict != checker.StateHealthy {
		t.Errorf("after a passing probe: %+v; want still held out", st)
	}
	setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeActive, Reason: "deploy done"})
	if st, _ := e.c.Status("web-1"); !st.Routable || st.Spec.Admin().Mode != checker.ModeActive || st.Weight != 100 {
		t.Errorf("back to active: %+v; want routable at weight 100", st)
	}
	want := []string{
		"mode web-1: active -> draining (deploy 4711)",
		"web-1: healthy -> unhealthy (draining, draining: deploy 4711)",
		"mode web-1: draining -> active (deploy done)",
		"web-1: unhealthy -> healthy (active, active: deploy done)",
	}
	if diff := cmp.Diff(want, events(next(t, w))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// The panic threshold never keeps a draining target routable: it is the
// operator's word. A drained target counts as unhealthy in its group's
// room.
func TestModeDrainIsNotHeldByThePanicThreshold(t *testing.T) {
	e := newEnv(t, checker.Config{MaxUnhealthyFraction: 0.5})
	for _, n := range []string{"a", "b"} {
		e.add(t, modeSpec(n, "edge"))
	}
	e.probes.set("a", fail)
	e.c.RunRound(t.Context()) // a is the one target the group may lose
	setMode(t, e.c, checker.ModeRequest{Target: "b", Mode: checker.ModeDraining})
	if got := e.c.Healthy("edge"); len(got) != 0 {
		t.Errorf("Healthy = %v, want none: the drain is not held back", got)
	}
	if g := e.c.Groups("edge")[0]; g.Panic || g.Unhealthy != 2 {
		t.Errorf("group %+v; want 2 unhealthy, no panic", g)
	}
}

// In maintenance a target is not probed. Leaving it with a stale last
// result, it starts unhealthy and must pass rise probes; with a result
// younger than one interval, its verdict is carried over.
func TestModeMaintenanceStopsProbesAndLeavesUnhealthy(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, modeSpec("db-1", ""))
	e.c.RunRound(t.Context()) // a pass at the epoch
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeMaintenance, Reason: "disk swap"})
	calls := e.probes.callCount("db-1")
	e.clock.Advance(5 * time.Second)
	e.c.RunRound(t.Context())
	if e.probes.callCount("db-1") != calls {
		t.Error("a target in maintenance was probed")
	}
	w := watchNow(t, e.c, checker.Filter{})
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeActive})
	st, _ := e.c.Status("db-1")
	if st.Routable || st.Verdict != checker.StateUnhealthy || st.PassStreak != 0 || st.CarriedOver {
		t.Errorf("out of maintenance with a 5s-old result: %+v; want unhealthy, no streak", st)
	}
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())
	if st, _ := e.c.Status("db-1"); st.Routable {
		t.Error("routable after one pass, rise is 2")
	}
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())
	if st, _ := e.c.Status("db-1"); !st.Routable {
		t.Error("not routable after rise passes")
	}
	want := []string{"mode db-1: maintenance -> active ()", "db-1: unhealthy -> healthy (active)"}
	if diff := cmp.Diff(want, events(next(t, w))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// A fresh result is carried over.
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeMaintenance})
	e.clock.Advance(500 * time.Millisecond)
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeActive})
	if st, _ := e.c.Status("db-1"); !st.Routable || !st.CarriedOver {
		t.Errorf("out of maintenance with a 500ms-old result: %+v; want carried over, routable", st)
	}
}

// A group's SetMode sets every target of the group; Add keeps a target's
// mode whatever spec it is given.
func TestModeGroupAndAddKeepsTheMode(t *testing.T) {
	e := newEnv(t, checker.Config{})
	for _, n := range []string{"b", "a", "c"} {
		e.add(t, modeSpec(n, "edge"))
	}
	e.add(t, modeSpec("x", "other"))
	sts := setMode(t, e.c, checker.ModeRequest{Group: "edge", Mode: checker.ModeDraining, Reason: "rack 4"})
	var names []string
	for _, st := range sts {
		names = append(names, st.Spec.Name+"="+st.Spec.Admin().Mode.String())
	}
	if !cmp.Equal(names, []string{"a=draining", "b=draining", "c=draining"}) {
		t.Errorf("SetMode(group) = %v", names)
	}
	if got := e.c.Healthy(""); !cmp.Equal(got, []string{"x"}) {
		t.Errorf("Healthy = %v, want x", got)
	}
	s := modeSpec("a", "edge")
	s.Rise = 3
	st, _, err := e.c.Add(s)
	if err != nil || st.Spec.Admin().Mode != checker.ModeDraining || st.Spec.Rise != 3 {
		t.Errorf("Add over a drained target: %+v, %v; want the new spec, still draining", st, err)
	}
}

// Bad requests are refused naming the field, and change nothing.
func TestModeBadRequests(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, modeSpec("web-1", "edge"))
	// msg, when set, is the whole message. An until past the bound says
	// how far ahead in whole seconds, rounded up: as the client wrote it,
	// though it reached pulsed a few milliseconds after the client read
	// its clock, and never as the bound itself.
	for _, tc := range []struct {
		req   checker.ModeRequest
		field string
		msg   string
	}{
		{checker.ModeRequest{Mode: checker.ModeDraining}, "target", ""},
		{checker.ModeRequest{Target: "web-1", Group: "edge", Mode: checker.ModeDraining}, "target", ""},
		{checker.ModeRequest{Target: "web-1", Mode: 7}, "mode", ""},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: strings.Repeat("r", 257)}, "reason", "reason: must be at most 256 bytes, got 257"},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Until: epoch}, "until", ""},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Until: epoch.Add(31 * 24 * time.Hour)}, "until", "until: must be at most 720h0m0s ahead, got 744h0m0s"},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Until: epoch.Add(800*time.Hour - 3187*time.Microsecond)}, "until", "until: must be at most 720h0m0s ahead, got 800h0m0s"},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Until: epoch.Add(720*time.Hour + 300*time.Millisecond)}, "until", "until: must be at most 720h0m0s ahead, got 720h0m1s"},
		{checker.ModeRequest{Target: "web-1", Mode: checker.ModeActive, Until: epoch.Add(time.Hour)}, "until", ""},
	} {
		_, err := e.c.SetMode(tc.req)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("SetMode(%+v) = %v, want a field error on %s", tc.req, err, tc.field)
		} else if tc.msg != "" && err.Error() != tc.msg {
			t.Errorf("SetMode(%+v) = %v, want %q", tc.req, err, tc.msg)
		}
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "nope", Mode: checker.ModeDraining}); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("unknown target: %v", err)
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Group: "nope", Mode: checker.ModeDraining}); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := e.c.Drain("web-1", 25*time.Hour); err == nil {
		t.Error("Drain for 25h accepted")
	}
	if st, _ := e.c.Status("web-1"); st.Spec.Admin() != (checker.Admin{}) || !st.Routable {
		t.Errorf("after rejected calls: %+v; want untouched", st)
	}
}

// A mode with an until returns to ACTIVE by itself, stored like any
// other; a drain removes its target when it ends, saying why.
func TestModeUntilAndDrainThenRemove(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, modeSpec("web-1", ""))
	e.add(t, modeSpec("web-2", ""))
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeMaintenance, Until: epoch.Add(time.Minute)})
	ds, err := e.c.Drain("web-2", 30*time.Second)
	if err != nil || ds.Spec.Admin().Mode != checker.ModeDraining || !ds.Spec.Admin().RemoveAt.Equal(epoch.Add(30*time.Second)) {
		t.Fatalf("Drain = %+v, %v", ds, err)
	}
	if got := st.specs["web-2"].Admin(); got.Mode != checker.ModeDraining {
		t.Errorf("drain not stored before Drain returned: %+v", got)
	}
	e.clock.Advance(30 * time.Second)
	waitFor(t, "web-2 removed", func() bool { _, err := e.c.Status("web-2"); return err != nil })
	e.clock.Advance(30 * time.Second)
	waitFor(t, "web-1 active again", func() bool { s, _ := e.c.Status("web-1"); return s.Spec.Admin().Mode == checker.ModeActive })
	if got := st.specs["web-1"].Admin(); got.Mode != checker.ModeActive || got.Reason != "until 2026-01-01T00:01:00Z reached" {
		t.Errorf("stored admin after until: %+v", got)
	}
	want := []string{
		"mode web-1: active -> maintenance ()",
		"mode web-2: active -> draining (removal in 30s)",
		"TARGET_EXPIRED web-2: removed, drained for 30s (RemoveTarget drain_for)",
		"REMOVED web-2",
		"mode web-1: maintenance -> active (until 2026-01-01T00:01:00Z reached)",
	}
	// The store publishes the events after the registry applied them, so
	// the status above may come before the last event: wait for as many
	// events as wanted, then compare.
	var got []string
	waitFor(t, "every event published", func() bool {
		for _, ev := range events(next(t, w)) {
			if strings.HasPrefix(ev, "mode") || strings.HasPrefix(ev, "TARGET_EXPIRED") || strings.HasPrefix(ev, "REMOVED") {
				got = append(got, ev)
			}
		}
		return len(got) >= len(want)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// firstExpiry waits for the first TARGET_EXPIRED event on w and returns
// it as events describes it.
func firstExpiry(t *testing.T, w *checker.Watcher) string {
	t.Helper()
	var got string
	waitFor(t, "a TARGET_EXPIRED event", func() bool {
		for _, ev := range events(next(t, w)) {
			if got == "" && strings.HasPrefix(ev, "TARGET_EXPIRED") {
				got = ev
			}
		}
		return got != ""
	})
	return got
}

// A second drain of a draining target moves its removal, not the drain's
// start: the reason gives the whole drain, in whole seconds.
func TestDrainAgainSaysTheWholeDrain(t *testing.T) {
	e := storeEnv(t, newMemStore(), checker.Config{})
	e.add(t, modeSpec("web-1", ""))
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	if _, err := e.c.Drain("web-1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(4*time.Second + 17*time.Millisecond)
	if _, err := e.c.Drain("web-1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(5 * time.Second)
	want := "TARGET_EXPIRED web-1: removed, drained for 9s (RemoveTarget drain_for)"
	if got := firstExpiry(t, w); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// The mode is stored with the spec: after a restart a drained target is
// still draining and not routable, whatever state was stored.
func TestModeSurvivesRestart(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, modeSpec("web-1", ""))
	setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeMaintenance, Reason: "disk"})
	e.c.Close()
	st.states["web-1"] = checker.StoredState{Name: "web-1", State: checker.StateHealthy} // a state stored before the mode took effect
	e2 := storeEnv(t, st, checker.Config{})
	s, err := e2.c.Status("web-1")
	if err != nil || s.Spec.Admin().Mode != checker.ModeMaintenance || s.Spec.Admin().Reason != "disk" || s.Routable {
		t.Errorf("after a restart: %+v, %v; want in maintenance, not routable", s, err)
	}
	e2.c.RunRound(t.Context())
	if e2.probes.callCount("web-1") != 0 {
		t.Error("a target in maintenance was probed after a restart")
	}
}

// A target unhealthy for its remove_after_unhealthy, without a break, is
// removed with the reason on the stream; never while its group is in
// panic.
func TestRemoveAfterUnhealthy(t *testing.T) {
	// Overload detection is off: the fake clock's jumps would make the
	// started scheduler late, and a degraded checker removes nothing.
	logs := &lockedBuffer{}
	e := newEnv(t, checker.Config{MaxUnhealthyFraction: 0.34, Overload: checker.OverloadPolicy{Disabled: true}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	for _, n := range []string{"a", "b", "c"} {
		s := modeSpec(n, "edge")
		s.Interval = time.Hour
		s.Timeout = time.Second
		s.Lifecycle = &checker.Lifecycle{RemoveAfterUnhealthy: 10 * time.Second}
		e.add(t, s)
	}
	l := modeSpec("gone", "")
	l.Interval = time.Hour
	l.Lifecycle = &checker.Lifecycle{RemoveAfterUnhealthy: 10 * time.Second}
	e.add(t, l)
	w := watchNow(t, e.c, checker.Filter{})
	e.probes.setAll(map[string]outcome{"a": fail, "b": fail, "gone": fail})
	e.c.RunRound(t.Context()) // a out, b held: edge in panic
	if g := e.c.Groups("edge")[0]; !g.Panic {
		t.Fatalf("group %+v, want panic", g)
	}
	if st, _ := e.c.Status("a"); !st.UnhealthySince.Equal(epoch) {
		t.Errorf("unhealthy since %v, want the epoch", st.UnhealthySince)
	}
	e.c.Start()
	// A removal runs a little after its deadline, as with a real clock;
	// the reason still gives the streak in whole seconds.
	e.clock.Advance(10*time.Second + 17*time.Millisecond)
	waitFor(t, "gone removed", func() bool { _, err := e.c.Status("gone"); return err != nil })
	// The pass that removed gone found a and b due too: in panic, kept.
	for _, n := range []string{"a", "b"} {
		if _, err := e.c.Status(n); err != nil {
			t.Errorf("%s removed while its group is in panic", n)
		}
	}
	e.probes.set("b", pass)
	e.probes.set("a", fail)
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context()) // b's verdict recovers (rise 2: one pass), a stays; b no longer counts
	e.probes.set("b", pass)
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())
	waitFor(t, "a removed once the panic ended", func() bool { _, err := e.c.Status("a"); return err != nil })
	if _, err := e.c.Status("b"); err != nil {
		t.Error("b removed although it recovered")
	}
	var got []string
	for _, ev := range events(next(t, w)) {
		if strings.HasPrefix(ev, "TARGET_EXPIRED") {
			got = append(got, ev)
		}
	}
	want := []string{
		"TARGET_EXPIRED gone: removed, unhealthy for 10s (remove_after_unhealthy 10s)",
		"TARGET_EXPIRED a: removed, unhealthy for 12s (remove_after_unhealthy 10s)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="gone: removed, unhealthy for 10s (remove_after_unhealthy 10s)"`) {
		t.Errorf("the removal is not in the log:\n%s", logs)
	}
}

// A slow start ramps a target's weight linearly from 0 to 100 after it
// becomes routable; its transition says when the ramp ends.
func TestSlowStart(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := modeSpec("web-1", "")
	s.InitialState, s.Rise = checker.StateUnhealthy, 1
	s.Lifecycle = &checker.Lifecycle{SlowStart: 10 * time.Second}
	e.add(t, s)
	trs := e.c.RunRound(t.Context())
	if len(trs) != 1 || !trs[0].SlowStartEnd.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("transitions %+v; want one ending its slow start 10s on", trs)
	}
	for _, tc := range []struct {
		step time.Duration
		want uint32
	}{{0, 0}, {5 * time.Second, 50}, {5 * time.Second, 100}} {
		e.clock.Advance(tc.step)
		if st, _ := e.c.Status("web-1"); st.Weight != tc.want {
			t.Errorf("weight at %v = %d, want %d", e.clock.Now().Sub(epoch), st.Weight, tc.want)
		}
	}
}

// With a shared registry the mode travels in the spec every replica
// applies: the owner's SetMode writes it, its state follows through the
// owner's proposal, and a replica that loads the registry finds the
// target draining and not routable whatever state was stored.
func TestModeShared(t *testing.T) {
	f := &fakeShared{}
	e := newSharedEnv(t, f, checker.Config{})
	s := spec("web-1")
	s.InitialState = checker.StateHealthy
	e.add(t, s)
	sts := setMode(t, e.c, checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy 4711"})
	if len(sts) != 1 || sts[0].Spec.Admin().Mode != checker.ModeDraining {
		t.Fatalf("SetMode = %+v", sts)
	}
	waitFor(t, "the drain's state stored", func() bool { return e.state(t, "web-1") == checker.StateUnhealthy })
	if n := f.proposed(); n != 1 {
		t.Errorf("%d states proposed, want 1", n)
	}

	drained := s.WithAdmin(checker.Admin{Mode: checker.ModeDraining, Reason: "deploy 4711", Since: epoch})
	other := newSharedEnv(t, &fakeShared{loadRev: 5, loaded: []checker.SharedTarget{{
		Spec: drained, State: &checker.SharedState{State: checker.StateHealthy}, StateRev: 3,
	}}}, checker.Config{})
	st, err := other.c.Status("web-1")
	if err != nil || st.Spec.Admin().Mode != checker.ModeDraining || st.Routable {
		t.Errorf("loaded by another replica: %+v, %v; want draining, not routable", st, err)
	}
}

// An automatic removal waits while the checker is degraded: stale is not
// down.
func TestRemoveAfterUnhealthyWaitsForADegradedChecker(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{MaxWaiting: 1, RecoverAfter: time.Hour}})
	s := modeSpec("dead", "")
	s.Interval = time.Hour
	s.Lifecycle = &checker.Lifecycle{RemoveAfterUnhealthy: 10 * time.Second}
	e.add(t, s)
	e.probes.set("dead", fail)
	e.c.RunRound(t.Context())
	// Two hung targets and one slot: one waits, a sign of overload.
	for _, n := range []string{"h1", "h2"} {
		e.add(t, modeSpec(n, ""))
		e.probes.set(n, outcome{hang: true})
	}
	e.c.Start()
	e.clock.Advance(time.Second)
	waitFor(t, "the checker degraded", func() bool { return e.c.Overload().Degraded })
	e.clock.Advance(10 * time.Second)
	// The loop has looked: a mode ending at the same time is applied in the
	// same pass.
	e.add(t, modeSpec("marker", ""))
	setMode(t, e.c, checker.ModeRequest{Target: "marker", Mode: checker.ModeDraining, Until: e.clock.Now().Add(time.Second)})
	e.clock.Advance(time.Second)
	waitFor(t, "the marker's mode ended", func() bool { st, _ := e.c.Status("marker"); return st.Spec.Admin().Mode == checker.ModeActive })
	if _, err := e.c.Status("dead"); err != nil {
		t.Error("removed while the checker is degraded")
	}
}

// Maintenance breaks the unhealthy streak: no result is seen in it, so a
// target repaired while out is not removed the moment it is activated,
// before a probe can say so; its streak starts again.
func TestLeavingMaintenanceRestartsTheUnhealthyStreak(t *testing.T) {
	e := newEnv(t, checker.Config{Overload: checker.OverloadPolicy{Disabled: true}})
	s := modeSpec("db-1", "")
	s.Interval = 5 * time.Second
	s.Lifecycle = &checker.Lifecycle{RemoveAfterUnhealthy: 10 * time.Second}
	e.add(t, s)
	w := watchNow(t, e.c, checker.Filter{})
	e.probes.set("db-1", fail)
	e.c.RunRound(t.Context())
	e.c.Start()
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeMaintenance, Reason: "disk swap"})
	e.clock.Advance(30 * time.Second)
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeActive})
	st, err := e.c.Status("db-1")
	if err != nil {
		t.Fatalf("db-1 removed on leaving maintenance: %v", err)
	}
	if want := epoch.Add(30 * time.Second); !st.UnhealthySince.Equal(want) {
		t.Errorf("unhealthy since %v, want %v: the streak starts again on leaving maintenance", st.UnhealthySince, want)
	}
	e.clock.Advance(10 * time.Second)
	waitFor(t, "db-1 removed 10s after leaving maintenance", func() bool { _, err := e.c.Status("db-1"); return err != nil })
	if got, want := firstExpiry(t, w), "TARGET_EXPIRED db-1: removed, unhealthy for 10s (remove_after_unhealthy 10s)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// A group's modes are stored in one write: the store gets its targets in
// one PutSpecs, and a failure changes none of them, in the registry or in
// the store, and says so.
func TestModeGroupStoredInOneWrite(t *testing.T) {
	bs := &batchStore{memStore: newMemStore()}
	e := newEnv(t, checker.Config{Store: bs, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	for _, n := range []string{"a", "b"} {
		e.add(t, modeSpec(n, "edge"))
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Group: "edge", Mode: checker.ModeDraining}); err != nil {
		t.Fatal(err)
	}
	bs.mu.Lock()
	last := slices.Clone(bs.batches[len(bs.batches)-1])
	bs.failSpec = errors.New("disk full")
	bs.mu.Unlock()
	slices.Sort(last)
	if !slices.Equal(last, []string{"a", "b"}) {
		t.Errorf("the group's modes were written as %v, want a and b in one write", bs.batches)
	}
	_, err := e.c.SetMode(checker.ModeRequest{Group: "edge", Mode: checker.ModeActive})
	if !errors.Is(err, checker.ErrStore) || !strings.Contains(err.Error(), "0 of 2 targets changed") {
		t.Fatalf("SetMode = %v, want a store error saying 0 of 2 changed", err)
	}
	for _, n := range []string{"a", "b"} {
		st, _ := e.c.Status(n)
		if st.Spec.Admin().Mode != checker.ModeDraining || bs.specs[n].Admin().Mode != checker.ModeDraining {
			t.Errorf("%s: mode %v, stored %v; want draining still", n, st.Spec.Admin().Mode, bs.specs[n].Admin().Mode)
		}
	}
}

// A new spec for a target in maintenance changes its spec, not its mode:
// it is still not probed.
func TestModeMaintenanceSurvivesANewSpec(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := modeSpec("db-1", "")
	s.Interval = time.Minute
	e.add(t, s)
	setMode(t, e.c, checker.ModeRequest{Target: "db-1", Mode: checker.ModeMaintenance})
	s.Interval = time.Second // sooner: the scheduler would bring its probe forward
	e.add(t, s)
	e.c.Start()
	e.clock.Advance(time.Minute)
	e.c.RunRound(t.Context())
	if st, _ := e.c.Status("db-1"); st.Spec.Admin().Mode != checker.ModeMaintenance || st.Spec.Interval != time.Second || e.probes.callCount("db-1") != 0 {
		t.Errorf("after a new spec: %+v, %d probes; want the new interval, in maintenance, never probed", st, e.probes.callCount("db-1"))
	}
}

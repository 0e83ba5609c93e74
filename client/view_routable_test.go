package client_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/client"
)

// healthyTCP is a target that starts HEALTHY, so it is routable unless its
// mode says otherwise, with no probe needed.
func healthyTCP(name, group, addr string) client.Target {
	tg := tcpTarget(name, group, addr)
	tg.InitialState = client.StateHealthy
	return tg
}

// A View started after targets were drained or put in maintenance leaves
// them out of Routable from its first snapshot on, and says why in Mode.
func TestViewRoutableLeavesOutModesSetBeforeItStarts(t *testing.T) {
	e := newEnv(t, 1, checker.Config{Clock: fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))})
	c := e.client(t)
	ctx := within(t)
	for _, tg := range []client.Target{
		healthyTCP("web-1", "edge", "10.0.0.1:80"),
		healthyTCP("web-2", "edge", "10.0.0.2:80"),
		healthyTCP("web-3", "edge", "10.0.0.3:80"),
	} {
		if _, _, err := c.Add(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetMode(ctx, client.ModeRequest{Target: "web-2", Mode: client.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetMode(ctx, client.ModeRequest{Target: "web-3", Mode: client.ModeMaintenance, Reason: "disk swap"}); err != nil {
		t.Fatal(err)
	}

	v := c.View(ctx, client.Filter{Group: "edge"})
	defer v.Close()
	if err := v.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"web-1"}, routableNames(v.Routable("edge"))); diff != "" {
		t.Errorf("Routable after the first snapshot (-want +got):\n%s", diff)
	}
	for name, want := range map[string]client.Mode{"web-1": client.ModeActive, "web-2": client.ModeDraining, "web-3": client.ModeMaintenance} {
		st, ok := v.Get(name)
		if !ok || st.Mode != want || st.Routable != (want == client.ModeActive) {
			t.Errorf("%s in the view: present %v, mode %v, routable %v; want mode %v", name, ok, st.Mode, st.Routable, want)
		}
	}
	// A second view, of the names only, gets the same from its snapshot.
	byName := c.View(ctx, client.Filter{Names: []string{"web-2", "web-3"}})
	defer byName.Close()
	if err := byName.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if got := routableNames(byName.Routable("edge")); len(got) != 0 {
		t.Errorf("Routable of a view by names: %v, want none", got)
	}
}

// A draining target (or one in maintenance) stays out of a running View's
// Routable when it is added again (AddTarget keeps its mode whatever spec it
// is given) or updated (UpdateTarget), even into another group.
func TestViewRoutableKeepsModesOutOnReAddAndUpdate(t *testing.T) {
	e := newEnv(t, 1, checker.Config{Clock: fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))})
	c := e.client(t)
	ctx := within(t)
	for _, tg := range []client.Target{
		healthyTCP("web-1", "edge", "10.0.0.1:80"),
		healthyTCP("web-2", "edge", "10.0.0.2:80"),
		healthyTCP("web-3", "edge", "10.0.0.3:80"),
		healthyTCP("api-1", "api", "10.0.1.1:80"),
	} {
		if _, _, err := c.Add(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	v := c.View(ctx, client.Filter{})
	defer v.Close()
	if err := v.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	// caughtUp waits until the view has applied every change made so far.
	caughtUp := func(what string) {
		t.Helper()
		l, err := c.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the view to apply "+what, func() bool { return v.Revision() >= l.Revision })
	}
	caughtUp("the adds")
	if diff := cmp.Diff([]string{"web-1", "web-2", "web-3"}, routableNames(v.Routable("edge"))); diff != "" {
		t.Fatalf("Routable before any mode (-want +got):\n%s", diff)
	}
	if _, err := c.SetMode(ctx, client.ModeRequest{Target: "web-2", Mode: client.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetMode(ctx, client.ModeRequest{Target: "web-3", Mode: client.ModeMaintenance}); err != nil {
		t.Fatal(err)
	}
	caughtUp("the modes")
	if diff := cmp.Diff([]string{"web-1"}, routableNames(v.Routable("edge"))); diff != "" {
		t.Fatalf("Routable after SetMode (-want +got):\n%s", diff)
	}

	// Added again with a new spec that says HEALTHY: the modes stay.
	for _, tg := range []client.Target{healthyTCP("web-2", "edge", "10.0.0.22:80"), healthyTCP("web-3", "edge", "10.0.0.33:80")} {
		tg.Interval = 30 * time.Second
		st, created, err := c.Add(ctx, tg)
		if err != nil || created || st.Routable {
			t.Fatalf("Add of %s again: created %v, routable %v, %v", tg.Name, created, st.Routable, err)
		}
	}
	caughtUp("the adds again")
	if diff := cmp.Diff([]string{"web-1"}, routableNames(v.Routable("edge"))); diff != "" {
		t.Errorf("Routable after the adds again (-want +got):\n%s", diff)
	}
	for _, name := range []string{"web-2", "web-3"} {
		if st, _ := v.Get(name); st.Target.Interval != 30*time.Second || st.Routable || st.Mode == client.ModeActive {
			t.Errorf("%s in the view after its add again: interval %v, routable %v, mode %v", name, st.Target.Interval, st.Routable, st.Mode)
		}
	}

	// Updated in place, then into another group: still out.
	if _, st, err := c.Update(ctx, client.Target{Name: "web-2", Timeout: 2 * time.Second}, "timeout"); err != nil || st.Routable {
		t.Fatalf("Update of web-2: routable %v, %v", st.Routable, err)
	}
	if _, st, err := c.Update(ctx, client.Target{Name: "web-3", Group: "api"}, "group"); err != nil || st.Routable {
		t.Fatalf("Update of web-3 into api: routable %v, %v", st.Routable, err)
	}
	caughtUp("the updates")
	if diff := cmp.Diff([]string{"web-1"}, routableNames(v.Routable("edge"))); diff != "" {
		t.Errorf("Routable of edge after the updates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"api-1"}, routableNames(v.Routable("api"))); diff != "" {
		t.Errorf("Routable of api after web-3 moved in (-want +got):\n%s", diff)
	}
	if st, _ := v.Get("web-2"); st.Target.Timeout != 2*time.Second || st.Mode != client.ModeDraining {
		t.Errorf("web-2 in the view after its update: timeout %v, mode %v", st.Target.Timeout, st.Mode)
	}
	if st, _ := v.Get("web-3"); st.Target.Group != "api" || st.Mode != client.ModeMaintenance {
		t.Errorf("web-3 in the view after its move: group %q, mode %v", st.Target.Group, st.Mode)
	}

	// A probe round that passes changes nothing for them either.
	for _, addr := range []string{"10.0.0.1:80", "10.0.0.22:80", "10.0.0.33:80", "10.0.1.1:80"} {
		e.set(addr, true)
	}
	e.round(t)
	caughtUp("the round")
	got := append(routableNames(v.Routable("edge")), routableNames(v.Routable("api"))...)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"api-1", "web-1"}, got); diff != "" {
		t.Errorf("Routable after a passing round (-want +got):\n%s", diff)
	}
}

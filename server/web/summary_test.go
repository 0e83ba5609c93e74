package web_test

import (
	"encoding/json"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// The group table counts a target an operator took out in its mode, not as
// a failure: planned work must not look like an outage.
func TestSummaryCountsModesApartFromFailures(t *testing.T) {
	spec := func(m checker.Mode) checker.Spec {
		return checker.Spec{Group: "edge", Rise: 2, Fall: 3}.WithAdmin(checker.Admin{Mode: m})
	}
	list := []checker.Status{
		{Spec: spec(checker.ModeActive), State: checker.StateHealthy},
		{Spec: spec(checker.ModeActive), State: checker.StateUnhealthy},
		{Spec: spec(checker.ModeDraining), State: checker.StateUnhealthy},
		{Spec: spec(checker.ModeMaintenance), State: checker.StateUnhealthy},
		{Spec: spec(checker.ModeMaintenance), State: checker.StateHealthy},
	}
	b, err := json.Marshal(web.SummarizeForTest(list))
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Name                                                      string
		Total, Healthy, Suspect, Unhealthy, Draining, Maintenance int
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Total != 5 || got[0].Healthy != 1 || got[0].Unhealthy != 1 || got[0].Draining != 1 || got[0].Maintenance != 2 {
		t.Errorf("summary %s: want 5 targets: 1 healthy, 1 unhealthy, 1 draining, 2 in maintenance", b)
	}
}

// The page's state filter takes every state pulsectl ls --state takes, and
// the two modes.
func TestStateFilters(t *testing.T) {
	rf := checker.Spec{Rise: 2, Fall: 3}
	for _, c := range []struct {
		name string
		in   checker.Status
		out  checker.Status
	}{
		{"healthy", checker.Status{Spec: rf, State: checker.StateHealthy}, checker.Status{Spec: rf, State: checker.StateUnhealthy}},
		{"unhealthy", checker.Status{Spec: rf, State: checker.StateUnhealthy}, checker.Status{Spec: rf, State: checker.StateHealthy}},
		{"suspect", checker.Status{Spec: rf, State: checker.StateSuspect}, checker.Status{Spec: rf, State: checker.StateHealthy}},
		{"routable", checker.Status{Spec: rf, Routable: true}, checker.Status{Spec: rf}},
		{"not-routable", checker.Status{Spec: rf}, checker.Status{Spec: rf, Routable: true}},
		{"held", checker.Status{Spec: rf, PanicHeld: true}, checker.Status{Spec: rf}},
		{"flapping", checker.Status{Spec: rf, Flapping: true}, checker.Status{Spec: rf}},
		{"carried-over", checker.Status{Spec: rf, CarriedOver: true}, checker.Status{Spec: rf}},
		{"quarantined", checker.Status{Spec: rf, Quarantined: "bad"}, checker.Status{Spec: rf}},
		{"draining", checker.Status{Spec: rf.WithAdmin(checker.Admin{Mode: checker.ModeDraining})}, checker.Status{Spec: rf}},
		{"maintenance", checker.Status{Spec: rf.WithAdmin(checker.Admin{Mode: checker.ModeMaintenance})}, checker.Status{Spec: rf}},
	} {
		keep, known := web.StateFilterForTest(c.name, c.in)
		drop, _ := web.StateFilterForTest(c.name, c.out)
		if !known || !keep || drop {
			t.Errorf("state=%s: known %v, keeps its case %v, keeps the other %v", c.name, known, keep, drop)
		}
	}
	if _, known := web.StateFilterForTest("down", checker.Status{}); known {
		t.Error("state=down is taken")
	}
}

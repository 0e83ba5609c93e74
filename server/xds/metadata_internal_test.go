package xds

import (
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// An endpoint's "mode" is the mode's name alone, as "state" is the state's:
// a client matching mode == "draining" finds a draining target. Targets that
// share an address list their modes in the order of their names, and an
// endpoint whose targets are all active has no mode.
func TestModeMetadata(t *testing.T) {
	spec := func(name, addr string, m checker.Mode) checker.Spec {
		s := checker.Spec{Name: name, Group: "edge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: addr}}}
		return s.WithAdmin(checker.Admin{Mode: m})
	}
	v := newView()
	v.reset([]checker.Status{
		{Spec: spec("a", "127.0.0.1:81", checker.ModeActive), State: checker.StateHealthy},
		{Spec: spec("b", "127.0.0.1:82", checker.ModeDraining), State: checker.StateHealthy},
		{Spec: spec("c", "127.0.0.1:83", checker.ModeActive), State: checker.StateHealthy},
		{Spec: spec("d", "127.0.0.1:83", checker.ModeMaintenance), State: checker.StateUnhealthy},
	}, 10)
	eps, _ := v.endpoints("edge")
	lbs := loadAssignment("edge", eps, time.Now()).GetEndpoints()[0].GetLbEndpoints()
	want := []struct{ target, mode string }{{"a", ""}, {"b", "draining"}, {"c,d", "active,maintenance"}}
	if len(lbs) != len(want) {
		t.Fatalf("%d endpoints, want %d", len(lbs), len(want))
	}
	for i, w := range want {
		md := lbs[i].GetMetadata().GetFilterMetadata()[MetadataKey].GetFields()
		if got := md["target"].GetStringValue(); got != w.target {
			t.Errorf("endpoint %d: target %q, want %q", i, got, w.target)
		}
		mode, ok := md["mode"]
		if got := mode.GetStringValue(); got != w.mode || ok != (w.mode != "") {
			t.Errorf("endpoint %s: mode %q (set: %v), want %q", w.target, got, ok, w.mode)
		}
	}
}

package web_test

import (
	"errors"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// restartedStore holds what a pulsed stored before it restarted; it takes
// every write.
type restartedStore struct{ targets []checker.StoredTarget }

func (s restartedStore) Load() ([]checker.StoredTarget, uint64, error) { return s.targets, 10, nil }
func (restartedStore) PutSpec(checker.Spec) error                      { return nil }
func (restartedStore) PutSpecs([]checker.Spec) error                   { return nil }
func (restartedStore) DeleteTarget(string) error                       { return nil }
func (restartedStore) CommitStates([]checker.StoredState, []string, uint64) error {
	return nil
}
func (restartedStore) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) { return nil, nil }
func (restartedStore) PutGroupPolicy(string, checker.GroupPolicy) error           { return nil }

// After a restart a target's state shows "carried over" until its first
// fresh result, but not that of a target in maintenance or quarantined:
// neither is probed, so the tag would never go, as if pulsed were stuck.
// The page's state filter keeps what the rows show; the checker's own flag
// (the API's carried_over) is left as it is.
func TestCarriedOverOnlyWhileAProbeIsDue(t *testing.T) {
	maint := tcpSpec("web-2", "edge").WithAdmin(checker.Admin{Mode: checker.ModeMaintenance, Reason: "disk swap", Since: epoch})
	e := newEnv(t, checker.Config{Store: restartedStore{targets: []checker.StoredTarget{
		{Spec: tcpSpec("web-1", "edge"), State: checker.StateHealthy},
		{Spec: maint, State: checker.StateHealthy},
		{Spec: checker.Spec{Name: "old"}, Err: errors.New("damaged record")},
	}}}, web.Config{})
	for _, name := range []string{"web-1", "web-2", "old"} {
		if st, err := e.c.Status(name); err != nil || !st.CarriedOver {
			t.Fatalf("set-up: %s carried over %v, %v; want the checker to say carried over", name, st.CarriedOver, err)
		}
	}

	carried := func(query string) map[string]bool {
		var p page
		getJSON(t, e.srv.URL+"/api/targets"+query, &p)
		out := map[string]bool{}
		for _, r := range p.Targets {
			out[r.Name] = r.CarriedOver
		}
		return out
	}
	if got := carried(""); len(got) != 3 || !got["web-1"] || got["web-2"] || got["old"] {
		t.Errorf("carriedOver by row %v; want web-1 only (web-2 in maintenance and old quarantined are not probed)", got)
	}
	if got := carried("?state=carried-over"); len(got) != 1 || !got["web-1"] {
		t.Errorf("state=carried-over keeps %v; want web-1 alone, as the rows show", got)
	}

	// web-1's first fresh result ends its carry-over, as before.
	e.set("web-1:80", outcome{})
	e.rounds(1)
	if got := carried(""); got["web-1"] {
		t.Errorf("web-1 still carried over after a fresh result: %v", got)
	}
}

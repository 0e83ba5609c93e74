package web_test

import (
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/server/web"
)

// ownedByR2 is a shared registry as replica r9 sees it: r2 owns web-1.
type ownedByR2 struct{ fakeshared.Mirror }

func (ownedByR2) Load() ([]checker.SharedTarget, uint64, error) {
	return []checker.SharedTarget{{
		Spec:     tcpSpec("web-1", ""),
		State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
		StateRev: 5,
	}}, 10, nil
}
func (ownedByR2) ID() string          { return "r9" }
func (ownedByR2) Owner(string) string { return "r2" }

// The page's data names the replica that probes each target, and the one
// serving the page, for the page to tell them apart; a single pulsed's
// rows name none.
func TestPageNamesTheOwner(t *testing.T) {
	e := newEnv(t, checker.Config{Shared: ownedByR2{}}, web.Config{})
	var p struct {
		Targets []map[string]any
		Checker struct{ Replica string }
	}
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if len(p.Targets) != 1 || p.Targets[0]["owner"] != "r2" || p.Checker.Replica != "r9" {
		t.Fatalf("targets %v, replica %q; want web-1 owned by r2, served by r9", p.Targets, p.Checker.Replica)
	}
	if _, js := get(t, e.srv.URL+"/app.js"); !strings.Contains(js, ".owner") || !strings.Contains(js, ".replica") {
		t.Error("app.js never reads .owner and .replica")
	}
	if _, html := get(t, e.srv.URL+"/"); !strings.Contains(html, `id="detail-owner"`) {
		t.Error("the target's details have no place for its owner")
	}

	alone := newEnv(t, checker.Config{}, web.Config{})
	alone.add(t, tcpSpec("web-1", ""))
	var single struct{ Targets []map[string]any }
	getJSON(t, alone.srv.URL+"/api/targets", &single)
	if _, ok := single.Targets[0]["owner"]; ok {
		t.Errorf("a single pulsed's row %v names an owner", single.Targets[0])
	}
}

package web_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// threshold mirrors a group's panicThreshold in /api/targets.
type threshold struct {
	MaxUnhealthyFraction float64
	Own                  bool
	MaxUnhealthy         int
}

// The groups of /api/targets, and of the feed's snapshot (which the page
// puts in their place), give each group's panic threshold in force,
// whether the group's own or pulsed's default, and how many of its
// targets may be unhealthy at once; the targets with no group, which are
// not a pool, have none.
func TestGroupsShowTheirPanicThreshold(t *testing.T) {
	e := newEnv(t, checker.Config{MaxUnhealthyFraction: 0.5}, web.Config{})
	for _, name := range []string{"a", "b", "c", "d"} {
		e.add(t, tcpSpec(name, "edge"))
	}
	for _, name := range []string{"x", "y", "z"} {
		e.add(t, tcpSpec(name, "data"))
	}
	e.add(t, tcpSpec("lone", ""))
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.75}); err != nil {
		t.Fatal(err)
	}
	want := map[string]*threshold{
		"":     nil,
		"data": {MaxUnhealthyFraction: 0.5, Own: false, MaxUnhealthy: 1}, // floor(0.5 x 3)
		"edge": {MaxUnhealthyFraction: 0.75, Own: true, MaxUnhealthy: 3}, // floor(0.75 x 4)
	}
	type groups struct {
		Groups []struct {
			Name           string
			PanicThreshold *threshold
		}
	}
	byName := func(g groups) map[string]*threshold {
		out := map[string]*threshold{}
		for _, x := range g.Groups {
			out[x.Name] = x.PanicThreshold
		}
		return out
	}

	var p groups
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if diff := cmp.Diff(want, byName(p)); diff != "" {
		t.Errorf("/api/targets' panic thresholds (-want +got):\n%s", diff)
	}
	var snap groups
	e.openFeed(t, "/events?names=a", "").next(t).decode(t, &snap)
	if diff := cmp.Diff(want, byName(snap)); diff != "" {
		t.Errorf("the snapshot's panic thresholds (-want +got):\n%s", diff)
	}

	// Unset, the group's threshold goes back to the default.
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{}); err != nil {
		t.Fatal(err)
	}
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if got := byName(p)["edge"]; got == nil || *got != (threshold{MaxUnhealthyFraction: 0.5, MaxUnhealthy: 2}) {
		t.Errorf("edge's threshold once its own is unset: %+v, want pulsed's default 0.5, at most 2", got)
	}
}

// The page reads a group's panic threshold under the names the endpoint
// writes (a field renamed on one side alone would leave the column
// blank), and its groups table has the column.
func TestPageReadsThePanicThreshold(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("a", "edge"))
	var p struct {
		Groups []map[string]any
	}
	getJSON(t, e.srv.URL+"/api/targets", &p)
	th, _ := p.Groups[0]["panicThreshold"].(map[string]any)
	if len(p.Groups) != 1 || len(th) != 3 {
		t.Fatalf("groups %v, want edge with a threshold of three fields", p.Groups)
	}
	_, js := get(t, e.srv.URL+"/app.js")
	for _, key := range append([]string{"panicThreshold"}, slices.Collect(maps.Keys(th))...) {
		if !strings.Contains(js, "."+key) {
			t.Errorf("app.js never reads .%s", key)
		}
	}
	if _, html := get(t, e.srv.URL+"/"); !strings.Contains(html, ">panic threshold</th>") {
		t.Error("the groups table has no panic threshold column")
	}
}

package checker_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// Groups counts a group's targets and unhealthy targets as they join,
// move and leave (new targets start unhealthy), and forgets a group once
// it has neither targets nor a policy.
func TestGroupsCountAndForget(t *testing.T) {
	e := newEnv(t, checker.Config{MaxUnhealthyFraction: 0.5, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	add := func(name, group string) {
		s := spec(name)
		s.Group = group
		e.add(t, s)
	}
	summary := func() map[string][2]int { // group -> {targets, unhealthy}
		out := map[string][2]int{}
		for _, g := range e.c.Groups("") {
			out[g.Group] = [2]int{g.Targets, g.Unhealthy}
		}
		return out
	}
	add("a", "edge")
	add("b", "edge")
	add("c", "tmp")
	if diff := cmp.Diff(map[string][2]int{"edge": {2, 2}, "tmp": {1, 1}}, summary()); diff != "" {
		t.Errorf("after adding (-want +got):\n%s", diff)
	}
	add("b", "core") // moves: edge keeps a, core gets b
	if ok, err := e.c.Remove("c"); !ok || err != nil {
		t.Fatalf("Remove(c): %v %v", ok, err)
	}
	if diff := cmp.Diff(map[string][2]int{"edge": {1, 1}, "core": {1, 1}}, summary()); diff != "" {
		t.Errorf("after a move and the last of tmp removed (-want +got):\n%s", diff)
	}
	if gs := e.c.Groups("tmp"); len(gs) != 0 {
		t.Errorf("Groups(tmp) of an emptied group without a policy: %+v", gs)
	}
	// A policy keeps a group without targets; clearing it forgets it.
	if _, err := e.c.SetGroupPolicy("tmp", checker.GroupPolicy{MaxUnhealthyFraction: 0.25}); err != nil {
		t.Fatal(err)
	}
	if gs := e.c.Groups("tmp"); len(gs) != 1 || gs[0].Targets != 0 || gs[0].MaxUnhealthyFraction != 0.25 {
		t.Errorf("Groups(tmp) with a policy and no targets: %+v", gs)
	}
	if _, err := e.c.SetGroupPolicy("tmp", checker.GroupPolicy{}); err != nil {
		t.Fatal(err)
	}
	if gs := e.c.Groups("tmp"); len(gs) != 0 {
		t.Errorf("Groups(tmp) after its policy was cleared: %+v", gs)
	}
	// Clearing the policy of a group with targets keeps the group.
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][2]int{"edge": {1, 1}, "core": {1, 1}}, summary()); diff != "" {
		t.Errorf("after clearing edge's policy (-want +got):\n%s", diff)
	}
}

// A target's policy event is logged with its group and target.
func TestPolicyLogNamesTheTarget(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, checker.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := spec("web-2")
	s.Group = "edge"
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 1, 1, checker.StateHealthy
	s.FlapWindow, s.FlapThreshold, s.FlapStableFor = 10*time.Second, 3, 3*time.Second
	e.add(t, s)
	for _, o := range []outcome{fail, pass, fail} {
		e.clock.Advance(time.Second)
		e.probes.set("web-2", o)
		e.c.RunRound(t.Context())
	}
	re := regexp.MustCompile(`level=WARN msg="web-2: flapping, 3 transitions in 10s; held unhealthy until stable for 3s" event=FLAPPING_STARTED revision=\d+ group=edge target=web-2\n`)
	if !re.MatchString(logs.String()) {
		t.Errorf("log lacks FLAPPING_STARTED with its group and target:\n%s", logs.String())
	}
}

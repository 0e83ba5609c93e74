package etcdreg_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// eventLine is every field of an event a watcher compares across
// replicas: kind, revision, time, and what it says.
func eventLine(e checker.Event) string {
	s := fmt.Sprintf("%d %s %s", e.Revision, e.Kind, e.Time.UTC().Format(time.RFC3339Nano))
	switch {
	case e.Kind == checker.EventTransition:
		s += " " + e.Transition.String() + " " + e.Transition.Time.UTC().Format(time.RFC3339Nano)
	case e.Kind.IsPolicy():
		s += " " + e.Policy.Text
	default:
		s += " " + e.Target()
	}
	return s
}

// Every replica streams the same events with the same fields, times
// included: a target added on one replica, flapping, drained from another
// and removed.
func TestEventsAreIdenticalOnEveryReplica(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	ws := watchBoth(t, r1, r2)

	s := target("flappy")
	s.InitialState, s.FlapThreshold, s.FlapWindow, s.FlapStableFor = checker.StateHealthy, 3, time.Minute, time.Minute
	if _, _, err := r1.c.Add(s); err != nil {
		t.Fatal(err)
	}
	for i, want := range []checker.State{checker.StateUnhealthy, checker.StateHealthy, checker.StateUnhealthy} {
		b.setFailing("flappy", i%2 == 0)
		eventually(t, fmt.Sprintf("flappy %v", want), func() bool { return state(r1, "flappy") == want && state(r2, "flappy") == want })
	}
	b.setFailing("flappy", false)
	eventually(t, "flappy flapping on both", func() bool {
		a, e1 := r1.c.Status("flappy")
		c, e2 := r2.c.Status("flappy")
		return e1 == nil && e2 == nil && a.Flapping && c.Flapping
	})
	if _, err := r2.c.SetMode(checker.ModeRequest{Target: "flappy", Mode: checker.ModeDraining, Reason: "deploy"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.c.Remove("flappy"); err != nil {
		t.Fatal(err)
	}
	last := func(evs []checker.Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Kind == checker.EventRemoved
	}
	var lines [2][]string
	for i, w := range ws {
		for _, e := range drain(t, w, last) {
			lines[i] = append(lines[i], eventLine(e))
		}
	}
	if diff := cmp.Diff(lines[0], lines[1]); diff != "" {
		t.Errorf("the replicas' events differ (-r1 +r2):\n%s", diff)
	}
}

// An event an outside component announces on one replica (a discovery
// source failing) streams on every replica, at one revision, with one
// time.
func TestAnnouncedEventsStreamOnEveryReplica(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	ws := watchBoth(t, r1, r2)
	pc := checker.PolicyChange{Text: "discovery:api: http_sd 0 failing: 500", Source: "discovery:api", SDConfig: "http_sd 0", Error: "500"}
	if err := r1.c.Announce(checker.EventDiscoveryFailed, pc); err != nil {
		t.Fatal(err)
	}
	var lines [2][]string
	for i, w := range ws {
		for _, e := range drain(t, w, func(evs []checker.Event) bool { return len(evs) > 0 }) {
			lines[i] = append(lines[i], eventLine(e)+" "+e.Policy.Source+" "+e.Policy.SDConfig+" "+e.Policy.Error)
		}
	}
	if len(lines[0]) != 1 || !strings.Contains(lines[0][0], "DISCOVERY_FAILED") || !strings.Contains(lines[0][0], "http_sd 0 500") {
		t.Fatalf("r1 streamed %q, want the DISCOVERY_FAILED event", lines[0])
	}
	if diff := cmp.Diff(lines[0], lines[1]); diff != "" {
		t.Errorf("the replicas' events differ (-r1 +r2):\n%s", diff)
	}
}

// watchBoth waits until r1 and r2 are both members and at one revision,
// and returns a watcher of each from it.
func watchBoth(t *testing.T, r1, r2 *replica) []*checker.Watcher {
	t.Helper()
	eventually(t, "two members", func() bool { return len(r1.reg.Members()) == 2 && len(r2.reg.Members()) == 2 })
	from := max(r1.c.Revision(), r2.c.Revision())
	eventually(t, "both at one revision", func() bool { return r1.c.Revision() >= from && r2.c.Revision() >= from })
	var ws []*checker.Watcher
	for _, r := range []*replica{r1, r2} {
		w, err := r.c.Watch(checker.Filter{}, from)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		ws = append(ws, w)
	}
	return ws
}

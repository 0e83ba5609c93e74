package web_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/checker/history"
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

// A target's history on a replica that does not probe it says which
// replica keeps it, rather than show an empty one as the target's; on the
// owner, and once this replica recorded probes, it does not.
func TestHistoryNamesTheReplicaThatKeepsIt(t *testing.T) {
	rec := history.New(history.Options{})
	e := newEnv(t, checker.Config{Shared: ownedByR2{}}, web.Config{History: rec})
	var h struct{ KeptBy string }
	getJSON(t, e.srv.URL+"/api/history?target=web-1", &h)
	if h.KeptBy != "r2" {
		t.Errorf("keptBy %q, want r2", h.KeptBy)
	}
	if _, js := get(t, e.srv.URL+"/app.js"); !strings.Contains(js, "h.keptBy") {
		t.Error("app.js never reads keptBy")
	}
	// What this replica probed before the target moved is shown as usual.
	rec.ObserveProbe(checker.Spec{Name: "web-1"}, checker.Result{Pass: true, Latency: time.Millisecond, Time: time.Now().Add(-time.Hour)})
	h.KeptBy = ""
	getJSON(t, e.srv.URL+"/api/history?target=web-1", &h)
	if h.KeptBy != "" {
		t.Errorf("with probes recorded here, keptBy %q", h.KeptBy)
	}

	alone := newEnv(t, checker.Config{}, web.Config{History: history.New(history.Options{})})
	alone.add(t, tcpSpec("web-1", ""))
	getJSON(t, alone.srv.URL+"/api/history?target=web-1", &h)
	if h.KeptBy != "" {
		t.Errorf("a single pulsed's history is kept by %q", h.KeptBy)
	}
}

// movingOwner is ownedByR2 with an owner the test moves, as a replica
// joining or leaving does.
type movingOwner struct {
	ownedByR2
	owner *atomic.Value // string
}

func (m movingOwner) Owner(string) string { return m.owner.Load().(string) }

// A members change sends the page no event of its own, yet moves owners:
// the feed brings the named rows afresh, with the new owner, on a replica
// that probes none of them (so no result would bring them).
func TestFeedFollowsTheOwner(t *testing.T) {
	owner := &atomic.Value{}
	owner.Store("r2")
	e := newEnv(t, checker.Config{Shared: movingOwner{owner: owner}}, web.Config{ResultsInterval: 5 * time.Millisecond})
	f := e.openFeed(t, "/events?names=web-1", "")
	type ownedRows struct {
		Targets []struct{ Name, Owner string }
	}
	var snap ownedRows
	if ev := f.next(t); ev.name != "snapshot" {
		t.Fatalf("first event %s, want the snapshot", ev.name)
	} else if ev.decode(t, &snap); len(snap.Targets) != 1 || snap.Targets[0].Owner != "r2" {
		t.Fatalf("snapshot rows %+v, want web-1 owned by r2", snap.Targets)
	}

	owner.Store("r3") // r2 left
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 11}}, 11)
	f.waitFor(t, "web-1's row owned by r3", func(ev sseEvent) bool {
		var d ownedRows
		if ev.name == "results" {
			ev.decode(t, &d)
		}
		return len(d.Targets) == 1 && d.Targets[0].Name == "web-1" && d.Targets[0].Owner == "r3"
	})
}

// pages is a server.Directory of the replicas' status pages.
type pages map[string]string

func (p pages) Addresses(id string) (string, string) { return "", p[id] }

// With the replicas' pages known, a target's history on a replica that
// does not probe it gives the page of the one that keeps it, which the
// page links to (TestStatusPageVantagesInBrowser follows the link).
func TestHistoryGivesThePageOfTheReplicaThatKeepsIt(t *testing.T) {
	for _, dir := range []pages{{"r2": "https://127.0.0.2:9090/"}, {}} {
		e := newEnv(t, checker.Config{Shared: ownedByR2{}}, web.Config{History: history.New(history.Options{}), Directory: dir})
		var h struct{ KeptBy, KeptByPage string }
		getJSON(t, e.srv.URL+"/api/history?target=web-1", &h)
		if h.KeptBy != "r2" || h.KeptByPage != dir["r2"] {
			t.Errorf("directory %v: keptBy %q keptByPage %q, want r2 %q", dir, h.KeptBy, h.KeptByPage, dir["r2"])
		}
		if _, js := get(t, e.srv.URL+"/app.js"); !strings.Contains(js, "h.keptByPage") {
			t.Error("app.js never reads keptByPage")
		}
	}
}

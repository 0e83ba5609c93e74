package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/server/web"
)

// onEtcd opens replica id of a registry on etcd, to be run by the checker
// given to it.
func onEtcd(t *testing.T, endpoint, id string) *etcdreg.Registry {
	t.Helper()
	reg, err := etcdreg.Open(t.Context(), etcdreg.Options{
		Endpoints: []string{endpoint}, Prefix: "/pulse-web-catchup/", ID: id, LeaseTTL: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() }) // after the checker closes
	return reg
}

// twoReplicas starts replica a, a bare checker, and replica b, serving
// the page, on etcd.
func twoReplicas(t *testing.T, etcd *etcdtest.Server) (*checker.Checker, *env) {
	t.Helper()
	regA := onEtcd(t, etcd.Endpoint, "a")
	a, err := checker.New(checker.Config{Shared: regA, NewProber: (&fakeProbers{}).New})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	regA.Run(a)
	regB := onEtcd(t, etcd.Endpoint, "b")
	b := newEnv(t, checker.Config{Shared: regB}, web.Config{})
	regB.Run(b.c)
	return a, b
}

// With replicas, the page's list and a feed's snapshot on one replica
// hold every target added on another before the request.
func TestPageFollowsWritesOfAnotherReplica(t *testing.T) {
	a, b := twoReplicas(t, etcdtest.Start(t, 0))

	for i := range 30 {
		name := fmt.Sprintf("web-%02d", i)
		if _, _, err := a.Add(tcpSpec(name, "")); err != nil {
			t.Fatal(err)
		}
		var p struct{ Targets []struct{ Name string } }
		getJSON(t, b.srv.URL+"/api/targets?limit=1000", &p)
		if len(p.Targets) != i+1 {
			t.Fatalf("b's /api/targets right after a added %s: %d targets, want %d", name, len(p.Targets), i+1)
		}
		if i%10 == 9 {
			f := b.openFeed(t, "/events", "")
			ev := f.next(t)
			var snap rowsData
			ev.decode(t, &snap)
			if ev.name != "snapshot" || snap.Total == nil || *snap.Total != i+1 {
				t.Fatalf("b's feed after %d targets: %s with %v targets", i+1, ev.name, snap.Total)
			}
			f.resp.Body.Close()
		}
	}
}

// With replicas behind one address, a feed resumes on one replica from
// the last id another gave it, with no snapshot, even when this replica
// has not applied that revision yet.
func TestFeedResumesFromAnotherReplicasID(t *testing.T) {
	a, b := twoReplicas(t, etcdtest.Start(t, 0))

	for i := range 20 {
		if _, _, err := a.Add(tcpSpec(fmt.Sprintf("web-%02d", i), "")); err != nil {
			t.Fatal(err)
		}
		last := a.Revision() // the id a's feed last sent
		f := b.openFeed(t, "/events", strconv.FormatUint(last, 10))
		next := fmt.Sprintf("next-%02d", i)
		if _, _, err := a.Add(tcpSpec(next, "")); err != nil {
			t.Fatal(err)
		}
		ev := f.next(t, "results", "progress", "transition")
		var d struct{ Target struct{ Name string } }
		ev.decode(t, &d)
		if ev.name != "added" || d.Target.Name != next {
			t.Fatalf("b's feed resumed from a's revision %d: first event %s (%s), want %s added", last, ev.name, ev.data, next)
		}
		f.resp.Body.Close()
	}
}

// A feed resumes on one replica from an id another gave it even when
// nothing under the fleet's prefix changed up to that revision: a reached
// it through a progress notification after another fleet's write moved
// etcd's revision, and b's watch would bring it only with etcd's next
// notification, minutes away (ten in these tests' etcd). An id from
// another etcd, ahead of this one's revision, starts over with a snapshot
// at once.
func TestFeedResumesFromRevisionReachedThroughAnotherPrefix(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	a, b := twoReplicas(t, etcd)

	etcd.Put(t, "/another-fleet/k", "v")
	if err := a.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	last := a.Revision()
	if b.c.Revision() >= last {
		t.Fatalf("b applied revision %d already, a %d: the test needs b behind", b.c.Revision(), last)
	}
	// openFeed returns once the feed's headers came, so the feed is
	// resumed (or started over) before the target is added.
	f := b.openFeed(t, "/events", strconv.FormatUint(last, 10))
	if _, _, err := a.Add(tcpSpec("next", "")); err != nil {
		t.Fatal(err)
	}
	ev := f.next(t, "results", "progress", "transition")
	var d struct{ Target struct{ Name string } }
	ev.decode(t, &d)
	if ev.name != "added" || d.Target.Name != "next" {
		t.Fatalf("b's feed resumed from a's revision %d: first event %s (%s), want next added", last, ev.name, ev.data)
	}
	f.resp.Body.Close()

	// Twice CatchUp's bound (2s) at most: a replica never applies a
	// revision etcd has not reached, so waiting for it would last as long
	// as the wait's bound.
	began := time.Now()
	f = b.openFeed(t, "/events", strconv.FormatUint(last+1_000_000, 10))
	ev = f.next(t)
	if took := time.Since(began); ev.name != "snapshot" || took >= 5*time.Second {
		t.Fatalf("b's feed from another etcd's revision %d: first event %s after %v, want a snapshot within 5s", last+1_000_000, ev.name, took)
	}
}

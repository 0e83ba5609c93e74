package etcdreg

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// A response is cut around each revision that changes the members, never
// within a revision: every replica applies the changes before a member
// change with the old members and those after with the new, however etcd
// grouped the events.
func TestByMembersCutsAroundMemberRevisions(t *testing.T) {
	r := &Registry{prefix: "/p/"}
	ev := func(rev int64, key string) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte("/p/" + key), ModRevision: rev}}
	}
	evs := []*clientv3.Event{
		ev(3, "targets/a"), ev(3, "states/a"),
		ev(4, "members/r2"), ev(4, "verdicts/a/r2"),
		ev(5, "states/a"),
		ev(6, "members/r3"),
		ev(7, "verdicts/a/r1"), ev(8, "states/a"),
	}
	var got []string
	for _, seg := range r.byMembers(evs) {
		var revs []int64
		for _, e := range seg {
			revs = append(revs, e.Kv.ModRevision)
		}
		got = append(got, fmt.Sprint(revs))
	}
	want := []string{"[3 3]", "[4 4]", "[5]", "[6]", "[7 8]"}
	if !slices.Equal(got, want) {
		t.Errorf("segments %v, want %v", got, want)
	}
	if segs := r.byMembers(evs[:2]); len(segs) != 1 || len(segs[0]) != 2 {
		t.Errorf("no member change: %d segments, want the response whole", len(segs))
	}
}

type applied struct {
	changes []checker.SharedChange
	rev     uint64
}

func (a *applied) ApplyShared(ch []checker.SharedChange, rev uint64) {
	a.changes = append(a.changes, ch...)
	a.rev = rev
}
func (*applied) SetSharedErr(error) {}

// A replica that reads the registry again (etcd compacted the history it
// needed) applies the verdicts stored meanwhile with their own revisions,
// and removes those removed meanwhile.
func TestResyncRemovesVerdictsGoneMeanwhile(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	r, err := Open(context.Background(), Options{Endpoints: []string{etcd.Endpoint}, Prefix: "/resync/", ID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	put := func(key, val string) int64 {
		resp, err := r.cli.Put(ctx, "/resync/"+key, val)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put("targets/web", `{"v":1,"spec":{"Name":"web"}}`)
	r2 := put("verdicts/web/r2", `{"v":1,"label":"zone-b","state":1}`)
	put("verdicts/web/r3", `{"v":1,"label":"zone-c","state":2}`)
	if _, _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cli.Delete(ctx, "/resync/verdicts/web/r3"); err != nil {
		t.Fatal(err)
	}
	r4 := put("verdicts/web/r4", `{"v":1,"label":"zone-d","state":1}`)
	var a applied
	if _, err := r.resync(&a); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range a.changes {
		switch ch.Kind {
		case checker.SharedVerdictPut:
			got = append(got, fmt.Sprintf("put %s/%s@%d", ch.Name, ch.Verdict.Member, ch.Verdict.Rev))
		case checker.SharedVerdictDeleted:
			got = append(got, fmt.Sprintf("deleted %s/%s", ch.Name, ch.Verdict.Member))
		}
	}
	slices.Sort(got)
	want := []string{"deleted web/r3", fmt.Sprintf("put web/r2@%d", r2), fmt.Sprintf("put web/r4@%d", r4)}
	if !slices.Equal(got, want) {
		t.Errorf("resync's verdict changes %q, want %q", got, want)
	}
}

// A replica that reads the registry again takes the members' labels and
// addresses from what it read: a member whose key was put again with no
// label meanwhile is labelled by its ID, which moves the vantages as a
// change of members does, and a member that left keeps neither.
func TestResyncRebuildsMembersLabels(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	r, err := Open(context.Background(), Options{Endpoints: []string{etcd.Endpoint}, Prefix: "/resync/", ID: "r1", Vantage: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if _, err := r.cli.Put(ctx, "/resync/members/r2", `{"id":"r2","vantage":"zone-b","api":"127.0.0.2:50051"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cli.Put(ctx, "/resync/members/r3", `{"id":"r3","vantage":"zone-c","api":"127.0.0.3:50051"}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cli.Put(ctx, "/resync/members/r2", `{"id":"r2","api":"127.0.0.2:50051"}`); err != nil {
		t.Fatal(err)
	}
	var a applied
	if _, err := r.resync(&a); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(a.changes, func(ch checker.SharedChange) bool { return ch.Kind == checker.SharedMembersChanged }) {
		t.Errorf("resync after r2's label went: no members change")
	}
	if _, err := r.cli.Delete(ctx, "/resync/members/r3"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.resync(&a); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	labels, addrs := fmt.Sprint(r.labels), fmt.Sprint(slices.Sorted(maps.Keys(r.addrs)))
	r.mu.Unlock()
	if want := "map[r1:zone-a]"; labels != want {
		t.Errorf("labels after resync %s, want %s", labels, want)
	}
	if want := "[r1 r2]"; addrs != want {
		t.Errorf("addresses after resync of %s, want of %s", addrs, want)
	}
}

package etcdreg

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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

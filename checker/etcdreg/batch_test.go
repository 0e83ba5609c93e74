package etcdreg_test

import (
	"fmt"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// AddMany on a replica writes many specs to a transaction: every replica
// shows them all, each with its own ADDED event, in a few revisions.
func TestAddManyInFewTransactions(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	moved := target("moved")
	moved.Group = "old"
	if _, _, err := r1.c.Add(moved); err != nil {
		t.Fatal(err)
	}
	eventually(t, "moved on r2", func() bool { _, err := r2.c.Status("moved"); return err == nil })
	w, err := r2.c.Watch(checker.Filter{}, r2.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	const n = 300
	specs := make([]checker.Spec, 0, n+1)
	for i := range n {
		s := target(fmt.Sprintf("t%03d", i))
		s.Group = fmt.Sprintf("g%d", i%5)
		specs = append(specs, s)
	}
	moved.Group = "new"
	specs = append(specs, moved)
	res, err := r1.c.AddMany(specs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Created != (i < n) || r.Status.Spec.Group != specs[i].Group {
			t.Fatalf("%s: created %v, group %q, %v", specs[i].Name, r.Created, r.Status.Spec.Group, r.Err)
		}
	}
	evs := drain(t, w, func(evs []checker.Event) bool {
		added := 0
		for _, e := range evs {
			if e.Kind == checker.EventAdded {
				added++
			}
		}
		return added == n
	})
	revs := map[uint64]bool{}
	for _, e := range evs {
		if e.Kind == checker.EventAdded {
			revs[e.Revision] = true
		}
	}
	if len(revs) > n/50 {
		t.Errorf("%d ADDED events at %d revisions, want at most %d: one transaction each?", n, len(revs), n/50)
	}
	if st, err := r2.c.Status("moved"); err != nil || st.Spec.Group != "new" {
		t.Errorf("moved on r2: group %q, %v", st.Spec.Group, err)
	}
	if g := r2.c.Groups("g3"); len(g) != 1 || g[0].Targets != n/5 {
		t.Errorf("group g3 on r2: %+v, want %d targets", g, n/5)
	}
}

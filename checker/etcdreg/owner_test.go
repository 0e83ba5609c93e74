package etcdreg_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// Every replica names the same owner for a target, and it is the replica
// that probes it (for a target probed from several vantages, the first of
// them); when the owner leaves, every replica left names the same new
// owner, which probes it from then on.
func TestEveryReplicaNamesTheOwner(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	rs := []*replica{
		startReplica(t, etcd.Endpoint, "r1", b),
		startReplica(t, etcd.Endpoint, "r2", b),
		startReplica(t, etcd.Endpoint, "r3", b),
	}
	eventually(t, "every replica sees every member", func() bool {
		for _, r := range rs {
			if len(r.reg.Members()) != len(rs) {
				return false
			}
		}
		return true
	})
	var names []string
	for i := range 9 {
		names = append(names, fmt.Sprintf("t%02d", i))
	}
	for _, n := range names {
		if _, _, err := rs[0].c.Add(target(n)); err != nil {
			t.Fatal(err)
		}
	}
	multi := target("multi")
	multi.Vantages = 2
	if _, _, err := rs[0].c.Add(multi); err != nil {
		t.Fatal(err)
	}

	// sameOwner waits until every replica of live names one owner for
	// name, with the state it stored, and returns it.
	sameOwner := func(live []*replica, name string) string {
		t.Helper()
		var owner string
		eventually(t, "every replica names "+name+"'s owner", func() bool {
			owner = ""
			for _, r := range live {
				st, err := r.c.Status(name)
				if err != nil || st.Owner == "" || st.State != checker.StateHealthy || (owner != "" && st.Owner != owner) {
					return false
				}
				owner = st.Owner
			}
			return true
		})
		return owner
	}
	byOwner := map[string]int{}
	for _, n := range names {
		owner := sameOwner(rs, n)
		byOwner[owner]++
		if got := rs[0].reg.Owner(n); got != owner {
			t.Errorf("%s: the statuses name %s, the registry %s", n, owner, got)
		}
		for _, r := range rs {
			if probed := b.count(r.id, n) > 0; probed != (r.id == owner) {
				t.Errorf("%s (owner %s): %s probed it %d times", n, owner, r.id, b.count(r.id, n))
			}
		}
	}
	if len(byOwner) < 2 {
		t.Fatalf("owners %v: want the targets divided among the replicas", byOwner)
	}
	owner := sameOwner(rs, "multi")
	for _, r := range rs {
		st, _ := r.c.Status("multi")
		if len(st.Vantages) != 2 || st.Vantages[0].Member != owner {
			t.Errorf("multi on %s: owner %s, vantages %v; want the owner first of two", r.id, owner, st.Vantages)
		}
	}

	// The owner of t00 stops cleanly: the others name one new owner at
	// once, and it probes t00.
	gone := sameOwner(rs, "t00")
	live := slices.DeleteFunc(slices.Clone(rs), func(r *replica) bool { return r.id == gone })
	for _, r := range rs {
		if r.id == gone {
			r.stop()
		}
	}
	eventually(t, "the replicas left see each other alone", func() bool {
		return len(live[0].reg.Members()) == 2 && len(live[1].reg.Members()) == 2
	})
	next := sameOwner(live, "t00")
	if next == gone {
		t.Fatalf("t00's owner is still %s, which left", gone)
	}
	before := b.count(next, "t00")
	eventually(t, next+" probes t00", func() bool { return b.count(next, "t00") > before })
}

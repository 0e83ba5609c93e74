package etcdreg_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
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

// Every replica knows where the others say their clients reach them, from
// its first read of the members (r3) and as they join (r1 of r3); one that
// leaves has none.
func TestReplicasKnowEachOthersAddresses(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	ep := []string{etcd.Endpoint}
	rs := []*replica{
		openReplica(t, etcdreg.Options{Endpoints: ep, ID: "r1", LeaseTTL: 2 * time.Second, API: "127.0.0.1:50051", Page: "http://127.0.0.1:9090/"}, b, nil),
		openReplica(t, etcdreg.Options{Endpoints: ep, ID: "r2", LeaseTTL: 2 * time.Second}, b, nil),
		openReplica(t, etcdreg.Options{Endpoints: ep, ID: "r3", LeaseTTL: 2 * time.Second, API: "127.0.0.3:50051"}, b, nil),
	}
	want := map[string][2]string{"r1": {"127.0.0.1:50051", "http://127.0.0.1:9090/"}, "r2": {}, "r3": {"127.0.0.3:50051", ""}}
	eventually(t, "every replica knows every one's addresses", func() bool {
		for _, r := range rs {
			for id, w := range want {
				if api, page := r.reg.Addresses(id); api != w[0] || page != w[1] {
					return false
				}
			}
		}
		return true
	})
	for _, r := range rs {
		for id, w := range want {
			if api, page := r.reg.Addresses(id); api != w[0] || page != w[1] {
				t.Errorf("%s says %s is at %q %q, want %q %q", r.id, id, api, page, w[0], w[1])
			}
		}
	}
	rs[0].stop()
	eventually(t, "r1's addresses gone with it", func() bool {
		api, page := rs[2].reg.Addresses("r1")
		return api == "" && page == ""
	})
	if api, page := rs[2].reg.Addresses("nobody"); api != "" || page != "" {
		t.Errorf("an unknown member's addresses: %q %q", api, page)
	}
}

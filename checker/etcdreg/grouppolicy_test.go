package etcdreg_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// A group's slow start and automatic removal hold on replicas as on one
// pulsed: set on one replica, every replica shows them, a recovery's slow
// start ends at the same time on each, an unhealthy target is removed
// once by its owner, and a replica that starts later loads the policy.
func TestGroupLifecyclePolicyIsShared(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	policy := checker.GroupPolicy{SlowStart: time.Minute, RemoveAfterUnhealthy: time.Second, Objective: 0.999, ObjectiveWindow: 24 * time.Hour}
	if _, err := r2.c.SetGroupPolicy("g", policy); err != nil {
		t.Fatalf("SetGroupPolicy on r2: %v", err)
	}
	for _, r := range []*replica{r1, r2} {
		eventually(t, "the policy on "+r.id, func() bool {
			g := r.c.Groups("g")
			return len(g) == 1 && g[0].Policy == policy
		})
	}
	w1, err := r1.c.Watch(checker.Filter{}, r1.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := r2.c.Watch(checker.Filter{}, r2.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()

	up, down := target("up"), target("down")
	up.Group, down.Group = "g", "g"
	b.setFailing("down", true)
	for _, s := range []checker.Spec{up, down} {
		if _, _, err := r1.c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	// up recovers with a slow start ending at the same time everywhere.
	var ends []time.Time
	for _, w := range []*checker.Watcher{w1, w2} {
		evs := drain(t, w, func(evs []checker.Event) bool {
			for _, e := range evs {
				if e.Kind == checker.EventTransition && e.Transition.Target == "up" && e.Transition.To == checker.StateHealthy {
					return true
				}
			}
			return false
		})
		for _, e := range evs {
			if e.Kind == checker.EventTransition && e.Transition.Target == "up" && e.Transition.To == checker.StateHealthy {
				ends = append(ends, e.Transition.SlowStartEnd)
			}
		}
	}
	if len(ends) != 2 || ends[0].IsZero() || !ends[0].Equal(ends[1]) {
		t.Errorf("up's slow start ends %v on r1 and r2, want one time, set", ends)
	}
	for _, r := range []*replica{r1, r2} {
		if st, err := r.c.Status("up"); err != nil || st.Weight >= 100 || st.SlowStartEnd.IsZero() {
			t.Errorf("up on %s: weight %d, slow start end %v, %v; want ramping", r.id, st.Weight, st.SlowStartEnd, err)
		}
	}
	// down is removed after a second unhealthy, on every replica.
	for _, r := range []*replica{r1, r2} {
		eventually(t, "down removed on "+r.id, func() bool { _, err := r.c.Status("down"); return err != nil })
	}
	r3 := startReplica(t, etcd.Endpoint, "r3", b)
	if g := r3.c.Groups("g"); len(g) != 1 || g[0].Policy != policy {
		t.Errorf("loaded by r3: %+v, want the policy %+v", g, policy)
	}
}

// A group's mode change on replicas is one transaction: every replica
// shows each target's MODE_CHANGED event at one revision.
func TestGroupSetModeIsOneRevision(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	const n = 100
	specs := make([]checker.Spec, n)
	for i := range specs {
		specs[i] = target(fmt.Sprintf("t%03d", i))
		specs[i].Group = "big"
	}
	if _, err := r1.c.AddMany(specs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the group on r2", func() bool { g := r2.c.Groups("big"); return len(g) == 1 && g[0].Targets == n })
	w, err := r2.c.Watch(checker.Filter{}, r2.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sts, err := r1.c.SetMode(checker.ModeRequest{Group: "big", Mode: checker.ModeDraining, Reason: "deploy"})
	if err != nil || len(sts) != n {
		t.Fatalf("SetMode: %d statuses, %v", len(sts), err)
	}
	revs := map[uint64]int{}
	drain(t, w, func(evs []checker.Event) bool {
		clear(revs)
		for _, e := range evs {
			if e.Kind == checker.EventModeChanged {
				revs[e.Revision]++
			}
		}
		total := 0
		for _, c := range revs {
			total += c
		}
		return total == n
	})
	if len(revs) != 1 {
		t.Errorf("the group's %d mode changes came at %d revisions (%v), want one", n, len(revs), revs)
	}
}

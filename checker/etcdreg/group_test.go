package etcdreg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// panicEvents describes a stream's panic events, with their revisions.
func panicEvents(evs []checker.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == checker.EventPanicEntered || e.Kind == checker.EventPanicExited {
			out = append(out, fmt.Sprintf("%d %s %s held=%v", e.Revision, e.Kind, e.Policy.Text, e.Policy.Held))
		}
	}
	return out
}

// countPanics counts a stream's panic events of kind.
func countPanics(evs []checker.Event, kind checker.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// Three replicas own the ten targets of group edge between them; eight
// fail at once. Whatever the order of the owners' writes, etcd's history
// never has more than five of them unhealthy (at most half of ten); the
// three others are held, on every replica alike, and every replica's
// stream has the same PANIC_ENTERED at the same revision. The replica
// owning held targets dies: their holds survive, with no transition. Then
// the backends recover: as each one makes room the first held target is
// released, and PANIC_EXITED comes once, at one revision, on the
// survivors' streams.
func TestGroupGuardAcrossReplicas(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	reps := []*replica{startReplica(t, etcd.Endpoint, "a", b), startReplica(t, etcd.Endpoint, "b", b), startReplica(t, etcd.Endpoint, "c", b)}
	eventually(t, "three members everywhere", func() bool {
		for _, r := range reps {
			if len(r.reg.Members()) != 3 {
				return false
			}
		}
		return true
	})
	if _, err := reps[1].c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.5}); err != nil {
		t.Fatalf("SetGroupPolicy(edge, 0.5) with etcd: %v", err)
	}
	var names []string
	for i := range 10 {
		n := fmt.Sprintf("web-%d", i)
		names = append(names, n)
		s := target(n)
		s.Group, s.InitialState = "edge", checker.StateHealthy
		if _, _, err := reps[i%3].c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	owners := map[string]bool{}
	for _, n := range names {
		owners[reps[0].reg.Owner(n)] = true
	}
	if len(owners) < 2 {
		t.Fatalf("the group's targets are not spread over the replicas: %v", owners)
	}
	for _, r := range reps {
		eventually(t, "the policy and ten targets on "+r.id, func() bool {
			g := r.c.Groups("edge")
			return len(g) == 1 && g[0].Targets == 10 && g[0].MaxUnhealthy == 5
		})
	}
	var ws []*checker.Watcher
	for _, r := range reps {
		w, err := r.c.Watch(checker.Filter{Group: "edge"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}

	for _, n := range names[:8] {
		b.setFailing(n, true)
	}
	settled := func(r *replica) bool {
		g := r.c.Groups("edge")
		return len(g) == 1 && g[0].Unhealthy == 5 && len(g[0].Held) == 3
	}
	for _, r := range reps {
		eventually(t, "five unhealthy and three held on "+r.id, func() bool { return settled(r) })
	}
	held := reps[0].c.Groups("edge")[0].Held
	for _, r := range reps {
		if got := r.c.Groups("edge")[0].Held; !slices.Equal(got, held) {
			t.Errorf("%s holds %v, %s holds %v", r.id, got, reps[0].id, held)
		}
		for _, n := range held {
			st, _ := r.c.Status(n)
			if !st.PanicHeld || !st.Routable || st.Verdict != checker.StateUnhealthy {
				t.Errorf("%s on %s: held %v routable %v verdict %v", n, r.id, st.PanicHeld, st.Routable, st.Verdict)
			}
		}
	}
	var streams [][]checker.Event
	for _, w := range ws {
		streams = append(streams, drain(t, w, func(evs []checker.Event) bool { return countPanics(evs, checker.EventPanicEntered) >= 1 }))
	}
	for i := range streams {
		if diff := cmp.Diff(panicEvents(streams[0]), panicEvents(streams[i])); diff != "" {
			t.Errorf("panic events of %s and %s differ (-a +other):\n%s", reps[0].id, reps[i].id, diff)
		}
	}
	if got := countPanics(streams[0], checker.EventPanicEntered); got != 1 {
		t.Errorf("%d PANIC_ENTERED, want 1: %v", got, panicEvents(streams[0]))
	}
	checkHistory(t, etcd, names, 5)

	// The owner of a held target dies: the others take it over, the hold
	// stays, nothing transitions.
	victim := reps[0].reg.Owner(held[0])
	var dead, alive []*replica
	for _, r := range reps {
		if r.id == victim {
			dead = append(dead, r)
		} else {
			alive = append(alive, r)
		}
	}
	dead[0].crash()
	for _, r := range alive {
		eventually(t, "two members on "+r.id, func() bool { return len(r.reg.Members()) == 2 })
	}
	newOwner := alive[0].reg.Owner(held[0])
	before := b.count(newOwner, held[0])
	eventually(t, "the new owner probes "+held[0], func() bool { return b.count(newOwner, held[0]) > before+2 })
	for _, r := range alive {
		if g := r.c.Groups("edge")[0]; !slices.Equal(g.Held, held) || g.Unhealthy != 5 {
			t.Errorf("after %s died, %s: %d unhealthy, holds %v; want 5 and %v", victim, r.id, g.Unhealthy, g.Held, held)
		}
	}
	var aliveWs []*checker.Watcher
	for i, r := range reps {
		if r.id != victim {
			aliveWs = append(aliveWs, ws[i])
		}
	}
	for i, w := range aliveWs {
		if evs, _ := w.Next(100); len(transitionsOf(evs)) != 0 || len(panicEvents(evs)) != 0 {
			t.Errorf("%s's stream after the takeover: %v %v", alive[i].id, transitionsOf(evs), panicEvents(evs))
		}
	}

	// One failing target recovers: the first held one, in name order, is
	// released (it goes unhealthy), the others stay held.
	first := names[0]
	b.setFailing(first, false)
	for _, r := range alive {
		eventually(t, held[0]+" released on "+r.id, func() bool {
			g := r.c.Groups("edge")[0]
			return state(r, first) == checker.StateHealthy && slices.Equal(g.Held, held[1:]) && g.Unhealthy == 5
		})
	}
	// All recover: the panic ends, once, at one revision.
	for _, n := range names {
		b.setFailing(n, false)
	}
	var ends [][]checker.Event
	for _, w := range aliveWs {
		ends = append(ends, drain(t, w, func(evs []checker.Event) bool { return countPanics(evs, checker.EventPanicExited) >= 1 }))
	}
	if diff := cmp.Diff(panicEvents(ends[0]), panicEvents(ends[1])); diff != "" || len(panicEvents(ends[0])) != 1 {
		t.Errorf("panic exits (-%s +%s):\n%s", alive[0].id, alive[1].id, diff)
	}
	for _, r := range alive {
		eventually(t, "all healthy on "+r.id, func() bool { return len(r.c.Healthy("edge")) == 10 })
	}
	checkHistory(t, etcd, names, 5)
}

// checkHistory fails unless etcd's history never has more than most of
// names unhealthy once they were all healthy.
func checkHistory(t *testing.T, etcd *etcdtest.Server, names []string, most int) {
	t.Helper()
	h := etcd.GroupHistory(t, prefix, names)
	if len(h) == 0 {
		t.Fatal("no history of the group's states in etcd")
	}
	for _, g := range h {
		if g.Unhealthy > most {
			t.Fatalf("at revision %d etcd has %d of the group unhealthy, more than %d: %v", g.Rev, g.Unhealthy, most, h)
		}
	}
	t.Logf("etcd's history of the group (revision:unhealthy/held): %v", h)
}

func transitionsOf(evs []checker.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == checker.EventTransition {
			out = append(out, e.Transition.String())
		}
	}
	return out
}

// Two replicas write the same group from the same guard revision: etcd
// takes one and refuses the other (ErrFenced). A target joining, leaving
// or moving between groups and a policy change rewrite the guards they
// concern, so a write decided before them is refused too; a move also
// rewrites the target's state, which refuses a write decided before it.
func TestGroupWriteFencedByGuard(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	open := func(id string) *etcdreg.Registry {
		reg, err := etcdreg.Open(context.Background(), etcdreg.Options{Endpoints: []string{etcd.Endpoint}, Prefix: prefix, ID: id, LeaseTTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
		if _, _, err := reg.Load(); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	a := open("a")
	b := open("b")
	if _, _, err := a.Load(); err != nil { // a's view of the members includes b
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	guardRev := func(group string) uint64 {
		t.Helper()
		resp, err := cli.Get(t.Context(), prefix+"guards/"+group)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0
		}
		return uint64(resp.Kvs[0].ModRevision)
	}
	s := target("x")
	s.Group = "edge"
	y := target("y")
	y.Group = "edge"
	for _, sp := range []checker.Spec{s, y} {
		if _, err := a.PutSpec(t.Context(), sp); err != nil {
			t.Fatal(err)
		}
	}
	g0 := guardRev("edge")
	if g0 == 0 {
		t.Fatal("adding a target to edge did not write its guard")
	}
	// Each takes the group's last slot for its own target, from the same
	// view: only the guard tells them apart.
	write := func(name string) checker.GroupProposal {
		return checker.GroupProposal{Group: "edge", GuardRev: g0, Writes: []checker.StateProposal{{
			Name: name, State: checker.SharedState{State: checker.StateUnhealthy, From: checker.StateHealthy},
		}}}
	}
	rev, err := a.ProposeGroup(t.Context(), write("x"))
	if err != nil {
		t.Fatalf("the first write from guard revision %d: %v", g0, err)
	}
	if _, err := b.ProposeGroup(t.Context(), write("y")); !errors.Is(err, checker.ErrFenced) {
		t.Fatalf("the second write from the same guard revision: %v, want ErrFenced", err)
	}
	if _, err := b.ProposeGroup(t.Context(), checker.GroupProposal{Group: "edge", GuardRev: rev, Writes: write("y").Writes}); err != nil {
		t.Fatalf("the same write from the new guard revision: %v", err)
	}
	rev = guardRev("edge")
	if got := guardRev("edge"); got != rev {
		t.Fatalf("guard at %d after the write committed at %d", got, rev)
	}

	// Moving x to another group rewrites both guards.
	s.Group = "core"
	if _, err := a.PutSpec(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if guardRev("edge") == rev || guardRev("core") == 0 {
		t.Errorf("moving x to core: edge's guard %d (was %d), core's %d", guardRev("edge"), rev, guardRev("core"))
	}
	// A state write of an ungrouped target, decided before the target
	// joined a group, is refused once it has.
	z := target("z")
	if _, err := a.PutSpec(t.Context(), z); err != nil {
		t.Fatal(err)
	}
	if err := a.ProposeState(t.Context(), checker.StateProposal{Name: "z", State: checker.SharedState{State: checker.StateHealthy, From: checker.StateUnhealthy}}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), prefix+"states/z")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("z's state: %v, %v", resp, err)
	}
	zRev := uint64(resp.Kvs[0].ModRevision)
	z.Group = "edge"
	if _, err := b.PutSpec(t.Context(), z); err != nil {
		t.Fatal(err)
	}
	if err := a.ProposeState(t.Context(), checker.StateProposal{Name: "z", StateRev: zRev, State: checker.SharedState{State: checker.StateUnhealthy, From: checker.StateHealthy}}); !errors.Is(err, checker.ErrFenced) {
		t.Errorf("a state write of z decided before z joined edge: %v, want ErrFenced", err)
	}
	// A policy change and a removal rewrite the guard.
	c0 := guardRev("core")
	if _, err := b.PutGroupPolicy(t.Context(), "core", checker.GroupPolicy{MaxUnhealthyFraction: 0.5}); err != nil {
		t.Fatal(err)
	}
	c1 := guardRev("core")
	if c1 == c0 {
		t.Error("a policy change left the guard as it was")
	}
	if _, existed, err := a.DeleteTarget(t.Context(), "x"); err != nil || !existed {
		t.Fatalf("DeleteTarget = %v, %v", existed, err)
	}
	if guardRev("core") == c1 {
		t.Error("removing x left core's guard as it was")
	}
}

// A held target with flap damping: the guard's write stores the owner's
// flap log with the hold, and a record of the flap log alone keeps the
// hold, so once the group has settled nothing is written again and the
// hold never lapses, in etcd's history or on any replica.
func TestGroupGuardHoldsWithFlapDamping(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	reps := []*replica{startReplica(t, etcd.Endpoint, "a", b), startReplica(t, etcd.Endpoint, "b", b)}
	eventually(t, "two members everywhere", func() bool {
		return len(reps[0].reg.Members()) == 2 && len(reps[1].reg.Members()) == 2
	})
	if _, err := reps[0].c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.5}); err != nil {
		t.Fatal(err)
	}
	names := []string{"web-0", "web-1", "web-2", "web-3"}
	for i, n := range names {
		s := target(n)
		s.Group, s.InitialState = "edge", checker.StateHealthy
		s.FlapThreshold, s.FlapWindow, s.FlapStableFor = 5, time.Minute, time.Minute
		if _, _, err := reps[i%2].c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names[:3] {
		b.setFailing(n, true)
	}
	settled := func(r *replica) bool {
		g := r.c.Groups("edge")
		return len(g) == 1 && g[0].Unhealthy == 2 && len(g[0].Held) == 1
	}
	for _, r := range reps {
		eventually(t, "two unhealthy and one held on "+r.id, func() bool { return settled(r) })
	}
	before := etcd.GroupHistory(t, prefix, names)
	// Forty probe intervals of failing results, which change nothing.
	for end := time.Now().Add(40 * 50 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for _, r := range reps {
			if !settled(r) {
				t.Fatalf("%s: the group moved while nothing changed: %+v", r.id, r.c.Groups("edge"))
			}
		}
	}
	after := etcd.GroupHistory(t, prefix, names)
	if len(after) != len(before) {
		t.Errorf("%d state writes while nothing changed: %+v", len(after)-len(before), after[len(before):])
	}
	for _, g := range after[len(before):] {
		if g.Held != 1 {
			t.Errorf("at revision %d the hold lapsed: %+v", g.Rev, g)
		}
	}
}

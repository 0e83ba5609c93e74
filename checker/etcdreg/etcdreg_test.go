package etcdreg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// backend is the fleet the replicas probe: each target passes unless set
// failing; every probe is counted by the replica that made it.
type backend struct {
	mu     sync.Mutex
	fail   map[string]bool
	probes map[string]map[string]int // replica -> target -> probes
}

func newBackend() *backend {
	return &backend{fail: map[string]bool{}, probes: map[string]map[string]int{}}
}

func (b *backend) setFailing(name string, fail bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail[name] = fail
}

func (b *backend) count(replica, name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.probes[replica][name]
}

type fakeProber struct {
	b       *backend
	replica string
	name    string
}

func (p fakeProber) Probe(context.Context) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.b.probes[p.replica] == nil {
		p.b.probes[p.replica] = map[string]int{}
	}
	p.b.probes[p.replica][p.name]++
	if p.b.fail[p.name] {
		return errors.New("down")
	}
	return nil
}

// target names its fake backend by the path of its URL (never contacted).
func target(name string) checker.Spec {
	return checker.Spec{Name: name, Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:9/" + name}}}
}

type replica struct {
	id  string
	reg *etcdreg.Registry
	c   *checker.Checker
}

const prefix = "/pulse-test/"

func startReplica(t *testing.T, endpoint, id string, b *backend) *replica {
	t.Helper()
	return startReplicaTTL(t, endpoint, id, b, 2*time.Second)
}

func startReplicaTTL(t *testing.T, endpoint, id string, b *backend, ttl time.Duration) *replica {
	t.Helper()
	return openReplica(t, etcdreg.Options{Endpoints: []string{endpoint}, ID: id, LeaseTTL: ttl}, b, nil)
}

// openReplica starts a replica with o (its Prefix and Logger set here)
// and the tests' checker configuration, changed by change if not nil.
func openReplica(t *testing.T, o etcdreg.Options, b *backend, change func(*checker.Config)) *replica {
	t.Helper()
	id := o.ID
	o.Prefix, o.Logger = prefix, testLogger(t)
	reg, err := etcdreg.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := checker.Config{
		Shared:   reg,
		Logger:   testLogger(t),
		Defaults: checker.Defaults{Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, Rise: 1, Fall: 1},
		NewProber: func(s probe.Spec) (checker.Prober, error) {
			return fakeProber{b: b, replica: id, name: s.HTTP.URL[strings.LastIndex(s.HTTP.URL, "/")+1:]}, nil
		},
	}
	if change != nil {
		change(&cfg)
	}
	c, err := checker.New(cfg)
	if err != nil {
		reg.Close()
		t.Fatal(err)
	}
	reg.Run(c)
	c.Start()
	r := &replica{id: id, reg: reg, c: c}
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	if r.c != nil {
		r.c.Close()
		r.reg.Close()
		r.c = nil
	}
}

// eventually polls cond until it holds or 15s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testscale.D(15 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func state(r *replica, name string) checker.State {
	st, err := r.c.Status(name)
	if err != nil {
		return checker.StateUnknown
	}
	return st.State
}

// collect returns every event a watcher gets until stop says so.
func drain(t *testing.T, w *checker.Watcher, until func([]checker.Event) bool) []checker.Event {
	t.Helper()
	var got []checker.Event
	deadline := time.After(testscale.D(15 * time.Second))
	for !until(got) {
		select {
		case <-w.Ready():
		case <-deadline:
			t.Fatalf("timed out; got %d events: %v", len(got), got)
		}
		evs, err := w.Next(100)
		if err != nil {
			t.Fatalf("watcher ended: %v", err)
		}
		got = append(got, evs...)
	}
	return got
}

func transitions(evs []checker.Event, name string) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == checker.EventTransition && e.Transition.Target == name {
			out = append(out, fmt.Sprintf("%d %s", e.Revision, e.Transition))
		}
	}
	return out
}

// Two replicas share one fleet: a target added on one shows on both at the
// same revision, only its owner probes it, its transitions reach watchers
// on both replicas with the same revisions, and when the owner dies the
// other takes it over within the lease TTL plus an interval.
func TestReplicasShareOneFleet(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	a := startReplica(t, etcd.Endpoint, "a", b)
	bb := startReplica(t, etcd.Endpoint, "b", b)
	eventually(t, "both replicas see both members", func() bool {
		return len(a.reg.Members()) == 2 && len(bb.reg.Members()) == 2
	})

	// Enough targets that each replica owns some.
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("t%02d", i))
	}
	wa, err := a.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	wb, err := bb.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	for i, n := range names {
		on := a
		if i%2 == 1 {
			on = bb
		}
		st, created, err := on.c.Add(target(n))
		if err != nil || !created || st.Spec.Name != n {
			t.Fatalf("Add(%s) on %s = %+v, %v, %v", n, on.id, st, created, err)
		}
		// Read your writes, on the other replica too once it caught up.
		if _, err := on.c.Status(n); err != nil {
			t.Fatalf("Status(%s) on the replica that added it: %v", n, err)
		}
	}
	owners := map[string]int{}
	for _, n := range names {
		owners[a.reg.Owner(n)]++
		if a.reg.Owner(n) != bb.reg.Owner(n) {
			t.Fatalf("replicas disagree on %s's owner: %s vs %s", n, a.reg.Owner(n), bb.reg.Owner(n))
		}
	}
	if owners["a"] == 0 || owners["b"] == 0 {
		t.Fatalf("ownership not divided: %v", owners)
	}
	for _, n := range names {
		eventually(t, n+" healthy on both replicas", func() bool {
			return state(a, n) == checker.StateHealthy && state(bb, n) == checker.StateHealthy
		})
	}
	// Only the owner probes.
	for _, n := range names {
		own, other := a.reg.Owner(n), "a"
		if own == "a" {
			other = "b"
		}
		if b.count(own, n) == 0 || b.count(other, n) != 0 {
			t.Errorf("%s (owner %s): probes by a %d, by b %d", n, own, b.count("a", n), b.count("b", n))
		}
	}

	// A failure on a target owned by a reaches b's watcher with the same
	// revision as a's.
	var victim string
	for _, n := range names {
		if a.reg.Owner(n) == "a" {
			victim = n
			break
		}
	}
	b.setFailing(victim, true)
	until := func(evs []checker.Event) bool {
		return len(transitions(evs, victim)) >= 2 // unknown -> healthy, healthy -> unhealthy
	}
	ga, gb := transitions(drain(t, wa, until), victim), transitions(drain(t, wb, until), victim)
	if strings.Join(ga[:2], "\n") != strings.Join(gb[:2], "\n") || !strings.HasSuffix(ga[1], victim+": healthy -> unhealthy") {
		t.Fatalf("transitions differ between replicas or are wrong:\na: %q\nb: %q", ga, gb)
	}
	if a.c.Revision() == 0 {
		t.Fatal("revision 0")
	}

	// Resume on b from a revision a handed out: the same events follow.
	resumeAt := wa.Progress
	rev, _ := resumeAt()
	b.setFailing(victim, false)
	eventually(t, victim+" healthy again on a", func() bool { return state(a, victim) == checker.StateHealthy })
	wr, err := bb.c.Watch(checker.Filter{Names: []string{victim}}, rev)
	if err != nil {
		t.Fatalf("resume on b from a's revision %d: %v", rev, err)
	}
	defer wr.Close()
	got := transitions(drain(t, wr, func(evs []checker.Event) bool { return len(transitions(evs, victim)) >= 1 }), victim)
	again := transitions(drain(t, wa, func(evs []checker.Event) bool { return len(transitions(evs, victim)) >= 1 }), victim)
	if got[0] != again[0] || !strings.HasSuffix(got[0], "unhealthy -> healthy") {
		t.Fatalf("resumed on b: %q; on a: %q", got, again)
	}

	// a dies without leaving (no lease revoked): b takes its targets over
	// within the TTL plus an interval, and carries their states over.
	died := time.Now()
	a.crash()
	eventually(t, "b alone", func() bool { return len(bb.reg.Members()) == 1 })
	before := b.count("b", victim)
	eventually(t, "b probes a's targets", func() bool { return b.count("b", victim) > before })
	// The bound is the lease TTL plus an interval; the slack is for a
	// loaded machine (the race detector), not for a missed expiry, which
	// would never end.
	took := time.Since(died)
	t.Logf("takeover after %v (TTL 2s, interval 50ms)", took)
	if took > 2*time.Second+50*time.Millisecond+5*time.Second {
		t.Errorf("takeover took %v, far more than the 2s TTL plus an interval", took)
	}
	b.setFailing(victim, true)
	got = transitions(drain(t, wb, func(evs []checker.Event) bool { return len(transitions(evs, victim)) >= 2 }), victim)
	if !strings.HasSuffix(got[len(got)-1], victim+": healthy -> unhealthy") {
		t.Fatalf("after the takeover, b's watcher got %q", got)
	}
	for _, n := range names {
		if st, err := bb.c.Status(n); err != nil || (n != victim && st.State != checker.StateHealthy) {
			t.Errorf("%s on b after a died: %+v, %v", n, st.State, err)
		}
	}
}

// crash stops a replica as a killed process would: the checker stops, the
// lease is neither renewed nor revoked.
func (r *replica) crash() {
	r.c.Close()
	r.reg.Abandon()
	r.c = nil
}

// A replica whose lease is gone cannot write a state, and neither can one
// whose view of the state is stale.
func TestWritesAreFenced(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	a := startReplica(t, etcd.Endpoint, "a", b)
	if _, _, err := a.c.Add(target("web")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web healthy", func() bool { return state(a, "web") == checker.StateHealthy })
	st, _ := a.c.Status("web")

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(context.Background(), prefix+"states/web")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("state key: %v, %v", resp, err)
	}
	stateRev := uint64(resp.Kvs[0].ModRevision)
	propose := func(rev uint64) error {
		return a.reg.ProposeState(context.Background(), checker.StateProposal{
			Name: "web", StateRev: rev,
			State: checker.SharedState{State: checker.StateUnhealthy, From: st.State, Time: time.Now(), Reason: "test"},
		})
	}
	if err := propose(stateRev - 1); !errors.Is(err, checker.ErrFenced) {
		t.Fatalf("write over a newer state: %v, want ErrFenced", err)
	}
	// The lease expires (as for a paused process): revoke it behind the
	// replica's back.
	mresp, err := cli.Get(context.Background(), prefix+"members/a")
	if err != nil || len(mresp.Kvs) != 1 {
		t.Fatalf("member key: %v, %v", mresp, err)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(mresp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := propose(stateRev); !errors.Is(err, checker.ErrFenced) {
		t.Fatalf("write after the lease expired: %v, want ErrFenced", err)
	}
	after, err := cli.Get(context.Background(), prefix+"states/web")
	if err != nil || after.Kvs[0].ModRevision != resp.Kvs[0].ModRevision {
		t.Fatalf("the state was overwritten: %v, %v", after, err)
	}
	// The replica notices, registers again and owns its target again.
	eventually(t, "a registered again", func() bool {
		m, err := cli.Get(context.Background(), prefix+"members/a")
		return err == nil && len(m.Kvs) == 1 && m.Kvs[0].Lease != mresp.Kvs[0].Lease
	})
	b.setFailing("web", true)
	eventually(t, "web unhealthy, written under the new lease", func() bool { return state(a, "web") == checker.StateUnhealthy })
}

// etcd unavailable: the replica keeps probing and serving its last view,
// says it is degraded, refuses changes it cannot store, and catches up
// when etcd returns, with every acknowledged registration kept.
func TestEtcdUnavailable(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	// A lease that outlives the outage: stopping etcd takes a moment during
	// which it still counts down leases it cannot hear renewed.
	a := startReplicaTTL(t, etcd.Endpoint, "a", b, 10*time.Second)
	for _, n := range []string{"x", "y"} {
		if _, _, err := a.c.Add(target(n)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "x and y healthy", func() bool {
		return state(a, "x") == checker.StateHealthy && state(a, "y") == checker.StateHealthy
	})

	etcd.Stop()
	eventually(t, "a flags itself degraded", func() bool { return a.c.StoreErr() != nil })
	before := b.count("a", "x")
	eventually(t, "a keeps probing", func() bool { return b.count("a", "x") > before+3 })
	if got := state(a, "y"); got != checker.StateHealthy {
		t.Fatalf("last view lost: y is %v", got)
	}
	// Not acknowledged; a timed-out write may or may not land, and says so.
	if _, _, err := a.c.Add(target("z")); !errors.Is(err, checker.ErrUncertain) && !errors.Is(err, checker.ErrStore) {
		t.Fatalf("Add while etcd is down: %v, want ErrUncertain or ErrStore", err)
	}
	b.setFailing("x", true) // decided while etcd is down, stored when it returns

	etcd.Restart()
	eventually(t, "a recovered", func() bool { return a.c.StoreErr() == nil })
	eventually(t, "x's transition stored and applied", func() bool { return state(a, "x") == checker.StateUnhealthy })
	if _, _, err := a.c.Add(target("z")); err != nil {
		t.Fatalf("Add after etcd returned: %v", err)
	}
	list, _ := a.c.List("")
	if len(list) != 3 {
		t.Fatalf("targets after the outage: %d, want x, y, z", len(list))
	}
	// A second replica started now sees everything acknowledged.
	b2 := startReplica(t, etcd.Endpoint, "b", b)
	list, _ = b2.c.List("")
	if len(list) != 3 {
		t.Fatalf("a new replica sees %d targets, want 3", len(list))
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// A replica whose view of the members is out of date (a replica joined
// that it has not seen: the new one may own its targets now) cannot write
// states until it catches up.
func TestWritesAreFencedByMembersNotSeen(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	reg, err := etcdreg.Open(context.Background(), etcdreg.Options{Endpoints: []string{etcd.Endpoint}, Prefix: prefix, ID: "a", LeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	rev, err := reg.PutSpec(context.Background(), target("web"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Load(); err != nil { // its view; no watch runs (Run is not called)
		t.Fatal(err)
	}
	propose := func(stateRev uint64) error {
		return reg.ProposeState(context.Background(), checker.StateProposal{Name: "web", StateRev: stateRev,
			State: checker.SharedState{State: checker.StateHealthy, From: checker.StateUnhealthy, Time: time.Now()}})
	}
	if err := propose(0); err != nil {
		t.Fatalf("first state, members as seen: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(context.Background(), prefix+"members/b", `{"id":"b"}`); err != nil {
		t.Fatal(err)
	}
	st, err := cli.Get(context.Background(), prefix+"states/web")
	if err != nil || len(st.Kvs) != 1 || uint64(st.Kvs[0].ModRevision) <= rev {
		t.Fatalf("state key: %v, %v", st, err)
	}
	if err := propose(uint64(st.Kvs[0].ModRevision)); !errors.Is(err, checker.ErrFenced) {
		t.Fatalf("write with a member not seen: %v, want ErrFenced", err)
	}
	if _, _, err := reg.Load(); err != nil { // caught up
		t.Fatal(err)
	}
	if err := propose(uint64(st.Kvs[0].ModRevision)); err != nil {
		t.Fatalf("write after seeing the new member: %v", err)
	}
}

package etcdreg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// startReplicaWith is startReplica with a change to the checker's
// configuration.
func startReplicaWith(t *testing.T, endpoint, id string, b *backend, change func(*checker.Config)) *replica {
	t.Helper()
	return openReplica(t, etcdreg.Options{Endpoints: []string{endpoint}, ID: id, LeaseTTL: 2 * time.Second}, b, change)
}

func flapView(r *replica, name string) string {
	st, err := r.c.Status(name)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("state %v verdict %v flapping %v transitions %d", st.State, st.Verdict, st.Flapping, st.Transitions)
}

func policyTexts(evs []checker.Event, kind checker.EventKind) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, fmt.Sprintf("%d %s", e.Revision, e.Policy.Text))
		}
	}
	return out
}

// The owner's flap log is stored with the target's state: both replicas
// show the same flapping status and FLAPPING_STARTED at the same revision;
// when the owner crashes the other takes the target over still flapping,
// its transitions not counted again; a replica started afterwards loads
// the log.
func TestFlapLogTravelsWithTheState(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	eventually(t, "two members", func() bool { return len(r1.reg.Members()) == 2 && len(r2.reg.Members()) == 2 })
	w1, err := r1.c.Watch(checker.Filter{}, r1.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := r2.c.Watch(checker.Filter{}, r1.c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()

	s := target("flappy")
	s.InitialState, s.FlapThreshold, s.FlapWindow, s.FlapStableFor = checker.StateHealthy, 3, time.Minute, time.Minute
	if _, _, err := r1.c.Add(s); err != nil {
		t.Fatal(err)
	}
	for i, want := range []checker.State{checker.StateUnhealthy, checker.StateHealthy, checker.StateUnhealthy} {
		b.setFailing("flappy", i%2 == 0)
		eventually(t, fmt.Sprintf("flappy %v", want), func() bool { return state(r1, "flappy") == want && state(r2, "flappy") == want })
	}
	b.setFailing("flappy", false)
	const want = "state unhealthy verdict healthy flapping true transitions 4"
	for _, r := range []*replica{r1, r2} {
		eventually(t, "flappy flapping with a healthy verdict on "+r.id, func() bool { return flapView(r, "flappy") == want })
	}
	hasStarted := func(evs []checker.Event) bool { return len(policyTexts(evs, checker.EventFlappingStarted)) > 0 }
	e1 := policyTexts(drain(t, w1, hasStarted), checker.EventFlappingStarted)
	e2 := policyTexts(drain(t, w2, hasStarted), checker.EventFlappingStarted)
	if len(e1) != 1 || e1[0] != e2[0] {
		t.Fatalf("FLAPPING_STARTED: r1 %q, r2 %q; want one, the same", e1, e2)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(context.Background(), prefix+"states/flappy")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("state key: %v, %v", resp, err)
	}
	var rec struct {
		Flap *checker.FlapRecord
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.Flap == nil || !rec.Flap.Flapping || len(rec.Flap.Changes) != 4 {
		t.Fatalf("stored state %s: want its flap log, flapping, 4 changes", resp.Kvs[0].Value)
	}

	owner, other := r1, r2
	if r2.reg.Owner("flappy") == "r2" {
		owner, other = r2, r1
	}
	owner.crash()
	eventually(t, other.id+" owns flappy", func() bool { return other.reg.Owner("flappy") == other.id })
	before := b.count(other.id, "flappy")
	eventually(t, other.id+" probes flappy", func() bool { return b.count(other.id, "flappy") > before+5 })
	if got := flapView(other, "flappy"); got != want {
		t.Errorf("after the takeover: %s, want %s", got, want)
	}
	r3 := startReplica(t, etcd.Endpoint, "r3", b)
	if got := flapView(r3, "flappy"); got != want {
		t.Errorf("loaded by a replica started afterwards: %s, want %s", got, want)
	}
}

// Outcomes reported on both replicas race for one bucket in etcd: no more
// are counted than the rate allows, every replica counts the same ones,
// and the owner applies those reported to the other.
func TestPassiveOutcomesShareOneBucket(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	eventually(t, "two members", func() bool { return len(r1.reg.Members()) == 2 && len(r2.reg.Members()) == 2 })
	s := target("web")
	s.InitialState, s.PassiveOutcomes, s.PassiveRate = checker.StateHealthy, true, 5
	s.Interval, s.Timeout = time.Hour, time.Second // probes stay out of it
	if _, _, err := r1.c.Add(s); err != nil {
		t.Fatal(err)
	}
	owner, other := r1, r2
	if r1.reg.Owner("web") == "r2" {
		owner, other = r2, r1
	}
	if _, counted, err := other.c.ReportOutcome("web", checker.Outcome{Err: "502 from upstream"}); err != nil || !counted {
		t.Fatalf("ReportOutcome on the replica that does not own web: %v, %v", counted, err)
	}
	eventually(t, "the owner applied it", func() bool {
		st, _ := owner.c.Status("web")
		return st.LastResult != nil && st.LastResult.Passive && st.LastResult.Err == "502 from upstream" && state(other, "web") == checker.StateUnhealthy
	})

	began := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	counted := 1
	for i := range 20 {
		r := []*replica{r1, r2}[i%2]
		wg.Go(func() {
			_, ok, err := r.c.ReportOutcome("web", checker.Outcome{Pass: true})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				counted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	most := 5 + int(time.Since(began).Seconds()*5) + 1
	t.Logf("%d of 21 outcomes counted in %v at 5 a second", counted, time.Since(began))
	if counted > most || counted < 2 {
		t.Errorf("%d outcomes counted, want within [2, %d]", counted, most)
	}
	eventually(t, "passive_results alike", func() bool {
		s1, _ := r1.c.Status("web")
		s2, _ := r2.c.Status("web")
		return s1.PassiveResults == uint64(counted) && s2.PassiveResults == uint64(counted)
	})
	if _, _, err := r2.c.ReportOutcome("nope", checker.Outcome{Pass: true}); err == nil {
		t.Error("an outcome for an unknown target was accepted")
	}
}

// A degraded replica's overload is published: CHECKER_DEGRADED with its
// ID on both replicas' watchers at the same revision, in both
// DegradedReplicas; when it dies, the other streams CHECKER_RECOVERED.
func TestOverloadIsPublishedPerReplica(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	// r1 never degraded (a loaded test machine would make it so), r2 at
	// its first probe.
	r1 := startReplicaWith(t, etcd.Endpoint, "r1", b, func(c *checker.Config) { c.Overload.Disabled = true })
	r2 := startReplicaWith(t, etcd.Endpoint, "r2", b, func(c *checker.Config) { c.Overload.MaxLag = time.Nanosecond })
	eventually(t, "two members", func() bool { return len(r1.reg.Members()) == 2 && len(r2.reg.Members()) == 2 })
	rev := max(r1.c.Revision(), r2.c.Revision())
	eventually(t, "both at one revision", func() bool { return r1.c.Revision() >= rev && r2.c.Revision() >= rev })
	w1, err := r1.c.Watch(checker.Filter{}, rev)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := r2.c.Watch(checker.Filter{}, rev)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	for i := 0; ; i++ { // until r2 owns one
		name := fmt.Sprintf("t%d", i)
		if _, _, err := r1.c.Add(target(name)); err != nil {
			t.Fatal(err)
		}
		if r1.reg.Owner(name) == "r2" {
			break
		}
	}
	hasDegraded := func(evs []checker.Event) bool { return len(policyTexts(evs, checker.EventCheckerDegraded)) > 0 }
	e1 := policyTexts(drain(t, w1, hasDegraded), checker.EventCheckerDegraded)
	e2 := policyTexts(drain(t, w2, hasDegraded), checker.EventCheckerDegraded)
	if len(e1) != 1 || e1[0] != e2[0] || !strings.Contains(e1[0], "replica r2: checker degraded: ") {
		t.Fatalf("CHECKER_DEGRADED: r1 %q, r2 %q; want r2's, the same", e1, e2)
	}
	for _, r := range []*replica{r1, r2} {
		if d := r.c.DegradedReplicas(); len(d) != 1 || d[0].Replica != "r2" || !d[0].Degraded {
			t.Errorf("%s's DegradedReplicas: %+v", r.id, d)
		}
	}
	if r1.c.Overload().Degraded {
		t.Error("r1 says it is degraded itself")
	}
	r2.crash()
	hasRecovered := func(evs []checker.Event) bool { return len(policyTexts(evs, checker.EventCheckerRecovered)) > 0 }
	if got := policyTexts(drain(t, w1, hasRecovered), checker.EventCheckerRecovered); !strings.Contains(got[0], "replica r2: left the replicas") {
		t.Errorf("CHECKER_RECOVERED on r1: %q", got)
	}
	if d := r1.c.DegradedReplicas(); len(d) != 0 {
		t.Errorf("r1's DegradedReplicas after r2 died: %+v", d)
	}
}

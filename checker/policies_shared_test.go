package checker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/fakeshared"
)

// fakeCluster is a shared registry in memory for several replicas, as
// etcd is for pulsed: every change gets the next revision and is applied
// to every replica's checker in the same order; a state write is fenced
// unless its writer owns the target and saw the stored state; an outcome
// is stored only over the one its writer saw.
type fakeCluster struct {
	applyMu sync.Mutex // one commit applied at a time, to every replica in order

	mu        sync.Mutex // protects the fields below
	rev       uint64
	replicas  []*fakeReplica
	owner     map[string]string // target -> replica; unlisted: the first replica
	stateRev  map[string]uint64
	outcomes  map[string]storedOutcome
	overloads map[string]checker.ReplicaOverload
}

type storedOutcome struct {
	o   checker.SharedOutcome
	rev uint64
}

// fakeReplica is one replica's view of a fakeCluster: its checker.Shared.
type fakeReplica struct {
	fakeshared.Mirror
	cl *fakeCluster
	id string
	c  *checker.Checker
	e  *testEnv
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{owner: map[string]string{}, stateRev: map[string]uint64{}, outcomes: map[string]storedOutcome{}, overloads: map[string]checker.ReplicaOverload{}}
}

// commit stores a change at the next revision and applies it to every
// replica.
func (cl *fakeCluster) commit(ch checker.SharedChange) uint64 {
	cl.applyMu.Lock()
	defer cl.applyMu.Unlock()
	cl.mu.Lock()
	cl.rev++
	ch.Rev = cl.rev
	reps := slices.Clone(cl.replicas)
	cl.mu.Unlock()
	for _, r := range reps {
		r.c.ApplyShared([]checker.SharedChange{ch}, ch.Rev)
	}
	return ch.Rev
}

// move gives a target to another replica: a membership change.
func (cl *fakeCluster) move(name, to string) {
	cl.mu.Lock()
	cl.owner[name] = to
	cl.mu.Unlock()
	cl.commit(checker.SharedChange{Kind: checker.SharedMembersChanged})
}

func (cl *fakeCluster) ownerOf(name string) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if o, ok := cl.owner[name]; ok {
		return o
	}
	return cl.replicas[0].id
}

// replica starts a replica on clock with probers fp.
func (cl *fakeCluster) replica(t *testing.T, id string, clock *fakeclock.Clock, fp *fakeProbers, cfg checker.Config) *fakeReplica {
	t.Helper()
	r := &fakeReplica{cl: cl, id: id}
	cfg.Shared, cfg.Clock, cfg.NewProber = r, clock, fp.New
	cfg.Defaults = checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.c = c
	r.e = &testEnv{c: c, clock: clock, probes: fp}
	cl.mu.Lock()
	cl.replicas = append(cl.replicas, r)
	cl.mu.Unlock()
	return r
}

func (r *fakeReplica) Load() ([]checker.SharedTarget, uint64, error) { return nil, 0, nil }

func (r *fakeReplica) PutSpecs(_ context.Context, specs []checker.Spec) (rev uint64, stored int, _ error) {
	for _, s := range specs {
		rev = r.cl.commit(checker.SharedChange{Kind: checker.SharedSpecPut, Spec: s})
	}
	return rev, len(specs), nil
}

func (r *fakeReplica) DeleteTarget(_ context.Context, name string) (uint64, bool, error) {
	return r.cl.commit(checker.SharedChange{Kind: checker.SharedSpecDeleted, Name: name}), true, nil
}

func (r *fakeReplica) ProposeState(_ context.Context, p checker.StateProposal) error {
	cl := r.cl
	cl.applyMu.Lock()
	defer cl.applyMu.Unlock()
	cl.mu.Lock()
	owner := cl.owner[p.Name]
	if owner == "" {
		owner = cl.replicas[0].id
	}
	if owner != r.id || cl.stateRev[p.Name] != p.StateRev {
		cl.mu.Unlock()
		return fmt.Errorf("%w: %s is not the owner or saw revision %d", checker.ErrFenced, r.id, p.StateRev)
	}
	cl.rev++
	rev := cl.rev
	cl.stateRev[p.Name] = rev
	reps := slices.Clone(cl.replicas)
	cl.mu.Unlock()
	p.State.Writer = r.id
	for _, x := range reps {
		x.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: rev, Name: p.Name, State: p.State}}, rev)
	}
	return nil
}

func (r *fakeReplica) Owns(name string) bool { return r.cl.ownerOf(name) == r.id }

func (r *fakeReplica) Owner(name string) string { return r.cl.ownerOf(name) }

func (r *fakeReplica) PutOutcome(_ context.Context, name string, o checker.SharedOutcome, prevRev uint64) (uint64, *checker.SharedOutcome, error) {
	cl := r.cl
	cl.applyMu.Lock()
	defer cl.applyMu.Unlock()
	cl.mu.Lock()
	if cur, ok := cl.outcomes[name]; ok && cur.rev != prevRev {
		cl.mu.Unlock()
		return cur.rev, &cur.o, nil
	}
	cl.rev++
	rev := cl.rev
	o.Replica = r.id
	cl.outcomes[name] = storedOutcome{o, rev}
	reps := slices.Clone(cl.replicas)
	cl.mu.Unlock()
	for _, x := range reps {
		x.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedOutcomePut, Rev: rev, Name: name, Outcome: o}}, rev)
	}
	return rev, nil, nil
}

func (r *fakeReplica) PutOverload(_ context.Context, o checker.ReplicaOverload) error {
	o.Replica = r.id
	r.cl.mu.Lock()
	r.cl.overloads[r.id] = o
	r.cl.mu.Unlock()
	r.cl.commit(checker.SharedChange{Kind: checker.SharedOverloadPut, Overload: o})
	return nil
}

func (r *fakeReplica) Overloads() []checker.ReplicaOverload {
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	var out []checker.ReplicaOverload
	for _, o := range r.cl.overloads {
		out = append(out, o)
	}
	return out
}

// policyEvents returns a watcher's policy events as "revision text".
func policyEvents(t *testing.T, w *checker.Watcher) []string {
	t.Helper()
	var out []string
	for _, e := range next(t, w) {
		if e.Kind.IsPolicy() {
			out = append(out, fmt.Sprintf("%d %s", e.Revision, e.Policy.Text))
		}
	}
	return out
}

// A flapping target stays flapping when it moves to another replica, which
// neither releases it nor counts its verdict changes again; every replica
// answers the same flapping status and streams the same FLAPPING events
// at the same revisions.
func TestSharedFlapDampingSurvivesAMove(t *testing.T) {
	cl := newFakeCluster()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	a := cl.replica(t, "a", clock, fp, checker.Config{})
	b := cl.replica(t, "b", clock, fp, checker.Config{})
	wa, wb := watchNow(t, a.c, checker.Filter{}), watchNow(t, b.c, checker.Filter{})

	s := spec("web-2")
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 1, 1, checker.StateHealthy
	s.FlapWindow, s.FlapThreshold, s.FlapStableFor = 10*time.Second, 3, 3*time.Second
	if _, _, err := b.c.Add(s); err != nil { // added on the replica that does not own it
		t.Fatal(err)
	}
	view := func(st checker.Status) string {
		return fmt.Sprintf("state %v verdict %v flapping %v transitions %d", st.State, st.Verdict, st.Flapping, st.Transitions)
	}
	// probe probes web-2 on r, a second later, and waits until both
	// replicas show want: the owner's writes have come back.
	probe := func(r *fakeReplica, ok bool, want checker.Status) {
		t.Helper()
		clock.Advance(time.Second)
		fp.set("web-2", map[bool]outcome{true: pass, false: fail}[ok])
		r.c.RunRound(t.Context())
		var got [2]string
		deadline := time.Now().Add(5 * time.Second)
		for {
			for i, x := range []*fakeReplica{a, b} {
				st, _ := x.c.Status("web-2")
				got[i] = view(st)
			}
			if got[0] == view(want) && got[1] == view(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("a says %s, b says %s; want %s", got[0], got[1], view(want))
			}
			time.Sleep(time.Millisecond)
		}
	}
	const H, U = checker.StateHealthy, checker.StateUnhealthy
	// Healthy, then fail, pass, fail: the third transition makes it flap;
	// the pass after that changes its verdict only.
	probe(a, false, checker.Status{State: U, Verdict: U, Transitions: 1})
	probe(a, true, checker.Status{State: H, Verdict: H, Transitions: 2})
	probe(a, false, checker.Status{State: U, Verdict: U, Flapping: true, Transitions: 3})
	probe(a, true, checker.Status{State: U, Verdict: H, Flapping: true, Transitions: 4})
	evA, evB := policyEvents(t, wa), policyEvents(t, wb)
	if len(evA) != 1 || !strings.Contains(evA[0], "web-2: flapping, 3 transitions in 10s") {
		t.Fatalf("a's stream: %v, want FLAPPING_STARTED", evA)
	}
	if diff := cmp.Diff(evA, evB); diff != "" {
		t.Fatalf("the replicas' streams differ (-a +b):\n%s", diff)
	}

	// b takes it over: still flapping, its four changes not counted again
	// by b's first passes.
	cl.move("web-2", "b")
	probe(b, true, checker.Status{State: U, Verdict: H, Flapping: true, Transitions: 4})
	probe(b, true, checker.Status{State: U, Verdict: H, Flapping: true, Transitions: 4})
	if got := policyEvents(t, wb); len(got) != 0 {
		t.Fatalf("events after the move: %v, want none", got)
	}
	// Stable for 3s since its last change (on a): released, once, on both.
	probe(b, true, checker.Status{State: H, Verdict: H, Transitions: 4})
	evA, evB = policyEvents(t, wa), policyEvents(t, wb)
	if len(evB) != 1 || !strings.Contains(evB[0], "web-2: no longer flapping, stable for 3s after flapping") {
		t.Fatalf("b's stream: %v, want FLAPPING_ENDED", evB)
	}
	if diff := cmp.Diff(evA, evB); diff != "" {
		t.Fatalf("the replicas' streams differ (-a +b):\n%s", diff)
	}
}

// Outcomes reported to a replica that does not own the target count: the
// owner applies them, every replica counts them, and the rate limit is
// one bucket for the target whatever replica is asked, even when replicas
// race for its last tokens.
func TestSharedPassiveOutcomesGoToTheOwner(t *testing.T) {
	cl := newFakeCluster()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	a := cl.replica(t, "a", clock, fp, checker.Config{})
	b := cl.replica(t, "b", clock, fp, checker.Config{})
	s := spec("web-1")
	s.InitialState, s.PassiveOutcomes, s.PassiveRate, s.Fall = checker.StateHealthy, true, 4, 1
	if _, _, err := a.c.Add(s); err != nil {
		t.Fatal(err)
	}
	st, counted, err := b.c.ReportOutcome("web-1", checker.Outcome{Err: "502 from upstream"})
	if err != nil || !counted {
		t.Fatalf("ReportOutcome on b = %v, %v", counted, err)
	}
	if st.PassiveResults != 1 {
		t.Errorf("b's status counts %d passive results, want 1", st.PassiveResults)
	}
	waitFor(t, "a's verdict stored", func() bool {
		sa, _ := a.c.Status("web-1")
		sb, _ := b.c.Status("web-1")
		return sa.State == checker.StateUnhealthy && sb.State == checker.StateUnhealthy
	})
	if sa, _ := a.c.Status("web-1"); sa.PassiveResults != 1 || sa.LastResult == nil || !sa.LastResult.Passive || sa.LastResult.Err != "502 from upstream" {
		t.Errorf("the owner's status %+v: want the outcome applied", sa)
	}

	// 3 tokens left of 4; 12 outcomes race from both replicas at one instant:
	// exactly 3 count.
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for i := range 12 {
		r := []*fakeReplica{a, b}[i%2]
		wg.Go(func() {
			if _, counted, err := r.c.ReportOutcome("web-1", checker.Outcome{Pass: true}); err != nil {
				t.Error(err)
			} else if counted {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 3 {
		t.Fatalf("%d outcomes counted at one instant, want the bucket's 3", n)
	}
	sa, _ := a.c.Status("web-1")
	sb, _ := b.c.Status("web-1")
	if sa.PassiveResults != 4 || sb.PassiveResults != 4 || sa.PassiveLimited+sb.PassiveLimited != 9 {
		t.Errorf("passive results a %d b %d, limited a %d + b %d; want 4, 4 and 9", sa.PassiveResults, sb.PassiveResults, sa.PassiveLimited, sb.PassiveLimited)
	}
	// A quarter second refills one token, on either replica.
	clock.Advance(250 * time.Millisecond)
	if _, counted, _ := b.c.ReportOutcome("web-1", checker.Outcome{Pass: true}); !counted {
		t.Error("an outcome after a refill was not counted")
	}
	if _, counted, _ := a.c.ReportOutcome("web-1", checker.Outcome{Pass: true}); counted {
		t.Error("an outcome over the rate was counted")
	}

	// The target moves to b: an outcome sent to a is applied by b.
	cl.move("web-1", "b")
	clock.Advance(time.Second)
	if _, counted, err := a.c.ReportOutcome("web-1", checker.Outcome{Err: "reset by peer"}); err != nil || !counted {
		t.Fatalf("ReportOutcome on a after the move: %v, %v", counted, err)
	}
	if sb, _ := b.c.Status("web-1"); sb.LastResult == nil || sb.LastResult.Err != "reset by peer" {
		t.Errorf("the new owner's last result %+v, want the outcome sent to a", sb.LastResult)
	}
	if sa, _ := a.c.Status("web-1"); sa.LastResult != nil && sa.LastResult.Err == "reset by peer" {
		t.Error("the old owner applied the outcome")
	}
}

// A degraded replica's overload is on every replica's stream, with its ID,
// at the same revision, and in every replica's DegradedReplicas; its own
// probe timeouts do not count, as with a single checker.
func TestSharedOverloadIsPublished(t *testing.T) {
	cl := newFakeCluster()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	a := cl.replica(t, "a", clock, fp, checker.Config{Overload: checker.OverloadPolicy{MaxLag: -1, MaxWaiting: -1}})
	b := cl.replica(t, "b", clock, fp, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{MaxWaiting: 1, MaxLag: -1, RecoverAfter: 3 * time.Second}})
	wa, wb := watchNow(t, a.c, checker.Filter{}), watchNow(t, b.c, checker.Filter{})
	for _, n := range []string{"h1", "h2"} {
		cl.mu.Lock()
		cl.owner[n] = "b"
		cl.mu.Unlock()
		s := spec(n)
		s.Interval, s.Timeout, s.Fall, s.InitialState = 5*time.Second, 5*time.Second, 1, checker.StateHealthy
		if _, _, err := a.c.Add(s); err != nil {
			t.Fatal(err)
		}
		fp.set(n, outcome{hang: true})
	}
	a.c.Start()
	b.c.Start()
	// b probes both with one slot: one waits, and b is degraded.
	for i := 0; !b.c.Overload().Degraded; i++ {
		if i == 100 {
			t.Fatalf("b never degraded: %+v", b.c.Overload())
		}
		step(t, b.e, 100*time.Millisecond)
	}
	// The clock stands still from here, so b cannot recover before its
	// state is published: a state not yet published is replaced by a newer
	// one, and stepping on could publish only the recovery.
	waitFor(t, "b's degraded state on both replicas", func() bool {
		return len(a.c.DegradedReplicas()) == 1 && len(b.c.DegradedReplicas()) == 1
	})
	if d := a.c.DegradedReplicas(); len(d) != 1 || d[0].Replica != "b" || !strings.Contains(d[0].Reason, "1 probe waiting for a slot (threshold 1)") {
		t.Errorf("a's DegradedReplicas: %+v", d)
	}
	evA, evB := policyEvents(t, wa), policyEvents(t, wb)
	if len(evA) != 1 || !strings.Contains(evA[0], "replica b: checker degraded: ") {
		t.Fatalf("a's stream: %v, want b's CHECKER_DEGRADED", evA)
	}
	if diff := cmp.Diff(evA, evB); diff != "" {
		t.Fatalf("the replicas' streams differ (-a +b):\n%s", diff)
	}
	for i := 0; ; i++ {
		st1, _ := b.c.Status("h1")
		st2, _ := b.c.Status("h2")
		if st1.IgnoredTimeouts+st2.IgnoredTimeouts >= 1 {
			break
		}
		if i == 100 {
			t.Fatal("no timeout ignored")
		}
		step(t, b.e, 100*time.Millisecond)
	}
	if got := a.c.Healthy(""); len(got) != 2 {
		t.Errorf("routable on a: %v; b's own timeouts counted", got)
	}

	// b keeps up again: CHECKER_RECOVERED on both.
	fp.set("h1", pass)
	fp.set("h2", pass)
	for i := 0; len(a.c.DegradedReplicas()) != 0 || len(b.c.DegradedReplicas()) != 0; i++ {
		if i == 200 {
			t.Fatalf("b never recovered: %+v", b.c.Overload())
		}
		step(t, b.e, 100*time.Millisecond)
	}
	// While its probes hung, b may have recovered and degraded again
	// between two timeouts: whatever happened, it ends recovered, and the
	// streams agree.
	evA, evB = policyEvents(t, wa), policyEvents(t, wb)
	if len(evA) == 0 || !strings.Contains(evA[len(evA)-1], "replica b: checker recovered: ") {
		t.Fatalf("a's stream: %v, want b's CHECKER_RECOVERED last", evA)
	}
	if diff := cmp.Diff(evA, evB); diff != "" {
		t.Fatalf("the replicas' streams differ (-a +b):\n%s", diff)
	}
}

// Flap damping turned off while a target flaps (a spec written on any
// replica): its owner releases it, and every replica streams the same
// FLAPPING_ENDED and the transition back to its verdict.
func TestSharedFlapDampingTurnedOff(t *testing.T) {
	cl := newFakeCluster()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	a := cl.replica(t, "a", clock, fp, checker.Config{})
	b := cl.replica(t, "b", clock, fp, checker.Config{})
	wa, wb := watchNow(t, a.c, checker.Filter{}), watchNow(t, b.c, checker.Filter{})
	s := spec("web-2")
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 1, 1, checker.StateHealthy
	s.FlapWindow, s.FlapThreshold, s.FlapStableFor = 10*time.Second, 2, time.Hour
	if _, _, err := a.c.Add(s); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []bool{false, true} {
		clock.Advance(time.Second)
		fp.set("web-2", map[bool]outcome{true: pass, false: fail}[ok])
		a.c.RunRound(t.Context())
	}
	both := func(what string, cond func(checker.Status) bool) {
		t.Helper()
		waitFor(t, what, func() bool {
			sa, _ := a.c.Status("web-2")
			sb, _ := b.c.Status("web-2")
			return cond(sa) && cond(sb)
		})
	}
	both("flapping", func(st checker.Status) bool { return st.Flapping && st.State == checker.StateUnhealthy })
	s.FlapThreshold, s.FlapStableFor = 0, 0
	if _, _, err := b.c.Add(s); err != nil {
		t.Fatal(err)
	}
	both("released", func(st checker.Status) bool { return !st.Flapping && st.State == checker.StateHealthy })
	evA, evB := policyEvents(t, wa), policyEvents(t, wb)
	if len(evA) != 2 || !strings.Contains(evA[1], "web-2: no longer flapping, flap damping turned off") {
		t.Fatalf("a's stream: %v, want FLAPPING_STARTED and FLAPPING_ENDED", evA)
	}
	if diff := cmp.Diff(evA, evB); diff != "" {
		t.Fatalf("the replicas' streams differ (-a +b):\n%s", diff)
	}
}

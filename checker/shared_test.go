package checker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
)

// fakeShared is a shared registry in memory: it numbers changes with
// revisions that skip (as etcd's do, for writes that are not events) and
// applies them to the checker at once, as a watch would.
type fakeShared struct {
	fakeshared.Mirror
	mu        sync.Mutex
	c         *checker.Checker
	rev       uint64
	notOwned  map[string]bool
	fence     bool
	proposals []checker.StateProposal
	loaded    []checker.SharedTarget
	loadRev   uint64
}

func (f *fakeShared) Load() ([]checker.SharedTarget, uint64, error) {
	f.rev = f.loadRev
	return f.loaded, f.loadRev, nil
}

// commit numbers a change, two revisions past the last, and applies it.
func (f *fakeShared) commit(ch checker.SharedChange) uint64 {
	f.mu.Lock()
	f.rev += 2
	ch.Rev = f.rev
	c := f.c
	f.mu.Unlock()
	c.ApplyShared([]checker.SharedChange{ch}, ch.Rev)
	return ch.Rev
}

func (f *fakeShared) PutSpecs(_ context.Context, specs []checker.Spec) (rev uint64, stored int, _ error) {
	for _, s := range specs {
		rev = f.commit(checker.SharedChange{Kind: checker.SharedSpecPut, Spec: s})
	}
	return rev, len(specs), nil
}

func (f *fakeShared) DeleteTarget(_ context.Context, name string) (uint64, bool, error) {
	return f.commit(checker.SharedChange{Kind: checker.SharedSpecDeleted, Name: name}), true, nil
}

func (f *fakeShared) ProposeState(_ context.Context, p checker.StateProposal) error {
	f.mu.Lock()
	f.proposals = append(f.proposals, p)
	fenced := f.fence
	f.mu.Unlock()
	if fenced {
		return fmt.Errorf("%w: test", checker.ErrFenced)
	}
	p.State.Writer = "me"
	f.commit(checker.SharedChange{Kind: checker.SharedStatePut, Name: p.Name, State: p.State})
	return nil
}

func (f *fakeShared) Owns(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.notOwned[name]
}

// Owner names this replica "me", and any other "other".
func (f *fakeShared) Owner(name string) string {
	if f.Owns(name) {
		return "me"
	}
	return "other"
}

func (f *fakeShared) setOwned(name string, own bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notOwned[name] = !own
}

func (f *fakeShared) proposed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.proposals)
}

func newSharedEnv(t *testing.T, f *fakeShared, cfg checker.Config) *testEnv {
	t.Helper()
	if f.notOwned == nil {
		f.notOwned = map[string]bool{}
	}
	cfg.Shared = f
	cfg.Defaults = checker.Defaults{Interval: 1e9, Timeout: 5e8, Rise: 1, Fall: 1}
	e := newEnv(t, cfg)
	f.mu.Lock()
	f.c = e.c
	f.mu.Unlock()
	return e
}

func (e *testEnv) state(t *testing.T, name string) checker.State {
	t.Helper()
	st, err := e.c.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	return st.State
}

// The loaded registry comes without events; every later event carries the
// shared registry's revision, gaps included; the owner's result becomes a
// state only once its write comes back; resumes, compaction and future
// revisions follow the registry's revisions.
func TestSharedRevisionsAreTheRegistrys(t *testing.T) {
	f := &fakeShared{loadRev: 7, loaded: []checker.SharedTarget{{
		Spec:     spec("pre"),
		State:    &checker.SharedState{State: checker.StateHealthy, From: checker.StateUnhealthy, Writer: "other"},
		StateRev: 3,
	}}}
	rec := &recorder{}
	e := newSharedEnv(t, f, checker.Config{HistorySize: 3, Observer: rec})
	if e.c.Revision() != 7 {
		t.Fatalf("revision after load = %d, want 7", e.c.Revision())
	}
	st, err := e.c.Status("pre")
	if err != nil || st.State != checker.StateHealthy || !st.CarriedOver {
		t.Fatalf("loaded target: %+v, %v", st, err)
	}

	st, created, err := e.c.Add(spec("a"))
	if err != nil || !created || st.State != checker.StateUnhealthy {
		t.Fatalf("Add = %+v, %v, %v", st, created, err)
	}
	e.probes.set("a", pass)
	e.probes.set("pre", pass)
	if trs := e.c.RunRound(t.Context()); len(trs) != 0 {
		t.Fatalf("a shared checker's round changed states itself: %v", texts(trs))
	}
	waitFor(t, "a's write to come back", func() bool { return e.state(t, "a") == checker.StateHealthy })
	if f.proposed() != 1 {
		t.Fatalf("%d proposals, want 1 (pre's pass changes nothing)", f.proposed())
	}

	w, err := e.c.Watch(checker.Filter{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got []string
	for _, ev := range next(t, w) {
		got = append(got, fmt.Sprintf("%d %s", ev.Revision, kinds([]checker.Event{ev})[0]))
	}
	if want := []string{"9 added a", "11 a: unhealthy -> healthy"}; !slices.Equal(got, want) {
		t.Fatalf("events from 7: %q, want %q", got, want)
	}
	// The transition carries its event's revision, and is reported (to the
	// Observer) as the only transition.
	w3, err := e.c.Watch(checker.Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	if evs := next(t, w3); len(evs) != 1 || evs[0].Transition.Revision != 11 {
		t.Fatalf("the transition from 10: %+v, want Transition.Revision 11", evs)
	}
	waitFor(t, "the transition observed", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.trs) > 0 })
	rec.mu.Lock()
	if !slices.Equal(rec.trs, []string{"a: unhealthy -> healthy"}) {
		t.Errorf("observed transitions %q, want a's rise only", rec.trs)
	}
	rec.mu.Unlock()
	// A revision inside a gap resumes at the next event.
	w2, err := e.c.Watch(checker.Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if evs := next(t, w2); len(evs) != 1 || evs[0].Revision != 11 {
		t.Fatalf("from 10: %v", evs)
	}
	if _, err := e.c.Watch(checker.Filter{}, 12); !errors.Is(err, checker.ErrFutureRevision) {
		t.Fatalf("from 12: %v, want a future revision", err)
	}
	// A revision without an event (a member's lease, say) moves the
	// checker on.
	e.c.ApplyShared(nil, 20)
	if e.c.Revision() != 20 {
		t.Fatalf("revision = %d, want 20", e.c.Revision())
	}
	if rev, ok := w2.Progress(); !ok || rev != 20 {
		t.Fatalf("progress = %d, %v; want 20, true", rev, ok)
	}
	f.mu.Lock()
	f.rev = 20
	f.mu.Unlock()
	// Two more events overflow the history of 3: resuming from before the
	// evicted one is compacted.
	e.add(t, spec("b"))
	e.add(t, spec("c"))
	if _, err := e.c.Watch(checker.Filter{}, 8); !errors.Is(err, checker.ErrCompacted) {
		t.Fatalf("from 8 after eviction: %v, want compacted", err)
	}
	if _, err := e.c.Watch(checker.Filter{}, 9); err != nil {
		t.Fatalf("from 9 (the evicted event's revision): %v", err)
	}
}

// A replica probes only what it owns and mirrors the rest; ownership
// moves with the members; a fenced write changes nothing and the next
// result proposes again.
func TestSharedOwnershipAndFencing(t *testing.T) {
	f := &fakeShared{}
	e := newSharedEnv(t, f, checker.Config{})
	f.setOwned("theirs", false)
	e.add(t, spec("theirs"))
	e.probes.set("theirs", pass)
	e.c.RunRound(t.Context())
	if n := e.probes.callCount("theirs"); n != 0 {
		t.Fatalf("probed a target another replica owns %d times", n)
	}
	// Its owner's write arrives: mirrored, with an event.
	w := watchNow(t, e.c, checker.Filter{})
	f.commit(checker.SharedChange{Kind: checker.SharedStatePut, Name: "theirs", State: checker.SharedState{
		State: checker.StateHealthy, From: checker.StateUnhealthy, Time: e.clock.Now(), Writer: "other",
	}})
	if got := kinds(next(t, w)); !slices.Equal(got, []string{"theirs: unhealthy -> healthy"}) {
		t.Fatalf("mirrored events: %q", got)
	}

	// The other replica leaves: this one takes the target over from its
	// stored state, without a transition when the results agree.
	f.setOwned("theirs", true)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 100}}, 100)
	st, _ := e.c.Status("theirs")
	if !st.CarriedOver || st.State != checker.StateHealthy {
		t.Fatalf("taken over: %+v", st)
	}
	e.c.RunRound(t.Context())
	if e.probes.callCount("theirs") != 1 || f.proposed() != 0 {
		t.Fatalf("after the takeover: %d probes, %d proposals; want 1, 0", e.probes.callCount("theirs"), f.proposed())
	}

	// Fenced: the write is refused, the state stays.
	f.mu.Lock()
	f.fence = true
	f.mu.Unlock()
	e.probes.set("theirs", fail)
	e.c.RunRound(t.Context())
	waitFor(t, "the fenced proposal", func() bool { return f.proposed() == 1 })
	if got := e.state(t, "theirs"); got != checker.StateHealthy {
		t.Fatalf("a fenced write changed the state to %v", got)
	}
	f.mu.Lock()
	f.fence = false
	f.mu.Unlock()
	waitFor(t, "the proposal to settle", func() bool {
		e.c.RunRound(t.Context())
		return e.state(t, "theirs") == checker.StateUnhealthy
	})
	if f.proposals[len(f.proposals)-1].StateRev == 0 {
		t.Fatal("the proposal did not name the state revision it replaces")
	}

	// Given away again: no more probes.
	f.setOwned("theirs", false)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 200}}, 200)
	before := e.probes.callCount("theirs")
	e.c.RunRound(t.Context())
	if e.probes.callCount("theirs") != before {
		t.Fatal("probed a target given away")
	}
}

// A loaded target another replica owns is not carried over here: this
// replica shows its owner's stored state and takes no result of it, so the
// tag would never end. Taken over, it is carried over until its first
// result, as after a restart.
func TestSharedNotOwnedIsNotCarriedOver(t *testing.T) {
	stored := func(name string, rev uint64) checker.SharedTarget {
		return checker.SharedTarget{Spec: spec(name), StateRev: rev,
			State: &checker.SharedState{State: checker.StateHealthy, From: checker.StateUnhealthy, Writer: "other"}}
	}
	f := &fakeShared{loadRev: 7, loaded: []checker.SharedTarget{stored("theirs", 3), stored("mine", 4)}}
	f.notOwned = map[string]bool{"theirs": true}
	e := newSharedEnv(t, f, checker.Config{})
	if st, _ := e.c.Status("theirs"); st.CarriedOver || st.State != checker.StateHealthy {
		t.Errorf("a loaded target another replica owns: carried over %v, state %v; want not carried over, healthy", st.CarriedOver, st.State)
	}
	if st, _ := e.c.Status("mine"); !st.CarriedOver {
		t.Errorf("a loaded target this replica owns is not carried over")
	}
	f.setOwned("theirs", true)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 100}}, 100)
	if st, _ := e.c.Status("theirs"); !st.CarriedOver {
		t.Errorf("taken over, the target is not carried over")
	}
	// Given to another replica before its first result here: the tag
	// goes with it.
	f.setOwned("theirs", false)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 101}}, 101)
	if st, _ := e.c.Status("theirs"); st.CarriedOver {
		t.Errorf("given to another replica, the target is still carried over here")
	}
}

// A replica that gives a target away keeps no streak, last result or next
// probe of its own for it: only the replica that probes a target fills
// them in, and a former owner's would stay as they were, a next probe in
// the past among them, however long ago it stopped probing.
func TestSharedGivenAwayShowsNoProbeOfItsOwn(t *testing.T) {
	f := &fakeShared{}
	e := newSharedEnv(t, f, checker.Config{})
	e.add(t, spec("web-1"))
	e.probes.set("web-1", pass)
	e.c.RunRound(t.Context())
	waitFor(t, "its owner's write of healthy", func() bool { return e.state(t, "web-1") == checker.StateHealthy })
	st, err := e.c.Status("web-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.PassStreak == 0 || st.LastResult == nil || st.NextProbe.IsZero() {
		t.Fatalf("probed here: pass streak %d, last result %v, next probe %v; want all three", st.PassStreak, st.LastResult, st.NextProbe)
	}
	f.setOwned("web-1", false)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 100}}, 100)
	st, err = e.c.Status("web-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.PassStreak != 0 || st.FailStreak != 0 || st.LastResult != nil || !st.NextProbe.IsZero() {
		t.Errorf("given away: streaks %d/%d, last result %v, next probe %v; want none of this replica's own", st.PassStreak, st.FailStreak, st.LastResult, st.NextProbe)
	}
	if st.State != checker.StateHealthy {
		t.Errorf("given away: state %v; want the stored healthy", st.State)
	}
}

// Every status names the target's owner as the shared registry's view of
// the members has it, and names the new one once the members change; a
// checker alone names none.
func TestSharedStatusNamesTheOwner(t *testing.T) {
	f := &fakeShared{}
	e := newSharedEnv(t, f, checker.Config{})
	f.setOwned("theirs", false)
	e.add(t, spec("mine"))
	e.add(t, spec("theirs"))
	owners := func() map[string]string {
		t.Helper()
		list, _ := e.c.List("")
		out := map[string]string{}
		for _, st := range list {
			out[st.Spec.Name] = st.Owner
		}
		if st, err := e.c.Status("theirs"); err != nil || st.Owner != out["theirs"] {
			t.Fatalf("Status(theirs).Owner = %q, %v; List says %q", st.Owner, err, out["theirs"])
		}
		return out
	}
	if got := owners(); got["mine"] != "me" || got["theirs"] != "other" {
		t.Fatalf("owners %v; want mine: me, theirs: other", got)
	}

	// The members change: theirs is this replica's now, and mine another's.
	f.setOwned("theirs", true)
	f.setOwned("mine", false)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 100}}, 100)
	if got := owners(); got["mine"] != "other" || got["theirs"] != "me" {
		t.Fatalf("after the members changed, owners %v; want mine: other, theirs: me", got)
	}
	e.probes.set("theirs", pass)
	e.probes.set("mine", pass)
	e.c.RunRound(t.Context())
	if e.probes.callCount("theirs") != 1 || e.probes.callCount("mine") != 0 {
		t.Fatalf("probes: theirs %d, mine %d; want only the target it names itself the owner of probed",
			e.probes.callCount("theirs"), e.probes.callCount("mine"))
	}

	alone := newEnv(t, checker.Config{})
	alone.add(t, spec("web-1"))
	if st, _ := alone.c.Status("web-1"); st.Owner != "" {
		t.Errorf("a checker alone names %q the owner; want none", st.Owner)
	}
}

// membersCounter is an Observer that counts the members changes it is
// told of.
type membersCounter struct{ n atomic.Int32 }

func (*membersCounter) ObserveProbe(checker.Spec, checker.Result) {}
func (*membersCounter) ObserveTransition(checker.Transition)      {}
func (m *membersCounter) ObserveMembers()                         { m.n.Add(1) }

// A MembersObserver is told of each members change, which moves owners
// with no event of its own (a status page's rows follow it), and of no
// other change the shared registry applies.
func TestSharedMembersChangeIsObserved(t *testing.T) {
	f := &fakeShared{}
	obs := &membersCounter{}
	e := newSharedEnv(t, f, checker.Config{Observer: obs})
	e.add(t, spec("web-1"))
	if n := obs.n.Load(); n != 0 {
		t.Fatalf("told of %d members changes before any; want none", n)
	}
	f.setOwned("web-1", false)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: 100}}, 100)
	if n := obs.n.Load(); n != 1 {
		t.Fatalf("told of %d members changes after one; want 1", n)
	}
	if st, _ := e.c.Status("web-1"); st.Owner != "other" {
		t.Errorf("after the members change, web-1's owner is %q; want other", st.Owner)
	}
}

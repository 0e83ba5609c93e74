package checker_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
)

// memStore is a checker.Store in memory whose writes can fail or wait.
type memStore struct {
	mu         sync.Mutex
	specs      map[string]checker.Spec
	states     map[string]checker.StoredState
	policies   map[string]checker.GroupPolicy
	rev        uint64
	failSpec   error
	failCommit error
	gate       chan struct{}    // if set, CommitStates waits for it
	specGate   chan struct{}    // if set, PutSpec and PutSpecs wait for it
	loadErr    map[string]error // Load returns these targets as unreadable
	commits    int
}

func newMemStore() *memStore {
	return &memStore{specs: map[string]checker.Spec{}, states: map[string]checker.StoredState{}, policies: map[string]checker.GroupPolicy{}}
}

func (m *memStore) Load() ([]checker.StoredTarget, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []checker.StoredTarget
	for name, spec := range m.specs {
		st := m.states[name]
		out = append(out, checker.StoredTarget{Spec: spec, State: st.State, LastTransition: st.LastTransition, Flap: st.Flap, Held: st.Held, Err: m.loadErr[name]})
	}
	return out, m.rev, nil
}

func (m *memStore) PutSpec(spec checker.Spec) error { return m.PutSpecs([]checker.Spec{spec}) }

// PutSpecs stores specs, all or none.
func (m *memStore) PutSpecs(specs []checker.Spec) error {
	m.mu.Lock()
	gate := m.specGate
	m.mu.Unlock()
	if gate != nil {
		<-gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSpec != nil {
		return m.failSpec
	}
	for _, spec := range specs {
		m.specs[spec.Name] = spec
	}
	return nil
}

func (m *memStore) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.policies), nil
}

func (m *memStore) PutGroupPolicy(group string, p checker.GroupPolicy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSpec != nil {
		return m.failSpec
	}
	if p == (checker.GroupPolicy{}) {
		delete(m.policies, group)
	} else {
		m.policies[group] = p
	}
	return nil
}

func (m *memStore) DeleteTarget(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSpec != nil {
		return m.failSpec
	}
	delete(m.specs, name)
	delete(m.states, name)
	return nil
}

func (m *memStore) CommitStates(states []checker.StoredState, deleted []string, rev uint64) error {
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		<-gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failCommit != nil {
		return m.failCommit
	}
	for _, st := range states {
		if _, ok := m.specs[st.Name]; ok {
			m.states[st.Name] = st
		}
	}
	for _, n := range deleted {
		delete(m.states, n)
	}
	m.rev = rev
	m.commits++
	return nil
}

func (m *memStore) state(name string) checker.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[name].State
}

func storeEnv(t *testing.T, st *memStore, cfg checker.Config) *testEnv {
	cfg.Store = st
	if cfg.Defaults == (checker.Defaults{}) {
		cfg.Defaults = checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	}
	return newEnv(t, cfg)
}

func TestStoreAddAndRemoveAreStoredBeforeTheyReturn(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("a"))
	if _, ok := st.specs["a"]; !ok {
		t.Fatal("Add returned before the spec was stored")
	}
	if ok, err := e.c.Remove("a"); !ok || err != nil {
		t.Fatalf("Remove: %v %v", ok, err)
	}
	if _, ok := st.specs["a"]; ok {
		t.Fatal("Remove returned before the spec was deleted")
	}

	st.failSpec = errors.New("disk full")
	e.c.List("") // a's removal is published: the watcher starts after it
	w := watchNow(t, e.c, checker.Filter{})
	if _, _, err := e.c.Add(spec("b")); !errors.Is(err, checker.ErrStore) {
		t.Errorf("Add with a failing store: %v, want ErrStore", err)
	}
	if _, err := e.c.Status("b"); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("a target whose spec could not be stored was registered: %v", err)
	}
	// The operator learns of it too (pulse_registry_error, the status
	// page), not only the caller, until a write goes through again.
	if err := e.c.StoreErr(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("StoreErr after a refused spec write = %v, want disk full", err)
	}
	st.failSpec = nil
	e.add(t, spec("c"))
	if err := e.c.StoreErr(); err != nil {
		t.Errorf("StoreErr after a spec was stored again = %v, want nil", err)
	}
	st.failSpec = errors.New("read-only")
	if ok, err := e.c.Remove("c"); ok || !errors.Is(err, checker.ErrStore) {
		t.Errorf("Remove with a failing store: %v %v", ok, err)
	}
	if err := e.c.StoreErr(); err == nil {
		t.Error("StoreErr after a refused removal = nil, want its error")
	}
	if _, err := e.c.Status("c"); err != nil {
		t.Errorf("a removal that could not be stored removed the target: %v", err)
	}
	e.c.List("") // waits until what was acknowledged is published
	if got := kinds(next(t, w)); !cmp.Equal(got, []string{"added c"}) {
		t.Errorf("events %v, want only c's addition", got)
	}
}

// A transition reaches no watcher before its state is stored.
func TestStoreTransitionIsStoredBeforeItIsPublished(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("a"))
	e.c.List("")
	w := watchNow(t, e.c, checker.Filter{})

	gate := make(chan struct{})
	st.mu.Lock()
	st.gate = gate
	st.mu.Unlock()
	e.probes.set("a", pass)
	if trs := e.c.RunRound(t.Context()); len(trs) != 1 {
		t.Fatalf("no transition: %v", trs)
	}
	if evs := next(t, w); len(evs) != 0 {
		t.Fatalf("published before stored: %v", kinds(evs))
	}
	close(gate)
	waitFor(t, "the transition to be published", func() bool {
		select {
		case <-w.Ready():
		default:
		}
		evs, _ := w.Next(10)
		if len(evs) == 0 {
			return false
		}
		if got := kinds(evs); !cmp.Equal(got, []string{"a: unhealthy -> healthy"}) {
			t.Errorf("published %v", got)
		}
		return true
	})
	if st.state("a") != checker.StateHealthy {
		t.Errorf("stored state %v, want healthy", st.state("a"))
	}
}

// A snapshot shows nothing unstored: Snapshot waits until the snapshot's
// revision is stored before it returns.
func TestStoreSnapshotWaitsForItsRevisionToBeStored(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("a"))
	e.c.List("") // a's addition is stored and published

	gate := make(chan struct{})
	var openGate sync.Once
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) }) // before the checker's Close, which waits for the committer
	st.mu.Lock()
	st.gate = gate
	commitsBefore := st.commits
	st.mu.Unlock()
	e.probes.set("a", pass)
	if trs := e.c.RunRound(t.Context()); len(trs) != 1 { // a rises; its commit waits at the gate
		t.Fatalf("no transition: %v", trs)
	}
	w, err := e.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	type snap struct {
		statuses []checker.Status
		commits  int
	}
	got := make(chan snap, 1)
	go func() {
		statuses, _ := w.Snapshot()
		st.mu.Lock()
		defer st.mu.Unlock()
		got <- snap{statuses, st.commits}
	}()
	// A Snapshot that did not wait returns at once; give it the time to.
	select {
	case s := <-got:
		t.Fatalf("Snapshot returned (%d statuses) before its revision was stored", len(s.statuses))
	case <-time.After(50 * time.Millisecond):
	}
	openGate.Do(func() { close(gate) })
	select {
	case s := <-got:
		if s.commits == commitsBefore || len(s.statuses) != 1 || s.statuses[0].State != checker.StateHealthy {
			t.Errorf("Snapshot after %d commits (before: %d): %+v", s.commits, commitsBefore, s.statuses)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Snapshot did not return once the store was written")
	}
}

// While the store fails, events wait and StoreErr says why; they are
// published in order once it works again.
func TestStoreFailingCommitsHoldEventsUntilItRecovers(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("a"))
	e.c.List("")
	w := watchNow(t, e.c, checker.Filter{})
	st.mu.Lock()
	st.failCommit = errors.New("no space left on device")
	st.mu.Unlock()
	for _, o := range []outcome{pass, fail, pass} {
		e.probes.set("a", o)
		e.c.RunRound(t.Context())
	}
	waitFor(t, "the store error to show", func() bool { return e.c.StoreErr() != nil })
	if evs := next(t, w); len(evs) != 0 {
		t.Fatalf("published without being stored: %v", kinds(evs))
	}
	st.mu.Lock()
	st.failCommit = nil
	st.mu.Unlock()
	var got []string
	waitFor(t, "the held events", func() bool {
		got = append(got, kinds(next(t, w))...)
		return len(got) >= 3
	})
	if diff := cmp.Diff([]string{"a: unhealthy -> healthy", "a: healthy -> unhealthy", "a: unhealthy -> healthy"}, got); diff != "" {
		t.Errorf("held events (-want +got):\n%s", diff)
	}
	if err := e.c.StoreErr(); err != nil {
		t.Errorf("StoreErr after recovery: %v", err)
	}
}

// A refused spec write is reported until any write to the store goes
// through again, a batch of state changes included: once the disk has
// room, the probes' transitions are stored, and pulse_registry_error must
// not go on saying pulsed cannot store changes until someone happens to
// add, remove or change a target.
func TestStoreErrClearsWhenStatesAreStoredAgain(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("a"))
	e.c.List("")
	st.mu.Lock()
	st.failSpec = errors.New("no space left on device")
	st.mu.Unlock()
	if _, _, err := e.c.Add(spec("b")); !errors.Is(err, checker.ErrStore) {
		t.Fatalf("Add with a full disk: %v, want ErrStore", err)
	}
	if e.c.StoreErr() == nil {
		t.Fatal("StoreErr after a refused spec write = nil")
	}
	st.mu.Lock()
	st.failSpec = nil
	commits := st.commits
	st.mu.Unlock()
	e.probes.set("a", pass)
	e.c.RunRound(t.Context()) // a: unhealthy -> healthy, stored
	waitFor(t, "the transition to be stored", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.commits > commits
	})
	waitFor(t, "StoreErr to clear once a write went through", func() bool { return e.c.StoreErr() == nil })
}

// After a restart every target is back with its spec and stored state,
// marked carried over, with no transition; revisions go on from the
// store's.
func TestStoreRestartWithoutFlips(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{StartRevision: 1000})
	b := spec("b")
	b.Group = "edge"
	e.add(t, spec("a"))
	e.add(t, b)
	e.probes.setAll(map[string]outcome{"a": pass, "b": fail})
	e.c.RunRound(t.Context())
	before, rev := e.c.List("")
	e.c.Close()
	if rev != 1003 || st.rev != 1003 {
		t.Fatalf("revision %d, stored %d; want 1003", rev, st.rev)
	}

	e2 := storeEnv(t, st, checker.Config{StartRevision: 5000}) // the store's revision wins
	after, rev2 := e2.c.List("")
	if rev2 != rev {
		t.Errorf("revision after restart %d, want %d", rev2, rev)
	}
	for i := range after {
		if !after[i].CarriedOver || after[i].PassStreak != 0 || after[i].LastResult != nil {
			t.Errorf("%s after restart: %+v; want carried over with fresh streaks", after[i].Spec.Name, after[i])
		}
		if after[i].State != before[i].State || !cmp.Equal(after[i].Spec, before[i].Spec) || !after[i].LastTransition.Equal(before[i].LastTransition) {
			t.Errorf("%s: state %v spec %+v, before the restart %v %+v", after[i].Spec.Name, after[i].State, after[i].Spec, before[i].State, before[i].Spec)
		}
	}
	w, err := e2.c.Watch(checker.Filter{}, rev) // resume across the restart
	if err != nil {
		t.Fatalf("resume at the stored revision: %v", err)
	}
	if _, err := e2.c.Watch(checker.Filter{}, rev-1); !errors.Is(err, checker.ErrCompacted) {
		t.Errorf("resume before the restart's revision: %v, want compacted", err)
	}
	e2.probes.setAll(map[string]outcome{"a": pass, "b": fail})
	if trs := e2.c.RunRound(t.Context()); len(trs) != 0 {
		t.Errorf("the first results after a restart flipped states: %v", texts(trs))
	}
	if st, _ := e2.c.Status("a"); st.CarriedOver || st.PassStreak != 1 {
		t.Errorf("after a fresh result: %+v", st)
	}
	e2.c.Remove("b")
	e2.c.List("")
	if got := kinds(next(t, w)); !slices.Equal(got, []string{"removed b"}) {
		t.Errorf("events after the restart %v", got)
	}
}

// TestStoredTargetsRefusedByTodaysRulesAreQuarantined: a stored target
// that today's rules refuse (a probe the egress policy denies, a spec that
// no longer validates, a record that cannot be read) does not keep the
// checker from starting and is not dropped: it is listed with the reason,
// never probed, never routable, refuses passive outcomes, and AddTarget
// fixes it (an update of the name) or Remove removes it.
func TestStoredTargetsRefusedByTodaysRulesAreQuarantined(t *testing.T) {
	st := newMemStore()
	e := storeEnv(t, st, checker.Config{})
	e.add(t, spec("meta"))
	e.add(t, spec("ok"))
	e.c.Close()
	bad := spec("bad")
	bad.Interval, bad.Timeout, bad.Rise, bad.Fall = time.Second, 2*time.Second, 1, 1 // timeout past the interval
	st.specs["bad"] = bad
	st.specs["garbled"] = checker.Spec{Name: "garbled"}
	st.loadErr = map[string]error{"garbled": errors.New("stored spec: unexpected end of JSON input")}
	st.states["ok"] = checker.StoredState{Name: "ok", State: checker.StateHealthy}

	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	c, err := checker.New(checker.Config{
		Store: st, Clock: clock,
		Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
		NewProber: func(s probe.Spec) (checker.Prober, error) {
			if s.TCP != nil && s.TCP.Address == "meta:80" {
				return nil, &probe.FieldError{Field: "tcp.address", Reason: "meta is denied by egress policy"}
			}
			return fp.New(s)
		},
	})
	if err != nil {
		t.Fatalf("New with refused stored targets: %v", err)
	}
	defer c.Close()
	c.Start()
	wantWhy := map[string]string{
		"bad":     "timeout: must be at most the interval (1s), got 2s",
		"garbled": "stored spec: unexpected end of JSON input",
		"meta":    "tcp.address: meta is denied by egress policy",
	}
	list, _ := c.List("")
	got := map[string]string{}
	for _, s := range list {
		if s.Quarantined != "" {
			got[s.Spec.Name] = s.Quarantined
			if s.Routable || s.State != checker.StateUnhealthy {
				t.Errorf("quarantined %s: state %v routable %v, want unhealthy, not routable", s.Spec.Name, s.State, s.Routable)
			}
		}
	}
	if diff := cmp.Diff(wantWhy, got); diff != "" {
		t.Errorf("quarantined targets (-want +got):\n%s", diff)
	}
	if h := c.Healthy(""); !slices.Equal(h, []string{"ok"}) {
		t.Errorf("Healthy = %v, want only [ok]", h)
	}
	if routable, total := c.GroupHealth(""); routable != 1 || total != 4 {
		t.Errorf("GroupHealth = %d of %d, want 1 of 4", routable, total)
	}

	// Probes run on schedule for the others, never for the quarantined.
	c.RunRound(t.Context())
	for range 5 {
		clock.Advance(time.Second)
	}
	waitFor(t, "ok to be probed", func() bool { return fp.callCount("ok") >= 2 })
	for _, addr := range []string{"meta", "bad", "garbled"} {
		if n := fp.callCount(addr); n != 0 {
			t.Errorf("%s was probed %d times; a quarantined target is never probed", addr, n)
		}
	}
	if _, _, err := c.ReportOutcome("bad", checker.Outcome{Pass: true}); !errors.Is(err, checker.ErrQuarantined) {
		t.Errorf("ReportOutcome on a quarantined target: %v, want ErrQuarantined", err)
	}

	// A valid spec of the name fixes it: an update, probed from then on.
	w := watchNow(t, c, checker.Filter{})
	fixed := spec("bad")
	if _, created, err := c.Add(fixed); err != nil || created {
		t.Fatalf("Add fixing a quarantined target: created %v, %v; want an update", created, err)
	}
	if s, _ := c.Status("bad"); s.Quarantined != "" {
		t.Errorf("after the fix, still quarantined: %q", s.Quarantined)
	}
	if st.specs["bad"].Timeout != time.Second {
		t.Errorf("the fixed spec was not stored: %+v", st.specs["bad"])
	}
	if ok, err := c.Remove("meta"); !ok || err != nil {
		t.Errorf("Remove of a quarantined target: %v %v", ok, err)
	}
	if _, ok := st.specs["meta"]; ok {
		t.Error("the removed quarantined target is still stored")
	}
	c.List("")
	if diff := cmp.Diff([]string{"updated bad", "removed meta"}, kinds(next(t, w))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	waitFor(t, "the fixed target to be probed", func() bool {
		clock.Advance(time.Second)
		return fp.callCount("bad") >= 1
	})
}

package checker_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/fakeshared"
)

// fleet is a shared registry in memory for several replicas, with etcd's
// semantics where the group guard relies on them: revisions, compares on a
// key's revision, fencing by a replica's membership, and a log of changes
// that each replica applies at its own pace (the test decides when: its
// watch may lag). After every commit it checks the invariant: a group's
// unhealthy count never rises past maxUnhealthy(fraction, size).
type fleet struct {
	t    *testing.T
	dflt float64 // the replicas' default threshold

	mu       sync.Mutex
	rev      uint64
	specs    map[string]checker.Spec
	states   map[string]fleetState
	guards   map[string]uint64
	policies map[string]float64
	members  map[string]uint64 // live replica -> its member key's create revision
	joinRev  uint64            // the last member key put
	log      []fleetEntry
	lastDown int      // the group's unhealthy count after the last commit
	history  []string // "rev:unhealthy/size"
	bad      []string
	commits  int // group writes committed
	fenced   int // group writes refused
}

type fleetState struct {
	st  checker.SharedState
	rev uint64
}

type fleetEntry struct {
	rev     uint64
	changes []checker.SharedChange
	members []string // the live members after a membership change; nil otherwise
	gone    string   // the member whose key was deleted, if any
}

const fleetGroup = "edge"

func newFleet(t *testing.T, dflt float64) *fleet {
	return &fleet{t: t, dflt: dflt, specs: map[string]checker.Spec{}, states: map[string]fleetState{},
		guards: map[string]uint64{}, policies: map[string]float64{}, members: map[string]uint64{}}
}

// commitLocked appends an entry at the next revision and checks the
// invariant.
func (f *fleet) commitLocked(e fleetEntry) uint64 {
	f.rev++
	e.rev = f.rev
	for i := range e.changes {
		e.changes[i].Rev = f.rev
	}
	f.log = append(f.log, e)
	n, down := 0, 0
	for name, s := range f.specs {
		if s.Group != fleetGroup {
			continue
		}
		n++
		if st, ok := f.states[name]; ok && !(st.st.State == checker.StateHealthy || st.st.State == checker.StateSuspect) {
			down++
		}
	}
	frac := f.dflt
	if p := f.policies[fleetGroup]; p != 0 {
		frac = p
	}
	limit := max(1, int(math.Floor(frac*float64(n)+1e-9)))
	if down > limit && down > f.lastDown {
		f.bad = append(f.bad, fmt.Sprintf("revision %d: %d of %d unhealthy, at most %d (was %d)", f.rev, down, n, limit, f.lastDown))
	}
	f.lastDown = down
	f.history = append(f.history, fmt.Sprintf("%d:%d/%d", f.rev, down, n))
	return f.rev
}

// guardChange is the change of a group write's guard, last in its entry.
func guardChange(group string) checker.SharedChange {
	return checker.SharedChange{Kind: checker.SharedGroupChanged, Name: group, Time: epoch}
}

func (f *fleet) putSpec(spec checker.Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, existed := f.specs[spec.Name]
	f.specs[spec.Name] = spec
	e := fleetEntry{changes: []checker.SharedChange{{Kind: checker.SharedSpecPut, Spec: spec}}}
	if !existed {
		e.changes = append(e.changes, guardChange(spec.Group))
	}
	rev := f.commitLocked(e)
	if !existed {
		f.guards[spec.Group] = rev
	}
}

func (f *fleet) deleteTarget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.specs[name]
	if !ok {
		return
	}
	delete(f.specs, name)
	delete(f.states, name)
	f.guards[s.Group] = f.commitLocked(fleetEntry{changes: []checker.SharedChange{
		{Kind: checker.SharedSpecDeleted, Name: name}, guardChange(s.Group),
	}})
}

func (f *fleet) putPolicy(group string, frac float64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies[group] = frac
	rev := f.commitLocked(fleetEntry{changes: []checker.SharedChange{
		{Kind: checker.SharedPolicyPut, Name: group, Policy: checker.GroupPolicy{MaxUnhealthyFraction: frac}}, guardChange(group),
	}})
	f.guards[group] = rev
	return rev
}

func (f *fleet) liveLocked() []string {
	var out []string
	for m := range f.members {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// join registers a replica (again): a new member key.
func (f *fleet) join(r *fleetReplica) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++ // the key's revision; the entry below takes the next
	f.members[r.id] = f.rev
	f.joinRev = f.rev
	r.mu.Lock()
	r.createRev = f.rev
	r.mu.Unlock()
	f.rev--
	f.commitLocked(fleetEntry{members: f.liveLocked()})
}

// leave deletes a replica's member key, as its lease's expiry does; the
// replica runs on, unaware until it applies the change.
func (f *fleet) leave(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.members, id)
	f.commitLocked(fleetEntry{members: f.liveLocked(), gone: id})
}

// fleetReplica is one replica's view of the fleet: a checker.Shared that
// keeps group guards.
type fleetReplica struct {
	fakeshared.Mirror
	f      *fleet
	id     string
	c      *checker.Checker
	probes *fakeProbers
	w      *checker.Watcher

	applied int // entries of f.log applied; the driver's alone

	mu        sync.Mutex // protects the view below
	members   []string
	joined    uint64
	createRev uint64
	loaded    []checker.SharedGroup
}

func (r *fleetReplica) Load() ([]checker.SharedTarget, uint64, error) {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []checker.SharedTarget
	for name, s := range f.specs {
		st := checker.SharedTarget{Spec: s}
		if fs, ok := f.states[name]; ok {
			v := fs.st
			st.State, st.StateRev = &v, fs.rev
		}
		out = append(out, st)
	}
	var groups []checker.SharedGroup
	for g, rev := range f.guards {
		groups = append(groups, checker.SharedGroup{Name: g, GuardRev: rev, Policy: checker.GroupPolicy{MaxUnhealthyFraction: f.policies[g]}})
	}
	r.applied = len(f.log)
	r.mu.Lock()
	r.members, r.joined, r.loaded = f.liveLocked(), f.joinRev, groups
	r.mu.Unlock()
	return out, f.rev, nil
}

func (r *fleetReplica) LoadedGroups() []checker.SharedGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loaded
}

func (r *fleetReplica) PutSpecs(context.Context, []checker.Spec) (uint64, int, error) {
	return 0, 0, fmt.Errorf("the fleet's specs are the test's to write")
}

func (r *fleetReplica) DeleteTarget(context.Context, string) (uint64, bool, error) {
	return 0, false, fmt.Errorf("the fleet's specs are the test's to write")
}

func (r *fleetReplica) PutGroupPolicy(_ context.Context, group string, p checker.GroupPolicy) (uint64, error) {
	return r.f.putPolicy(group, p.MaxUnhealthyFraction), nil
}

func (r *fleetReplica) ProposeState(context.Context, checker.StateProposal) error {
	return fmt.Errorf("%w: every target of the fleet is in a group", checker.ErrFenced)
}

func (r *fleetReplica) Owns(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fleetOwner(r.members, name) == r.id
}

func fleetOwner(members []string, name string) string {
	var best string
	var bestH uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m + "\x00" + name))
		if v := h.Sum64(); best == "" || v > bestH {
			best, bestH = m, v
		}
	}
	return best
}

// ProposeGroup commits g as etcd's transaction would, or fences it.
func (r *fleetReplica) ProposeGroup(_ context.Context, g checker.GroupProposal) (uint64, error) {
	r.mu.Lock()
	createRev, joined := r.createRev, r.joined
	r.mu.Unlock()
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := createRev != 0 && f.members[r.id] == createRev && f.joinRev <= joined && f.guards[g.Group] == g.GuardRev
	for _, w := range g.Writes {
		if _, exists := f.specs[w.Name]; !exists || f.states[w.Name].rev != w.StateRev {
			ok = false
		}
	}
	if !ok {
		f.fenced++
		return 0, fmt.Errorf("%w: test fleet", checker.ErrFenced)
	}
	f.commits++
	f.rev++ // the states and the guard at one revision: set them first
	var e fleetEntry
	for _, w := range g.Writes {
		st := w.State
		st.Writer = r.id
		f.states[w.Name] = fleetState{st: st, rev: f.rev}
		e.changes = append(e.changes, checker.SharedChange{Kind: checker.SharedStatePut, Name: w.Name, State: st})
	}
	e.changes = append(e.changes, guardChange(g.Group))
	f.guards[g.Group] = f.rev
	f.rev--
	return f.commitLocked(e), nil
}

// deliver applies up to n of the fleet's entries this replica has not
// applied yet, as its watch would; it returns how many.
func (r *fleetReplica) deliver(n int) int {
	f := r.f
	f.mu.Lock()
	pending := f.log[r.applied:min(len(f.log), r.applied+n)]
	f.mu.Unlock()
	for _, e := range pending {
		changes := e.changes
		if e.members != nil {
			r.mu.Lock()
			r.members = e.members
			if e.gone == "" {
				r.joined = max(r.joined, e.rev) // the member key's put
			} else if e.gone == r.id && r.createRev < e.rev {
				r.createRev = 0 // (an older deletion is of a key it replaced since)
			}
			r.mu.Unlock()
			changes = []checker.SharedChange{{Kind: checker.SharedMembersChanged, Rev: e.rev}}
		}
		r.c.ApplyShared(changes, e.rev)
		r.applied++
	}
	return len(pending)
}

// propertySeedOf returns PULSE_PROPERTY_SEED when set, else a seed from
// the clock, and logs how to replay it.
func propertySeedOf(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("PULSE_PROPERTY_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("PULSE_PROPERTY_SEED=%q: want an unsigned integer", v)
		}
	}
	t.Logf("seed %d: replay with PULSE_PROPERTY_SEED=%d", seed, seed)
	return seed
}

// The panic threshold across replicas, as a model-based property: three
// replicas own a group's targets; in a random interleaving of backends
// failing and recovering, owners probing and deciding, replicas applying
// the registry's changes late and at different paces, replicas losing and
// regaining their membership (ownership moves, writes from a replica that
// lost its lease are fenced), targets added and removed and the threshold
// changed, the group's unhealthy count never rises past the threshold at
// any revision. Once everything is applied, every replica shows the same
// states and holds, and the same panic events at the same revisions.
// PULSE_PROPERTY_SEED replays a run's operations; each step waits for the
// replicas' group writers to be idle, so the interleaving follows the
// operations, though the goroutines' scheduling still varies.
func TestGroupGuardProperty(t *testing.T) {
	seed := propertySeedOf(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f := newFleet(t, 0.5)
	for i := range 10 {
		s := spec(fmt.Sprintf("t%02d", i)).WithDefaults(checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1})
		s.Group, s.InitialState = fleetGroup, checker.StateHealthy
		f.putSpec(s)
	}
	clock := fakeclock.New(epoch)
	var reps []*fleetReplica
	for i := range 3 {
		r := &fleetReplica{f: f, id: fmt.Sprintf("r%d", i+1)}
		f.join(r)
		reps = append(reps, r)
	}
	for _, r := range reps {
		r.probes = newFakeProbers(clock)
		c, err := checker.New(checker.Config{
			Shared: r, Clock: clock, NewProber: r.probes.New, MaxUnhealthyFraction: f.dflt,
			Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.c = c
		defer c.Close()
		if r.w, err = c.Watch(checker.Filter{Group: fleetGroup}, 0); err != nil {
			t.Fatal(err)
		}
		defer r.w.Close()
	}
	names := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for n := range f.specs {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	failing := map[string]bool{}
	setOutcome := func(name string, down bool) {
		failing[name] = down
		for _, r := range reps {
			if down {
				r.probes.set(name, fail)
			} else {
				r.probes.set(name, pass)
			}
		}
	}
	for _, n := range names() {
		setOutcome(n, false)
	}
	idle := func() {
		waitFor(t, "the replicas' group writes", func() bool {
			for _, r := range reps {
				if !r.c.GroupWritesIdle() {
					return false
				}
			}
			return true
		})
	}
	next := 10
	const steps = 1000
	for step := range steps {
		switch k := rng.IntN(100); {
		case k < 30: // backends fail or recover, often many at once
			ns := names()
			many := 1 + rng.IntN(3)
			if rng.IntN(5) == 0 {
				many = len(ns) // a shared dependency fails: most of the group at once
			}
			for range many {
				n := ns[rng.IntN(len(ns))]
				setOutcome(n, rng.IntN(2) == 0)
			}
		case k < 55: // an owner probes and decides
			reps[rng.IntN(len(reps))].c.RunRound(t.Context())
		case k < 80: // a replica's watch delivers some of the log
			reps[rng.IntN(len(reps))].deliver(1 + rng.IntN(4))
		case k < 86: // a replica loses its membership (its lease expires)
			f.mu.Lock()
			live := f.liveLocked()
			f.mu.Unlock()
			if len(live) > 1 {
				f.leave(live[rng.IntN(len(live))])
			}
		case k < 92: // a replica that lost it registers again
			for _, r := range reps {
				f.mu.Lock()
				_, alive := f.members[r.id]
				f.mu.Unlock()
				if !alive {
					f.join(r)
					break
				}
			}
		case k < 95: // a target joins the group
			s := spec(fmt.Sprintf("t%02d", next)).WithDefaults(checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1})
			next++
			s.Group, s.InitialState = fleetGroup, checker.StateHealthy
			setOutcome(s.Name, rng.IntN(2) == 0)
			f.putSpec(s)
		case k < 98: // a target leaves it
			if ns := names(); len(ns) > 4 {
				f.deleteTarget(ns[rng.IntN(len(ns))])
			}
		default: // the threshold changes
			f.putPolicy(fleetGroup, []float64{0.3, 0.5, 0.8, 1}[rng.IntN(4)])
		}
		idle()
		if len(f.bad) > 0 {
			t.Fatalf("step %d (seed %d): the invariant broke: %v\nhistory: %v", step, seed, f.bad, f.history)
		}
	}

	// Quiesce: everyone a member again, every change applied, every owner
	// probing, until nothing more is written.
	for _, r := range reps {
		f.mu.Lock()
		_, alive := f.members[r.id]
		f.mu.Unlock()
		if !alive {
			f.join(r)
		}
	}
	for range 50 {
		before := f.rev
		for _, r := range reps {
			for r.deliver(1000) > 0 {
				idle()
			}
		}
		for _, r := range reps {
			r.c.RunRound(t.Context())
			idle()
		}
		if f.rev == before {
			break
		}
	}
	for _, r := range reps {
		r.deliver(1000)
	}
	if len(f.bad) > 0 {
		t.Fatalf("seed %d: the invariant broke: %v\nhistory: %v", seed, f.bad, f.history)
	}
	t.Logf("%d revisions, %d group writes committed, %d fenced", f.rev, f.commits, f.fenced)
	if f.commits == 0 || f.fenced == 0 {
		t.Errorf("the run exercised no group write (%d) or no fenced one (%d)", f.commits, f.fenced)
	}

	// Every replica shows the same group, and its stream the same panic
	// events at the same revisions.
	want := reps[0].c.Groups(fleetGroup)
	for _, r := range reps[1:] {
		if diff := cmp.Diff(want, r.c.Groups(fleetGroup)); diff != "" {
			t.Errorf("groups of r1 and %s differ (-r1 +%s):\n%s", r.id, r.id, diff)
		}
	}
	var streams [][]string
	for _, r := range reps {
		var got []string
		for {
			evs, err := r.w.Next(1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				if e.Kind == checker.EventPanicEntered || e.Kind == checker.EventPanicExited {
					got = append(got, fmt.Sprintf("%d %s", e.Revision, e.Policy.Text))
				}
			}
		}
		streams = append(streams, got)
	}
	for i, s := range streams[1:] {
		if diff := cmp.Diff(streams[0], s); diff != "" {
			t.Errorf("panic events of r1 and %s differ (-r1 +%s):\n%s", reps[i+1].id, reps[i+1].id, diff)
		}
	}
	// Settled, the threshold holds exactly: a failing backend is either
	// unhealthy or held, and held only when the group is full.
	g := want[0]
	for _, n := range names() {
		st, err := reps[0].c.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		if failing[n] && st.State != checker.StateUnhealthy && !st.PanicHeld {
			t.Errorf("%s fails, yet is %v and not held (verdict %v)", n, st.State, st.Verdict)
		}
	}
	if len(g.Held) > 0 && g.Unhealthy < g.MaxUnhealthy {
		t.Errorf("group %+v holds targets with room for them", g)
	}
}

// startFleet starts n replicas of f, all members, each with a watcher of
// the group.
func startFleet(t *testing.T, f *fleet, n int) []*fleetReplica {
	t.Helper()
	clock := fakeclock.New(epoch)
	var reps []*fleetReplica
	for i := range n {
		r := &fleetReplica{f: f, id: fmt.Sprintf("r%d", i+1)}
		f.join(r)
		reps = append(reps, r)
	}
	for _, r := range reps {
		r.probes = newFakeProbers(clock)
		c, err := checker.New(checker.Config{
			Shared: r, Clock: clock, NewProber: r.probes.New, MaxUnhealthyFraction: f.dflt,
			Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.c = c
		t.Cleanup(func() { c.Close() })
		if r.w, err = c.Watch(checker.Filter{Group: fleetGroup}, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.w.Close)
	}
	return reps
}

// settle runs every replica's round and delivers everything, until the
// fleet writes nothing more.
func settle(t *testing.T, f *fleet, reps []*fleetReplica) {
	t.Helper()
	for range 20 {
		f.mu.Lock()
		before := f.rev
		f.mu.Unlock()
		for _, r := range reps {
			r.c.RunRound(t.Context())
			waitFor(t, r.id+"'s group writes", r.c.GroupWritesIdle)
		}
		for _, r := range reps {
			for r.deliver(1000) > 0 {
				waitFor(t, r.id+"'s group writes", r.c.GroupWritesIdle)
			}
		}
		f.mu.Lock()
		done := f.rev == before
		f.mu.Unlock()
		if done {
			return
		}
	}
	t.Fatal("the fleet kept writing")
}

// Holds survive the group growing and shrinking and their owner leaving
// and coming back; held targets are released in name order, whoever owns
// them, and raising
// the threshold through SetGroupPolicy releases them all at once, in one
// write; its PANIC_EXITED is at that write's revision on every replica.
func TestGroupGuardReleasesInNameOrder(t *testing.T) {
	f := newFleet(t, 0.5)
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		s := spec(n).WithDefaults(checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1})
		s.Group, s.InitialState = fleetGroup, checker.StateHealthy
		f.putSpec(s)
	}
	reps := startFleet(t, f, 3)
	set := func(name string, o outcome) {
		for _, r := range reps {
			r.probes.set(name, o)
		}
	}
	for _, n := range names {
		set(n, fail)
	}
	settle(t, f, reps)
	g := reps[0].c.Groups(fleetGroup)[0]
	if g.Unhealthy != 3 || len(g.Held) != 3 {
		t.Fatalf("six of six failing at 0.5: %+v, want three unhealthy and three held", g)
	}
	held := g.Held
	// The group grows and shrinks by a healthy target (seven at 0.5 still
	// allow three), and the owner of the first held target loses its
	// membership and gets it back: the holds stay, nothing transitions.
	for _, r := range reps {
		evs, err := r.w.Next(1000)
		if err != nil {
			t.Fatal(err)
		}
		entered := 0
		for _, e := range evs {
			if e.Kind == checker.EventPanicEntered {
				entered++
			}
		}
		if entered != 1 {
			t.Errorf("%s's stream has %d PANIC_ENTERED, want 1", r.id, entered)
		}
	}
	extra := spec("g").WithDefaults(checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1})
	extra.Group, extra.InitialState = fleetGroup, checker.StateHealthy
	set("g", pass)
	f.putSpec(extra)
	settle(t, f, reps)
	owner := fleetOwner(reps[0].members, held[0])
	f.leave(owner)
	settle(t, f, reps)
	for _, r := range reps {
		if r.id == owner {
			f.join(r)
		}
	}
	settle(t, f, reps)
	f.deleteTarget("g")
	settle(t, f, reps)
	for _, r := range reps {
		if got := r.c.Groups(fleetGroup)[0]; !slices.Equal(got.Held, held) || got.Unhealthy != 3 {
			t.Errorf("%s after the group grew and shrank and %s left and came back: %+v, want holds %v", r.id, owner, got, held)
		}
		evs, err := r.w.Next(1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == checker.EventTransition || e.Kind.IsPolicy() {
				t.Errorf("%s: %s at %d, want no transition nor policy event", r.id, e.Kind, e.Revision)
			}
		}
	}
	// One unhealthy target recovers: the first held one goes.
	var up string
	for _, n := range names {
		if !slices.Contains(held, n) {
			up = n
			break
		}
	}
	set(up, pass)
	settle(t, f, reps)
	for _, r := range reps {
		if got := r.c.Groups(fleetGroup)[0].Held; !slices.Equal(got, held[1:]) {
			t.Errorf("%s holds %v after %s recovered, want %v", r.id, got, up, held[1:])
		}
	}
	// Raising the threshold releases the rest in one write.
	done := make(chan error, 1)
	go func() {
		_, err := reps[1].c.SetGroupPolicy(fleetGroup, checker.GroupPolicy{MaxUnhealthyFraction: 1})
		done <- err
	}()
	var setErr error
	waitFor(t, "SetGroupPolicy to return once its write came back", func() bool {
		reps[1].deliver(1)
		select {
		case setErr = <-done:
			return true
		default:
			return false
		}
	})
	if setErr != nil {
		t.Fatal(setErr)
	}
	settle(t, f, reps)
	var exits []string
	for _, r := range reps {
		if g := r.c.Groups(fleetGroup)[0]; len(g.Held) != 0 || g.Unhealthy != 5 {
			t.Errorf("%s after the threshold rose to 1: %+v", r.id, g)
		}
		evs, err := r.w.Next(1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Kind == checker.EventPanicExited || e.Kind == checker.EventPanicEntered {
				got = append(got, fmt.Sprintf("%d %s", e.Revision, e.Policy.Text))
			}
		}
		if exits == nil {
			exits = got
		} else if diff := cmp.Diff(exits, got); diff != "" {
			t.Errorf("panic events of r1 and %s differ:\n%s", r.id, diff)
		}
	}
	if len(exits) != 1 || !strings.Contains(exits[0], "panic exited") {
		t.Errorf("panic events %v, want one exited", exits)
	}
	if _, err := reps[0].c.SetGroupPolicy(fleetGroup, checker.GroupPolicy{SlowStart: time.Second}); err == nil {
		t.Error("a group's slow start with a shared registry was accepted")
	}
}

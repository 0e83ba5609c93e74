package checker_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

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

func (r *fleetReplica) Owns(name string) bool { return r.Owner(name) == r.id }

func (r *fleetReplica) Owner(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fleetOwner(r.members, name)
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

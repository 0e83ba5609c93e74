package checker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

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
	reps := startFleet(t, f, 3)
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

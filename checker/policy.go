package checker

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// Pool policies. They decide a target's published state from its verdict
// (its Machine's state) and live here, in the registry, under its lock:
// the panic threshold looks across a group's targets, flap damping at a
// target's recent history, and neither belongs in the pure Machine.
//
// The published state is the verdict, unless:
//
//   - flap damping holds the target unhealthy (Status.Flapping): its
//     verdict changed Spec.FlapThreshold times within Spec.FlapWindow; it is
//     released at its first result after the verdict has not changed for
//     Spec.FlapStableFor;
//   - its group's panic threshold holds it routable (Status.PanicHeld): the
//     move to unhealthy would make more than MaxUnhealthy targets of the
//     group unhealthy. Held targets are released, in name order, as room
//     appears (a target recovers, leaves, or the policy changes); a held
//     target whose verdict recovers simply stops being held.
//
// The panic threshold has the last word: flap damping never takes more of a
// group out than the threshold allows either.

// GroupPolicy is a group's pool policy. The zero value means the
// checker's defaults.
type GroupPolicy struct {
	// MaxUnhealthyFraction is the group's panic threshold: at most
	// floor(MaxUnhealthyFraction x targets) of the group, and always at
	// least one, are marked unhealthy at once. In (0, 1]; 1 disables the
	// threshold. If 0, Config.MaxUnhealthyFraction.
	MaxUnhealthyFraction float64
	// SlowStart is the slow start of the group's targets that have none of
	// their own (Lifecycle.SlowStart). 0: none. At most MaxSlowStart.
	SlowStart time.Duration
	// RemoveAfterUnhealthy is the automatic removal of the group's targets
	// that have none of their own (Lifecycle.RemoveAfterUnhealthy). 0:
	// never. In [MinRemoveAfterUnhealthy, MaxRemoveAfterUnhealthy].
	RemoveAfterUnhealthy time.Duration
	// Objective is the group's availability objective: the share of its
	// targets' probes that should pass over ObjectiveWindow, e.g. 0.999.
	// 0: none. In (0, 1); the checker stores it, the history measures it.
	Objective float64
	// ObjectiveWindow is the window Objective is measured over: whole
	// hours, at most MaxObjectiveWindow. 0 with an Objective: the most.
	ObjectiveWindow time.Duration
	// Vantages and Quorum are those of the group's targets that set none
	// of their own (Spec.Vantages, Spec.Quorum). 0: one vantage.
	Vantages, Quorum int
	// Outlier is the group's outlier detection (package outlier; the
	// registry's side in outlier.go); the zero value is off.
	Outlier outlier.Policy
}

// MaxObjectiveWindow is the longest window of an availability objective:
// the history a pulsed keeps.
const MaxObjectiveWindow = 30 * 24 * time.Hour

// checkObjective returns a *FieldError for an objective outside (0, 1) or
// a window that is not whole hours up to MaxObjectiveWindow, or set alone.
func checkObjective(p GroupPolicy) error {
	o, w := p.Objective, p.ObjectiveWindow
	switch {
	case math.IsNaN(o) || o < 0 || o >= 1:
		return &FieldError{"availability_objective", fmt.Sprintf("must be in (0, 1), e.g. 0.999 for 99.9%%, got %v", o)}
	case w != 0 && o == 0:
		return &FieldError{"objective_window", "needs an availability_objective"}
	case w < 0 || w > MaxObjectiveWindow || w%time.Hour != 0:
		return &FieldError{"objective_window", fmt.Sprintf("must be whole hours, from 1h to %v (30 days), got %v", MaxObjectiveWindow, w)}
	}
	return nil
}

// GroupStatus is a group's policy and its pool state.
type GroupStatus struct {
	Group string
	// Policy is the group's own policy; zero fields take the defaults.
	Policy GroupPolicy
	// MaxUnhealthyFraction is the threshold in force.
	MaxUnhealthyFraction float64
	// Targets is the group's size; Unhealthy how many of its targets are
	// not routable; MaxUnhealthy how many may be at once.
	Targets, Unhealthy, MaxUnhealthy int
	// Panic is true while the group holds at least one target.
	Panic bool
	// Held lists the held targets, sorted: the order they are released in.
	Held []string
}

// pool is a group's counts and policy state; guarded by the registry's lock. The
// empty group has one too (for its counts) but is never a pool: ungrouped
// targets are independent, so its threshold never holds them.
type pool struct {
	n    int                // targets
	down int                // targets whose state is not routable
	held map[string]*target // held routable by the threshold
	// pending are this member's targets with a state to decide with the
	// group's, and why (see buildGroupLocked).
	pending map[*target]cause
	panic   bool // len(held) > 0, as last announced
	policy  GroupPolicy
	// guardRev is, with a shared registry, the revision of the group's
	// guard this replica has applied (see group.go).
	guardRev uint64
}

func (p *pool) size() int {
	if p == nil {
		return 0
	}
	return p.n
}

// routable reports whether a target in state s receives traffic.
func (s State) routable() bool { return s == StateHealthy || s == StateSuspect }

// maxUnhealthy returns how many of n targets may be unhealthy at once under
// fraction f: floor(f x n), and at least one, so that a single dead backend
// is always marked (the threshold is about mass failure).
func maxUnhealthy(f float64, n int) int {
	return max(1, int(math.Floor(f*float64(n)+1e-9)))
}

func (r *registry) fractionLocked(p *pool) float64 {
	if p != nil && p.policy.MaxUnhealthyFraction > 0 {
		return p.policy.MaxUnhealthyFraction
	}
	return r.policyDflt
}

func (r *registry) poolLocked(group string) *pool {
	p := r.pools[group]
	if p == nil {
		p = &pool{held: make(map[string]*target), pending: make(map[*target]cause)}
		r.pools[group] = p
	}
	return p
}

// dropPoolLocked forgets an empty group without a policy.
func (r *registry) dropPoolLocked(group string) {
	if p := r.pools[group]; p != nil && p.n == 0 && p.policy == (GroupPolicy{}) {
		delete(r.pools, group)
	}
}

// joinPoolLocked counts t in its group.
func (r *registry) joinPoolLocked(t *target) {
	p := r.poolLocked(t.spec.Group)
	p.n++
	if !t.state.routable() {
		p.down++
	}
}

// leavePoolLocked takes t out of its group's counts and holds; the caller
// settles the group afterwards.
func (r *registry) leavePoolLocked(t *target) {
	p := r.pools[t.spec.Group]
	if p == nil {
		return
	}
	p.n--
	if !t.state.routable() {
		p.down--
	}
	if t.held {
		t.held = false
		delete(p.held, t.spec.Name)
	}
	delete(p.pending, t)
}

// verdictLocked applies flap damping after a result (or another change of
// t's machine) and then brings t's state in line; changed says the verdict
// changed. Flap damping starting or ending is written with t's state
// record (flap.go), whose application announces it.
func (r *registry) verdictLocked(t *target, changed bool, now time.Time, why cause) {
	if changed {
		t.flapsLocked().log.record(now, t.spec.flapWindow())
		if th := t.spec.FlapThreshold; th > 0 && !t.flapping && t.flaps().count(now, t.spec.flapWindow()) >= th {
			t.flapping = true
		}
	} else if t.flapping && now.Sub(t.flaps().last()) >= t.spec.flapStableFor() {
		t.flapping = false
		why = cause{reason: fmt.Sprintf("stable for %v after flapping", t.spec.flapStableFor())}
	}
	r.updateLocked(t, now, why)
	r.proposeFlapLocked(t, now) // a change of the log alone is a record of the same state
}

// updateLocked brings t's published state in line with its verdict and the
// policies: flap damping or its mode may want it unhealthy, and a grouped
// target's state is decided with its group's (see buildGroupLocked), where
// the panic threshold may hold a move to unhealthy.
func (r *registry) updateLocked(t *target, now time.Time, why cause) {
	if t.spec.Group != "" {
		if !t.owned {
			return
		}
		p := r.pools[t.spec.Group]
		if want, _, _ := r.desiredLocked(t, now, why); want == t.state && !t.held {
			delete(p.pending, t)
			return // nothing for the group to decide
		}
		p.pending[t] = why
		r.link.markGroup(t.spec.Group)
		return
	}
	want, why, _ := r.desiredLocked(t, now, why)
	r.setStateLocked(t, want, now, why)
}

// desiredLocked returns the state t's verdict and policies ask for, before
// the panic threshold, and why; admin says the operator's mode asks for it,
// which the threshold never holds back.
func (r *registry) desiredLocked(t *target, now time.Time, why cause) (want State, _ cause, admin bool) {
	want = t.verdict()
	if t.flapping && want != StateUnhealthy {
		want = StateUnhealthy
		why = cause{reason: fmt.Sprintf("flapping: %d transitions in %v", t.flaps().count(now, t.spec.flapWindow()), t.spec.flapWindow())}
	}
	if o := t.outlierState(); o != nil && o.Ejected && want != StateUnhealthy {
		want = StateUnhealthy
		why = cause{reason: "outlier ejected: " + o.Reason}
	}
	reason, admin := modeHold(t)
	if admin && want != StateUnhealthy {
		want = StateUnhealthy
		why = cause{reason: reason}
	}
	return want, why, admin
}

// settleLocked asks for a group's states to be decided again after a
// change of its room (a target added, removed or moved, a policy changed),
// when that can change them: it holds targets, or has just stopped.
func (r *registry) settleLocked(group string) {
	if p := r.pools[group]; p != nil && group != "" && (len(p.held) > 0 || p.panic) {
		r.link.markGroup(group)
	}
}

// announcePanicLocked emits PANIC_ENTERED or PANIC_EXITED when group's
// held set became non-empty or empty since the last announcement.
func (r *registry) announcePanicLocked(group string, p *pool, now time.Time) {
	panicNow := len(p.held) > 0
	if panicNow == p.panic {
		return
	}
	allowed := maxUnhealthy(r.fractionLocked(p), p.n)
	p.panic = panicNow
	pc := PolicyChange{Group: group, Held: sortedKeys(p.held), Targets: p.n, Unhealthy: p.down, MaxUnhealthy: allowed}
	kind := EventPanicExited
	r.lifeWakeLocked() // an automatic removal may have waited for the panic to end
	pc.Text = fmt.Sprintf("%s: panic exited (%d of %d down, at most %d)", group, p.down, p.n, allowed)
	if panicNow {
		kind = EventPanicEntered
		pc.Text = fmt.Sprintf("%s: panic entered, holding %s (%d of %d down, at most %d)", group, strings.Join(pc.Held, ", "), p.down, p.n, allowed)
	}
	r.emitLocked(Event{Kind: kind, Time: now, Policy: pc})
}

func sortedKeys(m map[string]*target) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ValidateFraction checks a MaxUnhealthyFraction: in (0, 1], or 0 for the
// default.
func ValidateFraction(f float64) error {
	if math.IsNaN(f) || f < 0 || f > 1 {
		return fmt.Errorf("must be in (0, 1] (1 disables the threshold), got %v", f)
	}
	return nil
}

// checkGroupPolicy returns a *FieldError for a group that is not a pool
// (the empty group) or a bad name, or a fraction outside (0, 1].
func checkGroupPolicy(group string, p GroupPolicy) error {
	if group == "" {
		return &FieldError{"group", "is required: targets without a group are not a pool"}
	}
	if err := ValidateGroup(group); err != nil {
		return &FieldError{"group", err.Error()}
	}
	if err := ValidateFraction(p.MaxUnhealthyFraction); err != nil {
		return &FieldError{"max_unhealthy_fraction", err.Error()}
	}
	if err := checkObjective(p); err != nil {
		return err
	}
	if err := p.Outlier.Validate(); err != nil {
		var fe *outlier.FieldError
		if errors.As(err, &fe) {
			return &FieldError{"outlier." + fe.Field, fe.Reason}
		}
		return err
	}
	switch {
	case p.Vantages < 0 || p.Vantages > MaxVantages:
		return &FieldError{"vantages", fmt.Sprintf("must be between 0 (one: the owner's) and %d, got %d", MaxVantages, p.Vantages)}
	case p.Quorum < 0 || p.Quorum > max(p.Vantages, 1):
		return &FieldError{"quorum", fmt.Sprintf("must be between 0 (a majority) and vantages (%d), got %d", max(p.Vantages, 1), p.Quorum)}
	}
	return (Spec{Lifecycle: &Lifecycle{SlowStart: p.SlowStart, RemoveAfterUnhealthy: p.RemoveAfterUnhealthy}}).validateLifecycle()
}

// groupStatusAndDrop returns a group's status, then forgets the group if
// it has neither targets nor a policy (a policy cleared).
func (r *registry) groupStatusAndDrop(group string) GroupStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.groupStatusLocked(group)
	r.dropPoolLocked(group)
	return st
}

// groups returns the status of every named group that has targets or a
// policy, sorted by name; a non-empty group returns only that one (none if
// it has neither).
func (r *registry) groups(group string) []GroupStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []GroupStatus
	if group != "" {
		if _, ok := r.pools[group]; ok {
			out = append(out, r.groupStatusLocked(group))
		}
		return out
	}
	for g := range r.pools {
		if g != "" {
			out = append(out, r.groupStatusLocked(g))
		}
	}
	slices.SortFunc(out, func(a, b GroupStatus) int { return strings.Compare(a.Group, b.Group) })
	return out
}

func (r *registry) groupStatusLocked(group string) GroupStatus {
	p := r.poolLocked(group)
	f := r.fractionLocked(p)
	return GroupStatus{
		Group:                group,
		Policy:               p.policy,
		MaxUnhealthyFraction: f,
		Targets:              p.n,
		Unhealthy:            p.down,
		MaxUnhealthy:         maxUnhealthy(f, p.n),
		Panic:                len(p.held) > 0,
		Held:                 sortedKeys(p.held),
	}
}

// reportPolicy logs a policy event and tells a PolicyObserver of it; it
// runs outside the locks.
func (r *registry) reportPolicy(e Event) {
	if po, ok := r.observer.(PolicyObserver); ok {
		po.ObservePolicy(e.Kind, e.Time, e.Policy)
	}
	attrs := []any{"event", e.Kind.String(), "revision", e.Revision}
	if e.Policy.Group != "" {
		attrs = append(attrs, "group", e.Policy.Group)
	}
	if e.Policy.Target != "" {
		attrs = append(attrs, "target", e.Policy.Target)
	}
	switch e.Kind {
	case EventPanicEntered, EventFlappingStarted, EventCheckerDegraded, EventCertExpiring, EventTargetExpired, EventDiscoveryFailed:
		r.logger.Warn(e.Policy.Text, attrs...)
	default:
		r.logger.Info(e.Policy.Text, attrs...)
	}
}

// maxFlaps bounds the verdict changes a target remembers; Validate bounds
// FlapThreshold by it.
const maxFlaps = MaxFlapThreshold

// flapLog holds the times of a target's recent verdict changes, oldest
// first. It is a value with no clock: callers pass the times.
//
// A change once recorded is never written over: the log forgets old ones
// by slicing them off and appends past its end, so the state record that
// stores it (snapshot) shares its array instead of copying it at every
// transition.
type flapLog struct {
	times []time.Time
}

// record notes a change at now and forgets the ones older than window.
func (f *flapLog) record(now time.Time, window time.Duration) {
	f.trim(now, window)
	if len(f.times) == maxFlaps {
		f.times = f.times[1:]
	}
	f.times = append(f.times, now)
}

func (f *flapLog) trim(now time.Time, window time.Duration) {
	i, cut := 0, addDur(now, -window)
	for i < len(f.times) && !f.times[i].After(cut) {
		i++
	}
	f.times = f.times[i:]
}

// snapshot returns the log's changes as they are now, for a state record:
// later changes are appended past its end, where it cannot see them, and
// an append to it copies.
func (f flapLog) snapshot() []time.Time {
	return f.times[:len(f.times):len(f.times)]
}

// count returns the changes within (now-window, now].
func (f flapLog) count(now time.Time, window time.Duration) int {
	n, cut := 0, addDur(now, -window)
	for _, t := range f.times {
		if t.After(cut) && !t.After(now) {
			n++
		}
	}
	return n
}

// last returns the time of the latest change, zero if none is remembered.
func (f flapLog) last() time.Time {
	if len(f.times) == 0 {
		return time.Time{}
	}
	return f.times[len(f.times)-1]
}

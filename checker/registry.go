package checker

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// registry is the targets and their states: the target map, each
// target's Machine, and the pool policies (panic, flap, passive; see
// policy.go and passive.go) under one mutex. It decides transitions and
// emits each change as an event, numbered in revision order, to its sink
// with its lock held: the committer's queue with a store, the hub without
// one. It does no I/O of its own (a spec write is the caller's callback,
// run between its two critical sections) and knows neither the store nor
// the watchers. Its decisions go through its link, a log: a shared
// registry's (see shared.go), whose writes come back through ApplyShared,
// or a checker's own (local.go), which applies them at once. Either way a
// state changes when its record is applied (apply.go).
//
// Its lock, mu, also guards the scheduler's state (see scheduler), and
// comes after the façade's wmu and before the committer's, the
// replication's and the hub's.
type registry struct {
	clock      Clock
	defaults   Defaults
	newProber  func(probe.Spec) (Prober, error)
	logger     *slog.Logger
	observer   Observer // nil if none
	maxTargets int      // 0: no limit
	maxInGroup int      // 0: no limit
	policyDflt float64  // MaxUnhealthyFraction in force for groups without their own
	sched      *scheduler
	sink       func(Event)    // takes the events emitted, with mu held
	link       link           // the log changes go through; see log.go
	remote     bool           // link is a shared registry's: events are numbered by its revisions
	vantages   SharedVantages // the shared registry's; nil alone, as one checker is one vantage (see vantage.go)
	self       Vantage        // this replica, with vantages
	vpolicy    VantagePolicy  // when a vantage is suspect, with its defaults

	mu       sync.Mutex // protects everything below, every *target and the scheduler's state
	targets  map[string]*target
	pools    map[string]*pool // by group, "" included; see policy.go
	rev      uint64           // the newest event's revision, published or not
	reports  []Event          // events to log and observe once mu is released
	closed   bool
	applying uint64                     // with a shared registry: the revision being applied; 0 outside it
	timed    map[*target]struct{}       // targets with a lifecycle deadline; see lifecycle.go
	lifeWake func()                     // wakes the lifecycle's loop; nil before it exists
	replicas map[string]ReplicaOverload // the degraded replicas, as published; see overload.go
	vstats   map[string]*vantageStats   // the vantages' counts, by member; see vantage.go
	outliers map[string]*outlierGroup   // the groups' outlier detection; see outlier.go
}

// newRegistry returns an empty registry; the caller calls use, then
// emitTo, before anything else.
func newRegistry(cfg Config, clock Clock, defaults Defaults, logger *slog.Logger, policyDflt float64) *registry {
	r := &registry{
		clock:      clock,
		defaults:   defaults,
		logger:     logger,
		observer:   cfg.Observer,
		maxTargets: cfg.MaxTargets,
		maxInGroup: cfg.MaxTargetsPerGroup,
		policyDflt: policyDflt,
		targets:    make(map[string]*target),
		pools:      make(map[string]*pool),
		timed:      make(map[*target]struct{}),
		vstats:     make(map[string]*vantageStats),
		outliers:   make(map[string]*outlierGroup),
		rev:        cfg.StartRevision,
	}
	r.link = newLocalLink(r)
	return r
}

// use gives the registry its scheduler and the builder of its probers.
func (r *registry) use(sched *scheduler, newProber func(probe.Spec) (Prober, error)) {
	r.sched, r.newProber = sched, newProber
}

// emitTo makes sink the taker of the registry's events, from now on; it is
// called with the registry's lock held, in revision order.
func (r *registry) emitTo(sink func(Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sink = sink
}

// locker returns the registry's lock, which the scheduler's pool waits on.
func (r *registry) locker() *sync.Mutex { return &r.mu }

// revision returns the newest event's revision, published or not.
func (r *registry) revision() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rev
}

// setRevision moves the revision to rev, loaded from a store.
func (r *registry) setRevision(rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rev = rev
}

// watch starts a watch, with add, under the registry's lock: with start 0
// from a snapshot of the targets match selects, at the current revision,
// otherwise from start.
func (r *registry) watch(match func(name, group string) bool, start uint64, add func(snap []Status, start uint64, snapshot bool) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if start != 0 {
		return add(nil, start, false)
	}
	now := r.clock.Now()
	var snap []Status
	for _, t := range r.targets {
		if match(t.spec.Name, t.spec.Group) {
			snap = append(snap, r.statusLocked(t, now))
		}
	}
	slices.SortFunc(snap, func(a, b Status) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	return add(snap, r.rev, true)
}

// deleteLocked removes the named target, if it exists, at at (the time its
// writer removed it), and returns it for the caller to close its prober.
// reason, if set, says why it expired, in an event before the removal's.
func (r *registry) deleteLocked(name string, at time.Time, reason string) *target {
	t, ok := r.targets[name]
	if !ok {
		return nil
	}
	if reason != "" {
		r.emitLocked(Event{Kind: EventTargetExpired, Time: at, Policy: PolicyChange{
			Group: t.spec.Group, Target: name, Text: name + ": removed, " + reason,
		}})
	}
	delete(r.targets, name)
	t.gone = true
	delete(r.timed, t)
	if t.quarantined() == "" { // a quarantined target is in no heap and no pool
		r.sched.removeLocked(t)
		t.index = -1
		r.leavePoolLocked(t)
	}
	r.emitLocked(Event{Kind: EventRemoved, Time: at, Status: r.statusLocked(t, at)})
	if v := t.vantagesOf(); v != nil {
		v.assigned = nil
		r.judgeLocked(t, v) // the vantages are judged on it no more
	}
	r.settleLocked(t.spec.Group) // fewer unhealthy targets: room for held ones
	r.dropPoolLocked(t.spec.Group)
	return t
}

// status returns a snapshot of one target, or an error wrapping
// ErrUnknownTarget.
func (r *registry) status(name string) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.targets[name]
	if !ok {
		return Status{}, fmt.Errorf("%w %q", ErrUnknownTarget, name)
	}
	return r.statusLocked(t, r.clock.Now()), nil
}

func (r *registry) list(group string) ([]Status, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	out := make([]Status, 0, len(r.targets))
	for _, t := range r.targets {
		if group == "" || t.spec.Group == group {
			out = append(out, r.statusLocked(t, now))
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	return out, r.rev
}

// healthy returns the names of routable targets sorted by name (suspect
// targets count as routable); a
// non-empty group keeps only that group's targets.
func (r *registry) healthy(group string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, t := range r.targets {
		if (group == "" || t.spec.Group == group) && t.state.routable() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// groupHealth counts a group's targets and how many of them are routable.
// A group exists while total > 0.
func (r *registry) groupHealth(group string) (routable, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.targets {
		if t.spec.Group == group {
			total++
			if t.state.routable() {
				routable++
			}
		}
	}
	return routable, total
}

func (r *registry) statusLocked(t *target, now time.Time) Status {
	st := Status{
		Spec:            t.spec,
		State:           t.state,
		Routable:        t.state.routable(),
		PassStreak:      t.m.PassStreak,
		FailStreak:      t.m.FailStreak,
		LastTransition:  t.lastTr,
		CarriedOver:     t.carried,
		Verdict:         t.verdict(),
		PanicHeld:       t.held,
		Flapping:        t.flapping,
		ProbeInterval:   r.sched.intervalLocked(t),
		NextProbe:       r.sched.frame.wall(t.next, now),
		Probing:         t.inFlight,
		ActiveResults:   t.active,
		IgnoredTimeouts: t.ignored,
		Quarantined:     t.quarantined(),
	}
	if t.more != nil {
		st.PassiveResults, st.PassiveLimited = t.more.passive, t.more.limited
	}
	st.CertNotAfter, st.CertWarning = certExpiry(t.prober)
	if t.hasLast {
		r := t.last
		st.LastResult = &r
	}
	st.Weight, st.SlowStartEnd = weightLocked(t, now)
	if lf := t.lifeOrNil(); lf != nil {
		st.UnhealthySince = lf.unhealthySince
	}
	flapStatusLocked(&st, t, now)
	if v := t.vantagesOf(); v != nil && len(v.assigned) > 0 {
		st.Vantages = v.statusVantages()
		st.Verdict = v.decided
		st.Owner = v.assigned[0].Member // whom assignLocked made the owner
	} else {
		st.Owner = r.link.owner(t.spec.Name)
	}
	if o := t.outlierState(); o != nil {
		oc := *o
		st.Outlier = &oc
	}
	return st
}

// observeLocked feeds one result, active or passive, to t's machine and
// applies the policies to what comes out.
func (r *registry) observeLocked(t *target, res Result, now time.Time) {
	t.last, t.hasLast = res, true
	t.carried = false
	r.sampleResultLocked(t, res)
	_, changed := t.m.Observe(res.Pass)
	if v := t.vantagesOf(); v != nil && len(v.assigned) > 0 {
		// One vantage's result: its verdict is stored, and the
		// vantages' verdict, as it is applied, changes the owner's.
		r.syncVerdictLocked(t, v, now)
		if !t.owned {
			return
		}
		changed = false
	}
	r.verdictLocked(t, changed, now, cause{result: res})
	r.unhealthySinceLocked(t, now)
	if !res.Passive {
		r.certWarningLocked(t, now)
	}
}

// cause is why a target's state changes: the result that tipped it, or a
// reason when no result did.
type cause struct {
	result Result
	reason string
}

// setStateLocked decides that t's published state is to be to: it writes
// the state's record through the link, and the state changes when the
// record is applied (applyStateLocked).
func (r *registry) setStateLocked(t *target, to State, now time.Time, why cause) {
	if t.state != to {
		r.proposeLocked(t, to, now, why)
	}
}

// applyStateLocked changes t's published state, keeps its pool's counts and
// records the transition.
func (r *registry) applyStateLocked(t *target, to State, now time.Time, why cause) {
	from := t.state
	if from == to {
		return
	}
	if p := r.pools[t.spec.Group]; p != nil && from.routable() != to.routable() {
		if to.routable() {
			p.down--
		} else {
			p.down++
		}
		if len(p.held) > 0 && t.spec.Group != "" {
			r.link.markGroup(t.spec.Group) // room for a held target, or less
		}
	}
	t.state = to
	t.lastTr = now
	tr := Transition{
		Target:       t.spec.Name,
		Group:        t.spec.Group,
		From:         from,
		To:           to,
		Time:         now,
		Reason:       why.reason,
		Mode:         t.spec.Admin().Mode,
		SlowStartEnd: r.rampLocked(t, from, to, now),
	}
	if why.reason == "" {
		tr.Result = why.result
	}
	if v := t.multi(); v != nil {
		tr.Vantages = v.statusVantages()
	}
	r.emitLocked(Event{Kind: EventTransition, Time: now, Transition: tr})
}

// unlockAndReport releases mu, then logs the events recorded meanwhile and
// tells the observer of the transitions, outside the locks.
func (r *registry) unlockAndReport() {
	evs := r.reports
	r.reports = nil
	r.mu.Unlock()
	for _, e := range evs {
		r.report(e)
	}
}

func (r *registry) report(e Event) {
	if e.Kind == EventRemoved {
		r.reportRemoval(e)
		return
	}
	if e.Kind == EventModeChanged {
		r.reportMode(e)
		return
	}
	if e.Kind != EventTransition {
		r.reportPolicy(e)
		return
	}
	tr := e.Transition
	if r.observer != nil {
		r.observer.ObserveTransition(tr)
	}
	attrs := []any{"target", tr.Target, "group", tr.Group, "from", tr.From.String(), "to", tr.To.String(), "revision", tr.Revision}
	if tr.Result.Err != "" {
		attrs = append(attrs, "error", tr.Result.Err)
	}
	if tr.Reason != "" {
		attrs = append(attrs, "reason", tr.Reason)
	}
	r.logger.Info(tr.String(), attrs...)
}

// closeProbers closes every target's prober, outside the lock.
func (r *registry) closeProbers() {
	r.mu.Lock()
	probers := make([]Prober, 0, len(r.targets))
	for _, t := range r.targets {
		probers = append(probers, t.prober)
	}
	r.mu.Unlock()
	for _, p := range probers {
		closeProber(p)
	}
}

// close marks the registry closed: Add, ReportOutcome, SetGroupPolicy and
// Watch return ErrClosed from now on. then runs under the lock, so that no
// watch starts after it.
func (r *registry) close(then func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	then()
}

func closeProber(p Prober) {
	if cl, ok := p.(io.Closer); ok {
		_ = cl.Close()
	}
}

// The registry's side of the scheduler's work: the scheduler takes the
// lock, asks which targets are still registered and probed, and hands each
// result over; the registry decides what it does to the target's state.

func (r *registry) lock()   { r.mu.Lock() }
func (r *registry) unlock() { r.mu.Unlock() }

// closedLocked reports whether Close has begun ending the registry.
func (r *registry) closedLocked() bool { return r.closed }

// eachLocked calls f for every registered target, in no order.
func (r *registry) eachLocked(f func(*target)) {
	for _, t := range r.targets {
		f(t)
	}
}

// currentLocked reports whether t is still registered (not removed, nor
// replaced by a target of the same name).
func (r *registry) currentLocked(t *target) bool { return !t.gone }

// probedLocked reports whether this checker probes t: it is not
// quarantined nor in maintenance and, with a shared registry, this replica
// owns it.
func (r *registry) probedLocked(t *target) bool {
	return (t.owned || t.vantage) && t.quarantined() == "" && t.spec.Admin().Mode != ModeMaintenance
}

// hasReportsLocked reports whether events wait to be logged and observed.
func (r *registry) hasReportsLocked() bool { return len(r.reports) > 0 }

// reportsLocked returns a mark of the events recorded so far, for
// transitionsSinceLocked.
func (r *registry) reportsLocked() int { return len(r.reports) }

// transitionsSinceLocked returns the transitions recorded since mark.
func (r *registry) transitionsSinceLocked(mark int) []Transition {
	var trs []Transition
	for _, e := range r.reports[mark:] {
		if e.Kind == EventTransition {
			trs = append(trs, e.Transition)
		}
	}
	return trs
}

// resultLocked applies a probe result to t.
func (r *registry) resultLocked(t *target, res Result, now time.Time) {
	t.active++
	r.observeLocked(t, res, now)
}

// ignoreLocked keeps a probe timeout that does not count (the checker was
// overloaded) as t's last result.
func (r *registry) ignoreLocked(t *target, res Result) {
	t.last, t.hasLast = res, true
	t.ignored++
}

// emitLocked numbers e and hands it to the sink: the committer, which
// publishes it once its change is stored, or with a shared registry the
// replication, which publishes the events of the changes it applies
// together. Alone, each event has a revision of its own; with a shared
// registry, the revision being applied, and an event outside ApplyShared
// concerns this replica alone (a certificate's warning): it is logged and
// observed, not streamed. r.mu must be held; the sink takes its own lock
// (lock order: mu, then the committer's or the replication's, then the
// hub's).
func (r *registry) emitLocked(e Event) Event {
	switch {
	case r.remote:
		e.Revision = r.applying
	default:
		r.rev++
		e.Revision = r.rev
	}
	if e.Kind == EventTransition {
		e.Transition.Revision = e.Revision
	}
	if r.reported(e.Kind) {
		r.reports = append(r.reports, e)
	}
	if e.Revision != 0 {
		r.sink(e)
	}
	return e
}

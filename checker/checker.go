// Package checker keeps Pulse's registry of targets, probes them on a
// schedule and turns their results into states with rise/fall hysteresis.
//
// It knows nothing of gRPC: it speaks in its own plain types (Spec, State,
// Result, Status, Transition) and plain Go errors, and package server
// translates. All target state lives in one map guarded by one mutex, which
// is never held while probing or while a subscriber reads.
package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"pulse/checker/probe"
)

// Errors returned by the checker; test for them with errors.Is.
var (
	// ErrUnknownTarget: no target has that name.
	ErrUnknownTarget = errors.New("unknown target")
	// ErrLimit: a configured limit is reached; see LimitError.
	ErrLimit = errors.New("limit reached")
	// ErrClosed: the checker was closed.
	ErrClosed = errors.New("checker closed")
	// ErrSubscriberTooSlow: a watcher fell further behind than the history
	// holds, so it was ended rather than miss an event; see BehindError.
	ErrSubscriberTooSlow = errors.New("watcher fell behind")
)

// LimitError says which limit a call ran into.
type LimitError struct {
	// What is limited, e.g. "targets", "targets in group \"edge\"",
	// "watchers".
	What string
	Max  int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: at most %d %s", ErrLimit, e.Max, e.What)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Prober runs one probe against a target: nil means pass. It must return by
// the context's deadline. A Prober that also implements io.Closer is closed
// when its target is removed or its probe spec replaced.
type Prober interface {
	Probe(ctx context.Context) error
}

// Result is the outcome of one probe.
type Result struct {
	// Pass is true only for an explicit pass.
	Pass bool
	// Latency is how long the probe took.
	Latency time.Duration
	// Err says why the probe failed; empty on a pass.
	Err string
	// Time is when the probe finished.
	Time time.Time
}

// Transition is one change of a target's state.
type Transition struct {
	// Revision orders every event the checker records; it starts at 1.
	Revision uint64
	Target   string
	Group    string
	From, To State
	// Time is when the transition was applied.
	Time time.Time
	// Result is the result that tipped the state; zero when Reason is set.
	Result Result
	// Reason says why the state changed when no probe result did, e.g.
	// "model changed to rise_fall".
	Reason string
}

// String returns seed 000's text: "<target>: <old> -> <new>".
func (t Transition) String() string {
	return fmt.Sprintf("%s: %s -> %s", t.Target, t.From, t.To)
}

// Status is a snapshot of one target.
type Status struct {
	// Spec is the target's spec with defaults filled in.
	Spec       Spec
	State      State
	Routable   bool
	PassStreak int
	FailStreak int
	// LastResult is nil before the first result.
	LastResult *Result
	// LastTransition is zero if the state never changed.
	LastTransition time.Time
	// CarriedOver is true from a restart until the first fresh result: the
	// state was loaded from the store.
	CarriedOver bool
}

// Config configures a Checker. Every field is optional.
type Config struct {
	// Clock is the source of time. If nil, RealClock is used.
	Clock Clock
	// Defaults fill unset Spec fields. If zero, StandardDefaults() is used.
	Defaults Defaults
	// NewProber builds a target's Prober from its probe spec. If nil, the
	// checker owns a probe.Factory and closes it on Close.
	NewProber func(probe.Spec) (Prober, error)
	// MaxConcurrentProbes bounds the probes in flight at once. If 0, 256.
	MaxConcurrentProbes int
	// HistorySize is how many events the checker keeps for watchers to
	// resume from and catch up with. If 0, 10,000.
	HistorySize int
	// StartRevision is the revision before the first event, unless the
	// Store has one, which wins. Zero is fine for one process; pulsed starts
	// from its start time so that revisions do not go backwards across
	// restarts of a memory-only registry.
	StartRevision uint64
	// Logger receives one line per transition. If nil, nothing is logged.
	Logger *slog.Logger
	// Observer is told of every probe result and transition, for metrics.
	// If nil, nobody is.
	Observer Observer
	// MaxTargets bounds the registered targets; MaxTargetsPerGroup bounds
	// each group's (the empty group included); MaxWatchers bounds the live
	// watchers. Zero means no limit. Past one, Add or Watch returns a
	// *LimitError.
	MaxTargets         int
	MaxTargetsPerGroup int
	MaxWatchers        int
	// Store keeps the registry across restarts: New loads it, Add and Remove
	// write specs before they return, and state changes are stored before
	// their events reach a watcher. If nil, the registry lives in memory
	// only. The caller closes the store after Close.
	Store Store
}

// Observer receives what the checker does, outside its locks. Its methods
// are called concurrently, must return quickly and must not call back into
// the checker.
type Observer interface {
	// ObserveProbe is called after each probe that ran to completion.
	ObserveProbe(spec Spec, r Result)
	// ObserveTransition is called after each transition is recorded.
	ObserveTransition(tr Transition)
}

// Checker is the registry of targets and their states. Its methods are safe
// for concurrent use. Create it with New; call Start to probe on schedule and
// Close to stop.
type Checker struct {
	clock     Clock
	defaults  Defaults
	newProber func(probe.Spec) (Prober, error)
	factory   *probe.Factory // owned, closed on Close; nil if NewProber was given
	logger    *slog.Logger
	limits    Config        // MaxTargets, MaxTargetsPerGroup, MaxWatchers
	observer  Observer      // nil if none
	sem       chan struct{} // bounds probes in flight
	wake      chan struct{} // tells the scheduler the schedule changed

	ctx       context.Context // ends when Close is called
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the scheduler and its probes
	startOnce sync.Once
	closeOnce sync.Once

	store      Store         // nil: memory only
	wmu        sync.Mutex    // serialises Add and Remove with a store: one spec write at a time
	commitWake chan struct{} // tells the committer there is work
	commitStop chan struct{} // closed by Close
	commitDone chan struct{} // closed when the committer has stopped

	// Lock order: wmu, then mu, then hmu.
	mu      sync.Mutex // protects targets, due, rev, pending, closed and every *target
	targets map[string]*target
	groups  map[string]int // targets per group
	due     dueHeap
	rev     uint64    // the newest event's revision, published or not
	pending []pending // events waiting for the committer, in revision order
	closed  bool

	hmu       sync.Mutex                       // protects hist, watchers, every *Watcher's position, published and storeErr
	hist      history                          // published events; hist.last is the newest published revision
	watchers  map[string]map[*Watcher]struct{} // by group filter; "" is every group
	published chan struct{}                    // closed and replaced at each publication by the committer
	storeErr  error
}

// target is one registered target; the fields are guarded by Checker.mu.
type target struct {
	spec     Spec
	prober   Prober
	gen      uint64 // bumped when the probe spec is replaced
	m        Machine
	last     *Result
	lastTr   time.Time
	inFlight bool
	carried  bool      // the state was loaded from the store; no fresh result yet
	next     time.Time // when the next probe is due
	index    int       // position in the due heap
}

// New returns a Checker that has not started probing.
func New(cfg Config) (*Checker, error) {
	c := &Checker{
		clock:     cfg.Clock,
		defaults:  cfg.Defaults,
		newProber: cfg.NewProber,
		logger:    cfg.Logger,
		observer:  cfg.Observer,
		limits:    Config{MaxTargets: cfg.MaxTargets, MaxTargetsPerGroup: cfg.MaxTargetsPerGroup, MaxWatchers: cfg.MaxWatchers},
		groups:    make(map[string]int),
		wake:      make(chan struct{}, 1),
		targets:   make(map[string]*target),
		watchers:  make(map[string]map[*Watcher]struct{}),
		rev:       cfg.StartRevision,
	}
	size := cfg.HistorySize
	if size <= 0 {
		size = 10000
	}
	c.published = make(chan struct{})
	if c.clock == nil {
		c.clock = RealClock{}
	}
	if c.defaults == (Defaults{}) {
		c.defaults = StandardDefaults()
	}
	if err := c.defaults.Validate(); err != nil {
		return nil, err
	}
	if c.newProber == nil {
		c.factory = probe.NewFactory()
		c.newProber = func(s probe.Spec) (Prober, error) { return c.factory.New(s) }
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	n := cfg.MaxConcurrentProbes
	if n <= 0 {
		n = 256
	}
	c.sem = make(chan struct{}, n)
	if cfg.Store != nil {
		c.store = cfg.Store
		rev, err := c.load()
		if err != nil {
			c.closeProbers()
			return nil, err
		}
		if rev != 0 {
			// Revisions go on from the store's: a client that resumes
			// across the restart gets a correct (empty) replay.
			c.rev = rev
		}
		c.commitWake = make(chan struct{}, 1)
		c.commitStop = make(chan struct{})
		c.commitDone = make(chan struct{})
		go c.commitLoop()
	}
	c.hist = newHistory(size, c.rev)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Defaults returns the defaults that fill unset Spec fields.
func (c *Checker) Defaults() Defaults { return c.defaults }

// Add registers a target, or replaces the spec of the target of that name.
// Replacing keeps the state and streaks (seed 000's add), and a probe result
// in flight for a replaced probe spec is discarded. created reports whether
// the target is new. A bad spec returns a *FieldError.
func (c *Checker) Add(spec Spec) (st Status, created bool, err error) {
	spec = spec.WithDefaults(c.defaults)
	if err := spec.Validate(); err != nil {
		return Status{}, false, err
	}
	var unused Prober // a prober built but not kept, or the one replaced
	defer func() { closeProber(unused) }()
	if c.store != nil {
		c.wmu.Lock()
		defer c.wmu.Unlock()
	}

	c.mu.Lock()
	old := c.targets[spec.Name]
	if old != nil {
		// The initial state only matters to a new target: an update keeps
		// the one it was created with, so it is no change.
		spec.InitialState = old.spec.InitialState
	}
	sameProbe := old != nil && reflect.DeepEqual(old.spec.Probe, spec.Probe)
	sameSpec := old != nil && reflect.DeepEqual(old.spec, spec)
	closed := c.closed
	limitErr := c.checkLimitsLocked(old, spec)
	c.mu.Unlock()
	if closed {
		return Status{}, false, ErrClosed
	}
	if limitErr != nil {
		return Status{}, false, limitErr
	}
	if c.store != nil && !sameSpec {
		// Durable before anything changes or is acknowledged; with wmu held
		// no other Add or Remove can change this target meanwhile.
		if err := c.store.PutSpec(spec); err != nil {
			return Status{}, false, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}

	var p Prober
	if !sameProbe {
		if p, err = c.newProber(spec.Probe); err != nil {
			return Status{}, false, wrapProbeErr(err)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		unused = p
		return Status{}, false, ErrClosed
	}
	now := c.clock.Now()
	t := c.targets[spec.Name]
	if t == nil {
		if p == nil { // the target was removed while we built the prober
			if p, err = c.newProber(spec.Probe); err != nil {
				return Status{}, false, wrapProbeErr(err)
			}
		}
		t = &target{
			spec:   spec,
			prober: p,
			m:      Machine{Model: spec.Model, Rise: spec.Rise, Fall: spec.Fall, State: spec.InitialState},
			next:   now.Add(firstDelay(spec.Name, spec.Interval)),
		}
		if err := c.checkLimitsLocked(nil, spec); err != nil { // re-checked: others may have added meanwhile
			unused = p
			return Status{}, false, err
		}
		c.targets[spec.Name] = t
		c.groups[spec.Group]++
		c.due.push(t)
		c.wakeScheduler()
		st := c.statusLocked(t)
		c.emitLocked(Event{Kind: EventAdded, Time: now, Status: st})
		return st, true, nil
	}
	if reflect.DeepEqual(t.spec, spec) {
		unused = p
		return c.statusLocked(t), false, nil // nothing changes, no event
	}

	if p != nil && !reflect.DeepEqual(t.spec.Probe, spec.Probe) {
		unused, t.prober = t.prober, p
		t.gen++
	} else {
		unused = p
	}
	if spec.Interval < t.spec.Interval {
		if next := now.Add(spec.Interval); next.Before(t.next) {
			t.next = next
			c.due.fix(t)
			c.wakeScheduler()
		}
	}
	prevGroup := t.spec.Group
	if prevGroup != spec.Group {
		c.groups[prevGroup]--
		if c.groups[prevGroup] == 0 {
			delete(c.groups, prevGroup)
		}
		c.groups[spec.Group]++
	}
	t.spec = spec
	t.m.Rise, t.m.Fall = spec.Rise, spec.Fall
	c.emitLocked(Event{Kind: EventUpdated, Time: now, Status: c.statusLocked(t), prevGroup: prevGroup})
	// A model change that drops the target's state is a transition of its
	// own, after the update.
	if from, changed := t.m.SetModel(spec.Model); changed {
		tr := c.recordLocked(t, from, Result{}, "model changed to "+spec.Model.String())
		defer c.reportTransitions([]Transition{tr})
	}
	return c.statusLocked(t), false, nil
}

func wrapProbeErr(err error) error {
	var fe *probe.FieldError
	if errors.As(err, &fe) {
		return &FieldError{fe.Field, fe.Reason}
	}
	return err
}

// Remove unregisters a target and reports whether it existed. A result that
// arrives for it afterwards is discarded. With a store, the removal is
// durable when Remove returns; a failure to store it returns an error
// wrapping ErrStore and removes nothing.
func (c *Checker) Remove(name string) (bool, error) {
	if c.store != nil {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		c.mu.Lock()
		_, ok := c.targets[name]
		c.mu.Unlock()
		if !ok {
			return false, nil
		}
		if err := c.store.DeleteTarget(name); err != nil {
			return false, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	c.mu.Lock()
	t, ok := c.targets[name]
	if ok {
		delete(c.targets, name)
		if c.groups[t.spec.Group]--; c.groups[t.spec.Group] == 0 {
			delete(c.groups, t.spec.Group)
		}
		c.due.remove(t)
		c.emitLocked(Event{Kind: EventRemoved, Time: c.clock.Now(), Status: c.statusLocked(t)})
	}
	c.mu.Unlock()
	if ok {
		closeProber(t.prober)
	}
	return ok, nil
}

// Status returns a snapshot of one target, or an error wrapping
// ErrUnknownTarget.
func (c *Checker) Status(name string) (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.targets[name]
	if !ok {
		return Status{}, fmt.Errorf("%w %q", ErrUnknownTarget, name)
	}
	return c.statusLocked(t), nil
}

// List returns every target's status sorted by name, and the revision they
// are at; a non-empty group keeps only that group's targets. With a store,
// List returns once that revision is stored and published, so a watch from
// it can start at once.
func (c *Checker) List(group string) ([]Status, uint64) {
	list, rev := c.list(group)
	if c.store != nil {
		c.waitPublished(rev)
	}
	return list, rev
}

func (c *Checker) list(group string) ([]Status, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.targets))
	for _, t := range c.targets {
		if group == "" || t.spec.Group == group {
			out = append(out, c.statusLocked(t))
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	return out, c.rev
}

// Healthy returns the names of routable targets sorted by name (seed 000's
// healthy(), with seed 001's suspect targets counted as routable); a
// non-empty group keeps only that group's targets.
func (c *Checker) Healthy(group string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, t := range c.targets {
		if (group == "" || t.spec.Group == group) && t.m.Routable() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkLimitsLocked says whether adding spec (replacing old, if any) stays
// within the limits.
func (c *Checker) checkLimitsLocked(old *target, spec Spec) error {
	if old == nil && c.limits.MaxTargets > 0 && len(c.targets) >= c.limits.MaxTargets {
		return &LimitError{What: "targets", Max: c.limits.MaxTargets}
	}
	joins := old == nil || old.spec.Group != spec.Group
	if joins && c.limits.MaxTargetsPerGroup > 0 && c.groups[spec.Group] >= c.limits.MaxTargetsPerGroup {
		return &LimitError{What: fmt.Sprintf("targets in group %q", spec.Group), Max: c.limits.MaxTargetsPerGroup}
	}
	return nil
}

// GroupHealth counts a group's targets and how many of them are routable.
// A group exists while total > 0.
func (c *Checker) GroupHealth(group string) (routable, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.targets {
		if t.spec.Group == group {
			total++
			if t.m.Routable() {
				routable++
			}
		}
	}
	return routable, total
}

func (c *Checker) statusLocked(t *target) Status {
	st := Status{
		Spec:           t.spec,
		State:          t.m.State,
		Routable:       t.m.Routable(),
		PassStreak:     t.m.PassStreak,
		FailStreak:     t.m.FailStreak,
		LastTransition: t.lastTr,
		CarriedOver:    t.carried,
	}
	if t.last != nil {
		r := *t.last
		st.LastResult = &r
	}
	return st
}

// job is one probe to run: the target and what it was when the probe began.
type job struct {
	t      *target
	gen    uint64
	spec   Spec
	prober Prober
}

func (c *Checker) jobLocked(t *target) job {
	t.inFlight = true
	return job{t: t, gen: t.gen, spec: t.spec, prober: t.prober}
}

// RunRound probes every target once, concurrently, each under its own
// timeout, then applies the results in name order under the lock and returns
// the round's transitions in name order: seed 000's run_checks. Targets that
// already have a probe in flight are skipped. One target's panic or timeout
// never stops the others.
func (c *Checker) RunRound(ctx context.Context) []Transition {
	c.mu.Lock()
	var jobs []job
	for _, t := range c.targets {
		if !t.inFlight {
			jobs = append(jobs, c.jobLocked(t))
		}
	}
	c.mu.Unlock()
	slices.SortFunc(jobs, func(a, b job) int { return cmp.Compare(a.spec.Name, b.spec.Name) })

	results := make([]Result, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			if err := c.acquire(ctx); err != nil {
				results[i] = Result{Err: err.Error(), Time: c.clock.Now()}
				return
			}
			defer c.release()
			results[i] = c.probe(ctx, j)
		})
	}
	wg.Wait()

	var trs []Transition
	c.mu.Lock()
	for i, j := range jobs {
		if tr, ok := c.applyLocked(ctx, j, results[i]); ok {
			trs = append(trs, tr)
		}
	}
	c.mu.Unlock()
	c.reportTransitions(trs)
	return trs
}

func (c *Checker) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Checker) release() { <-c.sem }

// probe runs one probe under its own timeout and turns the outcome into a
// Result. A panicking prober is a failed probe.
func (c *Checker) probe(ctx context.Context, j job) Result {
	start := c.clock.Now()
	pctx, cancel := c.clock.WithTimeout(ctx, j.spec.Timeout)
	err := safeProbe(pctx, j.prober)
	timedOut := errors.Is(pctx.Err(), context.DeadlineExceeded)
	cancel()
	end := c.clock.Now()
	r := Result{Pass: err == nil, Latency: end.Sub(start), Time: end}
	var panicked *panicError
	switch {
	case errors.As(err, &panicked):
		r.Err = panicked.Error()
	case err != nil && (timedOut || errors.Is(err, context.DeadlineExceeded)):
		r.Err = fmt.Sprintf("timeout after %v", j.spec.Timeout)
	case err != nil:
		r.Err = probe.Describe(err)
	case j.spec.MaxLatency > 0 && r.Latency > j.spec.MaxLatency:
		r.Pass = false
		r.Err = fmt.Sprintf("slow: %v > %v", r.Latency.Round(time.Millisecond), j.spec.MaxLatency)
	}
	if c.observer != nil && ctx.Err() == nil {
		c.observer.ObserveProbe(j.spec, r)
	}
	return r
}

func safeProbe(ctx context.Context, p Prober) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{v}
		}
	}()
	return p.Probe(ctx)
}

// panicError is a prober's panic, which is a failed probe, whatever the
// clock says by the time it is recovered.
type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("probe panicked: %v", e.v) }

// applyLocked records a finished job's result. The result is discarded when
// the target was removed, its probe spec replaced, or the run cancelled (a
// probe cut short by shutdown says nothing about the target).
func (c *Checker) applyLocked(ctx context.Context, j job, r Result) (Transition, bool) {
	if c.targets[j.spec.Name] != j.t {
		return Transition{}, false
	}
	j.t.inFlight = false
	if j.t.gen != j.gen || ctx.Err() != nil {
		return Transition{}, false
	}
	j.t.last = &r
	j.t.carried = false
	from, changed := j.t.m.Observe(r.Pass)
	if !changed {
		return Transition{}, false
	}
	return c.recordLocked(j.t, from, r, ""), true
}

// recordLocked stamps and publishes a state change of t.
func (c *Checker) recordLocked(t *target, from State, r Result, reason string) Transition {
	now := c.clock.Now()
	t.lastTr = now
	tr := Transition{
		Target: t.spec.Name,
		Group:  t.spec.Group,
		From:   from,
		To:     t.m.State,
		Time:   now,
		Result: r,
		Reason: reason,
	}
	return c.emitLocked(Event{Kind: EventTransition, Time: now, Transition: tr}).Transition
}

// reportTransitions logs transitions and tells the observer; it runs
// outside the locks.
func (c *Checker) reportTransitions(trs []Transition) {
	for _, tr := range trs {
		if c.observer != nil {
			c.observer.ObserveTransition(tr)
		}
		attrs := []any{"target", tr.Target, "group", tr.Group, "from", tr.From.String(), "to", tr.To.String(), "revision", tr.Revision}
		if tr.Result.Err != "" {
			attrs = append(attrs, "error", tr.Result.Err)
		}
		if tr.Reason != "" {
			attrs = append(attrs, "reason", tr.Reason)
		}
		c.logger.Info(tr.String(), attrs...)
	}
}

// Close stops the scheduler, waits for probes in flight, ends every
// watcher with ErrClosed and closes every prober. It is idempotent.
func (c *Checker) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		if c.store != nil {
			close(c.commitStop) // the committer stores what is pending, then stops
			<-c.commitDone
		}
		c.mu.Lock()
		c.closed = true
		c.hmu.Lock()
		for _, set := range c.watchers {
			for w := range set {
				c.endLocked(w, ErrClosed)
			}
		}
		c.hmu.Unlock()
		c.mu.Unlock()
		c.closeProbers()
	})
	return nil
}

func (c *Checker) closeProbers() {
	c.mu.Lock()
	probers := make([]Prober, 0, len(c.targets))
	for _, t := range c.targets {
		probers = append(probers, t.prober)
	}
	c.mu.Unlock()
	for _, p := range probers {
		closeProber(p)
	}
	if c.factory != nil {
		c.factory.Close()
	}
}

func closeProber(p Prober) {
	if cl, ok := p.(io.Closer); ok {
		_ = cl.Close()
	}
}

// Package checker keeps Pulse's registry of targets, probes them on a
// schedule and turns their results into states with rise/fall hysteresis.
//
// It knows nothing of gRPC: it speaks in its own plain types (Spec, State,
// Result, Status, Transition) and plain Go errors, and package server
// translates. All target state lives in one map guarded by one mutex, which
// is never held while probing or while a subscriber reads.
//
// Each target has two states. Its verdict is what its results alone say:
// the pure Machine's state. Its state, the one Status, Healthy and the
// transitions publish, is the verdict unless a pool policy holds it (see
// policy.go): the panic threshold of its group keeps it routable
// (Status.PanicHeld), or flap damping keeps it unhealthy
// (Status.Flapping). Policies that look across targets live here, in the
// registry, under its one mutex; the Machine stays a value.
package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
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

// AsyncProber is a Prober that can also run a probe without a goroutine
// waiting for its answer: the checker's workers start such probes and go
// on to the next, and the answers are applied as they come. The probe
// package's plain http:// probers are AsyncProbers on Linux, for probes on
// a connection they keep.
type AsyncProber interface {
	Prober
	// ProbeAsync starts a probe that ends by deadline and returns true;
	// done is then called exactly once with what Probe would have
	// returned, usually from another goroutine but possibly before
	// ProbeAsync returns (the caller holds no lock done takes). It returns
	// false, having started nothing and without calling done, when it
	// cannot run this probe so: the caller runs Probe instead.
	ProbeAsync(deadline time.Time, done func(error)) bool
	// CancelAsync ends the probe ProbeAsync started, if it still runs:
	// done is called soon, from another goroutine, with an error. The
	// checker calls it when it closes; closing the prober does it too.
	CancelAsync()
}

// Result is the outcome of one probe, or of one passive outcome.
type Result struct {
	// Pass is true only for an explicit pass.
	Pass bool
	// Latency is how long the probe took.
	Latency time.Duration
	// Err says why the probe failed; empty on a pass.
	Err string
	// Time is when the probe finished.
	Time time.Time
	// Passive is true for an outcome reported with ReportOutcome.
	Passive bool
	// Ignored is true for a probe timeout that did not count because the
	// checker was overloaded (see Overload): stale is not down.
	Ignored bool
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

	// Verdict is the state the results alone give (the Machine's). It
	// differs from State while a policy holds the target.
	Verdict State
	// PanicHeld is true while the target's group is in panic and its
	// verdict, unhealthy, is held back: it stays routable.
	PanicHeld bool
	// Flapping is true while flap damping holds the target unhealthy.
	Flapping bool
	// Transitions counts the verdict's changes within Spec.FlapWindow up to
	// now (at most 256).
	Transitions int
	// ProbeInterval is the interval the target is probed at now, after
	// Spec.IntervalFor.
	ProbeInterval time.Duration
	// NextProbe is when the next scheduled probe is due.
	NextProbe time.Time
	// Probing is true while a probe of the target is in flight, waiting for
	// a slot or running.
	Probing bool
	// ActiveResults and PassiveResults count the probe results and the
	// passive outcomes applied; PassiveLimited counts the passive outcomes
	// dropped by Spec.PassiveRate; IgnoredTimeouts the probe timeouts not
	// counted because the checker was overloaded.
	ActiveResults   uint64
	PassiveResults  uint64
	PassiveLimited  uint64
	IgnoredTimeouts uint64
	// Quarantined, when set, says why a stored target that today's rules
	// refuse is not probed: it stays listed, never routable, until Add
	// replaces its spec or Remove removes it.
	Quarantined string
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
	// ScheduleTick batches probe starts: the scheduler wakes only on
	// multiples of it (counted from the zero time) and starts every probe
	// due by then, so each probe starts at most one tick after its due
	// time and probes due close together start in one wake-up. If 0, each
	// probe starts at its own due time.
	ScheduleTick time.Duration
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
	// only. The caller closes the store after Close. A Store that is also a
	// PolicyStore keeps group policies too.
	Store Store
	// MaxUnhealthyFraction is the panic threshold of groups without a
	// policy of their own (see SetGroupPolicy): at most
	// floor(MaxUnhealthyFraction x targets) of a group, and always at least
	// one, are marked unhealthy at once. In [0, 1]; if 0, 1: no threshold.
	// pulsed's default is 0.5.
	MaxUnhealthyFraction float64
	// Overload tunes how the scheduler decides it is overloaded; the zero
	// value is the documented defaults.
	Overload OverloadPolicy
	// Shared, when set, puts the registry in a registry shared by several
	// replicas (see Shared) instead of Store, which must then be nil. The
	// caller feeds the shared registry's changes to ApplyShared.
	Shared Shared
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
	limits    Config   // MaxTargets, MaxTargetsPerGroup, MaxWatchers
	observer  Observer // nil if none
	closeOnce sync.Once

	store      Store      // nil: memory only
	policyDflt float64    // MaxUnhealthyFraction in force for groups without their own
	wmu        sync.Mutex // serialises Add and Remove with a store: one spec write at a time
	sched      *scheduler // the due heap, the probe pool, overload; see scheduler.go
	commit     *committer // with a store: stores state changes, then publishes them; see committer.go

	// Lock order: wmu, then mu, then the committer's, then the hub's.
	mu      sync.Mutex // protects targets, pools, rev, reports, closed, every *target, and the scheduler's state
	targets map[string]*target
	pools   map[string]*pool // by group, "" included; see policy.go
	rev     uint64           // the newest event's revision, published or not
	reports []Event          // events to log and observe once mu is released
	closed  bool

	hub      *hub   // the history of published events and the watchers; see hub.go
	storeErr errBox // the last failure to store state changes

	// With a shared registry (see shared.go); applying, mirroring and
	// proposals are guarded by mu.
	shared      Shared
	applying    uint64 // the revision ApplyShared is applying; 0 outside it
	mirroring   bool   // setStateLocked applies a stored state, not a verdict
	proposals   []proposal
	proposeWake chan struct{}
	proposeDone chan struct{}
}

// target is one registered target; the fields are guarded by Checker.mu.
type target struct {
	spec   Spec
	prober Prober
	gen    uint64  // bumped when the probe spec is replaced
	m      Machine // the verdict
	state  State   // the published state: the verdict unless a policy holds it
	flaps  flapLog // the verdict's recent changes
	last   Result  // the last result, by value: no allocation per result; valid when hasLast
	lastTr time.Time

	// The flags, together so that they take one word: with the last result
	// by value the target stays within a 512-byte allocation.
	held      bool // held routable by its group's panic threshold
	flapping  bool // held unhealthy by flap damping
	inFlight  bool
	hasLast   bool
	carried   bool // the state was loaded from the store; no fresh result yet
	owned     bool // with a shared registry: this replica probes the target
	proposing bool // with a shared registry: a state write is on its way

	slot time.Time // the scheduled start of the last scheduled probe; zero before the first
	next time.Time // when the next probe is due
	// startNs is when the next probe starts, in nanoseconds since the
	// epoch: next, batched by Config.ScheduleTick (see startBy). seq is the
	// target's number. Both order the due heap.
	startNs int64
	seq     uint64
	index   int // position in the due heap

	active, passive, limited, ignored uint64 // result counts, see Status
	// The passive outcomes' rate limit, made by the first one: most targets
	// never report any, and by value it would take the target past 512 bytes.
	bucket *tokenBucket

	// With a shared registry: the revision of the target's stored state
	// (owned and proposing are with the flags above).
	stateRev uint64
}

// targetSeq numbers targets as they are made: the due heap's order among
// targets that start at the same time.
var targetSeq atomic.Uint64

func newTarget(spec Spec, p Prober, state State) *target {
	return &target{
		seq:    targetSeq.Add(1),
		spec:   spec,
		prober: p,
		m:      Machine{Model: spec.Model, Rise: spec.Rise, Fall: spec.Fall, State: state},
		state:  state,
	}
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
		pools:     make(map[string]*pool),
		targets:   make(map[string]*target),
		rev:       cfg.StartRevision,
	}
	size := cfg.HistorySize
	if size <= 0 {
		size = 10000
	}
	if c.clock == nil {
		c.clock = RealClock{}
	}
	if c.defaults == (Defaults{}) {
		c.defaults = StandardDefaults()
	}
	if err := c.defaults.Validate(); err != nil {
		return nil, err
	}
	switch f := cfg.MaxUnhealthyFraction; {
	case math.IsNaN(f) || f < 0 || f > 1:
		return nil, fmt.Errorf("MaxUnhealthyFraction must be in [0, 1], got %v", f)
	case f == 0:
		c.policyDflt = 1
	default:
		c.policyDflt = f
	}
	sched, err := newScheduler(c, &c.mu, cfg, c.clock)
	if err != nil {
		return nil, err
	}
	c.sched = sched
	if c.newProber == nil {
		c.factory = probe.NewFactory()
		c.newProber = func(s probe.Spec) (Prober, error) { return c.factory.New(s) }
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Shared != nil {
		if cfg.Store != nil {
			return nil, errors.New("a checker takes a Store or a Shared registry, not both")
		}
		c.shared = cfg.Shared
		c.policyDflt = 1 // panic thresholds need one view of the group: see Shared
		rev, err := c.loadShared()
		if err != nil {
			c.closeProbers()
			return nil, err
		}
		c.rev = rev
		c.proposeWake = make(chan struct{}, 1)
		c.proposeDone = make(chan struct{})
	}
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
	}
	c.hub = newHub(size, c.rev, cfg.MaxWatchers)
	if c.shared != nil {
		go c.proposeLoop()
	}
	if c.store != nil {
		c.commit = newCommitter(c.store, c.hub, c.clock, c.logger, nil)
	}
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
	if c.shared != nil {
		return c.addShared(spec)
	}
	var unused Prober // a prober built but not kept, or the one replaced
	defer func() { closeProber(unused) }()
	if c.store != nil {
		c.wmu.Lock()
		defer c.wmu.Unlock()
	}

	c.mu.Lock()
	old := c.targets[spec.Name]
	limitErr := c.checkLimitsLocked(old, spec)
	if old != nil && old.quarantined() != "" {
		old = nil // replaced by a target made afresh from this spec
	}
	if old != nil {
		// The initial state only matters to a new target: an update keeps
		// the one it was created with, so it is no change.
		spec.InitialState = old.spec.InitialState
	}
	sameProbe := old != nil && reflect.DeepEqual(old.spec.Probe, spec.Probe)
	sameSpec := old != nil && reflect.DeepEqual(old.spec, spec)
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return Status{}, false, ErrClosed
	}
	// The prober is built first: a probe the egress policy refuses is a
	// rejected call (a bad request before a full registry), and a rejected
	// call stores nothing.
	var p Prober
	if !sameProbe {
		if p, err = c.newProber(spec.Probe); err != nil {
			return Status{}, false, wrapProbeErr(err)
		}
	}
	if limitErr != nil {
		unused = p
		return Status{}, false, limitErr
	}
	if c.store != nil && !sameSpec {
		// Durable before anything changes or is acknowledged; with wmu held
		// no other Add or Remove can change this target meanwhile.
		if err := c.store.PutSpec(spec); err != nil {
			unused = p
			return Status{}, false, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}

	c.mu.Lock()
	defer c.unlockAndReport()
	if c.closed {
		unused = p
		return Status{}, false, ErrClosed
	}
	now := c.clock.Now()
	t := c.targets[spec.Name]
	var fixed *target // the quarantined target this spec replaces
	if t != nil && t.quarantined() != "" {
		fixed, t = t, nil
	}
	if t == nil {
		if p == nil { // the target was removed while we built the prober
			if p, err = c.newProber(spec.Probe); err != nil {
				return Status{}, false, wrapProbeErr(err)
			}
		}
		if fixed == nil {
			if err := c.checkLimitsLocked(nil, spec); err != nil { // re-checked: others may have added meanwhile
				unused = p
				return Status{}, false, err
			}
		}
		t = newTarget(spec, p, spec.InitialState)
		c.targets[spec.Name] = t
		c.joinPoolLocked(t)
		c.sched.addLocked(t, now.Add(firstDelay(spec.Name, spec.Interval)))
		st := c.statusLocked(t, now)
		if fixed != nil {
			// Watchers know the name from the quarantined target: the fix is
			// an update of it.
			c.emitLocked(Event{Kind: EventUpdated, Time: now, Status: st, prevGroup: fixed.spec.Group})
			c.settleLocked(spec.Group, now)
			return st, false, nil
		}
		c.emitLocked(Event{Kind: EventAdded, Time: now, Status: st})
		c.settleLocked(spec.Group, now) // a new routable target may make room
		return st, true, nil
	}
	if reflect.DeepEqual(t.spec, spec) {
		unused = p
		return c.statusLocked(t, now), false, nil // nothing changes, no event
	}

	if p != nil && !reflect.DeepEqual(t.spec.Probe, spec.Probe) {
		unused, t.prober = t.prober, p
		t.gen++
	} else {
		unused = p
	}
	prevGroup := c.setSpecLocked(t, spec)
	c.emitLocked(Event{Kind: EventUpdated, Time: now, Status: c.statusLocked(t, now), prevGroup: prevGroup})
	// What the new spec changes in the state comes after the update, as
	// transitions of its own: a model change that drops the suspect state,
	// damping turned off, a group with more or less room.
	why := cause{reason: "spec changed"}
	if prevGroup != spec.Group {
		why = cause{reason: fmt.Sprintf("moved to group %q", spec.Group)}
	}
	if _, changed := t.m.SetModel(spec.Model); changed {
		why = cause{reason: "model changed to " + spec.Model.String()}
	}
	if t.flapping && spec.FlapThreshold == 0 {
		c.endFlappingLocked(t, now, "flap damping turned off")
		why = cause{reason: "flap damping turned off"}
	}
	c.updateLocked(t, now, why)
	if prevGroup != spec.Group {
		c.settleLocked(prevGroup, now)
		c.dropPoolLocked(prevGroup)
	}
	c.settleLocked(spec.Group, now)
	c.sched.hurryLocked(t, now)
	return c.statusLocked(t, now), false, nil
}

// setSpecLocked gives t a new spec, moving it between pools if its group
// changes, and returns the group it was in.
func (c *Checker) setSpecLocked(t *target, spec Spec) (prevGroup string) {
	prevGroup = t.spec.Group
	if prevGroup != spec.Group {
		c.leavePoolLocked(t)
	}
	t.spec = spec
	t.m.Rise, t.m.Fall = spec.Rise, spec.Fall
	if prevGroup != spec.Group {
		c.joinPoolLocked(t)
	}
	return prevGroup
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
	if c.shared != nil {
		return c.removeShared(name)
	}
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
		now := c.clock.Now()
		delete(c.targets, name)
		if t.quarantined() != "" { // in no heap and no pool
			c.emitLocked(Event{Kind: EventRemoved, Time: now, Status: c.statusLocked(t, now)})
		} else {
			c.sched.removeLocked(t)
			c.leavePoolLocked(t)
			c.emitLocked(Event{Kind: EventRemoved, Time: now, Status: c.statusLocked(t, now)})
			c.settleLocked(t.spec.Group, now) // fewer unhealthy targets: room for held ones
			c.dropPoolLocked(t.spec.Group)
		}
	}
	c.unlockAndReport()
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
	return c.statusLocked(t, c.clock.Now()), nil
}

// List returns every target's status sorted by name, and the revision they
// are at; a non-empty group keeps only that group's targets. With a store,
// List returns once that revision is stored and published, so a watch from
// it can start at once.
func (c *Checker) List(group string) ([]Status, uint64) {
	list, rev := c.list(group)
	_ = c.hub.wait(context.Background(), rev, nil) // with a store, the committer may not have published rev yet
	return list, rev
}

func (c *Checker) list(group string) ([]Status, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	out := make([]Status, 0, len(c.targets))
	for _, t := range c.targets {
		if group == "" || t.spec.Group == group {
			out = append(out, c.statusLocked(t, now))
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
		if (group == "" || t.spec.Group == group) && t.state.routable() {
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
	joins := old == nil || old.spec.Group != spec.Group || old.quarantined() != "" // a quarantined target is in no pool
	if joins && c.limits.MaxTargetsPerGroup > 0 && c.pools[spec.Group].size() >= c.limits.MaxTargetsPerGroup {
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
			if t.state.routable() {
				routable++
			}
		}
	}
	return routable, total
}

func (c *Checker) statusLocked(t *target, now time.Time) Status {
	st := Status{
		Spec:            t.spec,
		State:           t.state,
		Routable:        t.state.routable(),
		PassStreak:      t.m.PassStreak,
		FailStreak:      t.m.FailStreak,
		LastTransition:  t.lastTr,
		CarriedOver:     t.carried,
		Verdict:         t.m.State,
		PanicHeld:       t.held,
		Flapping:        t.flapping,
		Transitions:     t.flaps.count(now, t.spec.flapWindow()),
		ProbeInterval:   t.spec.IntervalFor(t.m),
		NextProbe:       t.next,
		Probing:         t.inFlight,
		ActiveResults:   t.active,
		PassiveResults:  t.passive,
		PassiveLimited:  t.limited,
		IgnoredTimeouts: t.ignored,
		Quarantined:     t.quarantined(),
	}
	if t.hasLast {
		r := t.last
		st.LastResult = &r
	}
	return st
}

// observeLocked feeds one result, active or passive, to t's machine and
// applies the policies to what comes out.
func (c *Checker) observeLocked(t *target, r Result, now time.Time) {
	t.last, t.hasLast = r, true
	t.carried = false
	_, changed := t.m.Observe(r.Pass)
	c.verdictLocked(t, changed, now, cause{result: r})
}

// cause is why a target's state changes: the result that tipped it, or a
// reason when no result did.
type cause struct {
	result Result
	reason string
}

// setStateLocked changes t's published state, keeps its pool's counts and
// records the transition.
func (c *Checker) setStateLocked(t *target, to State, now time.Time, why cause) {
	from := t.state
	if from == to {
		return
	}
	if c.shared != nil && !c.mirroring {
		c.proposeLocked(t, to, now, why)
		return
	}
	if p := c.pools[t.spec.Group]; p != nil && from.routable() != to.routable() {
		if to.routable() {
			p.down--
		} else {
			p.down++
		}
	}
	t.state = to
	t.lastTr = now
	tr := Transition{
		Target: t.spec.Name,
		Group:  t.spec.Group,
		From:   from,
		To:     to,
		Time:   now,
		Reason: why.reason,
	}
	if why.reason == "" {
		tr.Result = why.result
	}
	c.emitLocked(Event{Kind: EventTransition, Time: now, Transition: tr})
}

// unlockAndReport releases mu, then logs the events recorded meanwhile and
// tells the observer of the transitions, outside the locks.
func (c *Checker) unlockAndReport() {
	evs := c.reports
	c.reports = nil
	c.mu.Unlock()
	for _, e := range evs {
		c.report(e)
	}
}

func (c *Checker) report(e Event) {
	if e.Kind != EventTransition {
		c.reportPolicy(e)
		return
	}
	tr := e.Transition
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

// Close stops the scheduler, waits for probes in flight, ends every
// watcher with ErrClosed and closes every prober. It is idempotent.
func (c *Checker) Close() error {
	c.closeOnce.Do(func() {
		c.sched.stop()
		if c.commit != nil {
			c.commit.close() // it stores what is queued, then stops
		}
		if c.shared != nil {
			<-c.proposeDone
		}
		c.mu.Lock()
		c.closed = true
		c.hub.close()
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

// Start begins probing every target on its interval, in the background,
// until Close. Calling it more than once has no further effect. See
// scheduler.start for how targets are scheduled.
func (c *Checker) Start() { c.sched.start() }

// Scheduled is closed once the scheduler has made its first pass over the
// registry: every target loaded or registered before Start has its first
// probe scheduled. Readiness checks wait for it.
func (c *Checker) Scheduled() <-chan struct{} { return c.sched.scheduled }

// Overload returns the checker's overload state, for status pages and
// metrics. It is safe for concurrent use.
func (c *Checker) Overload() OverloadStatus { return c.sched.status() }

// RunRound probes every target once, concurrently, each under its own
// timeout, then applies the results in name order under the lock and returns
// the round's transitions in name order: seed 000's run_checks. Targets that
// already have a probe in flight are skipped. One target's panic or timeout
// never stops the others. The transitions include those the results cause
// in other targets (a panic hold released). The probes share the
// scheduler's workers and its MaxConcurrentProbes bound.
func (c *Checker) RunRound(ctx context.Context) []Transition { return c.sched.runRound(ctx) }

// The registry's side of the scheduler's work: the scheduler takes the
// lock, asks which targets are still registered and probed, and hands each
// result over; the registry decides what it does to the target's state.

func (c *Checker) lock()   { c.mu.Lock() }
func (c *Checker) unlock() { c.mu.Unlock() }

// closedLocked reports whether Close has begun ending the registry.
func (c *Checker) closedLocked() bool { return c.closed }

// eachLocked calls f for every registered target, in no order.
func (c *Checker) eachLocked(f func(*target)) {
	for _, t := range c.targets {
		f(t)
	}
}

// currentLocked reports whether t is still registered (not removed, nor
// replaced by a target of the same name).
func (c *Checker) currentLocked(t *target) bool { return c.targets[t.spec.Name] == t }

// probedLocked reports whether this checker probes t: it is not
// quarantined and, with a shared registry, this replica owns it.
func (c *Checker) probedLocked(t *target) bool {
	return (c.shared == nil || t.owned) && t.quarantined() == ""
}

// hasReportsLocked reports whether events wait to be logged and observed.
func (c *Checker) hasReportsLocked() bool { return len(c.reports) > 0 }

// reportsLocked returns a mark of the events recorded so far, for
// transitionsSinceLocked.
func (c *Checker) reportsLocked() int { return len(c.reports) }

// transitionsSinceLocked returns the transitions recorded since mark.
func (c *Checker) transitionsSinceLocked(mark int) []Transition {
	var trs []Transition
	for _, e := range c.reports[mark:] {
		if e.Kind == EventTransition {
			trs = append(trs, e.Transition)
		}
	}
	return trs
}

// resultLocked applies a probe result to t.
func (c *Checker) resultLocked(t *target, r Result, now time.Time) {
	t.active++
	c.observeLocked(t, r, now)
}

// ignoreLocked keeps a probe timeout that does not count (the checker was
// overloaded) as t's last result.
func (c *Checker) ignoreLocked(t *target, r Result) {
	t.last, t.hasLast = r, true
	t.ignored++
}

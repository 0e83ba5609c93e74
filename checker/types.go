package checker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/checker/probe"
)

// The checker's plain types: what its callers pass in and get back.

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
	// Limit is the Config field whose bound was reached.
	Limit Limit
	// What is limited, e.g. "targets", "targets in group \"edge\"",
	// "watchers".
	What string
	Max  int
}

// Limit names one of Config's bounds, for a LimitError.
type Limit int

// The limits of a LimitError.
const (
	// LimitTargets is Config.MaxTargets.
	LimitTargets Limit = iota + 1
	// LimitTargetsPerGroup is Config.MaxTargetsPerGroup.
	LimitTargetsPerGroup
	// LimitWatchers is Config.MaxWatchers.
	LimitWatchers
	// LimitWatchersPerSource is Config.MaxWatchersPerSource.
	LimitWatchersPerSource
)

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
	// Passive is true for an outcome reported with ReportOutcome.
	Passive bool
	// Ignored is true for a probe timeout that did not count because the
	// checker was overloaded (see Overload): stale is not down. (The flags
	// come first, together, so that a Result takes 56 bytes, not 64: a
	// target keeps its last one by value.)
	Ignored bool
	// OwnFault is true for a probe that failed for want of the checker's
	// own resources (probe.OwnFault: no file descriptor free). It says
	// nothing of the target: it is Ignored, and a sign of overload.
	OwnFault bool
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
	// "model changed to rise_fall" or "draining: deploy 4711".
	Reason string
	// Mode is the target's administrative mode after the transition.
	Mode Mode
	// SlowStartEnd, on a transition to routable of a target with a slow
	// start, is when its weight reaches 100%: it rises linearly from 0 at
	// Time. Zero otherwise.
	SlowStartEnd time.Time
	// Vantages, for a target probed from several vantages, are their
	// verdicts when the transition was applied, its owner's first.
	Vantages []VantageVerdict
}

// String returns the transition's text: "<target>: <old> -> <new>".
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
	// now (at most 256). With a shared registry, Verdict, Flapping and
	// Transitions are those its owner stored, on every replica.
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
	// counted because the checker was overloaded. With a shared registry,
	// PassiveResults counts the outcomes stored, on every replica;
	// PassiveLimited those this replica refused.
	ActiveResults   uint64
	PassiveResults  uint64
	PassiveLimited  uint64
	IgnoredTimeouts uint64
	// Quarantined, when set, says why a stored target that today's rules
	// refuse is not probed: it stays listed, never routable, until Add
	// replaces its spec or Remove removes it.
	Quarantined string
	// CertNotAfter is when the first-expiring certificate the target's
	// last probe saw expires, for TLS probes with a cert_expiry window;
	// zero otherwise. CertWarning says, while the last probe passed within
	// the warning window, e.g. "certificate expires in 20d (2026-12-21)".
	CertNotAfter time.Time
	CertWarning  string

	// The target's administrative mode, with its reason, since, until and
	// removal time, is Spec.Admin().

	// Weight is the target's share of traffic in percent: 0 when not
	// routable, 100 unless in its slow start, when it rises linearly to
	// 100 at SlowStartEnd.
	Weight uint32
	// SlowStartEnd is when the slow start in progress ends; zero if none.
	SlowStartEnd time.Time
	// UnhealthySince is since when the verdict has been unhealthy without
	// a break, for a target with an automatic removal; zero otherwise.
	UnhealthySince time.Time
	// Vantages, for a target probed from several vantages, are their
	// stored verdicts, its owner's first (State zero: none stored yet);
	// Verdict is then theirs (see Spec.Vantages).
	Vantages []VantageVerdict
	// Outlier, while its group's outlier detection has caught the target,
	// says how and why (GroupPolicy.Outlier); nil otherwise.
	Outlier *outlier.State
	// Owner is, with a shared registry, the member that probes the target
	// and stores its state, as this replica's view of the members has it
	// (Shared.Owner; for a target probed from several vantages, the first
	// of Vantages); empty without a shared registry.
	Owner string
}

// ProbedBy reports whether the member replica probes the target: it is
// its owner or one of its vantages. Without a shared registry (no owner)
// the one checker probes every target.
func (s *Status) ProbedBy(replica string) bool {
	return s.Owner == "" || s.Owner == replica ||
		slices.ContainsFunc(s.Vantages, func(v VantageVerdict) bool { return v.Member == replica })
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
	// multiples of the tick (counted from the zero time) and starts every
	// probe due by then, so each probe starts at most one tick after its
	// due time and probes due close together start in one wake-up. It is
	// the tick, or with a longer ScheduleTickMax its narrowest. If 0, each
	// probe starts at its own due time. At most MaxScheduleTick.
	ScheduleTick time.Duration
	// ScheduleTickMax is the widest the tick grows to while few probes
	// fall due: the tick is the time in which ScheduleBurst probes fall
	// due, within [ScheduleTick, ScheduleTickMax] (see tick.go). If not
	// above ScheduleTick (0 included), or ScheduleTick is 0, the tick stays
	// ScheduleTick. At most MaxScheduleTick: no probe starts later than
	// that after its due time.
	ScheduleTickMax time.Duration
	// ScheduleBurst is how many probes an adaptive tick aims to start at
	// once, a probe that dials a new connection (see ConnKeeper) counting
	// twice. If 0, DefaultScheduleBurst; at most MaxScheduleBurst.
	ScheduleBurst int
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
	// watchers, and MaxWatchersPerSource those of one Filter.Source. Zero
	// means no limit. Past one, Add or Watch returns a *LimitError.
	MaxTargets           int
	MaxTargetsPerGroup   int
	MaxWatchers          int
	MaxWatchersPerSource int
	// Store keeps the registry across restarts: New loads it, Add and Remove
	// write specs before they return, and state changes are stored before
	// their events reach a watcher. If nil, the registry lives in memory
	// only. The caller closes the store after Close.
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
	// Reprobe says what a connection the peer closed brings forward (see
	// ConnWatcher); the zero value reprobes at once.
	Reprobe ReprobePolicy
	// Vantage says when a vantage that probes targets with others (see
	// Spec.Vantages) is suspect; the zero value is the defaults.
	Vantage VantagePolicy
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

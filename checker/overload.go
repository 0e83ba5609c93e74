package checker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Stale is not down. A checker that cannot keep up with its own work
// hears answers too late, times out its own probes and would mark healthy
// targets down by the hundred (Envoy's main thread at ~20k endpoints). So
// the scheduler watches for signs that the checker itself is slow:
//
//   - lag: how late a probe starts (a worker takes it) against its
//     scheduled time, counted from when a slot was free for it; a sign
//     when above OverloadPolicy.MaxLag;
//   - stall: how long the Go scheduler kept runnable goroutines waiting
//     (the 99th percentile over a quarter of a second); a sign when above
//     OverloadPolicy.MaxStall;
//   - a probe that found no file descriptor free;
//   - saturation, only when OverloadPolicy.MaxWaiting is set: how many
//     probes wait for a slot.
//
// Waiting for a slot is not itself a sign: a probe's timeout starts when it
// gets its slot, so a probe that waited does not time out for it. Hung
// targets fill the slots (each holds one for its whole timeout) and make
// the others wait; had that been a sign, a blackholed rack would keep the
// checker degraded and never be marked down.
//
// At the first sign the checker is degraded (EventCheckerDegraded, and
// Overload().Degraded). While degraded, and for a probe that was scheduled
// before the checker last recovered, a probe's own timeout does not count
// toward fall: it is kept as the target's last result, marked Ignored, and
// counted in Status.IgnoredTimeouts. Explicit failures (connection refused,
// a 503) still count: they are the target's answer, not the checker's
// slowness. The checker recovers (EventCheckerRecovered) once it has seen
// no sign for OverloadPolicy.RecoverAfter, checked as results come in.
//
// The cost: while degraded, a target that really died by hanging is not
// marked down until the checker recovers. Give the checker more CPU (or
// lower the probe load) rather than turn detection off.

// DefaultOverloadRecovery is OverloadPolicy.RecoverAfter's default.
const DefaultOverloadRecovery = 10 * time.Second

// DefaultOverloadLagFloor bounds from below the lag that is a sign of
// overload when OverloadPolicy.MaxLag is 0 (a probe's interval). A probe
// that starts a few milliseconds late is the machine's scheduling jitter,
// not a checker that cannot keep up; without the floor, one target probed
// every millisecond would keep the checker degraded, so that no target's
// own timeouts counted toward fall.
const DefaultOverloadLagFloor = 100 * time.Millisecond

// DefaultOverloadStall is OverloadPolicy.MaxStall's value in pulsed
// (-overload-stall): runnable goroutines kept waiting longer than this
// leave a probe with the default 1s timeout half its time to hear its
// answer. A process that runs out of CPU for good goes far past it; a
// brief stall below it cannot fail a probe fall times in a row.
const DefaultOverloadStall = 500 * time.Millisecond

// OverloadPolicy tunes overload detection. The zero value is the defaults.
type OverloadPolicy struct {
	// MaxLag: a probe that starts more than this after its scheduled time
	// (or, when it waited for a slot, after a slot was free for it) is a
	// sign of overload. If 0, the interval the probe was scheduled at (the
	// probe missed a whole slot), and never less than
	// DefaultOverloadLagFloor. Negative: lag is no sign.
	MaxLag time.Duration
	// MaxWaiting: this many probes waiting for a concurrency slot at once
	// is a sign of overload. If 0 or negative, saturation is no sign: a
	// probe's timeout starts when it gets its slot, and hung targets that
	// fill every slot must still be marked down. Setting it brings that
	// blind spot back: while the slots stay full, no timeout counts.
	MaxWaiting int
	// MaxStall: the Go scheduler keeping runnable goroutines waiting longer
	// than this (the 99th percentile over each quarter of a second, from
	// runtime/metrics /sched/latencies:seconds) is a sign of overload: the
	// checker may hear an answer only after its probe's deadline. If 0 or
	// negative, no sampling (a Checker's default: the measure is of the
	// whole process; pulsed sets DefaultOverloadStall).
	MaxStall time.Duration
	// RecoverAfter is how long without a sign ends the overload. If 0,
	// DefaultOverloadRecovery.
	RecoverAfter time.Duration
	// Disabled turns detection off: every timeout counts.
	Disabled bool
}

func (p OverloadPolicy) validate() error {
	if p.RecoverAfter < 0 {
		return fmt.Errorf("Overload.RecoverAfter must be positive when set, got %v", p.RecoverAfter)
	}
	return nil
}

// OverloadStatus is the checker's own health: whether it keeps up.
type OverloadStatus struct {
	// Degraded is true while the checker is overloaded.
	Degraded bool
	// Since is when it became degraded; zero when not degraded.
	Since time.Time
	// Reason says what made it degraded, e.g. "a probe of web-1 started
	// 2.1s late (threshold 2s)" or "runnable goroutines waited 610ms to run
	// (threshold 500ms)".
	Reason string
	// Lag is how late the most recent probe started against its schedule.
	Lag time.Duration
	// Waiting is how many probes wait for a slot now; InFlight how many run;
	// MaxConcurrent the bound.
	Waiting, InFlight, MaxConcurrent int
	// IgnoredTimeouts counts every probe timeout not counted because the
	// checker was degraded.
	IgnoredTimeouts uint64
	// ScheduleTick is the schedule tick in force: Config.ScheduleTick, or
	// as an adaptive tick has set it (see Config.ScheduleTickMax).
	ScheduleTick time.Duration
}

// overloadState is guarded by the registry's lock.
type overloadState struct {
	degraded  bool
	since     time.Time
	reason    string
	lastSign  time.Time // when a sign was last seen
	recovered time.Time // when the checker last recovered
	ignored   uint64
}

// status returns the overload state; see Checker.Overload.
func (s *scheduler) status() OverloadStatus {
	s.reg.lock()
	defer s.reg.unlock()
	return OverloadStatus{
		Degraded:        s.ov.degraded,
		Since:           s.ov.since,
		Reason:          s.ov.reason,
		Lag:             time.Duration(s.lastLag.Load()),
		Waiting:         int(s.waiting.Load()),
		InFlight:        s.pool.running,
		MaxConcurrent:   s.pool.max,
		IgnoredTimeouts: s.ov.ignored,
		ScheduleTick:    s.tick,
	}
}

// signLocked records a sign of overload, entering the degraded state at the
// first one.
func (s *scheduler) signLocked(now time.Time, reason string) {
	if s.reg.closedLocked() {
		return
	}
	s.ov.lastSign = now
	if s.ov.degraded {
		return
	}
	s.ov.degraded, s.ov.since, s.ov.reason = true, now, reason
	s.reg.link.publishOverload(ReplicaOverload{Degraded: true, Since: now,
		Reason: "checker degraded: " + reason + "; its own probe timeouts do not count until it recovers"})
}

// checkRecoveryLocked ends the overload once no sign was seen for
// RecoverAfter and no more probes wait than the threshold allows.
func (s *scheduler) checkRecoveryLocked(now time.Time) {
	if !s.ov.degraded || now.Sub(s.ov.lastSign) < s.overload.RecoverAfter {
		return
	}
	if max := s.overload.MaxWaiting; max > 0 && int(s.waiting.Load()) >= max {
		return
	}
	s.ov.degraded, s.ov.recovered = false, now
	s.reg.lifeWakeLocked() // an automatic removal may have waited for it
	s.reg.link.publishOverload(ReplicaOverload{Since: now,
		Reason: fmt.Sprintf("checker recovered: no sign of overload for %v (degraded since %s: %s)", s.overload.RecoverAfter, s.ov.since.Format(time.RFC3339), s.ov.reason)})
	s.ov.since, s.ov.reason = time.Time{}, ""
}

// overloadedSinceLocked reports whether the checker was degraded at some
// time since due: it is now, or it recovered after due.
func (s *scheduler) overloadedSinceLocked(due time.Time) bool {
	return s.ov.degraded || (!s.ov.recovered.IsZero() && !s.ov.recovered.Before(due))
}

// NoteStall tells the checker that the process kept runnable goroutines
// waiting d to run (see liveness.SampleStalls): more than OverloadPolicy.MaxStall is
// a sign of overload.
func (c *Checker) NoteStall(d time.Duration) { c.sched.noteStall(d) }

func (s *scheduler) noteStall(d time.Duration) {
	if s.overload.Disabled || s.overload.MaxStall <= 0 || d <= s.overload.MaxStall {
		return
	}
	s.reg.lock()
	s.signLocked(s.clock.Now(), fmt.Sprintf("runnable goroutines waited %v to run (threshold %v)", d, s.overload.MaxStall))
	s.reg.unlockAndReport()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Overload with a shared registry. Each replica's scheduler judges its own
// overload, as a single checker does, and ignores its own probe timeouts
// while degraded. What it decides is published through the shared
// registry (SharedOverloads.PutOverload, kept only while the replica is a
// member) rather than streamed at once: every replica applies the
// published states in the registry's order and emits CHECKER_DEGRADED and
// CHECKER_RECOVERED with the replica's ID (PolicyChange.Replica) at the
// revision they were stored at, so every stream shows the same events,
// and DegradedReplicas lists the same replicas everywhere. A replica that
// leaves while degraded is published as recovered.

// SharedOverloads is the part of Shared that publishes each replica's
// overload state.
type SharedOverloads interface {
	// PutOverload publishes this replica's overload state; it lasts while
	// the replica is a member.
	PutOverload(ctx context.Context, o ReplicaOverload) error
	// Overloads returns the degraded replicas as Load read them.
	Overloads() []ReplicaOverload
}

// SharedOverloadPut: a replica published its overload state (Overload);
// numbered apart from the kinds in shared.go.
const SharedOverloadPut SharedChangeKind = 17

// ReplicaOverload is a replica's overload state as published.
type ReplicaOverload struct {
	// Replica is the replica's member ID; the shared registry fills it in.
	Replica string `json:"replica"`
	// Degraded is true while the replica is overloaded.
	Degraded bool `json:"degraded"`
	// Since is when it became degraded, or recovered.
	Since time.Time `json:"since"`
	// Reason says what made it degraded (or recover, or that it left).
	Reason string `json:"reason,omitempty"`
}

// overloadPub is the replication's queue of this replica's overload state
// to publish: only the latest one matters.
type overloadPub struct {
	wake chan struct{} // there is a state to publish
	done chan struct{} // closed when publishLoop has returned

	mu      sync.Mutex // protects pending
	pending *ReplicaOverload
}

// publishOverload is the replication's: it queues o, replacing any state not
// yet published. The registry calls it with its lock held.
func (rp *replication) publishOverload(o ReplicaOverload) {
	rp.ovl.mu.Lock()
	rp.ovl.pending = &o
	rp.ovl.mu.Unlock()
	select {
	case rp.ovl.wake <- struct{}{}:
	default:
	}
}

// publishLoop publishes this replica's overload state, retrying every
// second while the shared registry cannot take it, until the checker
// closes.
func (rp *replication) publishLoop() {
	defer close(rp.ovl.done)
	for {
		select {
		case <-rp.ovl.wake:
		case <-rp.closing.Done():
			return
		}
		for {
			rp.ovl.mu.Lock()
			o := rp.ovl.pending
			rp.ovl.pending = nil
			rp.ovl.mu.Unlock()
			if o == nil {
				break
			}
			ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
			err := rp.shared.PutOverload(ctx, *o)
			cancel()
			if err == nil {
				continue
			}
			rp.logger.Warn("publishing this replica's overload state failed; retrying", "error", err, "degraded", o.Degraded)
			rp.ovl.mu.Lock()
			if rp.ovl.pending == nil {
				rp.ovl.pending = o
			}
			rp.ovl.mu.Unlock()
			select {
			case <-time.After(time.Second):
			case <-rp.closing.Done():
				return
			}
		}
	}
}

// loadOverloads registers the degraded replicas the shared registry
// loaded, without events.
func (rp *replication) loadOverloads() {
	rp.reg.mu.Lock()
	defer rp.reg.mu.Unlock()
	for _, o := range rp.shared.Overloads() {
		if o.Degraded {
			rp.reg.replicasLocked()[o.Replica] = o
		}
	}
}

func (r *registry) replicasLocked() map[string]ReplicaOverload {
	if r.replicas == nil {
		r.replicas = make(map[string]ReplicaOverload)
	}
	return r.replicas
}

// applyOverloadLocked applies a replica's published overload state: a
// change of it is an event, at the revision being applied.
func (r *registry) applyOverloadLocked(o ReplicaOverload, now time.Time) {
	reps := r.replicasLocked()
	_, was := reps[o.Replica]
	kind := EventCheckerDegraded
	switch {
	case o.Degraded:
		reps[o.Replica] = o
		if was {
			return
		}
	case !was:
		return
	default:
		delete(reps, o.Replica)
		kind = EventCheckerRecovered
	}
	text := o.Reason
	if o.Replica != "" {
		text = "replica " + o.Replica + ": " + text
	}
	r.emitLocked(Event{Kind: kind, Time: now, Policy: PolicyChange{Replica: o.Replica, Text: text}})
}

// degradedReplicas returns the degraded replicas, sorted by ID.
func (r *registry) degradedReplicas() []ReplicaOverload {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ReplicaOverload, 0, len(r.replicas))
	for _, o := range r.replicas {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b ReplicaOverload) int { return cmp.Compare(a.Replica, b.Replica) })
	return out
}

// DegradedReplicas returns, with a shared registry, the replicas whose
// published state is degraded, sorted by ID: the same on every replica at
// the same revision. Without one it returns nil (see Overload).
func (c *Checker) DegradedReplicas() []ReplicaOverload {
	if c.repl == nil {
		return nil
	}
	return c.reg.degradedReplicas()
}

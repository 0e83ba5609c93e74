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
// (Status.Flapping). Policies that look across targets live in the
// registry, under its one mutex; the Machine stays a value.
//
// # Components
//
// Checker is a thin façade over components with one job each. Every
// change takes one path, alone or on replicas: decide, write, apply,
// publish.
//
//	scheduler → registry ⇄ link → committer → hub → Watcher
//	            (decide)  (write, apply)  (publish)
//
//	  - scheduler (scheduler.go, pool.go, overload.go): the due heap, the
//	    schedule loop, the probe workers and the asynchronous probe path,
//	    overload detection. It hands each result to the registry.
//	  - registry (registry.go, policy.go, group.go, flap.go, passive.go,
//	    mode.go, add.go): the targets, their Machines, the pool policies and
//	    the modes. It decides, under its lock, and writes each decision
//	    through its link; the one function that applies each kind of change
//	    (apply.go, add.go) emits the numbered events; no I/O.
//	  - link (log.go): the log every change goes through. localLink, a
//	    checker's own, on its Store: a registry of one member, which applies
//	    each write at once; replication (shared.go), a Shared registry's
//	    (etcd), which applies what every replica wrote as it comes back.
//	  - committer (committer.go): with a Store, stores the registry's state
//	    changes in batches, then publishes their events to the hub. On
//	    replicas the shared registry has stored them before they are
//	    applied, and the replication publishes them.
//	  - hub (hub.go): the history of published events and the watchers.
//	  - lifecycle (lifecycle.go): writes administrative modes and removals
//	    through the link, and acts on their deadlines.
//
// # Lock order
//
// Each lock is taken only after the ones before it, never the other way:
//
//  1. Checker.wmu: one spec or policy write through the link at a time.
//  2. registry.mu: the targets, the pools, the revision, and the
//     scheduler's heap, pool and overload state (one lock per result).
//  3. committer.mu (the store queue), or replication.mu (the proposals) or
//     guardWriter.mu (the groups to write; group.go).
//  4. hub.mu: the history and every watcher's position.
//
// The inbox of lost connections (scheduler.lost.mu, see reprobe.go) is a
// leaf: a prober's callback takes it alone, the schedule loop under 2.
//
// No lock is held while probing, storing, or while a watcher reads.
package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
	"github.com/pulsehealth/pulse/checker/probe"
)

// Checker is the registry of targets and their states. Its methods are safe
// for concurrent use. Create it with New; call Start to probe on schedule and
// Close to stop.
type Checker struct {
	clock     Clock
	defaults  Defaults
	factory   *probe.Factory     // owned, closed on Close; nil if NewProber was given
	wmu       liveness.WriteLock // serialises spec and policy writes (to the store, if any); watched (package liveness)
	reg       *registry
	sched     *scheduler
	commit    *committer   // nil without a store
	repl      *replication // nil without a shared registry
	hub       *hub
	life      *lifecycle
	closeOnce sync.Once
}

// New returns a Checker that has not started probing.
func New(cfg Config) (*Checker, error) {
	clock := cfg.Clock
	if clock == nil {
		clock = RealClock{}
	}
	defaults := cfg.Defaults
	if defaults == (Defaults{}) {
		defaults = StandardDefaults()
	}
	if err := defaults.Validate(); err != nil {
		return nil, err
	}
	policyDflt := cfg.MaxUnhealthyFraction
	switch f := policyDflt; {
	case math.IsNaN(f) || f < 0 || f > 1:
		return nil, fmt.Errorf("MaxUnhealthyFraction must be in [0, 1], got %v", f)
	case f == 0:
		policyDflt = 1
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	vpolicy, err := cfg.Vantage.withDefaults()
	if err != nil {
		return nil, err
	}
	reg := newRegistry(cfg, clock, defaults, logger, policyDflt)
	reg.vpolicy = vpolicy
	sched, err := newScheduler(reg, cfg, clock)
	if err != nil {
		return nil, err
	}
	c := &Checker{clock: clock, defaults: defaults, reg: reg, sched: sched}
	c.wmu.Init(clock.Now)
	newProber := cfg.NewProber
	if newProber == nil {
		c.factory = probe.NewFactory()
		newProber = func(s probe.Spec) (Prober, error) { return c.factory.New(s) }
	}
	reg.use(sched, newProber)
	if cfg.Shared != nil {
		if cfg.Store != nil {
			return nil, errors.New("a checker takes a Store or a Shared registry, not both")
		}
		if c.repl, err = newReplication(cfg.Shared, reg, logger, sched.closing()); err != nil {
			c.closeProbers()
			return nil, err
		}
	}
	if cfg.Store != nil {
		reg.link.(*localLink).loading = true // its groups are decided once it is all loaded
		if err := loadStore(cfg.Store, reg); err != nil {
			c.closeProbers()
			return nil, err
		}
	}
	size := cfg.HistorySize
	if size <= 0 {
		size = 10000
	}
	c.hub = newHub(size, reg.revision(), cfg.MaxWatchers, cfg.MaxWatchersPerSource)
	if cfg.Store != nil {
		c.commit = newCommitter(cfg.Store, c.hub, reg.revision(), clock, logger, nil)
		ll := reg.link.(*localLink)
		ll.store, ll.commit = cfg.Store, c.commit
		reg.emitTo(ll.sink) // published once stored
		ll.resume()
	} else {
		reg.emitTo(func(e Event) { c.hub.publish(e) })
	}
	if c.repl != nil {
		reg.emitTo(c.repl.queueEvent) // published by revision: see apply
		c.repl.start(c.hub)
	}
	c.life = newLifecycle(reg, clock, logger, &c.wmu)
	return c, nil
}

// Defaults returns the defaults that fill unset Spec fields.
func (c *Checker) Defaults() Defaults { return c.defaults }

// Add registers a target, or replaces the spec of the target of that name.
// Replacing keeps the state and streaks, and a probe result
// in flight for a replaced probe spec is discarded. created reports whether
// the target is new. A bad spec returns a *FieldError.
func (c *Checker) Add(spec Spec) (st Status, created bool, err error) {
	spec = spec.WithDefaults(c.defaults)
	if err := c.validate(spec); err != nil {
		return Status{}, false, err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	res := c.reg.addMany([]Spec{spec})[0]
	return res.Status, res.Created, res.Err
}

// validate checks a spec with its defaults, and that this checker can
// probe it as it asks: from several vantages only with a shared registry
// that assigns them.
func (c *Checker) validate(spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	return c.checkVantages(int(spec.Vantages))
}

// checkVantages refuses more than one vantage without a shared registry.
func (c *Checker) checkVantages(k int) error {
	if k > 1 && c.reg.vantages == nil {
		why := "a single pulsed is one vantage: probing from several needs replicas sharing a registry on etcd (pulsed -registry etcd)"
		return &FieldError{"vantages", fmt.Sprintf("must be at most 1 here (%s), got %d", why, k)}
	}
	return nil
}

// MaxAddMany bounds the specs of one AddMany call.
const MaxAddMany = 10000

// AddMany is Add for many specs at once: each is completed with the
// defaults, validated and registered as Add would, and refused alone (its
// AddResult's Err, as Add returns it) without keeping the others from
// being registered. The specs registered or changed are made durable
// together before AddMany returns, in one transaction of the store. Each new target has its own ADDED event, at
// consecutive revisions.
//
// A name given twice is refused the second time, with a *FieldError on
// "name"; more than MaxAddMany specs return a *FieldError and change
// nothing. With a shared registry the specs are written several to a
// transaction (one revision each).
func (c *Checker) AddMany(specs []Spec) ([]AddResult, error) {
	if len(specs) > MaxAddMany {
		return nil, &FieldError{"targets", fmt.Sprintf("must be at most %d per call, got %d: send them in several calls", MaxAddMany, len(specs))}
	}
	res := make([]AddResult, len(specs))
	valid := make([]Spec, 0, len(specs))
	at := make([]int, 0, len(specs)) // valid[k] is specs[at[k]]
	seen := make(map[string]struct{}, len(specs))
	for i, spec := range specs {
		spec = spec.WithDefaults(c.defaults)
		if err := c.validate(spec); err != nil {
			res[i].Err = err
			continue
		}
		if _, dup := seen[spec.Name]; dup {
			res[i].Err = &FieldError{"name", fmt.Sprintf("%q appears more than once in the call; the first is the one registered", spec.Name)}
			continue
		}
		seen[spec.Name] = struct{}{}
		valid = append(valid, spec)
		at = append(at, i)
	}
	// With wmu held no other write changes the targets between the check
	// of the specs and their write.
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for k, r := range c.reg.addMany(valid) {
		res[at[k]] = r
	}
	return res, nil
}

// Remove unregisters a target and reports whether it existed. A result that
// arrives for it afterwards is discarded. With a store, the removal is
// durable when Remove returns; a failure to store it returns an error
// wrapping ErrStore and removes nothing.
func (c *Checker) Remove(name string) (bool, error) { return c.life.remove(name, nil) }

// Drain puts a target in ModeDraining and removes it after drainFor (at
// least MinDrainFor and at most MaxDrainFor, else a *FieldError): Status.Spec.Admin().RemoveAt says when.
// With a store the drain is durable when Drain returns. Errors as SetMode.
func (c *Checker) Drain(name string, drainFor time.Duration) (Status, error) {
	a, err := drainAdmin(drainFor, c.clock.Now())
	if err != nil {
		return Status{}, err
	}
	sts, err := c.life.set(modeSel{name: name}, a, nil)
	if err != nil || len(sts) == 0 {
		return Status{}, cmp.Or(err, fmt.Errorf("%w %q", ErrUnknownTarget, name))
	}
	return sts[0], nil
}

// SetMode sets the administrative mode of one target or of every target
// of a group (see Mode), and returns their statuses after it, sorted by
// name. With a store the modes are durable when SetMode returns; a
// failure to store them returns an error wrapping ErrStore. Errors: a
// *FieldError for a bad request, ErrUnknownTarget (a group without
// targets too), ErrQuarantined, ErrClosed.
func (c *Checker) SetMode(req ModeRequest) ([]Status, error) {
	a, err := req.admin(c.clock.Now())
	if err != nil {
		return nil, err
	}
	return c.life.set(modeSel{name: req.Target, group: req.Group}, a, nil)
}

// Status returns a snapshot of one target, or an error wrapping
// ErrUnknownTarget.
func (c *Checker) Status(name string) (Status, error) { return c.reg.status(name) }

// List returns every target's status sorted by name, and the revision they
// are at; a non-empty group keeps only that group's targets. With a store,
// List returns once that revision is stored and published, so a watch from
// it can start at once.
func (c *Checker) List(group string) ([]Status, uint64) {
	list, rev, _ := c.ListContext(context.Background(), group) // with a store, the committer may not have published rev yet
	return list, rev
}

// Healthy returns the names of routable targets sorted by name (suspect
// targets count as routable); a
// non-empty group keeps only that group's targets.
func (c *Checker) Healthy(group string) []string { return c.reg.healthy(group) }

// GroupHealth counts a group's targets and how many of them are routable.
// A group exists while total > 0.
func (c *Checker) GroupHealth(group string) (routable, total int) { return c.reg.groupHealth(group) }

// Watch returns a watcher of the events matching f.
//
// With start 0 it begins with a snapshot: Snapshot returns every matching
// target's status at the current revision R, and Next returns the events
// after R. With start N > 0 Next returns the events after N; N older than the
// history returns a *CompactedError, N ahead of the current revision a
// *FutureRevisionError. If the checker is closed, Watch returns ErrClosed.
func (c *Checker) Watch(f Filter, start uint64) (*Watcher, error) {
	w := c.hub.newWatcher(f)
	// The registry holds its lock from the snapshot until the watcher is
	// in place: no event after the snapshot's revision is missed.
	err := c.reg.watch(w.matchesTarget, start, func(snap []Status, start uint64, snapshot bool) error {
		return c.hub.watch(w, snap, start, snapshot)
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Watchers returns how many watchers are live.
func (c *Checker) Watchers() int { return c.hub.count() }

// Revision returns the revision of the newest published event: a watch
// can resume from it.
func (c *Checker) Revision() uint64 { return c.hub.revision() }

// ReportOutcome feeds a passive outcome to the named target's machine,
// exactly as a probe result would be (rise, fall, the model and the pool
// policies all apply), when its spec has PassiveOutcomes. Outcomes are
// rate-limited per target by a token bucket of Spec.PassiveRate a second
// with a burst of as many: one over the rate is dropped, counted in
// Status.PassiveLimited, and ReportOutcome returns counted false and no
// error. A passive result does not go to the Observer (which sees probes).
//
// Errors: a *FieldError for a bad outcome, ErrUnknownTarget, an error
// wrapping ErrPassiveDisabled, ErrClosed. With a shared registry any
// replica accepts an outcome and the target's owner applies it (see
// passive.go; errors also ErrStore, ErrUncertain, ErrLagging).
func (c *Checker) ReportOutcome(name string, o Outcome) (st Status, counted bool, err error) {
	if err := o.Validate(); err != nil {
		return Status{}, false, err
	}
	return c.reg.link.reportOutcome(name, o)
}

// SetGroupPolicy sets a group's policy; the zero GroupPolicy clears it, so
// the defaults apply again. The group need not have targets yet. Raising
// the threshold releases held targets at once, in name order; lowering it
// marks no target unhealthy by itself, it only holds later transitions.
//
// The empty group is not a pool (a *FieldError on "group"), nor is a
// fraction outside (0, 1] valid (a *FieldError on "max_unhealthy_fraction").
// With a Store the policy is durable when SetGroupPolicy returns (an
// error wrapping ErrStore changes nothing); without one, policies live in
// memory only. With a
// shared registry the policy is stored there, for every replica, and
// applied when SetGroupPolicy returns.
func (c *Checker) SetGroupPolicy(group string, p GroupPolicy) (GroupStatus, error) {
	if err := checkGroupPolicy(group, p); err != nil {
		return GroupStatus{}, err
	}
	if err := c.checkVantages(p.Vantages); err != nil {
		return GroupStatus{}, err
	}
	if p.Objective > 0 && p.ObjectiveWindow == 0 {
		p.ObjectiveWindow = MaxObjectiveWindow
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.reg.link.putPolicy(group, p); err != nil {
		return GroupStatus{}, err
	}
	return c.reg.groupStatusAndDrop(group), nil
}

// Groups returns the status of every named group that has targets or a
// policy, sorted by name; a non-empty group returns only that one (none if
// it has neither).
func (c *Checker) Groups(group string) []GroupStatus { return c.reg.groups(group) }

// Start begins probing every target on its interval, in the background,
// until Close. Calling it more than once has no further effect. See
// scheduler.start for how targets are scheduled.
func (c *Checker) Start() {
	c.sched.start()
	c.life.start(c.sched.closing())
}

// Scheduled is closed once the scheduler has made its first pass over the
// registry: every target loaded or registered before Start has its first
// probe scheduled. Readiness checks wait for it.
func (c *Checker) Scheduled() <-chan struct{} { return c.sched.scheduledCh() }

// Overload returns the checker's overload state, for status pages and
// metrics. It is safe for concurrent use.
func (c *Checker) Overload() OverloadStatus { return c.sched.status() }

// RunRound probes every target once, concurrently, each under its own
// timeout, then applies the results in name order under the lock and returns
// the round's transitions in name order. Targets that
// already have a probe in flight are skipped. One target's panic or timeout
// never stops the others. The transitions include those the results cause
// in other targets (a panic hold released). The probes share the
// scheduler's workers and its MaxConcurrentProbes bound. Close cuts a
// round's probes short; the round then applies nothing.
func (c *Checker) RunRound(ctx context.Context) []Transition { return c.sched.runRound(ctx) }

// StoreErr returns the last error storing a change (a state change, a
// spec, a removal, a policy), or nil once a write of any kind succeeds
// again (states stored after a refused spec write clear it);
// with a shared registry, the last error writing to it (see
// SetSharedErr). ListTargets, the status page and pulse_registry_error
// report it.
func (c *Checker) StoreErr() error {
	return c.reg.link.err()
}

// Close stops the scheduler, waits for probes in flight, ends every
// watcher with ErrClosed and closes every prober. It is idempotent.
func (c *Checker) Close() error {
	c.closeOnce.Do(func() {
		c.sched.stop() // cancels the scheduler's context, which ends the replication's proposer
		c.life.wait()  // and the lifecycle's loop: no timed change after this
		if c.commit != nil {
			c.commit.close() // it stores what is queued, then stops
		}
		if c.repl != nil {
			c.repl.wait()
		}
		c.reg.close(c.hub.close)
		c.closeProbers()
	})
	return nil
}

// closeProbers closes every target's prober and the factory the checker
// owns.
func (c *Checker) closeProbers() {
	c.reg.closeProbers()
	if c.factory != nil {
		c.factory.Close()
	}
}

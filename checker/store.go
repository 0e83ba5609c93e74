package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Store keeps the registry across restarts. The checker owns the contract;
// package boltstore implements it on an embedded bbolt file, and another
// implementation can put the registry elsewhere (etcd, for several pulsed
// replicas).
//
// Specs are written by Add and Remove and must be durable when the method
// returns. States are written by the checker's committer, in revision
// order and in batches; CommitStates must apply a batch atomically and
// durably. A Store is used by one Checker at a time; calls may come from
// several goroutines.
type Store interface {
	// Load returns every stored target and the revision of the last commit
	// (0 for an empty store).
	Load() ([]StoredTarget, uint64, error)
	// PutSpec stores a target's spec, replacing any earlier one.
	PutSpec(spec Spec) error
	// DeleteTarget removes a target's spec and state.
	DeleteTarget(name string) error
	// CommitStates stores states, deletes the states of the targets named in
	// deleted, and records rev as the store's revision, in one transaction.
	CommitStates(states []StoredState, deleted []string, rev uint64) error
}

// PolicyStore is a Store that also keeps group policies. If Config.Store
// implements it, New loads the policies and SetGroupPolicy stores a policy
// (durably) before it returns; with another Store, group policies live in
// memory only. Panic holds and flapping are never stored: after a restart
// they start afresh from the carried-over states.
type PolicyStore interface {
	Store
	// LoadGroupPolicies returns every stored group policy by group.
	LoadGroupPolicies() (map[string]GroupPolicy, error)
	// PutGroupPolicy stores a group's policy; the zero GroupPolicy deletes
	// it.
	PutGroupPolicy(group string, p GroupPolicy) error
}

// StoredTarget is a target as a Store keeps it.
type StoredTarget struct {
	Spec Spec
	// State is the last stored state; StateUnknown if none was stored yet.
	State          State
	LastTransition time.Time
	// Err, when set, says why the record could not be read; Spec then holds
	// at least the name. The checker quarantines such a target.
	Err error
}

// StoredState is a target's state as the committer writes it.
type StoredState struct {
	Name           string
	State          State
	LastTransition time.Time
}

// ErrStore wraps a failure to store a change: the change was not made.
var ErrStore = errors.New("could not store the change")

// load registers the stored targets, with their stored states carried
// over, and returns the stored revision.
func (c *Checker) load() (uint64, error) {
	targets, rev, err := c.store.Load()
	if err != nil {
		return 0, fmt.Errorf("load the store: %w", err)
	}
	for _, st := range targets {
		spec := st.Spec.WithDefaults(c.defaults)
		err := st.Err
		if err == nil {
			err = spec.Validate()
		}
		var p Prober
		if err == nil {
			p, err = c.newProber(spec.Probe)
		}
		if err != nil {
			// A record that today's rules refuse (a stricter bound or egress
			// policy, a probe kind this version does not know, damaged bytes)
			// must neither keep pulsed from starting nor be dropped silently:
			// it is listed, quarantined with the reason, never probed, until
			// AddTarget fixes it or RemoveTarget removes it.
			c.logger.Warn("stored target quarantined: it is listed but not probed until fixed or removed", "target", st.Spec.Name, "error", err)
			c.targets[st.Spec.Name] = newQuarantined(st.Spec, err)
			continue
		}
		state := st.State
		if state == StateUnknown {
			state = spec.InitialState
		}
		t := newTarget(spec, p, state)
		t.lastTr = st.LastTransition
		t.carried = true
		c.targets[spec.Name] = t
		c.joinPoolLocked(t)
		c.sched.addLocked(t, c.clock.Now().Add(firstDelay(spec.Name, spec.Interval)))
	}
	if ps, ok := c.store.(PolicyStore); ok {
		policies, err := ps.LoadGroupPolicies()
		if err != nil {
			return 0, fmt.Errorf("load the group policies: %w", err)
		}
		for group, p := range policies {
			if err := ValidateGroup(group); err != nil || group == "" {
				return 0, fmt.Errorf("stored policy of group %q: bad group name", group)
			}
			if err := ValidateFraction(p.MaxUnhealthyFraction); err != nil {
				return 0, fmt.Errorf("stored policy of group %q: max_unhealthy_fraction %w", group, err)
			}
			c.poolLocked(group).policy = p
		}
	}
	return rev, nil
}

func (c *Checker) setStoreErr(err error) { c.storeErr.set(err) }

// StoreErr returns the last error storing state changes, or nil once a
// commit succeeds again. Readiness checks report it.
func (c *Checker) StoreErr() error {
	if c.commit != nil {
		return c.commit.err()
	}
	return c.storeErr.get()
}

// errBox holds an error for concurrent use.
type errBox struct {
	mu  sync.Mutex // protects err
	err error
}

func (b *errBox) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

func (b *errBox) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// quarantine stands in for the prober of a stored target that today's
// rules refuse. Such a target is never scheduled, belongs to no pool and is
// never routable; its status says why (Status.Quarantined).
type quarantine struct{ reason string }

func (q quarantine) Probe(context.Context) error { return errors.New(q.reason) }

// newQuarantined returns the quarantined target for a stored spec refused
// with err.
func newQuarantined(spec Spec, err error) *target {
	t := newTarget(spec, quarantine{err.Error()}, StateUnhealthy)
	t.index = -1 // in no due heap
	t.carried = true
	return t
}

// quarantined returns why t is quarantined, or "" if it is not.
func (t *target) quarantined() string {
	if q, ok := t.prober.(quarantine); ok {
		return q.reason
	}
	return ""
}

package checker

import (
	"context"
	"errors"
	"fmt"
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
	// PutSpecs stores specs, replacing earlier ones, all or none, in one
	// durable transaction: AddMany and SetMode on a group change their
	// targets together or not at all.
	PutSpecs(specs []Spec) error
	// DeleteTarget removes a target's spec and state.
	DeleteTarget(name string) error
	// CommitStates stores states, deletes the states of the targets named in
	// deleted, and records rev as the store's revision, in one transaction.
	CommitStates(states []StoredState, deleted []string, rev uint64) error
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
	// Flap is the flap log stored with the state, nil if none; Held, the
	// group's panic threshold hold (see StoredState).
	Flap *FlapRecord
	Held bool
	// Err, when set, says why the record could not be read; Spec then holds
	// at least the name. The checker quarantines such a target.
	Err error
}

// StoredState is a target's state record as the committer writes it:
// what a restart carries over.
type StoredState struct {
	Name           string
	State          State
	LastTransition time.Time
	// Flap is the target's flap log and verdict (nil: none yet): a
	// restarted pulsed keeps flapping targets damped, and a target that a
	// mode or a hold kept from its verdict takes that verdict again.
	Flap *FlapRecord
	// Held is set while the group's panic threshold holds the target
	// routable against its verdict.
	Held bool
}

// ErrStore wraps a failure to store a change: the change was not made.
var ErrStore = errors.New("could not store the change")

// loadStore registers what store holds in reg: the targets, with their
// stored states carried over, the group policies, and
// the revision, from which revisions go on (a client that resumes across
// the restart gets a correct, empty, replay).
func loadStore(store Store, reg *registry) error {
	targets, rev, err := store.Load()
	if err != nil {
		return fmt.Errorf("load the store: %w", err)
	}
	policies, err := store.LoadGroupPolicies()
	if err != nil {
		return fmt.Errorf("load the group policies: %w", err)
	}
	if err := reg.load(targets, policies); err != nil {
		return err
	}
	if rev != 0 {
		reg.setRevision(rev)
	}
	return nil
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

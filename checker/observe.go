package checker

import (
	"context"
	"time"
)

// RemovalObserver is an Observer that is also told when a target is
// removed, so that what it keeps by name (a status page's recent results)
// goes with the target at once rather than outliving it into a new target
// of the same name. ObserveRemoval is called after the removal, outside the
// checker's locks, with the removed target's spec; like the Observer's
// other methods it must not block or call the Checker. A probe that was in
// flight at the removal may still be observed after it.
type RemovalObserver interface {
	Observer
	ObserveRemoval(spec Spec)
}

// PolicyObserver is an Observer that is also told of policy events: a
// group's panic, a target's flapping, a certificate near its expiry, a
// target removed by itself, the checker's overload. ObservePolicy is
// called outside the checker's locks, in the order of the events; like
// the Observer's other methods it must not block or call the Checker.
type PolicyObserver interface {
	Observer
	ObservePolicy(kind EventKind, at time.Time, p PolicyChange)
}

// ModeObserver is an Observer that is also told of every change of a
// target's mode (SetMode, a drain, an until reached), with the spec after
// it (its Admin gives the mode, the reason and since when) and the mode
// before. ObserveMode is called outside the checker's locks; like the
// Observer's other methods it must not block or call the Checker.
type ModeObserver interface {
	Observer
	ObserveMode(spec Spec, from Mode, at time.Time)
}

// MembersObserver is an Observer that is also told, with a shared
// registry, when the live replicas changed (one joined or left): targets
// may have moved to other owners and vantages, which Status now names.
// ObserveMembers is called once the checker has applied the change,
// outside its locks; like the Observer's other methods it must not block
// or call the Checker.
type MembersObserver interface {
	Observer
	ObserveMembers()
}

// reportMembers tells a MembersObserver that the members changed.
func (r *registry) reportMembers() {
	if mo, ok := r.observer.(MembersObserver); ok {
		mo.ObserveMembers()
	}
}

// reportMode tells a ModeObserver of a target's mode change.
func (r *registry) reportMode(e Event) {
	if mo, ok := r.observer.(ModeObserver); ok {
		mo.ObserveMode(e.Status.Spec, e.Mode.From, e.Time)
	}
}

// reported says which events the registry reports (logs and observes)
// once its lock is released: transitions, policy events, and removals
// when its observer wants them.
func (r *registry) reported(k EventKind) bool {
	if k == EventTransition || k.IsPolicy() {
		return true
	}
	if _, ok := r.observer.(ModeObserver); ok && k == EventModeChanged {
		return true
	}
	_, ok := r.observer.(RemovalObserver)
	return k == EventRemoved && ok
}

// reportRemoval tells a RemovalObserver of a removed target.
func (r *registry) reportRemoval(e Event) {
	if ro, ok := r.observer.(RemovalObserver); ok {
		ro.ObserveRemoval(e.Status.Spec)
	}
}

// ListNow is List without its wait: it returns every target's status,
// sorted by name, and the registry's revision, at once, even while a Store
// cannot be written (List waits until the revision is stored and
// published, which a failing store holds back). It is for status pages and
// metrics, which must show that failure; a watch should start from List's
// revision, which ListNow's may be ahead of.
func (c *Checker) ListNow(group string) ([]Status, uint64) { return c.reg.list(group) }

// ListContext is List bounded by ctx: if ctx ends before the revision is
// stored and published (a Store that cannot write holds it back), it
// returns the list and revision with ctx's error, and the caller must not
// offer that revision as a point to resume a watch from.
func (c *Checker) ListContext(ctx context.Context, group string) ([]Status, uint64, error) {
	list, rev := c.reg.list(group)
	if err := c.hub.wait(ctx, rev, nil); err != nil {
		return list, rev, err
	}
	return list, rev, nil
}

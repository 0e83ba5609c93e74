package checker

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// link is the log every change of the registry is written through, and
// that applies it. Two implement it: localLink, the log of a checker
// alone, on its Store (a registry of one member, which applies each write
// at once), and replication, a Shared registry's (etcd's), which applies
// what every replica wrote as it comes back through ApplyShared. Every
// change takes the same four steps either way:
//
//   - decide: the registry decides, under its lock, from its view;
//   - write: the decision goes through the link;
//   - apply: one function applies it (putSpecLocked, deleteLocked,
//     applyRecordLocked, applyOutcomeLocked, applyOverloadLocked,
//     policyPutLocked), on every member alike;
//   - publish: its events reach watchers once it is durable (the
//     committer alone; on replicas, once the shared registry returns it).
type link interface {
	// The registry's decisions, with its lock held:

	// owns reports whether this member probes the named target.
	owns(name string) bool
	// owner names the member that probes the named target, for its
	// status; "" for the only member.
	owner(name string) string
	// propose writes a target's state record.
	propose(p proposal)
	// markGroup asks for a group's decisions to be written again.
	markGroup(group string)
	// publishOverload writes this member's overload state.
	publishOverload(o ReplicaOverload)

	// The callers' changes, without the registry's lock; each is durable
	// and applied when it returns:

	// putSpecs writes specs, in as few transactions as the log allows,
	// and returns how many, from the first, it stored: those are applied
	// even when err is not nil. It takes probers (nil, or one per spec,
	// nil where the target's own is kept) and closes those it does not
	// keep.
	putSpecs(specs []Spec, probers []Prober) (stored int, err error)
	// deleteTarget removes a target; reason, if set, says why it expired.
	deleteTarget(name, reason string) (existed bool, err error)
	// putPolicy stores a group's policy.
	putPolicy(group string, p GroupPolicy) error
	// reportOutcome takes a passive outcome for the named target's owner.
	reportOutcome(name string, o Outcome) (Status, bool, error)
	// announce publishes an outside component's event.
	announce(a Announcement) error
	// err returns the last error writing to the log, nil once a write
	// succeeds again.
	err() error

	// Outlier detection (outlier.go), without the registry's lock:

	// judgesGroup reports whether this member judges group's outliers.
	judgesGroup(group string) bool
	// putSamples stores this member's samples of group's targets.
	putSamples(group string, samples []outlier.Sample) error
	// putOutliers stores a judge's record of a group.
	putOutliers(rec outlier.Record) error
}

// localLink is the log of a checker that shares its registry with no one:
// a registry of one member, on its Store (none: memory only). Its
// decisions go through it exactly as they go through a shared registry (a
// state or flap record proposed, a group's decisions written together, an
// overload published), and it applies each at once, under the registry's
// lock, as the shared registry's write would come back. The committer
// makes the records it applied (state, flap log, hold) durable, in
// batches, before their events are published (see committer.go); specs,
// removals and policies are durable in the store before they are applied.
type localLink struct {
	reg    *registry
	store  Store      // nil: memory only
	commit *committer // nil without a store
	// dirty are the groups to decide again; flushing is set while they
	// are, so that a decision that marks its own group again is taken up
	// by the same loop. Both guarded by the registry's lock.
	dirty    map[string]struct{}
	flushing bool
	// loading is set while the store is loaded: a group is decided once
	// all of it is loaded (resume), not from the part loaded so far.
	loading bool
}

func newLocalLink(reg *registry) *localLink {
	return &localLink{reg: reg, dirty: make(map[string]struct{})}
}

// owns: the only member probes every target.
func (*localLink) owns(string) bool { return true }

// owner: the only member is not named.
func (*localLink) owner(string) string { return "" }

// propose applies a state record at once, and stores it.
func (l *localLink) propose(p proposal) {
	if p.verdict != nil {
		return // one member is one vantage: it stores no verdicts
	}
	l.reg.applyRecordLocked(p.p.Name, p.p.State, l.reg.rev)
	l.storeLocked(p.p.Name)
}

// sink takes the registry's events, with its lock held: each goes to the
// committer with the record it changes, to be published once stored.
func (l *localLink) sink(e Event) {
	w, ok := writeOf(e)
	if ok && !w.deleted {
		w.st = recordOf(l.reg.targets[w.st.Name], w.st)
	}
	l.commit.add(e, w, ok)
}

// storeLocked stores the named target's record as applied: a verdict or a
// hold can change without an event.
func (l *localLink) storeLocked(name string) {
	if l.commit == nil {
		return
	}
	if t := l.reg.targets[name]; t != nil {
		l.commit.write(recordOf(t, StoredState{Name: name, State: t.state, LastTransition: t.lastTr}))
	}
}

// recordOf completes st, t's state, with its flap log and hold; t may be
// nil (removed meanwhile).
func recordOf(t *target, st StoredState) StoredState {
	if t != nil {
		st.Flap, st.Held = t.storedFlap(), t.held
	}
	return st
}

// publishOverload applies this checker's overload state at once.
func (l *localLink) publishOverload(o ReplicaOverload) {
	l.reg.applyOverloadLocked(o, o.Since)
}

// markGroup decides the group's states again, now: its decisions are
// applied before the call that led to them returns.
func (l *localLink) markGroup(group string) {
	l.dirty[group] = struct{}{}
	if l.flushing || l.loading {
		return
	}
	l.flushing = true
	defer func() { l.flushing = false }()
	r := l.reg
	// Every round applies at least one write or ends the loop: a write
	// never undoes itself, so the loop ends; the bound only guards
	// against a decision that would.
	for range maxGroupRounds {
		if len(l.dirty) == 0 {
			return
		}
		groups := make([]string, 0, len(l.dirty))
		for g := range l.dirty {
			groups = append(groups, g)
		}
		clear(l.dirty)
		slices.Sort(groups)
		for _, g := range groups {
			l.decideLocked(g, r.clock.Now())
		}
	}
	r.logger.Error("a group's decisions did not settle; they are taken up again at its next change", "groups", len(l.dirty))
	clear(l.dirty)
}

// resume decides the groups marked while the store was loading, once the
// registry holds all of it and its events have a sink: a hold stored with
// a state is kept if the group still wants it, and released otherwise.
func (l *localLink) resume() {
	r := l.reg
	r.mu.Lock()
	defer r.unlockAndReport()
	l.loading = false
	for g := range l.dirty {
		l.markGroup(g) // decides every dirty group
		return
	}
}

// maxGroupRounds bounds the rounds of one markGroup.
const maxGroupRounds = 1000

// decideLocked makes and applies the group's decisions, as a group write
// and its guard's change would be applied on replicas.
func (l *localLink) decideLocked(group string, now time.Time) {
	r := l.reg
	p := r.pools[group]
	if p == nil {
		return
	}
	if gp, ok := r.buildGroupLocked(group, now, math.MaxInt); ok { // no transaction to fit in
		for _, w := range gp.Writes {
			r.applyRecordLocked(w.Name, w.State, r.rev)
			l.storeLocked(w.Name)
		}
	}
	r.announcePanicLocked(group, p, now)
}

// putSpecs stores specs in the store, in one transaction, then applies
// them, addBatch to a hold of the registry's lock.
func (l *localLink) putSpecs(specs []Spec, probers []Prober) (int, error) {
	n, err := len(specs), error(nil)
	if l.store != nil {
		n, err = putSpecs(l.store, specs)
		if err = l.wrote(err); err != nil {
			err = fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	r := l.reg
	var unused []Prober
	for lo := 0; lo < len(specs); lo += addBatch {
		r.mu.Lock()
		now := r.clock.Now()
		for i := lo; i < min(lo+addBatch, len(specs)); i++ {
			p := proberAt(probers, i)
			if i < n && !r.closed {
				_, _, p = r.putSpecLocked(specs[i], p, nil, 0, now, now)
			}
			unused = append(unused, p)
		}
		r.unlockAndReport()
		for _, p := range unused {
			closeProber(p)
		}
		unused = unused[:0]
	}
	return n, err
}

// proberAt returns probers[i], nil if probers is nil.
func proberAt(probers []Prober, i int) Prober {
	if probers == nil {
		return nil
	}
	return probers[i]
}

// deleteTarget removes the target from the store, then applies it.
func (l *localLink) deleteTarget(name, reason string) (bool, error) {
	if l.store != nil {
		if err := l.wrote(l.store.DeleteTarget(name)); err != nil {
			return false, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	r := l.reg
	r.mu.Lock()
	t := r.deleteLocked(name, r.clock.Now(), reason)
	r.unlockAndReport()
	if t == nil {
		return false, nil
	}
	closeProber(t.prober)
	return true, nil
}

// putPolicy stores the policy (without a store it lives in memory only),
// then applies it.
func (l *localLink) putPolicy(group string, p GroupPolicy) error {
	if l.store != nil {
		if err := l.wrote(l.store.PutGroupPolicy(group, p)); err != nil {
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	r := l.reg
	r.mu.Lock()
	defer r.unlockAndReport()
	if r.closed {
		return ErrClosed
	}
	r.policyPutLocked(group, p)
	return nil
}

// reportOutcome takes a token from the target's bucket and applies the
// outcome at once.
func (l *localLink) reportOutcome(name string, o Outcome) (Status, bool, error) {
	return l.reg.reportOutcome(name, o)
}

// announce applies the event at once.
func (l *localLink) announce(a Announcement) error { return l.reg.announceLocal(a) }

// judgesGroup: the only member judges every group.
func (*localLink) judgesGroup(string) bool { return true }

// putSamples applies the samples at once: they are not stored, as a
// restart starts sampling afresh.
func (l *localLink) putSamples(group string, samples []outlier.Sample) error {
	l.reg.mu.Lock()
	defer l.reg.mu.Unlock()
	l.reg.applySamplesLocked(group, samples)
	return nil
}

// putOutliers applies the record at once. It is not stored: after a
// restart the group is judged afresh, and its outliers found again.
func (l *localLink) putOutliers(rec outlier.Record) error {
	r := l.reg
	r.mu.Lock()
	defer r.unlockAndReport()
	if r.closed {
		return ErrClosed
	}
	r.applyOutliersLocked(rec, r.clock.Now(), true)
	return nil
}

// wrote records the outcome of a write to the store, and logs a failure:
// the caller's error alone would leave the operator unaware.
func (l *localLink) wrote(err error) error {
	l.commit.wrote(err)
	if err != nil {
		l.reg.logger.Warn("the store refused a write; the change was not made", "error", err)
	}
	return err
}

// err is the store's last error, as the committer has it: that of the
// state changes it cannot store, else of the last write if none has
// succeeded since.
func (l *localLink) err() error {
	if l.commit == nil {
		return nil // memory only: nothing to fail
	}
	return l.commit.err()
}

package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The panic threshold across replicas: the group guard.
//
// A group's targets are owned by different replicas, yet the threshold
// counts the whole group. A Shared registry that is also a SharedGroups
// keeps, per group, a guard: a key that every change of a group target's
// routability (to or from unhealthy), every hold and release, every target
// joining or leaving the group and every change of the group's policy
// rewrites, in the same transaction as the change, and that every group
// write requires to be at the revision its writer decided on. So:
//
//	Invariant: a group write commits only if the group's states, size and
//	policy at its commit revision are those its writer counted. Hence a
//	move to unhealthy commits only if the group then has at most
//	maxUnhealthy(fraction, size) unhealthy targets: the unhealthy count
//	of a group never rises past its bound, at any revision, whatever the
//	interleaving of the owners' decisions. (It can exceed the bound only
//	by the group shrinking, or the fraction being lowered, around targets
//	already unhealthy: those are never marked healthy for it, as with one
//	pulsed.)
//
// A target moved into a group (or between groups) has its state written
// again in the move's transaction (etcdreg's PutSpec), so that a state
// write decided before the move, outside the guard (Shared.ProposeState,
// for an ungrouped target), is refused by its state revision.
//
// Two owners deciding from the same view cannot both take the last slot:
// the second's guard comparison fails, and it decides again once it has
// applied the first's write.
//
// A hold is stored with the target's state (SharedState.Held: routable,
// held) in a group write, so the holds survive their owner's crash and an
// ownership move. Each replica writes, per group, one transaction at a
// time, with all its decisions for that group (see buildGroupLocked): its
// own targets' recoveries, then the group's held targets released in name
// order (whoever owns them: the guard proves they are still held), then
// its own targets that fail, unhealthy while there is room, held after.
// Every replica derives PANIC_ENTERED and PANIC_EXITED from the held set
// when it applies the guard's change, which comes last in the transaction:
// the events appear once, at the same revision, on every replica.
//
// A group's stored threshold (PutGroupPolicy) is the same for every
// replica; a group without one takes each replica's
// Config.MaxUnhealthyFraction, which must then be the same on every
// replica for them to agree on the bound.

// SharedGroups is the part of Shared that keeps group guards and
// policies, with which replicas enforce the panic threshold together. Its
// methods are called without the checker's locks.
type SharedGroups interface {
	// ProposeGroup writes a group's states in one transaction that also
	// rewrites the group's guard, if the guard is still at g.GuardRev, this
	// replica still holds its lease and its view of the members, and every
	// state is still the one at its StateRev. It returns the revision of
	// the commit, or an error wrapping ErrFenced when refused.
	ProposeGroup(ctx context.Context, g GroupProposal) (rev uint64, err error)
	// PutGroupPolicy stores a group's policy (its zero fields: the
	// defaults) and rewrites its guard in the same transaction; it returns
	// the revision.
	PutGroupPolicy(ctx context.Context, group string, p GroupPolicy) (rev uint64, err error)
	// LoadedGroups returns the groups' guards and policies as the last Load
	// read them.
	LoadedGroups() []SharedGroup
}

// SharedGroup is a group as a SharedGroups registry keeps it.
type SharedGroup struct {
	Name string
	// GuardRev is the revision the group's guard was last written at; 0 if
	// never.
	GuardRev uint64
	// Policy is the group's stored policy; its zero fields take the
	// checker's defaults.
	Policy GroupPolicy
}

// GroupProposal is a replica's decisions for one group, made from its view
// at the guard's revision GuardRev.
type GroupProposal struct {
	Group    string
	GuardRev uint64
	Writes   []StateProposal // on replicas, at most maxGroupWrites
}

// maxGroupWrites bounds the states one group write carries, within etcd's
// default limit of 128 operations (and comparisons) per transaction: each
// state takes two comparisons. The rest are written by the next round.
const maxGroupWrites = 50

// applyHeldLocked applies the hold stored with t's state.
func (r *registry) applyHeldLocked(t *target, held bool) {
	p := r.pools[t.spec.Group]
	if p == nil || t.spec.Group == "" || held == t.held {
		return
	}
	t.held = held
	if held {
		p.held[t.spec.Name] = t
	} else {
		delete(p.held, t.spec.Name)
	}
}

// guardChangedLocked applies a change of group's guard: the last change of
// a group write, so the group's states and holds at rev are all applied.
// It announces the group entering or leaving panic, and asks this
// replica's group writer to look at the group again.
func (r *registry) guardChangedLocked(group string, rev uint64, at time.Time) {
	p := r.pools[group]
	if p == nil {
		return
	}
	p.guardRev = rev
	if at.IsZero() {
		at = r.clock.Now()
	}
	r.announcePanicLocked(group, p, at)
	r.link.markGroup(group)
}

// policyPutLocked applies a group's policy, as stored: its held targets
// may be released, its targets' automatic removal turned on or off; a slow
// start applies from the next recovery. With a shared registry the guard's
// change of the same write follows.
func (r *registry) policyPutLocked(group string, p GroupPolicy) {
	pl := r.poolLocked(group)
	vantages := pl.policy.Vantages != p.Vantages || pl.policy.Quorum != p.Quorum
	if pl.policy.Outlier != p.Outlier {
		if p.Outlier.On() { // judged one interval of the new policy from now
			r.outlierGroupLocked(group).next = r.clock.Now().Add(p.Outlier.WithDefaults().Interval)
		}
		if r.lifeWake != nil {
			r.lifeWake() // the outliers' turns are the lifecycle loop's
		}
	}
	pl.policy = p
	now := r.clock.Now()
	for _, t := range r.targets {
		if t.spec.Group == group && t.quarantined() == "" {
			r.unhealthySinceLocked(t, now)
			if vantages && t.spec.Vantages == 0 {
				r.reassignLocked(t, now) // probed from the group's vantages
			}
		}
	}
	r.settleLocked(group)
}

// loadGroupsLocked applies the groups as loaded, after the targets and
// their holds: the held groups are in panic already, without an event.
func (r *registry) loadGroupsLocked(groups []SharedGroup) {
	for _, g := range groups {
		if g.Policy != (GroupPolicy{}) {
			r.poolLocked(g.Name).policy = g.Policy
		}
		if p := r.pools[g.Name]; p != nil {
			p.guardRev = g.GuardRev
		}
	}
	r.panicFromHoldsLocked()
	now := r.clock.Now()
	for _, t := range r.targets {
		if p := r.pools[t.spec.Group]; p != nil && p.policy.Vantages > 1 && t.spec.Vantages == 0 {
			r.reassignLocked(t, now) // probed from the group's vantages
		}
	}
}

// panicFromHoldsLocked marks the loaded groups with held targets as in
// panic already: the event was streamed before the load.
func (r *registry) panicFromHoldsLocked() {
	for name, p := range r.pools {
		if name != "" {
			p.panic = len(p.held) > 0
		}
	}
}

// groupWrite is a state in a group proposal, with the cause it records.
type groupWrite struct {
	t    *target
	to   State
	held bool
	why  cause
}

// buildGroupLocked makes this replica's decisions for group from its view:
// its own targets' moves to a routable state first (each frees a slot when
// it leaves unhealthy), then the group's held targets, released in name
// order while there is room, then its own targets that want to be
// unhealthy, in name order: unhealthy while there is room, held after. An
// operator's mode is never held. It decides for most targets at the most
// (a shared registry's transaction holds so many; the next write takes
// the rest). ok is false when there is nothing to write.
func (r *registry) buildGroupLocked(group string, now time.Time, most int) (GroupProposal, bool) {
	p := r.pools[group]
	if p == nil || r.closed {
		return GroupProposal{}, false
	}
	// The members with something to decide, in name order: this
	// replica's targets whose state is not the one they want or that are
	// held (the pending ones: see updateLocked), and the group's held
	// targets. A group's decision costs what it decides, not its size.
	var members []*target
	for t, why := range p.pending {
		if r.targets[t.spec.Name] != t || t.spec.Group != group || !t.owned || t.quarantined() != "" {
			delete(p.pending, t)
			continue
		}
		if want, _, _ := r.desiredLocked(t, now, why); want == t.state && !t.held {
			delete(p.pending, t) // nothing more to decide for it
			continue
		}
		members = append(members, t) // pending until its record is applied
	}
	for _, t := range p.held {
		if _, ok := p.pending[t]; !ok {
			members = append(members, t)
		}
	}
	slices.SortFunc(members, func(a, b *target) int { return cmp.Compare(a.spec.Name, b.spec.Name) })

	allowed := maxUnhealthy(r.fractionLocked(p), p.n)
	room := allowed - p.down
	var writes []groupWrite
	var held, failing []groupWrite
	for _, t := range members {
		if !t.owned {
			if t.held {
				held = append(held, groupWrite{t: t})
			}
			continue
		}
		why, ok := p.pending[t]
		if !ok {
			why = cause{result: t.last} // zero before the first result
		}
		want, why, admin := r.desiredLocked(t, now, why)
		switch {
		case want.routable():
			if (want != t.state || t.held) && len(writes) < most {
				writes = append(writes, groupWrite{t: t, to: want, why: why})
				if !t.state.routable() {
					room++
				}
			}
		case !t.state.routable():
			// Already out.
		case admin:
			if len(writes) < most {
				writes = append(writes, groupWrite{t: t, to: want, why: why})
				room--
			}
		case t.held:
			held = append(held, groupWrite{t: t})
		default:
			failing = append(failing, groupWrite{t: t, to: want, why: why})
		}
	}
	for _, w := range held {
		if room <= 0 || len(writes) >= most {
			break
		}
		w.to = StateUnhealthy
		w.why = cause{reason: fmt.Sprintf("released from group %s's panic hold (%d of %d down, at most %d)", group, allowed-room+1, p.n, allowed)}
		writes = append(writes, w)
		room--
	}
	for _, w := range failing {
		if len(writes) >= most {
			break
		}
		if room > 0 {
			room--
		} else {
			w.to, w.held = w.t.state, true
		}
		writes = append(writes, w)
	}
	if len(writes) == 0 {
		return GroupProposal{}, false
	}
	gp := GroupProposal{Group: group, GuardRev: p.guardRev, Writes: make([]StateProposal, 0, len(writes))}
	for _, w := range writes {
		// The flap log travels with every state record (flap.go):
		// the owner's own, or, for a release of another replica's target,
		// the one stored.
		flap := w.t.storedFlap()
		if w.t.owned {
			flap = flapRecordLocked(w.t, now)
		}
		st := SharedState{State: w.to, From: w.t.state, Time: now, Reason: w.why.reason, Held: w.held, Flap: flap}
		if w.to == w.t.state {
			st.Time = w.t.lastTr // a hold or its end: no transition, the last one's time stays
		}
		if w.why.reason == "" {
			st.Result = w.why.result
		}
		gp.Writes = append(gp.Writes, StateProposal{Name: w.t.spec.Name, State: st, StateRev: w.t.storedRev()})
	}
	return gp, true
}

// guardWriter writes this replica's group decisions: one group write in
// flight per group, built when it is sent, from the view at that moment.
// The registry marks a group when something may change what this replica
// decides for it: a result or mode of a target it owns, a guard change
// (another replica's write, which may also have fenced ours), an ownership
// move. Lock order: the registry's lock, then mu.
type guardWriter struct {
	shared  SharedGroups
	reg     *registry
	rp      *replication
	closing context.Context

	wake chan struct{}

	mu       sync.Mutex        // protects the fields below
	dirty    map[string]bool   // groups to look at again
	inflight map[string]bool   // groups with a write on its way
	awaiting map[string]uint64 // a committed write's revision, not yet applied here
}

func newGuardWriter(shared SharedGroups, rp *replication) *guardWriter {
	return &guardWriter{
		shared: shared, reg: rp.reg, rp: rp, closing: rp.closing,
		wake:     make(chan struct{}, 1),
		dirty:    make(map[string]bool),
		inflight: make(map[string]bool),
		awaiting: make(map[string]uint64),
	}
}

// mark asks for group to be looked at again; the registry calls it with
// its lock held.
func (g *guardWriter) mark(group string) {
	g.mu.Lock()
	g.dirty[group] = true
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run writes marked groups until the checker closes; the writes of
// different groups go concurrently, proposeConcurrency at most.
func (g *guardWriter) run() {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, proposeConcurrency)
	for {
		select {
		case <-g.wake:
		case <-g.closing.Done():
			return
		}
		g.mu.Lock()
		var groups []string
		for grp := range g.dirty {
			if !g.inflight[grp] {
				groups = append(groups, grp)
				delete(g.dirty, grp)
				g.inflight[grp] = true // until built and sent, or found empty
			}
		}
		g.mu.Unlock()
		slices.Sort(groups)
		for _, grp := range groups {
			gp, ok := g.build(grp)
			if !ok {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-g.closing.Done():
				return // the checker is closing: nothing more is written
			}
			wg.Go(func() {
				defer func() { <-sem }()
				g.send(gp)
			})
		}
	}
}

// build takes the registry's lock and builds group's write (run marked it
// in flight), unless this replica has not yet applied its last one.
func (g *guardWriter) build(group string) (GroupProposal, bool) {
	g.reg.mu.Lock()
	defer g.reg.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.reg.pools[group]
	if p == nil || p.guardRev < g.awaiting[group] {
		g.inflight[group] = false
		return GroupProposal{}, false // the guard's change marks it again
	}
	delete(g.awaiting, group)
	gp, ok := g.reg.buildGroupLocked(group, g.reg.clock.Now(), maxGroupWrites)
	if !ok {
		g.inflight[group] = false
	}
	// In name order in the transaction (the one member's log applies
	// them in the order they were decided).
	slices.SortFunc(gp.Writes, func(a, b StateProposal) int { return cmp.Compare(a.Name, b.Name) })
	return gp, ok
}

// idle reports whether no group is marked nor being written.
func (g *guardWriter) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.dirty) > 0 {
		return false
	}
	for _, busy := range g.inflight {
		if busy {
			return false
		}
	}
	return true
}

// send writes gp. Once committed, the group waits for the commit to come
// back; once fenced, it is looked at again when the guard's change that
// fenced it is applied (now, if it already was); on another error, after
// a pause.
func (g *guardWriter) send(gp GroupProposal) {
	ctx, cancel := context.WithTimeout(g.closing, sharedWait)
	rev, err := g.shared.ProposeGroup(ctx, gp)
	cancel()
	g.reg.mu.Lock()
	g.mu.Lock()
	g.inflight[gp.Group] = false
	p := g.reg.pools[gp.Group]
	switch {
	case err == nil:
		if p != nil && p.guardRev < rev {
			g.awaiting[gp.Group] = rev
		} else {
			g.dirty[gp.Group] = true
		}
	case errors.Is(err, ErrFenced):
		g.rp.logger.Debug("group write fenced: another write of the group, the members or this replica's lease changed", "group", gp.Group, "error", err)
		if p != nil && p.guardRev > gp.GuardRev {
			g.dirty[gp.Group] = true
		}
	default:
		g.rp.lastErr.set(err)
		g.rp.logger.Error("storing a group's states in the shared registry failed; retrying", "group", gp.Group, "error", err)
	}
	g.mu.Unlock()
	g.reg.mu.Unlock()
	if err != nil && !errors.Is(err, ErrFenced) {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-g.closing.Done():
			return
		}
		g.mu.Lock()
		g.dirty[gp.Group] = true
		g.mu.Unlock()
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// putPolicy stores a group's policy through the shared registry, for
// every replica, and waits until it has come back.
func (rp *replication) putPolicy(group string, p GroupPolicy) error {
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	rev, err := rp.shared.PutGroupPolicy(ctx, group, p)
	if err != nil {
		return sharedWriteErr(err)
	}
	return rp.waitApplied(ctx, rev)
}

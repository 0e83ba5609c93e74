package checker

import (
	"cmp"
	"time"
)

// The registry's side of a shared registry (see Shared and replication in
// shared.go): applying the changes every replica applies, owning targets,
// and proposing the states its results decide. All of it runs with the
// registry's lock held.

// loadShared registers the shared registry's targets, read at rev,
// without events.
func (r *registry) loadShared(targets []SharedTarget, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for _, st := range targets {
		r.putSharedLocked(st.Spec, st.State, st.StateRev, now, time.Time{})
	}
	r.rev = rev
}

// loadVerdicts applies the vantages' verdicts the shared registry's
// targets were loaded with, once their groups' policies are loaded too.
func (r *registry) loadVerdicts(targets []SharedTarget) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for _, rec := range r.vantages.LoadedVantages() {
		if rec.Suspect { // suspect already: no event
			r.vstats[rec.Member] = &vantageStats{label: rec.Label, suspect: true, since: rec.Time}
		}
	}
	for _, st := range targets {
		for _, vd := range st.Verdicts {
			r.applyVerdictLocked(st.Spec.Name, vd, false, now)
		}
	}
}

// putSharedLocked adds a target, or replaces its spec, as the shared
// registry says (see putSpecLocked).
func (r *registry) putSharedLocked(spec Spec, st *SharedState, stateRev uint64, now, at time.Time) {
	_, _, unused := r.putSpecLocked(spec.WithDefaults(r.defaults), nil, st, stateRev, now, at)
	closeProber(unused)
}

// deleteSharedLocked removes a target as the shared registry says, at at
// (the time its writer removed it).
func (r *registry) deleteSharedLocked(name string, at time.Time) {
	if t := r.deleteLocked(name, at, ""); t != nil {
		closeProber(t.prober)
	}
}

// applyRecordLocked applies a state a target's owner stored.
func (r *registry) applyRecordLocked(name string, st SharedState, rev uint64) {
	t, ok := r.targets[name]
	if !ok {
		return
	}
	t.flapsLocked().stateRev = rev
	t.proposing = false
	why := cause{result: st.Result, reason: st.Reason}
	now := r.clock.Now()
	r.applyFlapLocked(t, st, now) // its events come before the transition the record makes
	r.applyStateLocked(t, st.State, st.Time, why)
	held := st.Held && t.spec.Group != ""
	r.applyHeldLocked(t, held)
	if !t.owned {
		if v := t.multi(); v != nil {
			r.syncVerdictLocked(t, v, now) // the published state a vantage with no stored verdict stands by
			return
		}
		t.m.State = st.State
		r.flapFromStoreLocked(t) // the stored verdict, when there is one
		if held {
			t.m.State = StateUnhealthy // the verdict its owner stored the hold for
		}
		t.m.PassStreak, t.m.FailStreak = 0, 0
		return
	}
	// The owner's verdict may have moved on while the write was on its way.
	r.updateLocked(t, now, cause{result: t.last}) // zero before the first result
	r.proposeFlapLocked(t, now)
}

// reownLocked asks the shared registry which targets this replica probes
// and owns now that its members changed, and starts or stops probing them.
func (r *registry) reownLocked(now time.Time) {
	for _, t := range r.targets {
		r.reassignLocked(t, now)
	}
	r.lifeWakeLocked() // deadlines of the targets taken over are this replica's now
	for group := range r.pools {
		if group != "" {
			r.link.markGroup(group) // held targets taken over may be this replica's to release
		}
	}
}

// ownLocked makes this replica probe t or stop, and own it (store its
// state) or not. A target taken over starts from its stored state, as
// after a restart, with its first probe within one interval; a vantage
// taken over, from its stored verdict (see vantage.go).
func (r *registry) ownLocked(t *target, probes, owns bool, now time.Time) {
	v := t.vantagesOf()
	wasProbing, wasOwner := t.owned || t.vantage, t.owned
	t.owned, t.vantage = owns, probes && !owns
	switch {
	case !probes && wasProbing:
		r.sched.removeLocked(t)
		t.index = -1
		t.gen++ // a result in flight is no longer this replica's to store
		t.proposing = false
		t.carried = false // its state is its new owner's now; no result here would end the tag
		// The streaks, last result and next probe a status shows are the
		// probing replica's: kept, they would stand still here, the next
		// probe in the past, as if this replica still probed the target.
		t.m.PassStreak, t.m.FailStreak = 0, 0
		t.last, t.hasLast = Result{}, false
		t.next = noTime
		r.flapFromStoreLocked(t)
		if t.held && t.multi() == nil {
			t.m.State = StateUnhealthy // the verdict its owner stored the hold for
		}
		if v != nil {
			v.proposing = false
			r.dropVerdictLocked(t, v)
		}
	case probes && !wasProbing:
		t.m = Machine{Model: t.spec.Model, Rise: t.spec.Rise, Fall: t.spec.Fall, State: t.state}
		r.flapFromStoreLocked(t) // carry on from the stored flap log and verdict
		if mv := t.multi(); mv != nil {
			r.startVantageLocked(t, mv)
		} else if t.held {
			// Held: its previous owner's verdict was unhealthy; keep it
			// until this replica's own results say otherwise, so the
			// takeover neither releases nor re-decides the hold.
			t.m.State = StateUnhealthy
		}
		t.carried = true
		t.slot = noTime
		if r.probedLocked(t) {
			r.sched.addLocked(t, now.Add(firstDelay(t.spec.Name, t.spec.Interval)))
		}
	case wasOwner && !owns:
		t.proposing = false // its state is the new owner's to store
	case owns && !wasOwner:
		r.flapFromStoreLocked(t) // a vantage that becomes the owner carries on from the stored log
	}
	if owns && !wasOwner {
		if p := r.pools[t.spec.Group]; p != nil && t.spec.Group != "" && r.remote {
			p.pending[t] = cause{result: t.last} // the group decides again what it wants (reownLocked marks it)
		}
	}
	if mv := t.multi(); mv != nil {
		r.judgeLocked(t, mv) // the vantages that count may have changed
		r.decideVantagesLocked(t, mv, now)
		if owns && !wasOwner {
			r.updateLocked(t, now, cause{reason: mv.text()}) // what the previous owner had not stored yet
		}
		r.syncVerdictLocked(t, mv, now)
	} else if v != nil {
		r.judgeLocked(t, v)
		r.dropVerdictLocked(t, v) // probed from one vantage again
	}
}

// proposeLocked asks the replication to store t's new state: with a shared
// registry a state changes only once its owner's write comes back.
func (r *registry) proposeLocked(t *target, to State, now time.Time, why cause) {
	if !t.owned || t.proposing || to == t.state {
		return
	}
	r.writeStateLocked(t, to, now, now, why)
}

// writeStateLocked queues t's state record: the state to, changed at at,
// and the flap log as of now (see flap.go), which a record of the
// same state stores alone.
func (r *registry) writeStateLocked(t *target, to State, at, now time.Time, why cause) {
	t.proposing = true
	r.link.propose(proposal{t: t, gen: t.gen, p: StateProposal{
		Name:     t.spec.Name,
		StateRev: t.storedRev(),
		// A record of the same state (the flap log alone) keeps its hold.
		State: SharedState{State: to, From: t.state, Time: at, Result: why.result, Reason: why.reason,
			Flap: flapRecordLocked(t, now), Held: to == t.state && t.held},
	}})
}

// applySharedLocked applies changes read from the shared registry, in
// revision order, and returns the revision the registry is at after them:
// at least rev. It reports false, having done nothing, once the registry
// is closed.
func (r *registry) applySharedLocked(changes []SharedChange, rev uint64) (uint64, bool) {
	if r.closed {
		return 0, false
	}
	now := r.clock.Now()
	for _, ch := range changes {
		r.applying = ch.Rev
		switch ch.Kind {
		case SharedSpecPut:
			r.putSharedLocked(ch.Spec, nil, 0, now, cmp.Or(ch.Time, now))
		case SharedSpecDeleted:
			r.deleteSharedLocked(ch.Name, cmp.Or(ch.Time, now))
		case SharedStatePut:
			r.applyRecordLocked(ch.Name, ch.State, ch.Rev)
		case SharedMembersChanged:
			r.reownLocked(now)
		case SharedSamplesPut:
			r.applySamplesLocked(ch.Name, ch.Samples)
		case SharedOutliersPut:
			r.applyOutliersLocked(ch.Outliers, now, true)
		case SharedVantagePut:
			r.applyVantageLocked(ch.Vantage, now)
		case SharedVerdictPut, SharedVerdictDeleted:
			r.applyVerdictLocked(ch.Name, ch.Verdict, ch.Kind == SharedVerdictDeleted, now)
		case SharedOutcomePut:
			r.applyOutcomeLocked(ch.Name, ch.Outcome, ch.Rev, now)
		case SharedAnnounced:
			r.applyAnnouncedLocked(ch.Announcement)
		case SharedOverloadPut:
			r.applyOverloadLocked(ch.Overload, cmp.Or(ch.Overload.Since, now)) // the writer's time, the same on every replica
		case SharedGroupChanged:
			r.guardChangedLocked(ch.Name, cmp.Or(ch.GuardRev, ch.Rev), ch.Time)
		case SharedPolicyPut:
			r.policyPutLocked(ch.Name, ch.Policy)
			r.dropPoolLocked(ch.Name)
		}
		rev = max(rev, ch.Rev)
	}
	r.applying = 0
	if rev > r.rev {
		r.rev = rev
	}
	return r.rev, true
}

// proposalValid reports whether pr is still to be written: this replica
// owns its target, which is still registered, at the same generation.
func (r *registry) proposalValid(pr proposal) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pr.verdict != nil {
		return pr.t.gen == pr.gen && r.targets[pr.verdict.Target] == pr.t && (pr.verdict.Delete || pr.t.owned || pr.t.vantage)
	}
	return pr.t.owned && pr.t.gen == pr.gen && r.targets[pr.p.Name] == pr.t
}

// fenced notes that the shared registry refused pr's write: the target
// may propose again.
func (r *registry) fenced(pr proposal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pr.verdict != nil {
		if v := pr.t.vantagesOf(); v != nil {
			v.proposing = false // stored again once its results or the members say
		}
		return
	}
	pr.t.proposing = false
}

package checker

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// Adding targets: Add and AddMany check the specs and build their
// probers, then write them through the link, which makes them durable and
// applies them (putSpecLocked).

// AddResult is what AddMany did with one spec: its status and whether it
// was created, or why it was refused (Err, as Add returns it).
type AddResult struct {
	Status  Status
	Created bool
	Err     error
}

// addBatch bounds the targets applied under one hold of the registry's
// lock, so that probes and reads go on during a large batch.
const addBatch = 1024

// addMany is AddMany for specs with defaults, valid, of distinct names: it
// registers each target or replaces its spec. The changed specs are
// written through the link together, after every prober is built and
// every limit checked, and before anything changes. A spec refused (its
// probe, a limit) is refused alone; a failed write refuses the specs it
// did not store, and registers those it did. The caller keeps other
// writes out meanwhile.
func (r *registry) addMany(specs []Spec) []AddResult {
	res := make([]AddResult, len(specs))
	probers := make([]Prober, len(specs))
	keep := make([]bool, len(specs)) // the probe is the target's own already
	same := make([]bool, len(specs)) // nothing to write or change
	fail := func(i int, err error) {
		res[i].Err = err
		closeProber(probers[i])
		probers[i] = nil
	}

	// The specs as they will be stored: an update keeps the target's
	// initial state (it only matters to a new target) and its mode; a new
	// target is active.
	r.mu.Lock()
	closed := r.closed
	for i := range specs {
		old := r.targets[specs[i].Name]
		if old == nil || old.quarantined() != "" {
			specs[i] = specs[i].WithAdmin(Admin{})
			res[i].Created = old == nil
			continue
		}
		specs[i].InitialState = old.spec.InitialState
		specs[i] = specs[i].WithAdmin(old.spec.Admin())
		keep[i] = reflect.DeepEqual(old.spec.Probe, specs[i].Probe)
		same[i] = reflect.DeepEqual(old.spec, specs[i])
	}
	r.mu.Unlock()
	if closed {
		for i := range res {
			res[i] = AddResult{Err: ErrClosed}
		}
		return res
	}
	// The probers are built first: a probe the egress policy refuses is a
	// rejected spec (a bad request before a full registry), and a rejected
	// spec stores nothing.
	for i := range specs {
		if !keep[i] {
			p, err := r.newProber(specs[i].Probe)
			if err != nil {
				res[i] = AddResult{Err: wrapProbeErr(err)}
				continue
			}
			probers[i] = p
		}
	}
	r.mu.Lock()
	r.batchLimitsLocked(specs, res, fail)
	r.mu.Unlock()
	var changed []Spec
	var built []Prober
	var at []int // changed[k] is specs[at[k]]
	for i := range specs {
		if res[i].Err == nil && !same[i] {
			changed = append(changed, specs[i])
			built = append(built, probers[i])
			at = append(at, i)
		}
	}
	if len(changed) > 0 {
		// Durable before anything changes or is acknowledged.
		stored, err := r.link.putSpecs(changed, built)
		for _, i := range at[stored:] {
			res[i] = AddResult{Err: err}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for i := range specs {
		if res[i].Err != nil {
			continue
		}
		t := r.targets[specs[i].Name]
		switch {
		case r.closed:
			res[i] = AddResult{Err: ErrClosed}
		case t == nil: // removed again meanwhile
			res[i] = AddResult{Err: fmt.Errorf("%w %q: stored, then removed by another call", ErrUnknownTarget, specs[i].Name)}
		default:
			res[i].Status = r.statusLocked(t, now)
		}
	}
	return res
}

// batchLimitsLocked refuses, in order, the specs of a batch not yet refused
// that would take the registry or a group past its limit, counting the
// ones before them.
func (r *registry) batchLimitsLocked(specs []Spec, res []AddResult, fail func(int, error)) {
	if r.maxTargets <= 0 && r.maxInGroup <= 0 {
		return
	}
	added, joined := 0, make(map[string]int)
	for i, spec := range specs {
		if res[i].Err != nil {
			continue
		}
		old := r.targets[spec.Name]
		joins := old == nil || old.spec.Group != spec.Group || old.quarantined() != "" // a quarantined target is in no pool
		switch {
		case old == nil && r.maxTargets > 0 && len(r.targets)+added >= r.maxTargets:
			fail(i, &LimitError{Limit: LimitTargets, What: "targets", Max: r.maxTargets})
		case joins && r.maxInGroup > 0 && r.pools[spec.Group].size()+joined[spec.Group] >= r.maxInGroup:
			fail(i, &LimitError{Limit: LimitTargetsPerGroup, What: fmt.Sprintf("targets in group %q", spec.Group), Max: r.maxInGroup})
		default:
			if old == nil {
				added++
			}
			if joins {
				joined[spec.Group]++
			}
		}
	}
}

// putSpecLocked registers spec or replaces the spec of the target of its
// name, as its writer stored it at at: the one application of a spec, for
// Add alone and for a shared registry's change. p is its prober, nil to
// build one here (a probe this checker's rules refuse then fails every
// probe, with the reason: another replica's rules allowed it). A loaded
// target comes with its stored state (st, at stateRev, nil if none) and a
// zero at, which emits no event. It returns the prober left unused (built
// but not kept, or the one replaced) for the caller to close.
func (r *registry) putSpecLocked(spec Spec, p Prober, st *SharedState, stateRev uint64, now, at time.Time) (_ Status, created bool, unused Prober) {
	events := !at.IsZero()
	t := r.targets[spec.Name]
	var fixed *target // the quarantined target this spec replaces
	if t != nil && t.quarantined() != "" {
		fixed, t = t, nil
		fixed.gone = true
	}
	if t == nil {
		if p == nil {
			p = r.proberOrRefused(spec)
		}
		state := spec.InitialState
		if st != nil {
			state = st.State
		}
		t = newTarget(spec, p, state)
		t.index = -1
		if stateRev != 0 {
			t.flapsLocked().stateRev = stateRev
		}
		if st != nil {
			t.lastTr = st.Time
			r.loadFlapLocked(t, st.Flap)
		}
		held := st != nil && st.Held && spec.Group != ""
		if held {
			t.m.State = StateUnhealthy // the verdict its owner stored the hold for
		}
		if spec.Admin().Mode != ModeActive {
			t.state = StateUnhealthy // until its owner's state comes back
		}
		r.targets[spec.Name] = t
		r.sched.watchLocked(t)
		r.joinPoolLocked(t)
		r.applyHeldLocked(t, held)
		r.reassignLocked(t, now)
		// A new target starts afresh. A stored state is carried over where
		// this replica probes the target, until its first result; where it
		// does not, the state is its owner's, and no result here would
		// ever end the tag.
		t.carried = st != nil && (t.owned || t.vantage)
		if events {
			r.unhealthySinceLocked(t, now)
		}
		r.timedLocked(t)
		status := r.statusLocked(t, now)
		switch {
		case !events:
		case fixed != nil:
			// Watchers know the name from the quarantined target: the fix is
			// an update of it.
			r.emitLocked(Event{Kind: EventUpdated, Time: at, Status: status, prevGroup: fixed.spec.Group})
		default:
			r.emitLocked(Event{Kind: EventAdded, Time: at, Status: status})
		}
		r.settleLocked(spec.Group) // a new routable target may make room
		return status, fixed == nil, nil
	}
	spec.InitialState = t.spec.InitialState
	if reflect.DeepEqual(t.spec, spec) {
		return r.statusLocked(t, now), false, p // nothing changes, no event
	}
	if a := spec.Admin(); a != t.spec.Admin() {
		// SetMode on a shared registry: the spec carries the new mode.
		r.applyAdminLocked(t, a, now, at)
		if reflect.DeepEqual(t.spec, spec) {
			return r.statusLocked(t, now), false, p
		}
	}
	unused = p
	if !reflect.DeepEqual(t.spec.Probe, spec.Probe) {
		if p == nil {
			p = r.proberOrRefused(spec)
		}
		unused, t.prober = t.prober, p // a probe in flight keeps its own prober value
		t.gen++
		t.timedOut = false // a new probe has not hung yet
		r.sched.watchLocked(t)
	}
	prevVantages, prevQuorum := t.spec.Vantages, t.spec.Quorum
	prevGroup := r.setSpecLocked(t, spec)
	if prevGroup != spec.Group {
		r.leaveOutliersLocked(t, prevGroup, at)
	}
	if spec.Vantages != prevVantages || spec.Quorum != prevQuorum || prevGroup != spec.Group {
		r.reassignLocked(t, now)
	}
	r.emitLocked(Event{Kind: EventUpdated, Time: at, Status: r.statusLocked(t, now), prevGroup: prevGroup})
	// What the new spec changes in the state comes after the update, as
	// transitions of its own, decided by the target's owner: a model
	// change that drops the suspect state, damping turned off, a group
	// with more or less room.
	why := cause{reason: "spec changed"}
	if prevGroup != spec.Group {
		why = cause{reason: fmt.Sprintf("moved to group %q", spec.Group)}
	}
	if _, changed := t.m.SetModel(spec.Model); changed {
		why = cause{reason: "model changed to " + spec.Model.String()}
	}
	if t.owned {
		if t.flapping && spec.FlapThreshold == 0 {
			t.flapping = false
			why = cause{reason: "flap damping turned off"}
		}
		r.updateLocked(t, now, why)
		r.proposeFlapLocked(t, now)
		r.sched.hurryLocked(t, now)
	}
	r.unhealthySinceLocked(t, now) // its removal may be turned on or off
	if prevGroup != spec.Group {
		r.settleLocked(prevGroup)
		r.dropPoolLocked(prevGroup)
	}
	r.settleLocked(spec.Group)
	return r.statusLocked(t, now), false, unused
}

// proberOrRefused builds spec's prober; one this checker's rules refuse
// fails every probe with the reason.
func (r *registry) proberOrRefused(spec Spec) Prober {
	p, err := r.newProber(spec.Probe)
	if err != nil {
		r.logger.Warn("shared target's probe is refused here; it fails its probes on this replica", "target", spec.Name, "error", err)
		return refusedProber{err}
	}
	return p
}

// setSpecLocked gives t a new spec, moving it between pools if its group
// changes, and returns the group it was in.
func (r *registry) setSpecLocked(t *target, spec Spec) (prevGroup string) {
	prevGroup = t.spec.Group
	if prevGroup != spec.Group {
		r.leavePoolLocked(t)
	}
	t.spec = spec
	t.m.Rise, t.m.Fall = spec.Rise, spec.Fall
	if prevGroup != spec.Group {
		r.joinPoolLocked(t)
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

package checker

import (
	"fmt"
	"slices"
	"time"
)

// Flap damping, written through the log as every change is. The owner
// decides from its own results (verdictLocked); what it decided travels
// with the target's state: every state it stores carries its flap log
// (SharedState.Flap), and a change of the log that changes no state (a
// verdict change while flap damping, a mode or the panic threshold holds
// the target, the start or end of flapping while it is unhealthy) is
// stored as a state record of the same state. So:
//
//   - every member shows the stored flapping status, verdict and
//     transitions_in_window, and emits FLAPPING_STARTED and
//     FLAPPING_ENDED when it applies the record that changed them: the
//     same events at the same revision on every stream;
//   - a member that loads the target (a restart) or takes it over starts
//     from the stored log and verdict: a flapping target stays flapping
//     until it has been stable for flap_stable_for since its last stored
//     change, a draining target's verdict is the one it had, and the
//     verdict changes counted before are not counted again.
//
// The log's times are the owner's clock: replicas' clocks must agree to
// well within flap_window (NTP does).

// FlapRecord is a target's flap damping as its owner stored it with its
// state. A record without one (nil: written by a pulsed from before flap
// logs were stored) clears the stored log: each member then shows its own.
type FlapRecord struct {
	// Verdict is the state the target's results alone give.
	Verdict State `json:"verdict"`
	// Changes are the verdict's changes within the flap window, oldest
	// first; at most MaxFlapThreshold.
	Changes []time.Time `json:"changes,omitempty"`
	// Flapping is true while flap damping holds the target unhealthy.
	Flapping bool `json:"flapping,omitempty"`
	// Time is when the owner wrote the log: the time of the FLAPPING
	// event it leads to, the same on every replica. Zero in a record
	// written before it was kept: the applying replica's clock.
	Time time.Time `json:"time,omitzero"`
}

// lastChange returns the time of the record's latest change, zero if none.
func (f *FlapRecord) lastChange() time.Time {
	if len(f.Changes) > 0 {
		return f.Changes[len(f.Changes)-1]
	}
	return time.Time{}
}

// flapState is a target's flap damping as it stands and as its state
// record last stored it; made at its first verdict change or record.
// Nearly every target has one, so it is small, and apart from targetMore.
type flapState struct {
	log      flapLog     // the verdict's recent changes
	stored   *FlapRecord // the flap log as last stored with its state; nil before
	stateRev uint64      // the revision of the target's stored state
}

// flapsLocked returns t's flapState, making it.
func (t *target) flapsLocked() *flapState {
	if t.fs == nil {
		t.fs = &flapState{}
	}
	return t.fs
}

// flaps returns t's flap log; the zero log before its first change.
func (t *target) flaps() flapLog {
	if t.fs == nil {
		return flapLog{}
	}
	return t.fs.log
}

// storedRev returns the revision of t's stored state, 0 if none.
func (t *target) storedRev() uint64 {
	if t.fs == nil {
		return 0
	}
	return t.fs.stateRev
}

// storedFlap returns t's stored flap record, nil if none.
func (t *target) storedFlap() *FlapRecord {
	if t.fs == nil {
		return nil
	}
	return t.fs.stored
}

// flapRecordLocked returns t's flap log as its owner stores it.
func flapRecordLocked(t *target, now time.Time) *FlapRecord {
	if t.fs != nil {
		t.fs.log.trim(now, t.spec.flapWindow())
	}
	return &FlapRecord{Verdict: t.verdict(), Flapping: t.flapping, Time: now, Changes: t.flaps().snapshot()}
}

// flapStoredLocked reports whether the owner's view of t's flap damping is
// the one stored: the same verdict, flapping status and latest change
// (older changes leave the window by themselves, and need no write).
func flapStoredLocked(t *target) bool {
	f := t.storedFlap()
	if f == nil {
		return t.flaps().last().IsZero() && !t.flapping && t.verdict() == t.state
	}
	last := f.lastChange()
	return f.Verdict == t.verdict() && f.Flapping == t.flapping && last.Equal(t.flaps().last())
}

// proposeFlapLocked stores t's flap log when the owner's differs from the
// stored one and no state write is on its way (that one carries it): a
// verdict that changed without changing the state (flap damping, a mode or
// the panic threshold holds it), or flap damping starting or ending.
func (r *registry) proposeFlapLocked(t *target, now time.Time) {
	if !t.owned || t.proposing {
		return
	}
	if flapStoredLocked(t) {
		return
	}
	reason := "flap damping"
	if t.flapping {
		reason = fmt.Sprintf("flapping: %d transitions in %v", t.flaps().count(now, t.spec.flapWindow()), t.spec.flapWindow())
	} else if t.flapShown {
		reason = fmt.Sprintf("stable for %v after flapping", t.spec.flapStableFor())
		if t.spec.FlapThreshold == 0 {
			reason = "flap damping turned off"
		}
	}
	r.writeStateLocked(t, t.state, t.lastTr, now, cause{reason: reason})
}

// applyFlapLocked applies the flap log stored with t's state, at the
// revision being applied: every replica emits the same FLAPPING events. The
// owner keeps its own log (it may be ahead of the store); the others take
// the stored one.
func (r *registry) applyFlapLocked(t *target, st SharedState, now time.Time) {
	f := st.Flap
	if f == nil {
		// A pulsed that stored no flap log wrote it: what was stored
		// before is stale.
		if t.fs != nil {
			t.fs.stored = nil
		}
		t.flapShown = false
		return
	}
	was := t.flapShown
	t.flapShown = f.Flapping
	if !f.Time.IsZero() {
		now = f.Time
	}
	t.flapsLocked().stored = f
	if !t.owned {
		r.flapFromStoreLocked(t)
	}
	if f.Flapping == was {
		return // no event: most records
	}
	n := (flapLog{times: f.Changes}).count(now, t.spec.flapWindow())
	switch {
	case f.Flapping && !was:
		r.emitLocked(Event{Kind: EventFlappingStarted, Time: now, Policy: PolicyChange{
			Group: t.spec.Group, Target: t.spec.Name, Transitions: n,
			Text: fmt.Sprintf("%s: flapping, %d transitions in %v; held unhealthy until stable for %v", t.spec.Name, n, t.spec.flapWindow(), t.spec.flapStableFor()),
		}})
	case !f.Flapping && was:
		reason := st.Reason
		if reason == "" {
			reason = fmt.Sprintf("stable for %v after flapping", t.spec.flapStableFor())
		}
		r.emitLocked(Event{Kind: EventFlappingEnded, Time: now, Policy: PolicyChange{
			Group: t.spec.Group, Target: t.spec.Name, Transitions: n,
			Text: fmt.Sprintf("%s: no longer flapping, %s", t.spec.Name, reason),
		}})
	}
}

// flapFromStoreLocked makes t's flap log, flapping status and verdict the
// stored ones: on a replica that does not own t, and on one that takes it
// over (which neither releases it nor counts its changes again).
func (r *registry) flapFromStoreLocked(t *target) {
	f := t.storedFlap()
	if f == nil {
		return
	}
	t.flapsLocked().log = flapLog{times: slices.Clone(f.Changes[max(0, len(f.Changes)-maxFlaps):])}
	t.flapping = f.Flapping
	if t.vantagesOf() == nil { // else the machine is this replica's vantage's
		t.m.State = f.Verdict
	}
}

// loadFlapLocked takes the flap log stored with a loaded target's state,
// without events.
func (r *registry) loadFlapLocked(t *target, f *FlapRecord) {
	if f == nil {
		return
	}
	t.flapsLocked().stored = f
	t.flapShown = f.Flapping
	r.flapFromStoreLocked(t)
}

// flapStatusLocked fills in st's flap damping from the stored
// record, so that the owner answers as every other member does; from t's
// own log before any record.
func flapStatusLocked(st *Status, t *target, now time.Time) {
	f := t.storedFlap()
	if f == nil {
		st.Transitions = t.flaps().count(now, t.spec.flapWindow())
		return
	}
	st.Flapping = f.Flapping
	st.Verdict = f.Verdict
	st.Transitions = (flapLog{times: f.Changes}).count(now, t.spec.flapWindow())
}

package checker

import (
	"fmt"
	"math"
	"time"
)

// Administrative modes. Beside what its probes say, a target has a mode an
// operator sets (SetMode, or Remove with a drain): ACTIVE, DRAINING or
// MAINTENANCE. A mode is a policy like flap damping: it holds the
// published state UNHEALTHY (with a transition whose reason says so,
// "draining: deploy 4711") while the verdict goes on saying what the
// probes say. Unlike the panic threshold's hold it is the operator's word:
// the threshold never keeps a draining target routable, and a drained
// target counts as unhealthy in its group's room (draining half a group
// leaves the threshold less room for failures of the other half).
//
//   - DRAINING: still probed; not routable for new traffic, so clients let
//     the requests in flight finish and send no new ones.
//   - MAINTENANCE: not probed (a probe in flight is discarded), not
//     routable. Leaving it, the target does not come back blindly: its
//     verdict is UNHEALTHY with no streaks, so it must pass Spec.Rise
//     probes; unless its last result is younger than one Spec.Interval,
//     when its verdict is carried over (Status.CarriedOver) as after a
//     restart. Its first probe is due at once.
//
// The mode is stored with the target's spec (Spec.Lifecycle), so it
// survives restarts and is shared by replicas; Add keeps a target's mode
// whatever the spec it is given, as it keeps its initial state.

// Mode is a target's administrative mode. The zero value is ModeActive.
type Mode int

// The modes.
const (
	// ModeActive: routed by its health.
	ModeActive Mode = iota
	// ModeDraining: probed, never routable.
	ModeDraining
	// ModeMaintenance: not probed, never routable.
	ModeMaintenance
)

// String returns the mode's name: "active", "draining" or "maintenance".
func (m Mode) String() string {
	switch m {
	case ModeActive:
		return "active"
	case ModeDraining:
		return "draining"
	case ModeMaintenance:
		return "maintenance"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Bounds of the modes' inputs, checked by SetMode and Drain.
const (
	// MaxModeReason bounds a mode's reason, in bytes.
	MaxModeReason = 256
	// MaxModeUntil bounds how far ahead a mode's Until may be.
	MaxModeUntil = 30 * 24 * time.Hour
	// MinDrainFor and MaxDrainFor bound Drain's drainFor: a drain shorter
	// than a second lets no request finish.
	MinDrainFor = time.Second
	MaxDrainFor = 24 * time.Hour
)

// Admin is a target's administrative state. The zero value is ACTIVE for
// good. It is a value: copy it, never share a pointer to one.
type Admin struct {
	Mode Mode `json:",omitzero"`
	// Reason is the operator's reason ("deploy 4711"), or why the mode
	// changed by itself ("until 2026-12-01T18:00:00Z reached").
	Reason string `json:",omitzero"`
	// Since is when the mode was set.
	Since time.Time `json:",omitzero"`
	// Until, when set, returns the target to ACTIVE by itself.
	Until time.Time `json:",omitzero"`
	// RemoveAt, when set, removes the target (a drain started by Drain).
	RemoveAt time.Time `json:",omitzero"`
}

// holdReason is the reason of the transition the mode makes, e.g.
// "draining: deploy 4711".
func (a Admin) holdReason() string {
	if a.Reason == "" {
		return a.Mode.String()
	}
	return a.Mode.String() + ": " + a.Reason
}

// Lifecycle is how a target enters and leaves service: its slow start and
// automatic removal (from its spec) and its administrative mode (set by
// SetMode and Drain, kept by Add). A nil *Lifecycle in a Spec means none of
// them. It sits behind a pointer because most targets use none and a
// target must stay within its size class (448 bytes); a Spec's Lifecycle is
// never changed in place, only replaced.
type Lifecycle struct {
	// SlowStart, when positive, ramps the weight of the target linearly
	// from 0 to 100% over this window after it becomes routable. If 0, its
	// group's GroupPolicy.SlowStart. At most MaxSlowStart.
	SlowStart time.Duration `json:",omitzero"`
	// RemoveAfterUnhealthy, when positive, removes the target once its
	// verdict has been unhealthy this long without a break; never while
	// the checker is degraded, its group is in panic or it is in
	// maintenance, and leaving maintenance starts the streak again. If 0,
	// its group's GroupPolicy.RemoveAfterUnhealthy. In
	// [MinRemoveAfterUnhealthy, MaxRemoveAfterUnhealthy].
	RemoveAfterUnhealthy time.Duration `json:",omitzero"`
	// Admin is the target's administrative mode.
	Admin Admin `json:",omitzero"`
}

// Bounds of a Lifecycle's durations.
const (
	// MaxSlowStart bounds SlowStart.
	MaxSlowStart = time.Hour
	// MinRemoveAfterUnhealthy and MaxRemoveAfterUnhealthy bound
	// RemoveAfterUnhealthy.
	MinRemoveAfterUnhealthy = time.Second
	MaxRemoveAfterUnhealthy = 30 * 24 * time.Hour
)

// Admin returns the target's administrative state; the zero Admin if it
// has none.
func (s Spec) Admin() Admin {
	if s.Lifecycle == nil {
		return Admin{}
	}
	return s.Lifecycle.Admin
}

// WithAdmin returns s with its administrative state set to a; s itself,
// and any Spec sharing its Lifecycle, is not changed.
func (s Spec) WithAdmin(a Admin) Spec {
	var l Lifecycle
	if s.Lifecycle != nil {
		l = *s.Lifecycle
	}
	l.Admin = a
	s.Lifecycle = nil
	if l != (Lifecycle{}) {
		s.Lifecycle = &l
	}
	return s
}

// validateLifecycle checks a spec's slow start, automatic removal and
// administrative state.
func (s Spec) validateLifecycle() error {
	l := s.Lifecycle
	if l == nil {
		return nil
	}
	switch {
	case l.SlowStart < 0:
		return &FieldError{"slow_start", fmt.Sprintf("must be positive when set, got %v", l.SlowStart)}
	case l.SlowStart > MaxSlowStart:
		return &FieldError{"slow_start", fmt.Sprintf("must be at most %v, got %s", MaxSlowStart, durText(l.SlowStart))}
	case l.RemoveAfterUnhealthy != 0 && (l.RemoveAfterUnhealthy < MinRemoveAfterUnhealthy || l.RemoveAfterUnhealthy > MaxRemoveAfterUnhealthy):
		return &FieldError{"remove_after_unhealthy", fmt.Sprintf("must be between %v and %v when set, got %s", MinRemoveAfterUnhealthy, MaxRemoveAfterUnhealthy, durText(l.RemoveAfterUnhealthy))}
	case l.Admin.Mode < ModeActive || l.Admin.Mode > ModeMaintenance:
		return &FieldError{"mode", fmt.Sprintf("must be active, draining or maintenance, got %v", l.Admin.Mode)}
	case len(l.Admin.Reason) > MaxModeReason:
		return &FieldError{"reason", fmt.Sprintf("must be at most %d bytes, got %d", MaxModeReason, len(l.Admin.Reason))}
	}
	return nil
}

// ModeRequest is what SetMode sets: the mode of one target, or of every
// target of a group.
type ModeRequest struct {
	// Target names one target; exactly one of Target and Group is set.
	Target string
	// Group names a group: every target in it now.
	Group string
	Mode  Mode
	// Reason says why; at most MaxModeReason bytes.
	Reason string
	// Until, when set, returns the targets to ACTIVE by themselves: after
	// now, at most MaxModeUntil ahead, and only with DRAINING or
	// MAINTENANCE.
	Until time.Time
}

// admin checks r and returns the Admin it sets at now, or a *FieldError.
func (r ModeRequest) admin(now time.Time) (Admin, error) {
	switch {
	case (r.Target == "") == (r.Group == ""):
		return Admin{}, &FieldError{"target", "exactly one of target and group must be set"}
	case r.Target != "" && ValidateName(r.Target) != nil:
		return Admin{}, &FieldError{"target", ValidateName(r.Target).Error()}
	case r.Group != "" && ValidateGroup(r.Group) != nil:
		return Admin{}, &FieldError{"group", ValidateGroup(r.Group).Error()}
	case r.Mode < ModeActive || r.Mode > ModeMaintenance:
		return Admin{}, &FieldError{"mode", fmt.Sprintf("must be active, draining or maintenance, got %v", r.Mode)}
	case len(r.Reason) > MaxModeReason:
		return Admin{}, &FieldError{"reason", fmt.Sprintf("must be at most %d bytes, got %d", MaxModeReason, len(r.Reason))}
	case !r.Until.IsZero() && r.Mode == ModeActive:
		return Admin{}, &FieldError{"until", "only with draining or maintenance: active needs no end"}
	case !r.Until.IsZero() && !r.Until.After(now):
		return Admin{}, &FieldError{"until", fmt.Sprintf("must be in the future, got %s (now %s)", r.Until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	case r.Until.Sub(now) > MaxModeUntil:
		return Admin{}, &FieldError{"until", fmt.Sprintf("must be at most %v ahead, got %s", MaxModeUntil, durText(ceilSecond(r.Until.Sub(now))))}
	}
	return Admin{Mode: r.Mode, Reason: r.Reason, Since: now, Until: r.Until}, nil
}

// ceilSecond rounds d up to a whole second. An until a client computed
// from a duration ("--until 800h") reaches pulsed a few milliseconds later,
// so its distance from now reads 799h59m59.996812513s: rounded up it reads
// as the client wrote it, and one just past a bound never reads as the
// bound itself. A d within a second of the largest duration is left as is.
func ceilSecond(d time.Duration) time.Duration {
	if t := d.Truncate(time.Second); t != d && d > 0 && d < math.MaxInt64-time.Second {
		return t + time.Second
	}
	return d
}

// drainAdmin returns the Admin of a drain for drainFor from now, or a
// *FieldError.
func drainAdmin(drainFor time.Duration, now time.Time) (Admin, error) {
	if drainFor < MinDrainFor || drainFor > MaxDrainFor {
		return Admin{}, &FieldError{"drain_for", fmt.Sprintf("must be between %v and %v, got %s", MinDrainFor, MaxDrainFor, durText(drainFor))}
	}
	return Admin{Mode: ModeDraining, Reason: fmt.Sprintf("removal in %v", drainFor), Since: now, RemoveAt: now.Add(drainFor)}, nil
}

// ModeChange details an EventModeChanged; the mode after it, with its
// reason, since, until and removal time, is Event.Status.Spec.Admin().
type ModeChange struct {
	// From is the mode before.
	From Mode
}

// modeSel selects the targets SetMode changes: one by name, or a group's.
type modeSel struct{ name, group string }

// adminSpecs returns, for each target sel selects, its spec with admin a
// (its Since kept when its mode does not change), sorted by name: the
// specs to store. Unknown: ErrUnknownTarget; a quarantined target named:
// ErrQuarantined (a group's quarantined targets are left out). With
// expect, none when the target named no longer has that admin state.
func (r *registry) adminSpecs(sel modeSel, a Admin, expect *Admin) ([]Spec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	var ts []*target
	if sel.name != "" {
		t, ok := r.targets[sel.name]
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownTarget, sel.name)
		}
		if q := t.quarantined(); q != "" {
			return nil, fmt.Errorf("%w: %s; fix it with AddTarget first", ErrQuarantined, q)
		}
		if expect != nil && t.spec.Admin() != *expect {
			return nil, nil
		}
		ts = append(ts, t)
	} else {
		for _, t := range r.targets {
			if t.spec.Group == sel.group && t.quarantined() == "" {
				ts = append(ts, t)
			}
		}
		if len(ts) == 0 {
			return nil, fmt.Errorf("%w: no target in group %q", ErrUnknownTarget, sel.group)
		}
	}
	specs := make([]Spec, len(ts))
	for i, t := range ts {
		na := a
		if old := t.spec.Admin(); old.Mode == a.Mode && !old.Since.IsZero() {
			na.Since = old.Since
		}
		specs[i] = t.spec.WithAdmin(na)
	}
	sortSpecs(specs)
	return specs, nil
}

// applyAdminLocked gives t the admin state a, announces the change (at
// at: the time its writer stored it) and brings t's state, probing and
// timers in line with it.
func (r *registry) applyAdminLocked(t *target, a Admin, now, at time.Time) {
	old := t.spec.Admin()
	if old == a {
		return
	}
	t.spec = t.spec.WithAdmin(a)
	r.emitLocked(Event{Kind: EventModeChanged, Time: at, Status: r.statusLocked(t, now), Mode: ModeChange{From: old.Mode}})
	r.modeEffectLocked(t, old.Mode, now)
}

// modeEffectLocked does what t's move from mode from to its mode now
// means: stop or resume probing, reset the verdict after maintenance, and
// hold or release the state.
func (r *registry) modeEffectLocked(t *target, from Mode, now time.Time) {
	a := t.spec.Admin()
	switch {
	case a.Mode == from:
	case a.Mode == ModeMaintenance:
		t.gen++ // a probe in flight says nothing any more
		t.proposing = false
		r.sched.removeLocked(t)
	case from == ModeMaintenance:
		if t.hasLast && now.Sub(t.last.Time) < t.spec.Interval {
			t.carried = true // a fresh verdict is carried over, as after a restart
		} else {
			t.m.State, t.m.PassStreak, t.m.FailStreak = StateUnhealthy, 0, 0
			t.carried = false
		}
		// No result is seen in maintenance: the unhealthy streak starts
		// again, or a target repaired while out would be removed
		// (remove_after_unhealthy) as it comes back, before its first probe.
		if lf := t.lifeOrNil(); lf != nil {
			lf.unhealthySince = time.Time{}
		}
		r.unhealthySinceLocked(t, now)
		if r.probedLocked(t) && t.index < 0 {
			t.slot = noTime
			r.sched.addLocked(t, now)
		}
	}
	why := cause{reason: a.holdReason()}
	r.updateLocked(t, now, why)
	r.proposeFlapLocked(t, now) // the verdict reset after maintenance
	r.timedLocked(t)
}

// modeHold reports whether t's mode holds it unhealthy, and why.
func modeHold(t *target) (string, bool) {
	a := t.spec.Admin()
	return a.holdReason(), a.Mode != ModeActive
}

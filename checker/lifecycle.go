package checker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// lifecycle is the component that writes administrative modes and
// removals, and acts when their time comes: a mode's Until (back to
// ACTIVE), a drain's RemoveAt (removed), a target unhealthy for its
// RemoveAfterUnhealthy (removed). The registry keeps the targets with such
// a deadline in a set (timedLocked) and wakes the lifecycle's loop, which
// asks it what is due (dueLifecycle) and acts through the same write paths
// as SetMode and Remove, so that every change is stored before it is
// applied. With a shared registry only a target's owner acts on it.
//
// It has no lock of its own: the façade's wmu serialises its writes with
// Add's and SetGroupPolicy's, and the registry's lock guards the rest.
type lifecycle struct {
	reg    *registry
	clock  Clock
	logger *slog.Logger
	wmu    sync.Locker // the façade's: one spec write to the store at a time

	wake chan struct{}
	once sync.Once     // starts run, or closes done if it never ran
	done chan struct{} // closed when run has returned
}

func newLifecycle(reg *registry, clock Clock, logger *slog.Logger, wmu sync.Locker) *lifecycle {
	l := &lifecycle{reg: reg, clock: clock, logger: logger, wmu: wmu,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	reg.lifeWake = l.wakeUp
	return l
}

func (l *lifecycle) wakeUp() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// set is SetMode and Drain: it stores the admin state a of the targets sel
// selects, then applies it. expect, if not nil, is the admin state the one
// target named must still have (for the loop's own changes); if it has
// another, set does nothing.
func (l *lifecycle) set(sel modeSel, a Admin, expect *Admin) ([]Status, error) {
	// With wmu held no other Add, Update or Remove changes the targets
	// while their specs are written.
	l.wmu.Lock()
	defer l.wmu.Unlock()
	specs, err := l.reg.adminSpecs(sel, a, expect)
	if err != nil || len(specs) == 0 {
		return nil, err
	}
	if n, err := l.reg.link.putSpecs(specs, nil); err != nil {
		return nil, fmt.Errorf("%w (%d of %d targets changed)", err, n, len(specs))
	}
	return l.reg.statuses(specs), nil
}

// putSpecs stores specs in store, all or none, and returns how many are
// stored.
func putSpecs(store Store, specs []Spec) (int, error) {
	var err error
	switch len(specs) {
	case 0:
	case 1:
		err = store.PutSpec(specs[0])
	default:
		err = store.PutSpecs(specs)
	}
	if err != nil {
		return 0, err
	}
	return len(specs), nil
}

// remove is Remove; why, if not nil, decides under the registry's lock
// whether the target is to go and says why ("" keeps it): the removal is
// then announced with an EventTargetExpired and logged.
func (l *lifecycle) remove(name string, why func(*target, time.Time) string) (bool, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	reason, ok := l.reg.removable(name, why)
	if !ok {
		return false, nil
	}
	return l.reg.link.deleteTarget(name, reason)
}

// start runs the loop that acts on deadlines until ctx ends; only its
// first call does anything.
func (l *lifecycle) start(ctx context.Context) {
	l.once.Do(func() { go l.run(ctx) })
}

// run acts on deadlines until ctx ends.
func (l *lifecycle) run(ctx context.Context) {
	defer close(l.done)
	for {
		due, next := l.reg.dueLifecycle(l.clock.Now())
		failed := false
		for _, a := range due {
			if err := l.act(a); err != nil {
				failed = true
				l.logger.Error("a timed change could not be stored; retrying in a second", "target", a.name, "error", err)
			}
		}
		if failed {
			next = l.clock.Now().Add(time.Second)
		}
		if at := l.outliers(l.clock.Now()); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
		var tick <-chan time.Time
		var timer Timer
		if !next.IsZero() {
			timer = l.clock.TimerAt(next)
			tick = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-l.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// wait waits for run to return, after its context ended; at once if it
// never started.
func (l *lifecycle) wait() {
	l.once.Do(func() { close(l.done) })
	<-l.done
}

// lifeAction is a deadline reached: a mode's end (admin set, to restore
// ACTIVE) or a removal (the rest).
type lifeAction struct {
	name  string
	admin Admin // the admin state the target had when found due
	until bool  // the mode's Until was reached
}

func (l *lifecycle) act(a lifeAction) error {
	if a.until {
		back := Admin{Mode: ModeActive, Reason: "until " + a.admin.Until.UTC().Format(time.RFC3339) + " reached", Since: l.clock.Now()}
		_, err := l.set(modeSel{name: a.name}, back, &a.admin)
		return err
	}
	_, err := l.remove(a.name, func(t *target, now time.Time) string { return l.reg.expiryLocked(t, now, a.admin) })
	return err
}

// lifeState is a target's slow start and unhealthy streak, in its
// targetMore: most targets have neither.
type lifeState struct {
	rampStart, rampEnd time.Time // the slow start in progress; zero when none
	unhealthySince     time.Time // the verdict unhealthy without a break since; zero when not
}

// lifeLocked returns t's lifeState, making it.
func (t *target) lifeLocked() *lifeState { return &t.moreLocked().life }

// slowStartLocked returns t's slow start: its own, else its group's.
func (r *registry) slowStartLocked(t *target) time.Duration {
	if l := t.spec.Lifecycle; l != nil && l.SlowStart > 0 {
		return l.SlowStart
	}
	if p := r.pools[t.spec.Group]; p != nil && t.spec.Group != "" {
		return p.policy.SlowStart
	}
	return 0
}

// removeAfterLocked returns t's automatic removal: its own, else its
// group's.
func (r *registry) removeAfterLocked(t *target) time.Duration {
	if l := t.spec.Lifecycle; l != nil && l.RemoveAfterUnhealthy > 0 {
		return l.RemoveAfterUnhealthy
	}
	if p := r.pools[t.spec.Group]; p != nil && t.spec.Group != "" {
		return p.policy.RemoveAfterUnhealthy
	}
	return 0
}

// rampLocked starts or ends t's slow start as its state becomes routable
// or not, and returns the end of the one started.
func (r *registry) rampLocked(t *target, from, to State, now time.Time) time.Time {
	switch {
	case !from.routable() && to.routable():
		if ss := r.slowStartLocked(t); ss > 0 {
			lf := t.lifeLocked()
			lf.rampStart, lf.rampEnd = now, now.Add(ss)
			return lf.rampEnd
		}
	case from.routable() && !to.routable() && t.lifeOrNil() != nil:
		lf := t.lifeOrNil()
		lf.rampStart, lf.rampEnd = time.Time{}, time.Time{}
	}
	return time.Time{}
}

// weightLocked returns t's weight in percent at now, and the end of its
// slow start if one is in progress.
func weightLocked(t *target, now time.Time) (uint32, time.Time) {
	if !t.state.routable() {
		return 0, time.Time{}
	}
	top := uint32(100)
	if o := t.outlierState(); o != nil && !o.Ejected {
		top = outlier.Weight // a degraded outlier
	}
	lf := t.lifeOrNil()
	if lf == nil || !now.Before(lf.rampEnd) {
		return top, time.Time{}
	}
	w := uint32(100 * now.Sub(lf.rampStart) / lf.rampEnd.Sub(lf.rampStart))
	return min(w, top), lf.rampEnd
}

// unhealthySinceLocked starts or ends t's unhealthy streak after its
// verdict may have changed, and keeps its place in the timed set.
func (r *registry) unhealthySinceLocked(t *target, now time.Time) {
	down := t.verdict() == StateUnhealthy && r.removeAfterLocked(t) > 0
	lf := t.lifeOrNil()
	switch {
	case down && (lf == nil || lf.unhealthySince.IsZero()):
		t.lifeLocked().unhealthySince = now
		r.timedLocked(t)
	case !down && lf != nil && !lf.unhealthySince.IsZero():
		lf.unhealthySince = time.Time{}
		r.timedLocked(t)
	}
}

// timedLocked puts t in the set of targets with a deadline, or takes it
// out, and wakes the lifecycle's loop.
func (r *registry) timedLocked(t *target) {
	a := t.spec.Admin()
	lf := t.lifeOrNil()
	timed := !a.Until.IsZero() || !a.RemoveAt.IsZero() || (lf != nil && !lf.unhealthySince.IsZero())
	_, was := r.timed[t]
	switch {
	case timed && !was:
		r.timed[t] = struct{}{}
	case !timed && was:
		delete(r.timed, t)
	case !timed:
		return
	}
	if r.lifeWake != nil {
		r.lifeWake()
	}
}

// recheckAfter is how soon an automatic removal held back by a degraded
// checker or a group in panic is looked at again.
const recheckAfter = time.Second

// lifeWakeLocked wakes the lifecycle's loop: something that held an
// automatic removal back has ended.
func (r *registry) lifeWakeLocked() {
	if r.lifeWake != nil && len(r.timed) > 0 {
		r.lifeWake()
	}
}

// dueLifecycle returns the deadlines reached at now, in name order, and
// the next one after now (zero if none).
func (r *registry) dueLifecycle(now time.Time) (due []lifeAction, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, time.Time{}
	}
	soonest := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for t := range r.timed {
		if !t.owned {
			continue // its owner acts on it
		}
		a := t.spec.Admin()
		switch {
		case !a.RemoveAt.IsZero() && !now.Before(a.RemoveAt):
			due = append(due, lifeAction{name: t.spec.Name, admin: a})
			continue
		case !a.RemoveAt.IsZero():
			soonest(a.RemoveAt)
		}
		switch {
		case !a.Until.IsZero() && !now.Before(a.Until):
			due = append(due, lifeAction{name: t.spec.Name, admin: a, until: true})
			continue
		case !a.Until.IsZero():
			soonest(a.Until)
		}
		if at, ok := r.deadAtLocked(t); ok {
			switch {
			case now.Before(at):
				soonest(at)
			case r.expiryLocked(t, now, a) != "":
				due = append(due, lifeAction{name: t.spec.Name, admin: a})
			default: // held back: degraded, or the group in panic
				soonest(now.Add(recheckAfter))
			}
		}
	}
	slices.SortFunc(due, func(a, b lifeAction) int { return strings.Compare(a.name, b.name) })
	return due, next
}

// deadAtLocked returns when t's unhealthy streak reaches its automatic
// removal, if it has both.
func (r *registry) deadAtLocked(t *target) (time.Time, bool) {
	after := r.removeAfterLocked(t)
	lf := t.lifeOrNil()
	if after <= 0 || lf == nil || lf.unhealthySince.IsZero() || t.spec.Admin().Mode == ModeMaintenance {
		return time.Time{}, false
	}
	return lf.unhealthySince.Add(after), true
}

// expiryLocked says why t, found with admin state a, is to be removed at
// now, or "" if it is not (any more): its drain ended, or it has been
// unhealthy for its RemoveAfterUnhealthy while the checker is not
// degraded and its group not in panic.
func (r *registry) expiryLocked(t *target, now time.Time, a Admin) string {
	if t.spec.Admin() != a {
		return ""
	}
	if !a.RemoveAt.IsZero() {
		if now.Before(a.RemoveAt) {
			return ""
		}
		// The time since the drain began, which a second drain_for does
		// not move: in whole seconds, as it was asked for.
		return fmt.Sprintf("drained for %v (RemoveTarget drain_for)", roundDur(a.RemoveAt.Sub(a.Since)))
	}
	at, ok := r.deadAtLocked(t)
	if !ok || now.Before(at) || r.sched.degradedLocked() {
		return ""
	}
	if p := r.pools[t.spec.Group]; p != nil && t.spec.Group != "" && len(p.held) > 0 {
		return ""
	}
	// The removal runs a little after the deadline, so the streak is
	// rounded as the setting is written: "10m0s", not "10m0.00516849s".
	return fmt.Sprintf("unhealthy for %v (remove_after_unhealthy %v)", roundDur(now.Sub(t.lifeOrNil().unhealthySince)), r.removeAfterLocked(t))
}

// removable checks a removal's condition for the shared registry's path:
// the reason, and whether the target is to be removed.
func (r *registry) removable(name string, why func(*target, time.Time) string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.targets[name]
	if !ok {
		return "", false
	}
	if why == nil {
		return "", true
	}
	reason := why(t, r.clock.Now())
	return reason, reason != ""
}

// statuses returns the statuses of the targets of specs still registered.
func (r *registry) statuses(specs []Spec) []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var out []Status
	for _, s := range specs {
		if t, ok := r.targets[s.Name]; ok {
			out = append(out, r.statusLocked(t, now))
		}
	}
	return out
}

func sortSpecs(specs []Spec) {
	slices.SortFunc(specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
}

// roundDur rounds d to whole seconds from a second on, as drains and
// automatic removals are asked for, and to milliseconds below: a reason
// reads "drained for 34s", not "34.017056604s".
func roundDur(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

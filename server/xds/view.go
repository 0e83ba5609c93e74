package xds

import (
	"slices"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// view is the checker's groups as xDS sees them, kept up to date from a
// watch. Only the follower's goroutine uses it, so it has no lock.
//
// Targets without a group are not in it: a cluster is a group.
type view struct {
	byName map[string]*endpoint            // every grouped target
	groups map[string]map[string]*endpoint // by group, then name
	// panicking lists the groups whose panic threshold holds targets. The
	// checker announces a panic's start and end, but not a target held or
	// let go during one, so the follower asks for these groups' holds.
	panicking map[string]bool
	// dirty lists the groups whose assignment may have changed since the
	// last push, including groups that went.
	dirty map[string]bool
	rev   uint64
}

func newView() *view {
	return &view{byName: map[string]*endpoint{}, groups: map[string]map[string]*endpoint{}, panicking: map[string]bool{}, dirty: map[string]bool{}}
}

// reset replaces the view with a snapshot. Every group before and after is
// dirty: a push compares each assignment with the one last pushed.
func (v *view) reset(snap []checker.Status, rev uint64) {
	for g := range v.groups {
		v.dirty[g] = true
	}
	v.byName, v.groups, v.panicking = map[string]*endpoint{}, map[string]map[string]*endpoint{}, map[string]bool{}
	for _, st := range snap {
		v.add(st)
		if st.PanicHeld {
			v.panicking[st.Spec.Group] = true
		}
	}
	v.rev = rev
}

// apply applies events in revision order.
func (v *view) apply(evs []checker.Event) {
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case checker.EventAdded, checker.EventUpdated:
			v.remove(e.Status.Spec.Name)
			v.add(e.Status)
		case checker.EventRemoved:
			v.remove(e.Status.Spec.Name)
		case checker.EventModeChanged:
			if ep := v.byName[e.Status.Spec.Name]; ep != nil {
				ep.mode = e.Status.Spec.Admin().Mode
				v.dirty[ep.group] = true
			}
		case checker.EventTransition:
			if ep := v.byName[e.Transition.Target]; ep != nil {
				ep.state = e.Transition.To
				ep.mode = e.Transition.Mode
				ep.rampStart, ep.rampEnd = time.Time{}, time.Time{}
				if !e.Transition.SlowStartEnd.IsZero() {
					ep.rampStart, ep.rampEnd = e.Transition.Time, e.Transition.SlowStartEnd
				}
				// A held target's published state does not change while it
				// is held: a transition ends the hold (a release).
				ep.held = false
				v.dirty[e.Transition.Group] = true
			}
		case checker.EventOutlierStarted, checker.EventOutlierEnded:
			if ep := v.byName[e.Policy.Target]; ep != nil {
				ep.outlier = nil
				if o := e.Policy.Outlier; e.Kind == checker.EventOutlierStarted && o != nil {
					o := *o
					ep.outlier = &o
				}
				v.dirty[ep.group] = true
			}
		case checker.EventPanicEntered:
			v.panicking[e.Policy.Group] = true
			v.setHeld(e.Policy.Group, e.Policy.Held)
		case checker.EventPanicExited:
			delete(v.panicking, e.Policy.Group)
			v.setHeld(e.Policy.Group, nil)
		}
		v.rev = e.Revision
	}
}

// ramps marks dirty every group with a slow start in progress at now, so
// that its weights are pushed again; a slow start over is pushed once more
// (every weight back to equal), then forgotten.
func (v *view) ramps(now time.Time) {
	for _, ep := range v.byName {
		if ep.rampEnd.IsZero() {
			continue
		}
		v.dirty[ep.group] = true
		if !now.Before(ep.rampEnd) {
			ep.rampStart, ep.rampEnd = time.Time{}, time.Time{}
		}
	}
}

// setHeld marks exactly the named targets of group as held.
func (v *view) setHeld(group string, held []string) {
	for name, ep := range v.groups[group] {
		h := slices.Contains(held, name)
		if h != ep.held {
			ep.held = h
			v.dirty[group] = true
		}
	}
}

func (v *view) add(st checker.Status) {
	g := st.Spec.Group
	if g == "" {
		return
	}
	ep := newEndpoint(st)
	v.byName[ep.name] = ep
	set := v.groups[g]
	if set == nil {
		set = map[string]*endpoint{}
		v.groups[g] = set
	}
	set[ep.name] = ep
	v.dirty[g] = true
}

func (v *view) remove(name string) {
	ep := v.byName[name]
	if ep == nil {
		return
	}
	delete(v.byName, name)
	g := ep.group
	set := v.groups[g]
	delete(set, name)
	if len(set) == 0 {
		delete(v.groups, g)
		delete(v.panicking, g)
	}
	v.dirty[g] = true
}

// endpoints returns a group's endpoints in name order, and whether the
// group exists.
func (v *view) endpoints(group string) ([]*endpoint, bool) {
	set, ok := v.groups[group]
	if !ok {
		return nil, false
	}
	out := make([]*endpoint, 0, len(set))
	for _, ep := range set {
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b *endpoint) int { return strings.Compare(a.name, b.name) })
	return out, true
}

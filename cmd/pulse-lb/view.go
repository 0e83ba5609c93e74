package main

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// view is remote mode's picture of one group of a pulsed, built from its
// WatchTransitions stream: a snapshot, then the events after it. It follows
// the stream's contract (see proto/pulse/v1/pulse.proto): events at or below
// the last revision applied are duplicates from a resumed stream and are
// ignored, progress events move the resume point, and a new snapshot
// replaces the view wholesale.
//
// While no stream is up the view keeps what it last knew, and the balancer
// keeps routing with it.
//
// A view is safe for concurrent use: one mutex guards it, taken by apply
// (the writer) and by Healthy (the rotor's read), and never held while
// logging or doing I/O.
type view struct {
	group string

	mu      sync.Mutex            // protects the fields below
	targets map[string]viewTarget // the applied view, by target name
	healthy []string              // sorted names of the routable targets; replaced, never modified
	rev     uint64                // the last revision applied (event or progress)
	synced  bool                  // a snapshot completed and rev is a resume point
	pending map[string]viewTarget // a snapshot being received; nil outside one
}

// viewTarget is what the view knows of one target.
type viewTarget struct {
	group    string
	state    pb.State
	routable bool
	ramp     ramp // its slow start; see weights.go
}

// change is one change of the view for the log: a state transition, or a
// target entering (From unspecified) or leaving (To unspecified) the view.
type change struct {
	Target   string
	From, To pb.State
	Revision uint64
	// Err is the failed probe's error that tipped a transition, if any.
	Err string
	// Reason says why, when no probe result did: "snapshot", "removed",
	// "moved to group x", or pulsed's own reason.
	Reason string
}

// String returns the transition's text, "<target>: <old> -> <new>", where a
// target that was not or is no longer in the view is "absent".
func (c change) String() string {
	return fmt.Sprintf("%s: %s -> %s", c.Target, stateName(c.From), stateName(c.To))
}

// stateName returns the lower-case name the checker uses ("healthy"), or
// "absent" for STATE_UNSPECIFIED.
func stateName(s pb.State) string {
	switch s {
	case pb.State_STATE_UNSPECIFIED:
		return "absent"
	case pb.State_STATE_HEALTHY:
		return "healthy"
	case pb.State_STATE_UNHEALTHY:
		return "unhealthy"
	case pb.State_STATE_SUSPECT:
		return "suspect"
	}
	return s.String()
}

// routableState reports whether a target in state s receives traffic:
// HEALTHY, and SUSPECT of the three-state model.
func routableState(s pb.State) bool {
	return s == pb.State_STATE_HEALTHY || s == pb.State_STATE_SUSPECT
}

func newView(group string) *view {
	return &view{group: group, targets: make(map[string]viewTarget)}
}

// Healthy returns the sorted names of the routable targets.
func (v *view) Healthy() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.healthy
}

// startRevision returns the start_revision of the next watch: the last
// revision applied, or 0 (a snapshot) before the first snapshot completed
// or after resnapshot.
func (v *view) startRevision() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.synced {
		return 0
	}
	return v.rev
}

// resnapshot makes the next watch start from a snapshot: the server cannot
// resume from the view's revision. The view keeps routing meanwhile.
func (v *view) resnapshot() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.synced = false
}

// streamEnded discards a snapshot that was still arriving when the stream
// broke; the view stays as it was.
func (v *view) streamEnded() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pending = nil
}

// lastState returns the state the view last saw name in, and whether it
// has seen it.
func (v *view) lastState(name string) (pb.State, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.targets[name]
	return t.state, ok
}

// apply applies one event of the stream and returns the changes to log.
func (v *view) apply(ev *pb.WatchTransitionsResponse) []change {
	v.mu.Lock()
	defer v.mu.Unlock()
	rev := ev.GetRevision()
	switch e := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Snapshot:
		if v.pending == nil {
			v.pending = make(map[string]viewTarget)
		}
		if t := fromStatus(e.Snapshot); t.group == v.group {
			v.pending[e.Snapshot.GetSpec().GetName()] = t
		}
		return nil
	case *pb.WatchTransitionsResponse_SnapshotComplete:
		return v.completeSnapshotLocked(rev)
	}
	// Before a snapshot completes there is nothing to apply events to (a
	// snapshot stream sends none before snapshot_complete), and an event at
	// or below the last revision applied is a duplicate.
	if !v.synced || v.pending != nil || rev <= v.rev {
		return nil
	}
	v.rev = rev
	var ch []change
	switch e := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Transition:
		tr := e.Transition
		if tr.GetGroup() != v.group {
			break
		}
		v.targets[tr.GetTarget()] = viewTarget{group: tr.GetGroup(), state: tr.GetTo(), routable: routableState(tr.GetTo()), ramp: rampOfTransition(tr)}
		ch = append(ch, change{Target: tr.GetTarget(), From: tr.GetFrom(), To: tr.GetTo(), Revision: rev, Err: tr.GetResult().GetError(), Reason: tr.GetReason()})
	case *pb.WatchTransitionsResponse_Added:
		ch = v.putLocked(e.Added, rev)
	case *pb.WatchTransitionsResponse_Updated:
		ch = v.putLocked(e.Updated, rev)
	case *pb.WatchTransitionsResponse_Removed:
		name := e.Removed.GetName()
		if old, ok := v.targets[name]; ok {
			delete(v.targets, name)
			ch = append(ch, change{Target: name, From: old.state, Revision: rev, Reason: "removed"})
		}
	case *pb.WatchTransitionsResponse_Progress:
		return nil
	}
	if len(ch) > 0 {
		v.recomputeLocked()
	}
	return ch
}

// putLocked applies an added or updated target. One whose group is no
// longer the view's moved away: it leaves the view.
func (v *view) putLocked(st *pb.TargetStatus, rev uint64) []change {
	name := st.GetSpec().GetName()
	old, had := v.targets[name]
	t := fromStatus(st)
	if t.group != v.group {
		if !had {
			return nil
		}
		delete(v.targets, name)
		return []change{{Target: name, From: old.state, Revision: rev, Reason: fmt.Sprintf("moved to group %q", t.group)}}
	}
	v.targets[name] = t
	switch {
	case !had:
		return []change{{Target: name, To: t.state, Revision: rev, Reason: "added"}}
	case old.state != t.state || old.routable != t.routable:
		return []change{{Target: name, From: old.state, To: t.state, Revision: rev, Reason: "updated"}}
	}
	return nil
}

// completeSnapshotLocked replaces the view with the snapshot just received
// at revision rev, which becomes the resume point even when it is lower
// than the old one (a snapshot from another server).
func (v *view) completeSnapshotLocked(rev uint64) []change {
	next := v.pending
	if next == nil {
		next = make(map[string]viewTarget)
	}
	var ch []change
	for _, name := range slices.Sorted(maps.Keys(next)) {
		old, had := v.targets[name]
		t := next[name]
		if !had || old.state != t.state || old.routable != t.routable {
			ch = append(ch, change{Target: name, From: old.state, To: t.state, Revision: rev, Reason: "snapshot"})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.targets)) {
		if _, ok := next[name]; !ok {
			ch = append(ch, change{Target: name, From: v.targets[name].state, Revision: rev, Reason: "snapshot"})
		}
	}
	v.targets, v.pending = next, nil
	v.rev, v.synced = rev, true
	v.recomputeLocked()
	return ch
}

func (v *view) recomputeLocked() {
	var healthy []string
	for name, t := range v.targets {
		if t.routable {
			healthy = append(healthy, name)
		}
	}
	slices.Sort(healthy)
	v.healthy = healthy
}

func fromStatus(st *pb.TargetStatus) viewTarget {
	return viewTarget{group: st.GetSpec().GetGroup(), state: st.GetState(), routable: st.GetRoutable(), ramp: rampOf(st)}
}

package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

const (
	healthy   = pb.State_STATE_HEALTHY
	unhealthy = pb.State_STATE_UNHEALTHY
	suspect   = pb.State_STATE_SUSPECT
	absent    = pb.State_STATE_UNSPECIFIED
)

// Helpers that build the stream's events.

func targetStatus(name, group string, s pb.State) *pb.TargetStatus {
	return &pb.TargetStatus{Spec: &pb.Target{Name: name, Group: group}, State: s, Routable: routableState(s)}
}

func evSnapshot(rev uint64, name, group string, s pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: targetStatus(name, group, s)}}
}

func evComplete(rev uint64) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_SnapshotComplete{SnapshotComplete: &pb.SnapshotComplete{}}}
}

func evTransition(rev uint64, name, group string, from, to pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{Target: name, Group: group, From: from, To: to}}}
}

func evAdded(rev uint64, name, group string, s pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Added{Added: targetStatus(name, group, s)}}
}

func evUpdated(rev uint64, name, group string, s pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Updated{Updated: targetStatus(name, group, s)}}
}

func evRemoved(rev uint64, name, group string) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Removed{Removed: &pb.TargetRemoved{Name: name, Group: group}}}
}

func evProgress(rev uint64) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Progress{Progress: &pb.Progress{}}}
}

// step is one thing that happens to a view, and what it should look like
// afterwards.
type step struct {
	ev *pb.WatchTransitionsResponse
	// Instead of an event: "broken" (the stream ended), "resnapshot"
	// (pulsed said OUT_OF_RANGE), or "resume:N" handled by the test.
	do string

	wantLog     []string // change texts logged
	wantHealthy []string
	wantStart   uint64 // start_revision of the next watch
}

func TestViewApply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"snapshot builds the view", []step{
			{ev: evSnapshot(10, "a", "lb", healthy), wantStart: 0},
			{ev: evSnapshot(10, "b", "lb", unhealthy), wantStart: 0},
			{ev: evSnapshot(10, "c", "lb", suspect), wantStart: 0},
			{ev: evComplete(10), wantLog: []string{"a: absent -> healthy", "b: absent -> unhealthy", "c: absent -> suspect"}, wantHealthy: []string{"a", "c"}, wantStart: 10},
		}},
		{"nothing routes before the snapshot completes", []step{
			{ev: evSnapshot(10, "a", "lb", healthy), wantStart: 0},
			{ev: evTransition(11, "b", "lb", unhealthy, healthy), wantStart: 0},
		}},
		{"transitions apply in revision order; duplicates and older ones are ignored", []step{
			{ev: evSnapshot(10, "a", "lb", healthy)},
			{ev: evComplete(10), wantLog: []string{"a: absent -> healthy"}, wantHealthy: []string{"a"}, wantStart: 10},
			{ev: evTransition(11, "a", "lb", healthy, unhealthy), wantLog: []string{"a: healthy -> unhealthy"}, wantStart: 11},
			{ev: evTransition(11, "a", "lb", healthy, unhealthy), wantStart: 11},
			{ev: evTransition(9, "a", "lb", unhealthy, healthy), wantStart: 11},
			{ev: evTransition(13, "a", "lb", unhealthy, healthy), wantLog: []string{"a: unhealthy -> healthy"}, wantHealthy: []string{"a"}, wantStart: 13},
		}},
		{"progress moves the resume point, and an event at or below it is a duplicate", []step{
			{ev: evComplete(10), wantStart: 10},
			{ev: evProgress(20), wantStart: 20},
			{ev: evAdded(20, "a", "lb", healthy), wantStart: 20},
			{ev: evProgress(15), wantStart: 20},
			{ev: evAdded(21, "a", "lb", unhealthy), wantLog: []string{"a: absent -> unhealthy"}, wantStart: 21},
		}},
		{"added, updated and removed", []step{
			{ev: evComplete(10), wantStart: 10},
			{ev: evAdded(11, "a", "lb", unhealthy), wantLog: []string{"a: absent -> unhealthy"}, wantStart: 11},
			{ev: evTransition(12, "a", "lb", unhealthy, healthy), wantLog: []string{"a: unhealthy -> healthy"}, wantHealthy: []string{"a"}, wantStart: 12},
			{ev: evUpdated(13, "a", "lb", healthy), wantHealthy: []string{"a"}, wantStart: 13},
			{ev: evAdded(14, "b", "lb", healthy), wantLog: []string{"b: absent -> healthy"}, wantHealthy: []string{"a", "b"}, wantStart: 14},
			{ev: evRemoved(15, "a", "lb"), wantLog: []string{"a: healthy -> absent"}, wantHealthy: []string{"b"}, wantStart: 15},
			{ev: evRemoved(16, "zz", "lb"), wantHealthy: []string{"b"}, wantStart: 16},
		}},
		{"a target moved to another group leaves the view, and one moved in joins it", []step{
			{ev: evSnapshot(10, "a", "lb", healthy)},
			{ev: evComplete(10), wantLog: []string{"a: absent -> healthy"}, wantHealthy: []string{"a"}, wantStart: 10},
			{ev: evUpdated(11, "a", "other", healthy), wantLog: []string{"a: healthy -> absent"}, wantStart: 11},
			{ev: evTransition(12, "a", "other", healthy, unhealthy), wantStart: 12},
			{ev: evUpdated(13, "a", "lb", unhealthy), wantLog: []string{"a: absent -> unhealthy"}, wantStart: 13},
			{ev: evUpdated(14, "x", "other", healthy), wantStart: 14},
		}},
		{"a re-snapshot replaces the view, even at a lower revision", []step{
			{ev: evSnapshot(10, "a", "lb", healthy)},
			{ev: evSnapshot(10, "b", "lb", healthy)},
			{ev: evComplete(10), wantLog: []string{"a: absent -> healthy", "b: absent -> healthy"}, wantHealthy: []string{"a", "b"}, wantStart: 10},
			{do: "resnapshot", wantHealthy: []string{"a", "b"}, wantStart: 0},
			{ev: evTransition(11, "a", "lb", healthy, unhealthy), wantHealthy: []string{"a", "b"}, wantStart: 0},
			{ev: evSnapshot(5, "b", "lb", healthy), wantHealthy: []string{"a", "b"}, wantStart: 0},
			{ev: evSnapshot(5, "c", "lb", unhealthy), wantHealthy: []string{"a", "b"}, wantStart: 0},
			{ev: evComplete(5), wantLog: []string{"c: absent -> unhealthy", "a: healthy -> absent"}, wantHealthy: []string{"b"}, wantStart: 5},
			{ev: evTransition(6, "c", "lb", unhealthy, healthy), wantLog: []string{"c: unhealthy -> healthy"}, wantHealthy: []string{"b", "c"}, wantStart: 6},
		}},
		{"a stream broken mid-snapshot keeps the old view and snapshots again", []step{
			{ev: evSnapshot(10, "a", "lb", healthy)},
			{ev: evComplete(10), wantLog: []string{"a: absent -> healthy"}, wantHealthy: []string{"a"}, wantStart: 10},
			{do: "resnapshot", wantHealthy: []string{"a"}},
			{ev: evSnapshot(20, "b", "lb", healthy), wantHealthy: []string{"a"}},
			{do: "broken", wantHealthy: []string{"a"}},
			{ev: evSnapshot(21, "a", "lb", unhealthy), wantHealthy: []string{"a"}},
			{ev: evComplete(21), wantLog: []string{"a: healthy -> unhealthy"}, wantStart: 21},
		}},
		{"a snapshot of another group's target is ignored", []step{
			{ev: evSnapshot(10, "a", "other", healthy)},
			{ev: evComplete(10), wantStart: 10},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newView("lb")
			for i, s := range tc.steps {
				var texts []string
				switch s.do {
				case "":
					for _, ch := range v.apply(s.ev) {
						texts = append(texts, ch.String())
					}
				case "broken":
					v.streamEnded()
				case "resnapshot":
					v.resnapshot()
				}
				if diff := cmp.Diff(s.wantLog, texts); diff != "" {
					t.Errorf("step %d: logged changes (-want +got):\n%s", i, diff)
				}
				if got := v.Healthy(); !slices.Equal(got, s.wantHealthy) {
					t.Errorf("step %d: Healthy() = %v, want %v", i, got, s.wantHealthy)
				}
				if got := v.startRevision(); got != s.wantStart {
					t.Errorf("step %d: startRevision() = %d, want %d", i, got, s.wantStart)
				}
			}
		})
	}
}

// A transition's change carries the probe error, and lastState remembers
// the last state seen.
func TestViewDetails(t *testing.T) {
	v := newView("lb")
	v.apply(evSnapshot(10, "a", "lb", healthy))
	v.apply(evComplete(10))
	ev := evTransition(11, "a", "lb", healthy, unhealthy)
	ev.GetTransition().Result = &pb.ProbeResult{Error: "connection refused"}
	got := v.apply(ev)
	want := []change{{Target: "a", From: healthy, To: unhealthy, Revision: 11, Err: "connection refused"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("change (-want +got):\n%s", diff)
	}
	if st, ok := v.lastState("a"); !ok || st != unhealthy {
		t.Errorf("lastState(a) = %v, %v; want unhealthy, true", st, ok)
	}
	if _, ok := v.lastState("b"); ok {
		t.Errorf("lastState(b) found a target never seen")
	}
}

package main

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// weighted is a healthSource with fixed weights.
type weighted struct {
	healthy []string
	w       map[string]uint32
}

func (s weighted) Healthy() []string                      { return s.healthy }
func (s weighted) Weight(name string, _ time.Time) uint32 { return s.w[name] }

func pickNames(b *balancer, n int) map[string]int {
	got := map[string]int{}
	for range n {
		i, ok := b.pick(b.health.Healthy())
		if !ok {
			got["503"]++
			continue
		}
		got[b.backends[i].name]++
	}
	return got
}

// A backend in its slow start gets its weight's share of the turns: at
// 25% beside one at 100%, one request in five; at 0%, none while another
// is routable; and weights never make pulse-lb answer 503 while a backend
// is routable.
func TestWeightsShareTheTurns(t *testing.T) {
	backends := []*backend{{name: "a"}, {name: "b"}}
	for _, tc := range []struct {
		name string
		w    map[string]uint32
		want map[string]int
	}{
		{"both full", map[string]uint32{"a": 100, "b": 100}, map[string]int{"a": 50, "b": 50}},
		{"b at 25%", map[string]uint32{"a": 100, "b": 25}, map[string]int{"a": 80, "b": 20}},
		{"b at 0%", map[string]uint32{"a": 100, "b": 0}, map[string]int{"a": 100}},
		{"both at 0%: still served", map[string]uint32{"a": 0, "b": 0}, map[string]int{"a": 50, "b": 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &balancer{backends: backends, health: weighted{healthy: []string{"a", "b"}, w: tc.w}}
			got := pickNames(b, 100)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("picks %v, want %v", got, tc.want)
					break
				}
			}
			if got["503"] != 0 {
				t.Errorf("%d picks failed", got["503"])
			}
		})
	}
}

// The remote view takes a backend's ramp from its transition to routable
// (and from a snapshot's status), and its weight rises linearly over it.
func TestViewWeightFollowsTheRamp(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := newView("edge")
	v.apply(&pb.WatchTransitionsResponse{Revision: 1, Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: &pb.TargetStatus{
		Spec: &pb.Target{Name: "web-1", Group: "edge"}, State: pb.State_STATE_HEALTHY, Routable: true,
		LastTransitionTime: timestamppb.New(at.Add(-5 * time.Second)), SlowStartEnd: timestamppb.New(at.Add(5 * time.Second)),
	}}})
	v.apply(&pb.WatchTransitionsResponse{Revision: 1, Event: &pb.WatchTransitionsResponse_SnapshotComplete{}})
	if w := v.Weight("web-1", at); w != 50 {
		t.Errorf("weight from the snapshot, halfway: %d, want 50", w)
	}
	v.apply(&pb.WatchTransitionsResponse{Revision: 2, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
		Target: "web-1", Group: "edge", From: pb.State_STATE_HEALTHY, To: pb.State_STATE_UNHEALTHY, Time: timestamppb.New(at),
	}}})
	v.apply(&pb.WatchTransitionsResponse{Revision: 3, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
		Target: "web-1", Group: "edge", From: pb.State_STATE_UNHEALTHY, To: pb.State_STATE_HEALTHY, Time: timestamppb.New(at),
		SlowStartEnd: timestamppb.New(at.Add(10 * time.Second)),
	}}})
	for _, tc := range []struct {
		after time.Duration
		want  uint32
	}{{0, 0}, {time.Second, 10}, {5 * time.Second, 50}, {10 * time.Second, 100}, {time.Minute, 100}} {
		if w := v.Weight("web-1", at.Add(tc.after)); w != tc.want {
			t.Errorf("weight %v after the transition: %d, want %d", tc.after, w, tc.want)
		}
	}
}

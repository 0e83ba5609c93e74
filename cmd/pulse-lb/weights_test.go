package main

import (
	"testing"
	"time"

	"github.com/pulsehealth/pulse/client"
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

// A degraded outlier of pulsed's stream is weighed at its lowered weight:
// one request in eleven beside a backend at 100%; once it ends, its full
// share again.
func TestDegradedOutlierWeight(t *testing.T) {
	f := &fakePulse{}
	out := &pb.OutlierState{Reason: "p50 38ms vs group 4ms"}
	policy := func(rev uint64, kind pb.PolicyEvent_Kind) *pb.WatchTransitionsResponse {
		return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: kind, Group: "lb", Target: "b", Outlier: out}}}
	}
	f.scripts = []watchScript{{events: []*pb.WatchTransitionsResponse{
		evSnapshot(10, "a", "lb", healthy), evSnapshot(10, "b", "lb", healthy), evComplete(10),
		policy(11, pb.PolicyEvent_KIND_OUTLIER_STARTED),
	}}}
	s, _ := startFake(t, f, 0)
	waitUntil(t, func() bool { return s.view.Revision() >= 11 })
	if w := s.Weight("b", time.Now()); w != client.OutlierWeight {
		t.Fatalf("b's weight %d, want %d", w, client.OutlierWeight)
	}
	b := &balancer{backends: []*backend{{name: "a"}, {name: "b"}}, health: s}
	if got := pickNames(b, 110); got["a"] != 100 || got["b"] != 10 {
		t.Errorf("picks %v, want a 100, b 10", got)
	}
	if w := s.Weight("a", time.Now()); w != 100 {
		t.Errorf("a's weight %d", w)
	}
}

package main

import (
	"testing"
	"time"
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

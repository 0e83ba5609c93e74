package main

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func TestStamps(t *testing.T) {
	s := newStamps(3)
	if _, ok := s.get(0); ok {
		t.Fatal("a new stamp is set")
	}
	at := s.base.Add(1500 * time.Millisecond)
	s.set(0, at)
	if got, ok := s.get(0); !ok || got.Sub(s.base) != 1500*time.Millisecond {
		t.Errorf("get = %v, %v; want base+1.5s", got.Sub(s.base), ok)
	}
	s.set(1, s.base) // at the base itself: still set
	if _, ok := s.get(1); !ok {
		t.Error("a stamp at the base reads as unset")
	}
	s.setFirst(2, at)
	s.setFirst(2, at.Add(time.Second))
	if got, _ := s.get(2); !got.Equal(at) {
		t.Errorf("setFirst overwrote: %v", got.Sub(s.base))
	}
	s.clear(2)
	if _, ok := s.get(2); ok || s.len() != 3 {
		t.Error("clear did not clear")
	}
}

func TestTrackerCountsHealthyTargets(t *testing.T) {
	tr := newTracker(3)
	now := time.Now()
	transition := func(name string, to pb.State) *pb.Transition {
		return &pb.Transition{Target: name, To: to, Time: timestamppb.New(now)}
	}
	tr.apply(transition("t000000", pb.State_STATE_HEALTHY), now)
	tr.apply(transition("t000001", pb.State_STATE_HEALTHY), now)
	tr.apply(transition("t000001", pb.State_STATE_HEALTHY), now) // a repeat does not count twice
	tr.apply(transition("web-1", pb.State_STATE_HEALTHY), now)   // not a farm target
	tr.apply(transition("t000009", pb.State_STATE_HEALTHY), now) // beyond the farm
	if got := tr.nHealthy.Load(); got != 2 {
		t.Errorf("%d healthy, want 2", got)
	}
	tr.apply(transition("t000000", pb.State_STATE_UNHEALTHY), now.Add(time.Second))
	tr.apply(transition("t000002", pb.State_STATE_UNHEALTHY), now) // was never healthy
	if got := tr.nHealthy.Load(); got != 1 {
		t.Errorf("%d healthy after a fall, want 1", got)
	}
	if at, ok := tr.downAt.get(0); !ok || !at.Equal(now.Add(time.Second)) {
		t.Errorf("t000000's fall recorded at %v, %v", at, ok)
	}
	if _, ok := tr.downAt.get(1); ok {
		t.Error("t000001 has a fall")
	}
	if got := tr.events.Load(); got != 5 {
		t.Errorf("%d events counted, want 5 (the farm's)", got)
	}
}

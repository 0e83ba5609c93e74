package main

import (
	"testing"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// A target in maintenance or quarantined is never probed, so its state
// carried over from before a restart is not shown as waiting for a probe:
// neither in its state nor under ls --state carried-over.
func TestCarriedOverOnlyWhileAProbeIsDue(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *pb.TargetStatus
		want bool
	}{
		{"active", &pb.TargetStatus{CarriedOver: true, Mode: pb.Mode_MODE_ACTIVE}, true},
		{"draining", &pb.TargetStatus{CarriedOver: true, Mode: pb.Mode_MODE_DRAINING}, true},
		{"maintenance", &pb.TargetStatus{CarriedOver: true, Mode: pb.Mode_MODE_MAINTENANCE}, false},
		{"quarantined", &pb.TargetStatus{CarriedOver: true, Quarantined: "interval: must be at least 100ms"}, false},
		{"probed since", &pb.TargetStatus{Mode: pb.Mode_MODE_ACTIVE}, false},
	} {
		tc.st.State = pb.State_STATE_HEALTHY
		want := "healthy"
		if tc.want {
			want = "healthy (carried over)"
		}
		if got := stateText(tc.st); got != want {
			t.Errorf("%s: state %q, want %q", tc.name, got, want)
		}
		if got := stateFilters["carried-over"](tc.st); got != tc.want {
			t.Errorf("%s: ls --state carried-over matches: %v, want %v", tc.name, got, tc.want)
		}
	}
}

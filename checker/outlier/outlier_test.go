package outlier

import (
	"strings"
	"testing"
	"time"
)

// The policy's bounds name the field, without the "outlier." the checker
// puts before it.
func TestPolicyBounds(t *testing.T) {
	for _, tt := range []struct {
		p    Policy
		want string
	}{
		{Policy{LatencyFactor: 0.5}, "latency_factor: must be 0 (off) or between 1 and 1000, got 0.5"},
		{Policy{Interval: time.Millisecond}, "interval: must be between 1s and 1h0m0s"},
		{Policy{MinMembers: 1}, "min_members: must be 0 (3) or at least 2, got 1"},
		{Policy{FailurePercentage: 101}, "failure_percentage"},
		{Policy{MaxEjectionPercent: -1}, "max_ejection_percent"},
	} {
		err := tt.p.Validate()
		if _, ok := err.(*FieldError); !ok || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.p, err, tt.want)
		}
	}
	if err := (Policy{LatencyFactor: 3, Enforce: true}).Validate(); err != nil {
		t.Errorf("a valid policy: %v", err)
	}
}

// A replica stores a sample only when it says more than the stored one.
func TestSampleDiffers(t *testing.T) {
	old := Sample{Target: "a", Latency: 100 * time.Millisecond, Probes: 10, Passes: 5}
	for _, tt := range []struct {
		s    Sample
		want bool
	}{
		{Sample{Target: "a", Latency: 105 * time.Millisecond, Probes: 10, Passes: 5}, false},
		{Sample{Target: "a", Latency: 111 * time.Millisecond, Probes: 10, Passes: 5}, true},
		{Sample{Target: "a", Latency: 89 * time.Millisecond, Probes: 10, Passes: 5}, true},
		{Sample{Target: "a", Probes: 2, Passes: 5}, true},
		{Sample{Target: "a", Latency: 100 * time.Millisecond, Probes: 10, Passes: 6}, true},
		{Sample{Target: "a", Latency: 100 * time.Millisecond, Probes: 10, Passes: 5, Failures: 1}, true},
	} {
		if got := tt.s.Differs(old); got != tt.want {
			t.Errorf("%+v against %+v: %v, want %v", tt.s, old, got, tt.want)
		}
	}
}

package outlier

import (
	"testing"
	"time"
)

// A sampler keeps the last n latencies and gives their median from
// MinLatencyProbes on; it counts passive outcomes from one sample to the
// next; reset drops its latencies, and so does a policy that asks for
// fewer than it holds.
func TestSampler(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	now := time.Unix(1_800_000_000, 0)
	var s Sampler
	s.Latency(ms(9), 3)
	s.Latency(ms(1), 3)
	s.Outcome(true)
	s.Outcome(false)
	s.Outcome(false)
	if got := s.Take("a", now, false); got != (Sample{Target: "a", Probes: 2, Passes: 1, Failures: 2, Time: now}) {
		t.Errorf("two probes: %+v; want no latency yet, the outcomes counted", got)
	}
	for _, d := range []int{2, 5, 7} { // 9 and 1 leave the ring
		s.Latency(ms(d), 3)
	}
	if got := s.Take("a", now, false); got.Latency != ms(5) || got.Probes != 3 || got.Passes != 0 || got.Failures != 0 {
		t.Errorf("the last three: %+v; want their median 5ms, the outcomes afresh", got)
	}
	if got := s.Take("a", now, true); got.Latency != 0 || got.Probes != 0 {
		t.Errorf("reset: %+v; want no latency", got)
	}
	for _, d := range []int{4, 4, 4, 4} {
		s.Latency(ms(d), 4)
	}
	s.Latency(ms(8), 3) // the policy asks for three now
	if got := s.Take("a", now, false); got.Probes != 1 {
		t.Errorf("fewer asked for: %+v; want one probe, the ring afresh", got)
	}
}

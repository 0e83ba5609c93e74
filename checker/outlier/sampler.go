package outlier

import "time"

// Sampler is a target's samples, on its owner: the latencies of its last
// passing probes, in a ring, and its passive outcomes since its last
// sample. The zero value is empty and ready. It is not safe for concurrent
// use: its owner guards it.
type Sampler struct {
	lat              []time.Duration // its last passing probes' latencies, a ring
	at               int             // the next slot of lat
	passes, failures int             // passive outcomes since the last sample
}

// Latency keeps a passing probe's latency among the last n (n > 0, the
// policy's Samples). When the policy asks for fewer than it holds, it
// starts afresh.
func (s *Sampler) Latency(d time.Duration, n int) {
	if s.lat == nil {
		s.lat = make([]time.Duration, 0, n)
	}
	if len(s.lat) > n {
		s.lat, s.at = s.lat[:0], 0
	}
	if len(s.lat) < n {
		s.lat = append(s.lat, d)
	} else {
		s.lat[s.at] = d
	}
	s.at = (s.at + 1) % n
}

// Outcome counts a passive outcome.
func (s *Sampler) Outcome(pass bool) {
	if pass {
		s.passes++
	} else {
		s.failures++
	}
}

// Take returns the sample of target at now and starts counting its
// passive outcomes afresh. With reset, its latencies are dropped first:
// its last passing probes say nothing of it now (it is in maintenance,
// or its own probes find it unhealthy), and would weigh on its group's
// median; it starts afresh, from MinLatencyProbes new passing probes.
func (s *Sampler) Take(target string, now time.Time, reset bool) Sample {
	if reset {
		s.lat, s.at = s.lat[:0], 0
	}
	smp := Sample{Target: target, Time: now, Probes: len(s.lat), Passes: s.passes, Failures: s.failures}
	if len(s.lat) >= MinLatencyProbes {
		smp.Latency = median(s.lat)
	}
	s.passes, s.failures = 0, 0
	return smp
}

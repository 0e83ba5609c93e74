package outlier

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// median returns the median of ds (the mean of the middle two of an even
// count), leaving ds as it was.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// SameMembers reports whether two records' members say the same of each
// member.
func SameMembers(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool {
		if x.Target != y.Target || x.Over != y.Over || x.Ejections != y.Ejections || (x.State == nil) != (y.State == nil) {
			return false
		}
		return x.State == nil || *x.State == *y.State
	})
}

// Judge is the judgement of a group at now: a pure function of its policy
// (with its defaults: Policy.WithDefaults), its members (sorted), their
// stored samples and the last record. The record it returns has no Group:
// the caller names it.
func Judge(p Policy, names []string, samples map[string]Sample, prev Record, now time.Time) Record {
	before := map[string]Member{}
	for _, m := range prev.Members {
		before[m.Target] = m
	}
	reasons := map[string]string{}
	over := map[string]bool{}

	// The latency rule.
	var lats []time.Duration
	for _, n := range names {
		if s, ok := samples[n]; ok && s.Probes >= MinLatencyProbes {
			lats = append(lats, s.Latency)
		}
	}
	if p.LatencyFactor > 0 && len(lats) >= p.MinMembers {
		gm := median(lats)
		for _, n := range names {
			s := samples[n]
			if s.Probes >= MinLatencyProbes && float64(s.Latency) > p.LatencyFactor*float64(gm) && s.Latency > gm+p.LatencyMinDelta {
				over[n] = true
				if before[n].Over+1 >= p.Consecutive {
					reasons[n] = fmt.Sprintf("p50 %v vs group %v", roundLatency(s.Latency), roundLatency(gm))
				}
			}
		}
	}
	// The success-rate rule (Envoy's).
	if p.SuccessRateStdevFactor > 0 {
		var rates []float64
		for _, n := range names {
			if s := samples[n]; s.Passes+s.Failures >= p.SuccessRateRequestVolume {
				rates = append(rates, float64(s.Passes)/float64(s.Passes+s.Failures))
			}
		}
		if len(rates) >= p.MinMembers {
			mean, sd := meanStdev(rates)
			for _, n := range names {
				s := samples[n]
				if s.Passes+s.Failures < p.SuccessRateRequestVolume || reasons[n] != "" {
					continue
				}
				if rate := float64(s.Passes) / float64(s.Passes+s.Failures); rate < mean-p.SuccessRateStdevFactor*sd {
					reasons[n] = fmt.Sprintf("success rate %.1f%% vs group %.1f%% (stdev %.1f%%)", 100*rate, 100*mean, 100*sd)
				}
			}
		}
	}
	// The failure-percentage rule (Envoy's).
	if p.FailurePercentage > 0 {
		for _, n := range names {
			s := samples[n]
			total := s.Passes + s.Failures
			if total >= p.FailurePercentageRequestVolume && reasons[n] == "" && 100*s.Failures >= p.FailurePercentage*total {
				reasons[n] = fmt.Sprintf("%d of %d outcomes failed (%d%%)", s.Failures, total, 100*s.Failures/total)
			}
		}
	}

	// Who is ejected, degraded, or neither, now.
	ejected := 0
	for _, n := range names {
		if m := before[n]; m.State != nil && m.State.Ejected && now.Before(m.State.Until) {
			ejected++
		}
	}
	limit := max(1, p.MaxEjectionPercent*len(names)/100)
	out := Record{Time: now}
	for _, n := range names {
		m := before[n]
		m.Target = n
		if over[n] {
			m.Over++
		} else {
			m.Over = 0
		}
		reason := reasons[n]
		switch st := m.State; {
		case st != nil && st.Ejected && now.Before(st.Until):
			// Ejected: it stays out until its time is up.
		case p.Enforce && reason != "" && ejected < limit:
			m.Ejections++
			ejected++
			m.State = &State{Ejected: true, Reason: reason, Since: now, Until: now.Add(time.Duration(m.Ejections) * p.BaseEjectionTime), Ejections: m.Ejections}
		case reason != "":
			if p.Enforce {
				reason += fmt.Sprintf(" (not ejected: %d of %d ejected already, at most %d%%)", ejected, len(names), p.MaxEjectionPercent)
			}
			if st == nil || st.Ejected || st.Reason != reason {
				since := now
				if st != nil && !st.Ejected {
					since = st.Since
				}
				m.State = &State{Reason: reason, Since: since, Ejections: m.Ejections}
			}
		default:
			if st == nil || !st.Ejected {
				m.Ejections = max(0, m.Ejections-1) // a judgement passed unejected
			}
			m.State = nil
		}
		if m.Over > 0 || m.Ejections > 0 || m.State != nil {
			out.Members = append(out.Members, m)
		}
	}
	return out
}

// roundLatency rounds a latency for a reason: to 0.1ms below 10ms, to the
// millisecond above.
func roundLatency(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// meanStdev returns the mean and the population standard deviation of xs.
func meanStdev(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

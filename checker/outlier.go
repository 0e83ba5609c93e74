package checker

import (
	"fmt"
	"math"
	"time"
)

// Outlier detection: a member of a group much slower than the group, or
// failing more of its passive outcomes than the others, is caught before
// it is down (GroupPolicy.Outlier).
//
// Every interval each target's owner stores a sample of it (the median
// latency of its last passing probes, its passive outcomes since the last
// sample: OutlierSample), through the link. One member judges each group
// (alone, the checker itself; on replicas, one picked by rendezvous
// hashing): it compares the stored samples and stores the group's
// outliers (OutlierRecord), through the link, with what it counts from
// one judgement to the next (windows in a row, ejections in a row), so
// that another judge carries on from it. Every member applies the record
// alike: OUTLIER_STARTED and OUTLIER_ENDED at its revision, the target's
// Status.Outlier, and for an ejected target its published state, which
// its owner writes as for any hold.

// OutlierPolicy is a group's outlier detection. The zero value is off; a
// rule is on when its threshold is set.
type OutlierPolicy struct {
	// Interval is how often the group is judged. If 0,
	// DefaultOutlierInterval; in [MinOutlierInterval, MaxOutlierInterval].
	Interval time.Duration
	// Samples is how many of a member's latest passing probes its latency
	// is the median of. If 0, DefaultOutlierSamples; in [3, 100].
	Samples int
	// LatencyFactor turns the latency rule on: a member whose latency is
	// above LatencyFactor x the group's median latency and above the
	// median + LatencyMinDelta, at Consecutive judgements in a row, is an
	// outlier. 0: off; else in [1, 1000].
	LatencyFactor float64
	// LatencyMinDelta: if 0, DefaultOutlierMinDelta; at most 1h.
	LatencyMinDelta time.Duration
	// Consecutive is how many judgements in a row the latency rule must
	// hold. If 0, 3; in [1, 100].
	Consecutive int
	// SuccessRateStdevFactor turns the success-rate rule on (Envoy's):
	// among the members with at least SuccessRateRequestVolume passive
	// outcomes since the last judgement (at least MinMembers of them), one
	// whose success rate is below their mean minus SuccessRateStdevFactor
	// x their standard deviation is an outlier. 0: off; else in (0, 100]
	// (Envoy's default is 1.9).
	SuccessRateStdevFactor float64
	// SuccessRateRequestVolume: if 0, 100.
	SuccessRateRequestVolume int
	// FailurePercentage turns the failure-percentage rule on (Envoy's): a
	// member with at least FailurePercentageRequestVolume passive outcomes
	// since the last judgement, at least FailurePercentage% of them
	// failed, is an outlier. 0: off; else in [1, 100].
	FailurePercentage int
	// FailurePercentageRequestVolume: if 0, 50.
	FailurePercentageRequestVolume int
	// MinMembers: with fewer members that have a latency (or, for the
	// success rate, enough outcomes), nothing is judged. If 0, 3; at
	// least 2.
	MinMembers int
	// Enforce ejects an outlier (not routable) for BaseEjectionTime x its
	// ejections in a row; without it an outlier is degraded (routable, its
	// weight OutlierWeight%).
	Enforce bool
	// MaxEjectionPercent bounds the share of the group ejected at once,
	// and always allows one. If 0, 10; in [1, 100].
	MaxEjectionPercent int
	// BaseEjectionTime: if 0, 30s; in [1s, 1h].
	BaseEjectionTime time.Duration
}

// Bounds and defaults of OutlierPolicy.
const (
	DefaultOutlierInterval = 10 * time.Second
	MinOutlierInterval     = time.Second
	MaxOutlierInterval     = time.Hour
	DefaultOutlierSamples  = 10
	DefaultOutlierMinDelta = 10 * time.Millisecond
	// OutlierWeight is a degraded outlier's weight, in percent.
	OutlierWeight = 10
)

// On reports whether any rule is on.
func (p OutlierPolicy) On() bool {
	return p.LatencyFactor > 0 || p.SuccessRateStdevFactor > 0 || p.FailurePercentage > 0
}

// withDefaults returns p with its zero fields filled in.
func (p OutlierPolicy) withDefaults() OutlierPolicy {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if p.Interval == 0 {
		p.Interval = DefaultOutlierInterval
	}
	if p.LatencyMinDelta == 0 {
		p.LatencyMinDelta = DefaultOutlierMinDelta
	}
	if p.BaseEjectionTime == 0 {
		p.BaseEjectionTime = 30 * time.Second
	}
	def(&p.Samples, DefaultOutlierSamples)
	def(&p.Consecutive, 3)
	def(&p.SuccessRateRequestVolume, 100)
	def(&p.FailurePercentageRequestVolume, 50)
	def(&p.MinMembers, 3)
	def(&p.MaxEjectionPercent, 10)
	return p
}

// validate returns a *FieldError naming the first field out of bounds.
func (p OutlierPolicy) validate() error {
	f := func(field, reason string, args ...any) error {
		return &FieldError{"outlier." + field, fmt.Sprintf(reason, args...)}
	}
	switch {
	case p.Interval != 0 && (p.Interval < MinOutlierInterval || p.Interval > MaxOutlierInterval):
		return f("interval", "must be between %v and %v (0: %v), got %v", MinOutlierInterval, MaxOutlierInterval, DefaultOutlierInterval, p.Interval)
	case p.Samples != 0 && (p.Samples < 3 || p.Samples > 100):
		return f("samples", "must be between 3 and 100 (0: %d), got %d", DefaultOutlierSamples, p.Samples)
	case math.IsNaN(p.LatencyFactor) || p.LatencyFactor != 0 && (p.LatencyFactor < 1 || p.LatencyFactor > 1000):
		return f("latency_factor", "must be 0 (off) or between 1 and 1000, got %v", p.LatencyFactor)
	case p.LatencyMinDelta < 0 || p.LatencyMinDelta > time.Hour:
		return f("latency_min_delta", "must be between 0 (%v) and 1h, got %v", DefaultOutlierMinDelta, p.LatencyMinDelta)
	case p.Consecutive < 0 || p.Consecutive > 100:
		return f("consecutive", "must be between 0 (3) and 100, got %d", p.Consecutive)
	case math.IsNaN(p.SuccessRateStdevFactor) || p.SuccessRateStdevFactor < 0 || p.SuccessRateStdevFactor > 100:
		return f("success_rate_stdev_factor", "must be 0 (off) or in (0, 100], got %v", p.SuccessRateStdevFactor)
	case p.SuccessRateRequestVolume < 0:
		return f("success_rate_request_volume", "must not be negative (0: 100), got %d", p.SuccessRateRequestVolume)
	case p.FailurePercentage < 0 || p.FailurePercentage > 100:
		return f("failure_percentage", "must be 0 (off) or between 1 and 100, got %d", p.FailurePercentage)
	case p.FailurePercentageRequestVolume < 0:
		return f("failure_percentage_request_volume", "must not be negative (0: 50), got %d", p.FailurePercentageRequestVolume)
	case p.MinMembers < 0 || p.MinMembers == 1:
		return f("min_members", "must be 0 (3) or at least 2, got %d", p.MinMembers)
	case p.MaxEjectionPercent < 0 || p.MaxEjectionPercent > 100:
		return f("max_ejection_percent", "must be between 0 (10) and 100, got %d", p.MaxEjectionPercent)
	case p.BaseEjectionTime != 0 && (p.BaseEjectionTime < time.Second || p.BaseEjectionTime > time.Hour):
		return f("base_ejection_time", "must be between 1s and 1h (0: 30s), got %v", p.BaseEjectionTime)
	}
	return nil
}

// OutlierState is a target that its group's outlier detection caught.
type OutlierState struct {
	// Ejected: not routable until Until; else degraded: routable, its
	// weight OutlierWeight%.
	Ejected bool
	// Reason gives the numbers that made it one, e.g. "p50 38ms vs group
	// 4ms" or "success rate 62% vs group 99% (stdev 1%)".
	Reason string
	Since  time.Time
	Until  time.Time
	// Ejections counts its ejections in a row.
	Ejections int
}

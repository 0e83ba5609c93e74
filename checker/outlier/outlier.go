// Package outlier is the pure half of a group's outlier detection: a
// member much slower than the group, or failing more of its passive
// outcomes than the others, is caught before it is down.
//
// Its policy (Policy), a member's sample (Sample, taken by a Sampler on the
// target's owner), and the judgement of a group (Judge): a pure function of
// the policy, the members, their samples and the last record (Record), with
// no clock, lock or I/O. Package checker stores the samples and records
// through its link, picks the judge of each group and applies the records.
package outlier

import (
	"fmt"
	"math"
	"time"
)

// Policy is a group's outlier detection. The zero value is off; a rule is
// on when its threshold is set. It is a value: copies are independent.
type Policy struct {
	// Interval is how often the group is judged. If 0, DefaultInterval;
	// in [MinInterval, MaxInterval].
	Interval time.Duration
	// Samples is how many of a member's latest passing probes its latency
	// is the median of. If 0, DefaultSamples; in [3, 100].
	Samples int
	// LatencyFactor turns the latency rule on: a member whose latency is
	// above LatencyFactor x the group's median latency and above the
	// median + LatencyMinDelta, at Consecutive judgements in a row, is an
	// outlier. 0: off; else in [1, 1000].
	LatencyFactor float64
	// LatencyMinDelta: if 0, DefaultMinDelta; at most 1h.
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
	// weight Weight%).
	Enforce bool
	// MaxEjectionPercent bounds the share of the group ejected at once,
	// and always allows one. If 0, 10; in [1, 100].
	MaxEjectionPercent int
	// BaseEjectionTime: if 0, 30s; in [1s, 1h].
	BaseEjectionTime time.Duration
}

// Bounds and defaults of Policy.
const (
	DefaultInterval = 10 * time.Second
	MinInterval     = time.Second
	MaxInterval     = time.Hour
	DefaultSamples  = 10
	DefaultMinDelta = 10 * time.Millisecond
	// Weight is a degraded outlier's weight, in percent.
	Weight = 10
)

// On reports whether any rule is on.
func (p Policy) On() bool {
	return p.LatencyFactor > 0 || p.SuccessRateStdevFactor > 0 || p.FailurePercentage > 0
}

// WithDefaults returns p with its zero fields filled in.
func (p Policy) WithDefaults() Policy {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if p.Interval == 0 {
		p.Interval = DefaultInterval
	}
	if p.LatencyMinDelta == 0 {
		p.LatencyMinDelta = DefaultMinDelta
	}
	if p.BaseEjectionTime == 0 {
		p.BaseEjectionTime = 30 * time.Second
	}
	def(&p.Samples, DefaultSamples)
	def(&p.Consecutive, 3)
	def(&p.SuccessRateRequestVolume, 100)
	def(&p.FailurePercentageRequestVolume, 50)
	def(&p.MinMembers, 3)
	def(&p.MaxEjectionPercent, 10)
	return p
}

// FieldError says which field of a Policy is out of bounds. Field is its
// lower-case name as the API spells it, such as "latency_factor"; Reason
// is a sentence for the person who wrote the policy.
type FieldError struct {
	Field  string
	Reason string
}

// Error returns "<field>: <reason>".
func (e *FieldError) Error() string {
	return e.Field + ": " + e.Reason
}

// Validate returns a *FieldError naming the first field of p out of
// bounds, or nil.
func (p Policy) Validate() error {
	f := func(field, reason string, args ...any) error {
		return &FieldError{field, fmt.Sprintf(reason, args...)}
	}
	switch {
	case p.Interval != 0 && (p.Interval < MinInterval || p.Interval > MaxInterval):
		return f("interval", "must be between %v and %v (0: %v), got %v", MinInterval, MaxInterval, DefaultInterval, p.Interval)
	case p.Samples != 0 && (p.Samples < 3 || p.Samples > 100):
		return f("samples", "must be between 3 and 100 (0: %d), got %d", DefaultSamples, p.Samples)
	case math.IsNaN(p.LatencyFactor) || p.LatencyFactor != 0 && (p.LatencyFactor < 1 || p.LatencyFactor > 1000):
		return f("latency_factor", "must be 0 (off) or between 1 and 1000, got %v", p.LatencyFactor)
	case p.LatencyMinDelta < 0 || p.LatencyMinDelta > time.Hour:
		return f("latency_min_delta", "must be between 0 (%v) and 1h, got %v", DefaultMinDelta, p.LatencyMinDelta)
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

// State is a target that its group's outlier detection caught.
type State struct {
	// Ejected: not routable until Until; else degraded: routable, its
	// weight Weight%.
	Ejected bool
	// Reason gives the numbers that made it one, e.g. "p50 38ms vs group
	// 4ms" or "success rate 62% vs group 99% (stdev 1%)".
	Reason string
	Since  time.Time
	Until  time.Time
	// Ejections counts its ejections in a row.
	Ejections int
}

// MinLatencyProbes is the fewest passing probes a member's latency is
// taken from.
const MinLatencyProbes = 3

// Sample is a target as its owner samples it for its group's outlier
// detection (Sampler.Take).
type Sample struct {
	Target string
	// Latency is the median of its last passing probes (at most
	// Policy.Samples); Probes how many: with fewer than MinLatencyProbes
	// it has no latency.
	Latency time.Duration
	Probes  int
	// Passes and Failures count its passive outcomes since its previous
	// sample.
	Passes, Failures int
	// Time is when it was taken.
	Time time.Time
}

// Differs reports whether s says more than old, the stored sample of the
// same target: a latency changed by more than a tenth (or got or lost
// enough probes), or other passive outcomes. Replicas store only those.
func (s Sample) Differs(old Sample) bool {
	if (old.Probes >= MinLatencyProbes) != (s.Probes >= MinLatencyProbes) || old.Passes != s.Passes || old.Failures != s.Failures {
		return true
	}
	d := old.Latency - s.Latency
	return 10*max(d, -d) > old.Latency
}

// Record is a judge's decision on a group: its members that are outliers,
// or on their way to be one, or were ejected lately.
type Record struct {
	Group   string
	Time    time.Time // when the judge made it: the time of its events
	Members []Member
}

// Member is one member's part in a Record.
type Member struct {
	Target string
	// Over counts the judgements in a row its latency was over the line.
	Over int
	// Ejections counts its ejections in a row: each lasts one
	// BaseEjectionTime more; a judgement it passes unejected takes one off.
	Ejections int
	// State is set while it is an outlier.
	State *State
}

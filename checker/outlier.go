package checker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
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

// minLatencyProbes is the fewest passing probes a member's latency is
// taken from.
const minLatencyProbes = 3

// OutlierSample is a target as its owner samples it for its group's
// outlier detection.
type OutlierSample struct {
	Target string
	// Latency is the median of its last passing probes (at most
	// OutlierPolicy.Samples); Probes how many: with fewer than three it
	// has no latency.
	Latency time.Duration
	Probes  int
	// Passes and Failures count its passive outcomes since its previous
	// sample.
	Passes, Failures int
	// Time is when it was taken.
	Time time.Time
}

// OutlierRecord is a judge's decision on a group: its members that are
// outliers, or on their way to be one, or were ejected lately.
type OutlierRecord struct {
	Group   string
	Time    time.Time // when the judge made it: the time of its events
	Members []OutlierMember
}

// OutlierMember is one member's part in an OutlierRecord.
type OutlierMember struct {
	Target string
	// Over counts the judgements in a row its latency was over the line.
	Over int
	// Ejections counts its ejections in a row: each lasts one
	// BaseEjectionTime more; a judgement it passes unejected takes one off.
	Ejections int
	// State is set while it is an outlier.
	State *OutlierState
}

// SharedOutliers is a Shared registry that keeps the outlier samples and
// the judges' records (package etcdreg does).
type SharedOutliers interface {
	// JudgesGroup reports whether this replica judges the group.
	JudgesGroup(group string) bool
	// PutSamples stores this replica's samples of a group's targets.
	PutSamples(ctx context.Context, group string, samples []OutlierSample) error
	// PutOutliers stores a judge's record, while it holds its lease and
	// its view of the members is current.
	PutOutliers(ctx context.Context, rec OutlierRecord) error
	// LoadedOutliers returns the records and samples Load read.
	LoadedOutliers() ([]OutlierRecord, []OutlierSample)
}

// outlierGroup is what the registry knows of a group's outlier detection;
// guarded by its lock.
type outlierGroup struct {
	samples map[string]OutlierSample // by target, as stored
	rec     OutlierRecord            // the last record applied
	next    time.Time                // this member's next sampling and judgement
}

// outlierSampler is a target's samples, on its owner.
type outlierSampler struct {
	lat              []time.Duration // its last passing probes' latencies, a ring
	at               int             // the next slot of lat
	passes, failures int             // passive outcomes since the last sample
}

// outlierGroupLocked returns group's outlierGroup, making it.
func (r *registry) outlierGroupLocked(group string) *outlierGroup {
	g := r.outliers[group]
	if g == nil {
		g = &outlierGroup{samples: map[string]OutlierSample{}}
		r.outliers[group] = g
	}
	return g
}

// outlierPolicyLocked returns the outlier policy of t's group, with its
// defaults, and whether it is on.
func (r *registry) outlierPolicyLocked(group string) (OutlierPolicy, bool) {
	p := r.pools[group]
	if group == "" || p == nil || !p.policy.Outlier.On() {
		return OutlierPolicy{}, false
	}
	return p.policy.Outlier.withDefaults(), true
}

// sampleResultLocked keeps a result of an owned target for its group's
// outlier detection: a passing probe's latency, or a passive outcome.
func (r *registry) sampleResultLocked(t *target, res Result) {
	if t.spec.Group == "" || !t.owned || res.Ignored {
		return
	}
	pl := r.pools[t.spec.Group]
	if pl == nil || !pl.policy.Outlier.On() {
		return
	}
	n := cmp.Or(pl.policy.Outlier.Samples, DefaultOutlierSamples)
	m := t.moreLocked()
	if m.samp == nil {
		m.samp = &outlierSampler{lat: make([]time.Duration, 0, n)}
	}
	s := m.samp
	switch {
	case res.Passive && res.Pass:
		s.passes++
	case res.Passive:
		s.failures++
	case res.Pass:
		if len(s.lat) > n { // the policy asks for fewer now
			s.lat, s.at = s.lat[:0], 0
		}
		if len(s.lat) < n {
			s.lat = append(s.lat, res.Latency)
		} else {
			s.lat[s.at] = res.Latency
		}
		s.at = (s.at + 1) % n
	}
}

// takeSampleLocked returns t's sample at now and starts counting its
// passive outcomes afresh. A target in maintenance (not probed) or that
// its own probes find unhealthy has no latency: its last passing probes
// say nothing of it now, and would weigh on its group's median. It starts
// afresh, from three new passing probes.
func takeSampleLocked(t *target, now time.Time) OutlierSample {
	smp := OutlierSample{Target: t.spec.Name, Time: now}
	if t.more == nil || t.more.samp == nil {
		return smp
	}
	s := t.more.samp
	if t.spec.Admin().Mode == ModeMaintenance || t.m.State == StateUnhealthy {
		s.lat, s.at = s.lat[:0], 0
	}
	smp.Probes, smp.Passes, smp.Failures = len(s.lat), s.passes, s.failures
	if len(s.lat) >= minLatencyProbes {
		smp.Latency = median(s.lat)
	}
	s.passes, s.failures = 0, 0
	return smp
}

// outlierJob is one group's turn: the samples this member stores, and
// whether it judges the group, and its members (sorted).
type outlierJob struct {
	group   string
	samples []OutlierSample
	judge   bool
	members []string
}

// dueOutliers returns the groups whose turn it is at now, with this
// member's samples of its targets in each, and when the next turn is
// (zero if none).
func (r *registry) dueOutliers(now time.Time) (jobs []outlierJob, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, time.Time{}
	}
	soonest := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	due := map[string]*outlierJob{}
	for group := range r.pools {
		p, on := r.outlierPolicyLocked(group)
		if !on {
			continue
		}
		g := r.outlierGroupLocked(group)
		if g.next.IsZero() {
			g.next = now.Add(p.Interval)
		}
		if !now.Before(g.next) {
			g.next = now.Add(p.Interval)
			due[group] = &outlierJob{group: group, judge: r.link.judgesGroup(group)}
		}
		soonest(g.next)
	}
	for group, g := range r.outliers {
		if _, on := r.outlierPolicyLocked(group); !on {
			if len(g.rec.Members) > 0 && r.link.judgesGroup(group) {
				due[group] = &outlierJob{group: group, judge: true} // the policy is off: its outliers end
			} else if len(g.rec.Members) == 0 {
				delete(r.outliers, group)
			}
		}
	}
	if len(due) == 0 {
		return nil, next
	}
	for _, t := range r.targets {
		job := due[t.spec.Group]
		if job == nil || t.quarantined() != "" {
			continue
		}
		job.members = append(job.members, t.spec.Name)
		if !t.owned {
			continue
		}
		s := takeSampleLocked(t, now)
		if old, ok := r.outliers[t.spec.Group].samples[s.Target]; !r.remote || !ok || samplesDiffer(old, s) {
			job.samples = append(job.samples, s)
		}
	}
	for _, job := range due {
		slices.Sort(job.members)
		slices.SortFunc(job.samples, func(a, b OutlierSample) int { return cmp.Compare(a.Target, b.Target) })
		jobs = append(jobs, *job)
	}
	slices.SortFunc(jobs, func(a, b outlierJob) int { return cmp.Compare(a.group, b.group) })
	return jobs, next
}

// samplesDiffer reports whether a new sample says more than the stored one:
// a latency changed by more than a tenth (or got or lost enough probes),
// or other passive outcomes. Replicas store only those.
func samplesDiffer(old, s OutlierSample) bool {
	if (old.Probes >= minLatencyProbes) != (s.Probes >= minLatencyProbes) || old.Passes != s.Passes || old.Failures != s.Failures {
		return true
	}
	d := old.Latency - s.Latency
	return 10*max(d, -d) > old.Latency
}

// applySamplesLocked applies samples stored for group.
func (r *registry) applySamplesLocked(group string, samples []OutlierSample) {
	g := r.outlierGroupLocked(group)
	for _, s := range samples {
		g.samples[s.Target] = s
	}
}

// judgeOutliers makes group's record at now, of its members (sorted),
// from the stored samples and the last record; ok is false when nothing
// changed.
func (r *registry) judgeOutliers(group string, members []string, now time.Time) (rec OutlierRecord, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.outliers[group]
	if g == nil {
		return OutlierRecord{}, false
	}
	p, on := r.outlierPolicyLocked(group)
	if !on {
		members = nil
	}
	rec = judge(p, members, g.samples, g.rec, now)
	rec.Group = group
	return rec, !sameMembers(rec.Members, g.rec.Members)
}

// applyOutliersLocked applies a judge's record: each member's outlier
// state, its events at the record's revision, and, for a target ejected
// or back, its published state, which its owner writes.
func (r *registry) applyOutliersLocked(rec OutlierRecord, now time.Time, events bool) {
	g := r.outlierGroupLocked(rec.Group)
	at := cmp.Or(rec.Time, now)
	states := map[string]*OutlierState{}
	var names []string // the members the record, or the one before, speaks of
	for _, m := range g.rec.Members {
		names = append(names, m.Target)
	}
	for _, m := range rec.Members {
		names = append(names, m.Target)
		if m.State != nil {
			states[m.Target] = m.State
		}
	}
	g.rec = rec
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		t := r.targets[name]
		if t == nil || t.spec.Group != rec.Group {
			continue
		}
		was, now2 := t.outlierState(), states[t.spec.Name]
		if was == nil && now2 == nil || was != nil && now2 != nil && *was == *now2 {
			continue
		}
		if events && was != nil && (now2 == nil || was.Ejected != now2.Ejected) {
			text := fmt.Sprintf("%s: no longer an outlier", t.spec.Name)
			if was.Ejected {
				text = fmt.Sprintf("%s: ejection over", t.spec.Name)
			}
			r.emitLocked(Event{Kind: EventOutlierEnded, Time: at, Policy: PolicyChange{Group: rec.Group, Target: t.spec.Name, Text: text, Outlier: was}})
		}
		if events && now2 != nil && (was == nil || was.Ejected != now2.Ejected) {
			text := fmt.Sprintf("%s: outlier, degraded (routable at %d%%): %s", t.spec.Name, OutlierWeight, now2.Reason)
			if now2.Ejected {
				text = fmt.Sprintf("%s: outlier, ejected until %s (%s in a row): %s", t.spec.Name, now2.Until.UTC().Format(time.RFC3339), ordinal(now2.Ejections), now2.Reason)
			}
			r.emitLocked(Event{Kind: EventOutlierStarted, Time: at, Policy: PolicyChange{Group: rec.Group, Target: t.spec.Name, Text: text, Outlier: now2}})
		}
		ejectedBefore := was != nil && was.Ejected
		if now2 == nil {
			if t.more != nil {
				t.more.outlier = nil
			}
		} else {
			t.moreLocked().outlier = now2
		}
		if ejectedBefore != (now2 != nil && now2.Ejected) && t.owned {
			why := cause{reason: "outlier ejection over"}
			if now2 != nil && now2.Ejected {
				why = cause{reason: "outlier ejected: " + now2.Reason}
			}
			r.updateLocked(t, now, why)
		}
	}
}

// outlierState returns t's outlier state, nil if it is none.
func (t *target) outlierState() *OutlierState {
	if t.more == nil {
		return nil
	}
	return t.more.outlier
}

// ordinal returns "1st", "2nd", "3rd", "4th", ...
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// The replication's side: a Shared registry that is a SharedOutliers keeps
// the samples and records; without one, outlier policies are refused
// (putPolicy).

func (rp *replication) outliers() (SharedOutliers, bool) {
	so, ok := rp.shared.(SharedOutliers)
	return so, ok
}

// judgesGroup is SharedOutliers.JudgesGroup.
func (rp *replication) judgesGroup(group string) bool {
	so, ok := rp.outliers()
	return ok && so.JudgesGroup(group)
}

// putSamples stores this replica's samples through the shared registry;
// every replica applies them as they come back.
func (rp *replication) putSamples(group string, samples []OutlierSample) error {
	so, ok := rp.outliers()
	if !ok || len(samples) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	return so.PutSamples(ctx, group, samples)
}

// putOutliers stores the judge's record through the shared registry.
func (rp *replication) putOutliers(rec OutlierRecord) error {
	so, ok := rp.outliers()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	return so.PutOutliers(ctx, rec)
}

// loadOutliers applies the records and samples the shared registry was
// loaded with, without events.
func (rp *replication) loadOutliers() {
	so, ok := rp.outliers()
	if !ok {
		return
	}
	recs, samples := so.LoadedOutliers()
	r := rp.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for _, s := range samples {
		if t := r.targets[s.Target]; t != nil {
			r.applySamplesLocked(t.spec.Group, []OutlierSample{s})
		}
	}
	for _, rec := range recs {
		r.applyOutliersLocked(rec, now, false)
	}
}

// outliers runs the outlier detection's turns due at now: this member's
// samples stored, then the groups it judges judged. It returns when the
// next turn is due (zero if none).
func (l *lifecycle) outliers(now time.Time) time.Time {
	jobs, next := l.reg.dueOutliers(now)
	for _, job := range jobs {
		if err := l.reg.link.putSamples(job.group, job.samples); err != nil {
			l.logger.Warn("storing outlier samples failed; they are taken again at the next turn", "group", job.group, "error", err)
		}
		if !job.judge {
			continue
		}
		if rec, ok := l.reg.judgeOutliers(job.group, job.members, now); ok {
			if err := l.reg.link.putOutliers(rec); err != nil {
				l.logger.Warn("storing a group's outliers failed; it is judged again at its next turn", "group", job.group, "error", err)
			}
		}
	}
	return next
}

// leaveOutliersLocked ends t's outlier state and samples when it leaves
// group: it is judged with its new group's.
func (r *registry) leaveOutliersLocked(t *target, group string, at time.Time) {
	if t.more == nil {
		return
	}
	t.more.samp = nil
	if o := t.more.outlier; o != nil {
		t.more.outlier = nil
		r.emitLocked(Event{Kind: EventOutlierEnded, Time: at, Policy: PolicyChange{Group: group, Target: t.spec.Name,
			Text: fmt.Sprintf("%s: no longer an outlier of %s: it left the group", t.spec.Name, group), Outlier: o}})
	}
}

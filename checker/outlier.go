package checker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// Outlier detection: a member of a group much slower than the group, or
// failing more of its passive outcomes than the others, is caught before
// it is down (GroupPolicy.Outlier). Its policy, the samples and the
// judgement are package outlier's, pure; this file is the registry's side.
//
// Every interval each target's owner stores a sample of it (the median
// latency of its last passing probes, its passive outcomes since the last
// sample: outlier.Sample), through the link. One member judges each group
// (alone, the checker itself; on replicas, one picked by rendezvous
// hashing): it judges the stored samples (outlier.Judge) and stores the
// group's outliers (outlier.Record), through the link, with what it
// counts from one judgement to the next (windows in a row, ejections in a
// row), so that another judge carries on from it. Every member applies the record
// alike: OUTLIER_STARTED and OUTLIER_ENDED at its revision, the target's
// Status.Outlier, and for an ejected target its published state, which
// its owner writes as for any hold.

// SharedOutliers is the part of Shared that keeps the outlier samples and
// the judges' records.
type SharedOutliers interface {
	// JudgesGroup reports whether this replica judges the group.
	JudgesGroup(group string) bool
	// PutSamples stores this replica's samples of a group's targets.
	PutSamples(ctx context.Context, group string, samples []outlier.Sample) error
	// PutOutliers stores a judge's record, while it holds its lease and
	// its view of the members is current.
	PutOutliers(ctx context.Context, rec outlier.Record) error
	// LoadedOutliers returns the records and samples Load read.
	LoadedOutliers() ([]outlier.Record, []outlier.Sample)
}

// outlierGroup is what the registry knows of a group's outlier detection;
// guarded by its lock.
type outlierGroup struct {
	samples map[string]outlier.Sample // by target, as stored
	rec     outlier.Record            // the last record applied
	next    time.Time                 // this member's next sampling and judgement
}

// outlierGroupLocked returns group's outlierGroup, making it.
func (r *registry) outlierGroupLocked(group string) *outlierGroup {
	g := r.outliers[group]
	if g == nil {
		g = &outlierGroup{samples: map[string]outlier.Sample{}}
		r.outliers[group] = g
	}
	return g
}

// outlierPolicyLocked returns the outlier policy of t's group, with its
// defaults, and whether it is on.
func (r *registry) outlierPolicyLocked(group string) (outlier.Policy, bool) {
	p := r.pools[group]
	if group == "" || p == nil || !p.policy.Outlier.On() {
		return outlier.Policy{}, false
	}
	return p.policy.Outlier.WithDefaults(), true
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
	m := t.moreLocked()
	if m.samp == nil {
		m.samp = &outlier.Sampler{}
	}
	switch {
	case res.Passive:
		m.samp.Outcome(res.Pass)
	case res.Pass:
		m.samp.Latency(res.Latency, cmp.Or(pl.policy.Outlier.Samples, outlier.DefaultSamples))
	}
}

// takeSampleLocked returns t's sample at now and starts counting its
// passive outcomes afresh. A target in maintenance (not probed) or that
// its own probes find unhealthy has no latency (Sampler.Take).
func takeSampleLocked(t *target, now time.Time) outlier.Sample {
	if t.more == nil || t.more.samp == nil {
		return outlier.Sample{Target: t.spec.Name, Time: now}
	}
	reset := t.spec.Admin().Mode == ModeMaintenance || t.m.State == StateUnhealthy
	return t.more.samp.Take(t.spec.Name, now, reset)
}

// outlierJob is one group's turn: the samples this member stores, and
// whether it judges the group, and its members (sorted).
type outlierJob struct {
	group   string
	samples []outlier.Sample
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
		if old, ok := r.outliers[t.spec.Group].samples[s.Target]; !r.remote || !ok || s.Differs(old) {
			job.samples = append(job.samples, s)
		}
	}
	for _, job := range due {
		slices.Sort(job.members)
		slices.SortFunc(job.samples, func(a, b outlier.Sample) int { return cmp.Compare(a.Target, b.Target) })
		jobs = append(jobs, *job)
	}
	slices.SortFunc(jobs, func(a, b outlierJob) int { return cmp.Compare(a.group, b.group) })
	return jobs, next
}

// applySamplesLocked applies samples stored for group.
func (r *registry) applySamplesLocked(group string, samples []outlier.Sample) {
	g := r.outlierGroupLocked(group)
	for _, s := range samples {
		g.samples[s.Target] = s
	}
}

// judgeOutliers makes group's record at now, of its members (sorted),
// from the stored samples and the last record; ok is false when nothing
// changed.
func (r *registry) judgeOutliers(group string, members []string, now time.Time) (rec outlier.Record, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.outliers[group]
	if g == nil {
		return outlier.Record{}, false
	}
	p, on := r.outlierPolicyLocked(group)
	if !on {
		members = nil
	}
	rec = outlier.Judge(p, members, g.samples, g.rec, now)
	rec.Group = group
	return rec, !outlier.SameMembers(rec.Members, g.rec.Members)
}

// applyOutliersLocked applies a judge's record: each member's outlier
// state, its events at the record's revision, and, for a target ejected
// or back, its published state, which its owner writes.
func (r *registry) applyOutliersLocked(rec outlier.Record, now time.Time, events bool) {
	g := r.outlierGroupLocked(rec.Group)
	at := cmp.Or(rec.Time, now)
	states := map[string]*outlier.State{}
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
	// Every outlier ends when the policy is off; say so, not that an
	// ejection ran its time. The policy in force is the same on every
	// replica at the record's revision.
	ended := ""
	if _, on := r.outlierPolicyLocked(rec.Group); !on {
		ended = ": the group's outlier detection is off"
	}
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
			text := fmt.Sprintf("%s: no longer an outlier%s", t.spec.Name, ended)
			if was.Ejected {
				text = fmt.Sprintf("%s: ejection over%s", t.spec.Name, ended)
			}
			r.emitLocked(Event{Kind: EventOutlierEnded, Time: at, Policy: PolicyChange{Group: rec.Group, Target: t.spec.Name, Text: text, Outlier: was}})
		}
		if events && now2 != nil && (was == nil || was.Ejected != now2.Ejected) {
			text := fmt.Sprintf("%s: outlier, degraded (routable at %d%%): %s", t.spec.Name, outlier.Weight, now2.Reason)
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
			why := cause{reason: "outlier ejection over" + ended}
			if now2 != nil && now2.Ejected {
				why = cause{reason: "outlier ejected: " + now2.Reason}
			}
			r.updateLocked(t, now, why)
		}
	}
}

// outlierState returns t's outlier state, nil if it is none.
func (t *target) outlierState() *outlier.State {
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

// The replication's side: the shared registry keeps the samples and
// records.

// judgesGroup is SharedOutliers.JudgesGroup.
func (rp *replication) judgesGroup(group string) bool { return rp.shared.JudgesGroup(group) }

// putSamples stores this replica's samples through the shared registry;
// every replica applies them as they come back.
func (rp *replication) putSamples(group string, samples []outlier.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	return rp.shared.PutSamples(ctx, group, samples)
}

// putOutliers stores the judge's record through the shared registry.
func (rp *replication) putOutliers(rec outlier.Record) error {
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	return rp.shared.PutOutliers(ctx, rec)
}

// loadOutliers applies the records and samples the shared registry was
// loaded with, without events.
func (rp *replication) loadOutliers() {
	recs, samples := rp.shared.LoadedOutliers()
	r := rp.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for _, s := range samples {
		if t := r.targets[s.Target]; t != nil {
			r.applySamplesLocked(t.spec.Group, []outlier.Sample{s})
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

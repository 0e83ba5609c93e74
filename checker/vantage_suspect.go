package checker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Suspect vantages: each replica judges every vantage alike from the
// stored verdicts, and a vantage that disagrees with the others on too
// many targets is left out of every quorum (see vantage.go).

// VantagePolicy says when a vantage is suspect (see EventVantageSuspect).
// Every replica must use the same: each judges every vantage alike, from
// the stored verdicts.
type VantagePolicy struct {
	// SuspectShare is the share of the targets a vantage judges with
	// others that it must say unhealthy, while most of the others say
	// healthy, to be suspect; it recovers below half of it. In (0, 1]; if
	// 0, DefaultSuspectShare.
	SuspectShare float64
	// SuspectMin is the fewest targets a vantage must be judged on to be
	// suspect; if 0, DefaultSuspectMin.
	SuspectMin int
	// SuspectAfter is how long a vantage must stay over the line before
	// it is marked suspect: longer than the others take to see a real
	// outage (about a probe interval). If 0, DefaultSuspectAfter; at most
	// MaxSuspectAfter.
	SuspectAfter time.Duration
}

// The defaults of VantagePolicy.
const (
	DefaultSuspectShare = 0.5
	DefaultSuspectMin   = 3
	DefaultSuspectAfter = 10 * time.Second
	MaxSuspectAfter     = time.Hour
)

// VantageState is a vantage as the checker judges it.
type VantageState struct {
	Member, Label string
	// Judged counts the targets it and another vantage both have a
	// verdict on; Disagree, those it says unhealthy (or suspect) while
	// most of the others say healthy.
	Judged, Disagree int
	// Suspect: its verdicts are left out of every quorum; Since when.
	Suspect bool
	Since   time.Time
}

// Judging the vantages. A vantage whose own path is broken says unhealthy
// of the targets it probes while the others see them healthy. Every
// replica keeps, for each vantage, the targets it is judged on (it and
// another assigned vantage have stored verdicts) and those it disagrees on
// (it says unhealthy or suspect while most of the others say healthy),
// from the stored verdicts alone, as each is applied.
//
// A vantage is over the line while it disagrees on at least SuspectShare
// of at least SuspectMin targets, under it below half that share. When a
// real outage starts, the vantage whose probes see it first disagrees for
// a probe interval or so, until the others see it too; a broken vantage
// stays over the line. So one replica, its judge (SharedVantages.Judges),
// marks it suspect once it has stayed over the line for SuspectAfter, and
// recovered once it is under it, in a record of the shared registry
// (SharedVantages.PutVantage): every replica applies the record at the
// same revision, and emits VANTAGE_SUSPECT or VANTAGE_RECOVERED with its
// numbers and time. A suspect vantage's verdicts are left out of every
// quorum, so a target whose only vantages left are suspect keeps its
// state.

// VantageRecord is a judge's decision on a vantage, as stored.
type VantageRecord struct {
	Member, Label    string
	Suspect          bool
	Disagree, Judged int
	// Time is when the judge stored it: the time of its event on every
	// replica.
	Time time.Time
}

// vantageStats is one vantage's counts; guarded by the registry's lock.
type vantageStats struct {
	label            string
	judged, disagree int
	suspect          bool      // as last stored
	since            time.Time // when its suspicion, or recovery, was stored
	overSince        time.Time // this replica's clock: over the line since; zero while not
	writing          bool      // this replica, its judge, is storing a record of it
}

// judgement is a target's part in one vantage's counts.
type judgement struct {
	member   string
	disagree bool
}

// withDefaults returns p with its defaults, or an error naming the bad
// field.
func (p VantagePolicy) withDefaults() (VantagePolicy, error) {
	switch {
	case math.IsNaN(p.SuspectShare) || p.SuspectShare < 0 || p.SuspectShare > 1:
		return p, fmt.Errorf("Vantage.SuspectShare must be in (0, 1] (0: %v), got %v", DefaultSuspectShare, p.SuspectShare)
	case p.SuspectMin < 0:
		return p, fmt.Errorf("Vantage.SuspectMin must be positive (0: %d), got %d", DefaultSuspectMin, p.SuspectMin)
	case p.SuspectAfter < 0 || p.SuspectAfter > MaxSuspectAfter:
		return p, fmt.Errorf("Vantage.SuspectAfter must be between 0 (%v) and %v, got %v", DefaultSuspectAfter, MaxSuspectAfter, p.SuspectAfter)
	}
	if p.SuspectAfter == 0 {
		p.SuspectAfter = DefaultSuspectAfter
	}
	if p.SuspectShare == 0 {
		p.SuspectShare = DefaultSuspectShare
	}
	if p.SuspectMin == 0 {
		p.SuspectMin = DefaultSuspectMin
	}
	return p, nil
}

// judgeLocked replaces t's part in the vantages' counts with what its
// stored verdicts say now, and notes which vantages went over the line or
// under it.
func (r *registry) judgeLocked(t *target, v *vantageSet) {
	touched := make([]string, 0, 2*len(v.judged))
	for _, j := range v.judged {
		s := r.vstats[j.member]
		s.judged--
		if j.disagree {
			s.disagree--
		}
		touched = append(touched, j.member)
	}
	v.judged = v.judged[:0]
	counted := v.counted()
	if len(v.assigned) > 0 && len(counted) >= 2 {
		for i, vd := range counted {
			up, others := 0, 0
			for k, o := range counted {
				if k != i {
					others++
					if o.State == StateHealthy {
						up++
					}
				}
			}
			j := judgement{member: vd.Member, disagree: vd.State != StateHealthy && 2*up > others}
			s := r.vstats[vd.Member]
			if s == nil {
				s = &vantageStats{}
				r.vstats[vd.Member] = s
			}
			s.label = vd.Label
			s.judged++
			if j.disagree {
				s.disagree++
			}
			v.judged = append(v.judged, j)
			touched = append(touched, vd.Member)
		}
	}
	for _, m := range touched {
		r.judgeVantageLocked(m, r.clock.Now())
	}
}

// judgeVantageLocked notes when member went over the line, or under it.
func (r *registry) judgeVantageLocked(member string, now time.Time) {
	s := r.vstats[member]
	if s == nil {
		return
	}
	if r.overLocked(s) {
		if s.overSince.IsZero() {
			s.overSince = now
		}
	} else {
		s.overSince = time.Time{}
	}
	if !s.suspect && !s.writing && s.judged == 0 {
		delete(r.vstats, member)
	}
}

// overLocked reports whether s is over the line: it disagrees on at least
// SuspectShare of at least SuspectMin targets.
func (r *registry) overLocked(s *vantageStats) bool {
	return s.judged >= r.vpolicy.SuspectMin && float64(s.disagree) >= r.vpolicy.SuspectShare*float64(s.judged)
}

// underLocked reports whether s is under the line: below half the share,
// or judged on too few targets.
func (r *registry) underLocked(s *vantageStats) bool {
	return s.judged < r.vpolicy.SuspectMin || float64(s.disagree) < r.vpolicy.SuspectShare/2*float64(s.judged)
}

// judgeDue returns the records this replica, as the judge of the vantages
// it judges, is to store now: suspect for one over the line for
// SuspectAfter, recovered for a suspect one under it.
func (r *registry) judgeDue(now time.Time) []VantageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []VantageRecord
	for m, s := range r.vstats {
		if s.writing || !r.vantages.Judges(m) {
			continue
		}
		rec := VantageRecord{Member: m, Label: s.label, Disagree: s.disagree, Judged: s.judged, Time: now}
		switch {
		case !s.suspect && !s.overSince.IsZero() && now.Sub(s.overSince) >= r.vpolicy.SuspectAfter:
			rec.Suspect = true
		case s.suspect && r.underLocked(s):
		default:
			continue
		}
		s.writing = true
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b VantageRecord) int { return strings.Compare(a.Member, b.Member) })
	return out
}

// judged notes that storing rec failed: it is judged again.
func (r *registry) judgeFailed(rec VantageRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.vstats[rec.Member]; s != nil {
		s.writing = false
	}
}

// applyVantageLocked applies a judge's stored record: the vantage becomes
// suspect or recovers, its event at the record's revision, and the targets
// it probes are decided again.
func (r *registry) applyVantageLocked(rec VantageRecord, now time.Time) {
	s := r.vstats[rec.Member]
	if s == nil {
		s = &vantageStats{label: rec.Label}
		r.vstats[rec.Member] = s
	}
	s.writing = false
	if s.suspect == rec.Suspect {
		return
	}
	s.suspect, s.since = rec.Suspect, rec.Time
	at := cmp.Or(rec.Time, now)
	if rec.Suspect {
		r.emitLocked(Event{Kind: EventVantageSuspect, Time: at, Policy: PolicyChange{
			Replica: rec.Member, Vantage: rec.Label, Disagree: rec.Disagree, Judged: rec.Judged,
			Text: fmt.Sprintf("vantage %s (replica %s) suspect: unhealthy from it, healthy from the others, for %d of the %d targets it is judged on; its verdicts are left out of every quorum", rec.Label, rec.Member, rec.Disagree, rec.Judged),
		}})
	} else {
		r.emitLocked(Event{Kind: EventVantageRecovered, Time: at, Policy: PolicyChange{
			Replica: rec.Member, Vantage: rec.Label, Disagree: rec.Disagree, Judged: rec.Judged,
			Text: fmt.Sprintf("vantage %s (replica %s) recovered: it disagrees with the others on %d of the %d targets it is judged on", rec.Label, rec.Member, rec.Disagree, rec.Judged),
		}})
	}
	r.redecideLocked(rec.Member, now)
	r.judgeVantageLocked(rec.Member, now)
}

// redecideLocked derives again the verdict of every target member probes
// with others, after it became suspect or recovered.
func (r *registry) redecideLocked(member string, at time.Time) {
	for _, t := range r.targets {
		if v := t.multi(); v != nil && slices.ContainsFunc(v.assigned, func(a Vantage) bool { return a.Member == member }) {
			r.decideVantagesLocked(t, v, at)
		}
	}
}

// suspectLocked reports whether member's verdicts are left out.
func (r *registry) suspectLocked(member string) bool {
	s := r.vstats[member]
	return s != nil && s.suspect
}

// vantageStates returns the vantages as the checker judges them, by
// member.
func (r *registry) vantageStates() []VantageState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]VantageState, 0, len(r.vstats))
	for m, s := range r.vstats {
		out = append(out, VantageState{Member: m, Label: s.label, Judged: s.judged, Disagree: s.disagree, Suspect: s.suspect, Since: s.since})
	}
	slices.SortFunc(out, func(a, b VantageState) int { return strings.Compare(a.Member, b.Member) })
	return out
}

// Vantages returns the vantages that probe targets with others, as this
// checker judges them (every replica judges alike), by member; empty
// without them.
func (c *Checker) Vantages() []VantageState { return c.reg.vantageStates() }

// judgeLoop stores this replica's records of the vantages it judges (see
// judgeDue), a few times per SuspectAfter, until the checker closes.
func (rp *replication) judgeLoop() {
	defer close(rp.judging)
	every := min(time.Second, max(rp.reg.vpolicy.SuspectAfter/4, 10*time.Millisecond))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-rp.closing.Done():
			return
		}
		for _, rec := range rp.reg.judgeDue(rp.reg.clock.Now()) {
			ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
			err := rp.reg.vantages.PutVantage(ctx, rec)
			cancel()
			if err != nil {
				rp.logger.Warn("storing a vantage's judgement failed; judging it again", "vantage", rec.Label, "replica", rec.Member, "error", err)
				rp.reg.judgeFailed(rec)
			}
		}
	}
}

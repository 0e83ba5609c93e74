package checker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Vantages: a target probed from several replicas. With Spec.Vantages k
// above 1 and a shared registry that assigns vantages (SharedVantages), k
// replicas, in k distinct vantages where there are enough, probe the
// target, each with its own machine (the target's m on that replica). Each
// stores its verdict when it changes; every replica applies the stored
// verdicts in revision order and derives from them, alike, the vantages'
// verdict (vantageSet.decide): unhealthy once Quorum of the assigned
// vantages say so, healthy once Quorum say healthy, otherwise (three_state)
// suspect while they disagree, or unchanged. That verdict, not the owner's
// machine, is what the owner's policies (flap damping, modes, the panic
// threshold) turn into the published state, which it stores as it stores
// any state: every replica publishes the same transition at the same
// revision.
//
// A vantage stores its first verdict once it has a result of its own, and
// then each change. A replica taking a vantage over starts its machine
// from its own stored verdict, or from the published state. A vantage
// that stops probing the target (the members changed) removes its
// verdict; one that leaves the fleet loses it with its lease. A vantage
// whose verdicts contradict the others' is judged below (judgeLocked).

// MaxVantages bounds Spec.Vantages.
const MaxVantages = 9

// Vantage is a replica as a vantage point: its member ID and its label
// (by default the member ID; replicas that see the targets alike, say in
// one zone, share one).
type Vantage struct {
	Member string
	Label  string
}

// VantageVerdict is one vantage's verdict on a target, as it stored it.
type VantageVerdict struct {
	Member string
	Label  string
	State  State
	// Error is the failure of the result that made the verdict, when it
	// failed.
	Error string
	// Time is when the vantage stored it.
	Time time.Time
	// Rev is the revision it was stored at.
	Rev uint64
}

// String returns "label=state", with the error in parentheses; the state
// is "none" before the vantage stored one.
func (v VantageVerdict) String() string {
	st := "none"
	if v.State != StateUnknown {
		st = v.State.String()
	}
	s := v.Label + "=" + st
	if v.Error != "" {
		s += "(" + v.Error + ")"
	}
	return s
}

// SharedVantages is the part of Shared that lets several replicas probe a
// target (Spec.Vantages) and keeps their verdicts.
type SharedVantages interface {
	// Vantages returns the members that probe the named target from k
	// vantages: k of them while there are, in distinct labels while there
	// are enough, the first being the target's owner (Owns). It is called
	// with the checker's lock held and must not call the checker.
	Vantages(name string, k int) []Vantage
	// Self returns this replica's member ID and label.
	Self() Vantage
	// Judges reports whether this replica judges the vantage of member
	// (one live replica other than member does).
	Judges(member string) bool
	// PutVantage stores a judge's record of a vantage.
	PutVantage(ctx context.Context, rec VantageRecord) error
	// LoadedVantages returns the records Load read.
	LoadedVantages() []VantageRecord
	// ProposeVerdict stores this replica's verdict on a target, or removes
	// it (p.Delete), if this replica still holds its lease, its view of the
	// members is current, and its stored verdict is still the one at
	// p.PrevRev; else it returns an error wrapping ErrFenced.
	ProposeVerdict(ctx context.Context, p VerdictProposal) error
}

// VerdictProposal is a verdict a vantage asks the shared registry to
// store.
type VerdictProposal struct {
	Target  string
	Verdict VantageVerdict
	PrevRev uint64 // the revision of the verdict it replaces; 0 for none
	Delete  bool   // remove this replica's verdict instead
}

// vantageSet is a target's vantages on one replica; guarded by the
// registry's lock.
type vantageSet struct {
	assigned []Vantage        // the members probing the target, its owner first
	verdicts []VantageVerdict // as stored, by member (assigned or not)
	ownRev   uint64           // the revision of this replica's stored verdict
	// proposing: a write of this replica's verdict is on its way.
	proposing bool
	// decided is the vantages' verdict: what the owner's policies turn
	// into the published state.
	decided State
	// judged is the target's part in the vantages' counts (judgeLocked).
	judged []judgement
}

// vantagesOf returns t's vantageSet: nil unless several replicas probe it.
func (t *target) vantagesOf() *vantageSet {
	if t.more == nil {
		return nil
	}
	return t.more.vant
}

// multi returns t's vantageSet while several vantages probe it, else nil.
// (A target whose Vantages went down to 1 keeps its set, with none
// assigned, until the verdicts stored for it are removed.)
func (t *target) multi() *vantageSet {
	if v := t.vantagesOf(); v != nil && len(v.assigned) > 0 {
		return v
	}
	return nil
}

// verdict is the state t's results alone give: its machine's, or, probed
// from several vantages, theirs.
func (t *target) verdict() State {
	if v := t.multi(); v != nil {
		return v.decided
	}
	return t.m.State
}

// vantagesLocked returns how many vantages probe t and how many must
// agree: its spec's, or, where it sets none, its group policy's; the
// quorum a majority unless set.
func (r *registry) vantagesLocked(t *target) (k, q int) {
	k, q = int(t.spec.Vantages), int(t.spec.Quorum)
	if k == 0 && t.spec.Group != "" {
		if p := r.pools[t.spec.Group]; p != nil {
			k, q = p.policy.Vantages, p.policy.Quorum
		}
	}
	if q == 0 {
		q = k/2 + 1
	}
	return k, q
}

// stored returns member's stored verdict.
func (v *vantageSet) stored(member string) (VantageVerdict, bool) {
	for _, vd := range v.verdicts {
		if vd.Member == member {
			return vd, true
		}
	}
	return VantageVerdict{}, false
}

// put stores vd as its member's verdict.
func (v *vantageSet) put(vd VantageVerdict) {
	for i := range v.verdicts {
		if v.verdicts[i].Member == vd.Member {
			v.verdicts[i] = vd
			return
		}
	}
	v.verdicts = append(v.verdicts, vd)
}

// drop removes member's verdict.
func (v *vantageSet) drop(member string) {
	v.verdicts = slices.DeleteFunc(v.verdicts, func(vd VantageVerdict) bool { return vd.Member == member })
}

// counted returns the verdicts of the assigned vantages, in their order:
// those that count.
func (v *vantageSet) counted() []VantageVerdict {
	var out []VantageVerdict
	for _, a := range v.assigned {
		if vd, ok := v.stored(a.Member); ok {
			out = append(out, vd)
		}
	}
	return out
}

// decide returns the vantages' verdict, a pure function of the stored
// verdicts and the members: unhealthy once q of the assigned vantages not
// suspect say so, healthy once q say healthy; while neither, suspect if the model has
// it and some disagree, else cur. q is at most the vantages assigned: a
// fleet with fewer members than the target asks for decides with those it
// has.
func (v *vantageSet) decide(q int, model Model, cur State, suspect func(member string) bool) State {
	q = min(q, len(v.assigned))
	if q < 1 {
		return cur
	}
	var up, down, other int
	for _, vd := range v.counted() {
		if suspect(vd.Member) {
			continue
		}
		switch vd.State {
		case StateHealthy:
			up++
		case StateUnhealthy:
			down++
		default:
			other++
		}
	}
	switch {
	case down >= q:
		return StateUnhealthy
	case up >= q:
		return StateHealthy
	case model == ModelThreeState && down+other > 0:
		return StateSuspect
	}
	return cur
}

// text returns the verdicts as a reason: "vantages: a=healthy
// b=unhealthy(connection refused) c=healthy".
func (v *vantageSet) text() string {
	vs := v.statusVantages()
	parts := make([]string, len(vs))
	for i, vd := range vs {
		parts[i] = vd.String()
	}
	return "vantages: " + strings.Join(parts, " ")
}

// statusVantages returns the verdicts Status shows: the assigned
// vantages', in order, with State zero for one that has stored none.
func (v *vantageSet) statusVantages() []VantageVerdict {
	out := make([]VantageVerdict, 0, len(v.assigned))
	for _, a := range v.assigned {
		vd, ok := v.stored(a.Member)
		if !ok {
			vd = VantageVerdict{Member: a.Member, Label: a.Label}
		}
		vd.Label = a.Label
		out = append(out, vd)
	}
	return out
}

// assignLocked returns what this replica does for t: whether it probes
// it and whether it owns it; probed from several vantages, it sets which
// are its vantages.
func (r *registry) assignLocked(t *target) (probes, owns bool) {
	owns = r.link.owns(t.spec.Name)
	v := t.vantagesOf()
	k, _ := r.vantagesLocked(t)
	if r.vantages == nil || k < 2 || t.quarantined() != "" {
		if v != nil {
			v.assigned = nil
			if len(v.verdicts) == 0 {
				t.more.vant = nil
			}
		}
		return owns, owns
	}
	if v == nil {
		v = &vantageSet{decided: t.state}
		t.moreLocked().vant = v
	}
	v.assigned = r.vantages.Vantages(t.spec.Name, k)
	owns = len(v.assigned) > 0 && v.assigned[0].Member == r.self.Member
	probes = slices.ContainsFunc(v.assigned, func(a Vantage) bool { return a.Member == r.self.Member })
	return probes, owns
}

// reassignLocked starts or stops probing and owning t as the members, its
// spec and the shared registry say.
func (r *registry) reassignLocked(t *target, now time.Time) {
	probes, owns := r.assignLocked(t)
	r.ownLocked(t, probes, owns, now)
}

// startVantageLocked sets t's machine when this replica starts probing it
// from its vantage: its own stored verdict, or the published state.
func (r *registry) startVantageLocked(t *target, v *vantageSet) {
	t.m = Machine{Model: t.spec.Model, Rise: t.spec.Rise, Fall: t.spec.Fall, State: t.state}
	if vd, ok := v.stored(r.self.Member); ok {
		t.m.State = vd.State
	}
}

// decideVantagesLocked derives t's vantages' verdict again; on the owner, a
// change goes through the policies to the published state.
func (r *registry) decideVantagesLocked(t *target, v *vantageSet, now time.Time) {
	_, q := r.vantagesLocked(t)
	to := v.decide(q, t.spec.Model, v.decided, r.suspectLocked)
	if to == v.decided {
		return
	}
	v.decided = to
	if t.owned {
		r.verdictLocked(t, true, now, cause{reason: v.text()})
	}
}

// syncVerdictLocked stores this replica's verdict on t when its machine
// differs from its stored verdict, or none is stored and it has a result
// of its own.
func (r *registry) syncVerdictLocked(t *target, v *vantageSet, now time.Time) {
	if v.proposing || len(v.assigned) == 0 || !(t.owned || t.vantage) {
		if len(v.assigned) == 0 {
			r.dropVerdictLocked(t, v)
		}
		return
	}
	stored, ok := v.stored(r.self.Member)
	if ok && stored.State == t.m.State || !ok && (!t.hasLast || t.carried) {
		return // nothing new, or no result of its own yet
	}
	vd := VantageVerdict{Member: r.self.Member, Label: r.self.Label, State: t.m.State, Time: now}
	if t.hasLast && !t.last.Pass {
		vd.Error = t.last.Err
	}
	v.proposing = true
	r.link.propose(proposal{t: t, gen: t.gen, verdict: &VerdictProposal{Target: t.spec.Name, Verdict: vd, PrevRev: v.ownRev}})
}

// dropVerdictLocked removes this replica's stored verdict on t, when it
// no longer probes it.
func (r *registry) dropVerdictLocked(t *target, v *vantageSet) {
	if _, ok := v.stored(r.self.Member); !ok || v.proposing {
		return
	}
	v.proposing = true
	r.link.propose(proposal{t: t, gen: t.gen, verdict: &VerdictProposal{Target: t.spec.Name, Verdict: VantageVerdict{Member: r.self.Member}, PrevRev: v.ownRev, Delete: true}})
}

// applyVerdictLocked applies a vantage's stored verdict (or its removal),
// stored at vd.Rev.
func (r *registry) applyVerdictLocked(name string, vd VantageVerdict, deleted bool, now time.Time) {
	t, ok := r.targets[name]
	if !ok {
		return
	}
	v := t.vantagesOf()
	if v == nil {
		return // probed from one vantage: a verdict left from before
	}
	if deleted {
		v.drop(vd.Member)
	} else {
		v.put(vd)
	}
	if vd.Member == r.self.Member {
		v.ownRev, v.proposing = vd.Rev, false
		if deleted {
			v.ownRev = 0
		}
	}
	r.judgeLocked(t, v)
	if len(v.assigned) == 0 {
		if len(v.verdicts) == 0 {
			t.more.vant = nil // probed from one vantage again, and the last verdict is gone
		}
		return
	}
	r.decideVantagesLocked(t, v, now)
	if vd.Member == r.self.Member {
		r.syncVerdictLocked(t, v, now) // its machine may have moved on meanwhile
	}
}

// validateVantages checks Vantages and Quorum.
func (s Spec) validateVantages() error {
	switch {
	case s.Vantages > MaxVantages:
		return &FieldError{"vantages", fmt.Sprintf("must be between 0 (one: the owner's) and %d, got %d", MaxVantages, s.Vantages)}
	case s.Quorum > max(s.Vantages, 1):
		return &FieldError{"quorum", fmt.Sprintf("must be at most vantages (%d), got %d", max(s.Vantages, 1), s.Quorum)}
	}
	return nil
}

package probe

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Which http:// targets keep a connection when not all of them can. A kept
// connection saves a dial at every probe, so under a budget smaller than
// the fleet (FactoryOptions.MaxIdleConns, the open-file limit) the budget
// goes to the targets probed most often: each lean prober measures its own
// period (the time between the starts of its probes, smoothed), the
// Factory counts probers by period class (powers of two of milliseconds),
// and a prober keeps its connection only when its class is among the
// shortest that fit the budget. Within the class at the edge the first
// come keep theirs; a prober of a longer class closes its connection after
// each probe, which frees the room a shorter one takes at its next probe.

// periodClasses is the number of period classes: class k holds periods of
// [2^(k-1), 2^k) ms; the last holds every longer one (over 24 days).
const periodClasses = 32

// minPeriodGap is the shortest gap between two probe starts taken as a
// period: a probe that ProbeAsync could not start starts again in Probe at
// once, which is one probe, not two.
const minPeriodGap = time.Millisecond

// keepRank is the Factory's count of lean probers by period class, and the
// class up to which they may keep a connection.
type keepRank struct {
	classes [periodClasses]atomic.Int64
	// edge: probers of classes below it keep their connections; of the
	// class itself, as the budget allows; above it, none. periodClasses:
	// every class fits.
	edge     atomic.Int32
	computed atomic.Int64 // when edge was last computed (rankNs)
	unranked atomic.Int64 // probers with no period yet: they may keep, first come
}

// keepRankEvery is how often the edge is computed again, at most.
const keepRankEvery = time.Second

// rankEpoch is what the rank measures times from (rankNs), with the
// monotonic clock when times carry it, as the real clock's do: a step of
// the wall clock is then neither a probe period of an hour nor an edge
// left uncomputed for an hour.
var rankEpoch = time.Now()

func rankNs(t time.Time) int64 { return int64(t.Sub(rankEpoch)) }

// periodClass returns the class of a period.
func periodClass(d time.Duration) int32 {
	return int32(min(bits.Len64(uint64(d/time.Millisecond)), periodClasses-1))
}

// proberPeriod is one lean prober's place in the rank.
type proberPeriod struct {
	lastStart atomic.Int64 // the last probe's start (rankNs); 0 before the first
	smoothed  atomic.Int64 // smoothed period, ns; 0 until two probes
	class     atomic.Int32 // its class in the rank; -1 while unranked
}

// started notes a probe's start at now and moves the prober's class in r
// when its period changed class.
func (pp *proberPeriod) started(r *keepRank, now time.Time) {
	ns := rankNs(now)
	last := pp.lastStart.Swap(ns)
	gap := time.Duration(ns - last)
	if last == 0 || gap < minPeriodGap {
		return
	}
	est := time.Duration(pp.smoothed.Load())
	if est == 0 {
		est = gap
	} else {
		est = (3*est + gap) / 4
	}
	pp.smoothed.Store(int64(est))
	c := periodClass(est)
	old := pp.class.Swap(c)
	if old == c {
		return
	}
	if old < 0 {
		r.unranked.Add(-1)
	} else {
		r.classes[old].Add(-1)
	}
	r.classes[c].Add(1)
}

// join counts a new prober, unranked until its second probe.
func (r *keepRank) join(pp *proberPeriod) {
	pp.class.Store(-1)
	r.unranked.Add(1)
}

// leave takes a closed prober out of the count.
func (r *keepRank) leave(pp *proberPeriod) {
	if c := pp.class.Swap(-2); c >= 0 {
		r.classes[c].Add(-1)
	} else if c == -1 {
		r.unranked.Add(-1)
	}
}

// mayKeep reports whether a prober of pp's class may keep a connection
// under a budget of budget connections.
func (r *keepRank) mayKeep(pp *proberPeriod, budget int64, now time.Time) bool {
	c := pp.class.Load()
	if c < 0 {
		return true // not ranked yet: first come
	}
	return c <= r.edgeAt(budget, now)
}

// edgeAt returns the edge class for budget, computed again when the last
// computation is older than keepRankEvery.
func (r *keepRank) edgeAt(budget int64, now time.Time) int32 {
	ns := rankNs(now)
	last := r.computed.Load()
	if last != 0 && ns-last < int64(keepRankEvery) {
		return r.edge.Load()
	}
	if !r.computed.CompareAndSwap(last, ns) {
		return r.edge.Load() // another prober computes it
	}
	edge := int32(periodClasses)
	sum := r.unranked.Load() // they keep theirs, first come, whatever their class
	for c := range int32(periodClasses) {
		sum += r.classes[c].Load()
		if sum > budget {
			edge = c
			break
		}
	}
	r.edge.Store(edge)
	return edge
}

package probe

import (
	"testing"
	"time"
)

// Under a budget smaller than the fleet, the probers probed most often
// keep their connections: a class of longer periods past the budget keeps
// none, the class at its edge keeps what room is left, first come, and a
// prober not yet ranked (fewer than two probes) may keep, as before.
func TestKeepRankFavoursShortPeriods(t *testing.T) {
	var r keepRank
	t0 := time.Unix(1_000_000, 0)
	prober := func(period time.Duration) *proberPeriod {
		pp := &proberPeriod{}
		r.join(pp)
		for i := range 4 {
			pp.started(&r, t0.Add(time.Duration(i)*period))
		}
		return pp
	}
	fast1, fast2 := prober(100*time.Millisecond), prober(100*time.Millisecond)
	mid := prober(time.Second)
	slow := prober(10 * time.Second)
	fresh := &proberPeriod{}
	r.join(fresh)
	fresh.started(&r, t0)

	// Budget 3: the fast pair and the unranked one fit; the mid class is the
	// edge; the slow class is past it.
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		pp   *proberPeriod
		want bool
	}{
		{"fast1", fast1, true}, {"fast2", fast2, true}, {"mid (edge)", mid, true}, {"slow", slow, false}, {"unranked", fresh, true},
	} {
		if got := r.mayKeep(tc.pp, 3, now); got != tc.want {
			t.Errorf("budget 3: %s may keep %v, want %v (edge class %d)", tc.name, got, tc.want, r.edge.Load())
		}
	}
	// A budget the whole fleet fits in: everyone keeps, once the edge is
	// computed again.
	if !r.mayKeep(slow, 100, now.Add(keepRankEvery)) {
		t.Errorf("budget 100: the slow prober may not keep; edge class %d", r.edge.Load())
	}
	// A prober that leaves makes room: without fast2 and fresh, budget 3
	// holds fast1, mid and slow.
	r.leave(fast2)
	r.leave(fresh)
	if !r.mayKeep(slow, 3, now.Add(2*keepRankEvery)) {
		t.Errorf("after two left, budget 3: the slow prober may not keep; edge class %d", r.edge.Load())
	}
	// A prober that slows down changes class.
	for i := range 8 {
		fast1.started(&r, now.Add(time.Duration(i)*30*time.Second))
	}
	est := time.Duration(fast1.smoothed.Load())
	if c := fast1.class.Load(); c != periodClass(est) || c <= periodClass(10*time.Second) {
		t.Errorf("a prober now probed every 30s is in class %d (period %v)", c, est)
	}
}

package outlier

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func latencies(ms ...int) map[string]Sample {
	out := map[string]Sample{}
	for i, m := range ms {
		name := string(rune('a' + i))
		out[name] = Sample{Target: name, Latency: time.Duration(m) * time.Millisecond, Probes: 10}
	}
	return out
}

func namesOf(s map[string]Sample) []string {
	var out []string
	for i := range len(s) {
		out = append(out, string(rune('a'+i)))
	}
	return out
}

func stateOf(rec Record, name string) *State {
	for _, m := range rec.Members {
		if m.Target == name {
			return m.State
		}
	}
	return nil
}

// The latency rule: a member over factor x the group's median and the
// median + min delta for Consecutive judgements in a row is an outlier;
// a uniformly slow group has none; too few members, nothing is judged.
func TestJudgeLatency(t *testing.T) {
	p := Policy{LatencyFactor: 3, Consecutive: 2}.WithDefaults()
	now := time.Unix(1_800_000_000, 0)
	s := latencies(4, 5, 4, 38)
	rec := Judge(p, namesOf(s), s, Record{}, now)
	if st := stateOf(rec, "d"); st != nil {
		t.Fatalf("an outlier after one judgement of two: %+v", st)
	}
	rec = Judge(p, namesOf(s), s, rec, now.Add(10*time.Second))
	st := stateOf(rec, "d")
	if st == nil || st.Ejected || st.Reason != "p50 38ms vs group 4.5ms" {
		t.Fatalf("second judgement: %+v; want d degraded, p50 38ms vs group 4.5ms", st)
	}
	for _, n := range []string{"a", "b", "c"} {
		if stateOf(rec, n) != nil {
			t.Errorf("%s is an outlier too", n)
		}
	}
	// It speeds up: no longer one.
	s["d"] = Sample{Target: "d", Latency: 5 * time.Millisecond, Probes: 10}
	if rec = Judge(p, namesOf(s), s, rec, now.Add(20*time.Second)); stateOf(rec, "d") != nil || len(rec.Members) != 0 {
		t.Errorf("caught up, the record still holds %+v", rec.Members)
	}

	// Uniformly slow: nobody stands out.
	slow := latencies(900, 950, 880, 910)
	rec = Record{}
	for i := range 5 {
		rec = Judge(p, namesOf(slow), slow, rec, now.Add(time.Duration(i)*time.Second))
	}
	if len(rec.Members) != 0 {
		t.Errorf("a uniformly slow group has outliers: %+v", rec.Members)
	}
	// Over the factor but within min delta: not an outlier.
	fast := latencies(1, 1, 1, 5)
	rec = Record{}
	for i := range 5 {
		rec = Judge(p, namesOf(fast), fast, rec, now.Add(time.Duration(i)*time.Second))
	}
	if stateOf(rec, "d") != nil {
		t.Errorf("5ms against 1ms, under the 10ms minimum delta, made an outlier")
	}
	// Fewer members with a latency than MinMembers: nothing judged.
	two := latencies(4, 40)
	rec = Record{}
	for i := range 5 {
		rec = Judge(p, namesOf(two), two, rec, now.Add(time.Duration(i)*time.Second))
	}
	if len(rec.Members) != 0 {
		t.Errorf("two members judged: %+v", rec.Members)
	}
}

// Enforced: the outlier is ejected for BaseEjectionTime x its ejections
// in a row, never more than MaxEjectionPercent of the group at once (and
// always one); its ejection ends on its own, and a second one lasts
// longer.
func TestJudgeEjection(t *testing.T) {
	p := Policy{LatencyFactor: 3, Consecutive: 1, Enforce: true, BaseEjectionTime: 30 * time.Second}.WithDefaults()
	now := time.Unix(1_800_000_000, 0)
	s := latencies(4, 4, 4, 4, 4, 4, 4, 4, 50, 60) // two slow of ten: at most 10%, one ejected
	rec := Judge(p, namesOf(s), s, Record{}, now)
	i, j := stateOf(rec, "i"), stateOf(rec, "j")
	if i == nil || j == nil {
		t.Fatalf("i, j: %+v, %+v; want both outliers", i, j)
	}
	if !i.Ejected || !i.Until.Equal(now.Add(30*time.Second)) || i.Ejections != 1 {
		t.Errorf("i: %+v; want ejected for 30s, its first", i)
	}
	if j.Ejected || !strings.Contains(j.Reason, "not ejected: 1 of 10 ejected already, at most 10%") {
		t.Errorf("j: %+v; want degraded, the ejection cap reached", j)
	}
	// i stays ejected until its time is up, slow or not.
	s["i"] = Sample{Target: "i", Latency: 4 * time.Millisecond, Probes: 10}
	rec = Judge(p, namesOf(s), s, rec, now.Add(10*time.Second))
	if st := stateOf(rec, "i"); st == nil || !st.Ejected {
		t.Errorf("i before its time: %+v; want still ejected", st)
	}
	// Its time up: back, and then j can be ejected.
	rec = Judge(p, namesOf(s), s, rec, now.Add(31*time.Second))
	if st := stateOf(rec, "i"); st != nil {
		t.Errorf("i after its time: %+v; want back", st)
	}
	if st := stateOf(rec, "j"); st == nil || !st.Ejected {
		t.Errorf("j once i is back: %+v; want ejected", st)
	}
	// i slow again at once: its second ejection in a row lasts 60s.
	s["i"] = Sample{Target: "i", Latency: 70 * time.Millisecond, Probes: 10}
	s["j"] = Sample{Target: "j", Latency: 4 * time.Millisecond, Probes: 10}
	rec = Judge(p, namesOf(s), s, rec, now.Add(100*time.Second)) // j's time up too
	st := stateOf(rec, "i")
	if st == nil || !st.Ejected || st.Ejections != 2 || !st.Until.Equal(now.Add(160*time.Second)) {
		t.Errorf("i ejected again: %+v; want its second, for 60s", st)
	}
}

// Envoy's passive rules: the success rate far below the group's, and a
// failure percentage over the threshold, each with its request volume.
func TestJudgePassiveRules(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	outcomes := func(passes ...int) map[string]Sample {
		out := map[string]Sample{}
		for i, ps := range passes {
			name := string(rune('a' + i))
			out[name] = Sample{Target: name, Passes: ps, Failures: 200 - ps}
		}
		return out
	}
	sr := Policy{SuccessRateStdevFactor: 1.9}.WithDefaults()
	s := outcomes(200, 199, 200, 198, 200, 120)
	rec := Judge(sr, namesOf(s), s, Record{}, now)
	if st := stateOf(rec, "f"); st == nil || !strings.HasPrefix(st.Reason, "success rate 60.0% vs group") {
		t.Errorf("f at 60%% among ~99.6%%: %+v; want an outlier by success rate", st)
	}
	if n := len(rec.Members); n != 1 {
		t.Errorf("%d outliers, want 1: %+v", n, rec.Members)
	}
	// Too little volume: not judged.
	low := map[string]Sample{}
	for n, smp := range s {
		smp.Passes, smp.Failures = smp.Passes/10, smp.Failures/10
		low[n] = smp
	}
	if rec := Judge(sr, namesOf(low), low, Record{}, now); len(rec.Members) != 0 {
		t.Errorf("under the request volume: %+v", rec.Members)
	}

	fp := Policy{FailurePercentage: 50}.WithDefaults()
	s = outcomes(200, 200, 60)
	rec = Judge(fp, namesOf(s), s, Record{}, now)
	if st := stateOf(rec, "c"); st == nil || st.Reason != "140 of 200 outcomes failed (70%)" {
		t.Errorf("c failing 70%%: %+v", st)
	}
}

// BenchmarkPerfJudgeOutliers10k: one judgement of a group of 10,000, one
// member slow, once per interval (10s by default).
func BenchmarkPerfJudgeOutliers10k(b *testing.B) {
	p := Policy{LatencyFactor: 3, SuccessRateStdevFactor: 1.9, FailurePercentage: 85}.WithDefaults()
	samples := map[string]Sample{}
	var names []string
	for i := range 10000 {
		n := fmt.Sprintf("t%05d", i)
		names = append(names, n)
		samples[n] = Sample{Target: n, Latency: time.Duration(4000+i%100) * time.Microsecond, Probes: 10, Passes: 200}
	}
	samples["t00042"] = Sample{Target: "t00042", Latency: 900 * time.Millisecond, Probes: 10, Passes: 200}
	now := time.Unix(1_800_000_000, 0)
	var rec Record
	b.ReportAllocs()
	for b.Loop() {
		rec = Judge(p, names, samples, rec, now)
		now = now.Add(10 * time.Second)
	}
	if len(rec.Members) != 1 {
		b.Fatalf("%d members in the record, want 1", len(rec.Members))
	}
}

package checker

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func latencies(ms ...int) map[string]OutlierSample {
	out := map[string]OutlierSample{}
	for i, m := range ms {
		name := string(rune('a' + i))
		out[name] = OutlierSample{Target: name, Latency: time.Duration(m) * time.Millisecond, Probes: 10}
	}
	return out
}

func namesOf(s map[string]OutlierSample) []string {
	var out []string
	for i := range len(s) {
		out = append(out, string(rune('a'+i)))
	}
	return out
}

func stateOf(rec OutlierRecord, name string) *OutlierState {
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
	p := OutlierPolicy{LatencyFactor: 3, Consecutive: 2}.withDefaults()
	now := time.Unix(1_800_000_000, 0)
	s := latencies(4, 5, 4, 38)
	rec := judge(p, namesOf(s), s, OutlierRecord{}, now)
	if st := stateOf(rec, "d"); st != nil {
		t.Fatalf("an outlier after one judgement of two: %+v", st)
	}
	rec = judge(p, namesOf(s), s, rec, now.Add(10*time.Second))
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
	s["d"] = OutlierSample{Target: "d", Latency: 5 * time.Millisecond, Probes: 10}
	if rec = judge(p, namesOf(s), s, rec, now.Add(20*time.Second)); stateOf(rec, "d") != nil || len(rec.Members) != 0 {
		t.Errorf("caught up, the record still holds %+v", rec.Members)
	}

	// Uniformly slow: nobody stands out.
	slow := latencies(900, 950, 880, 910)
	rec = OutlierRecord{}
	for i := range 5 {
		rec = judge(p, namesOf(slow), slow, rec, now.Add(time.Duration(i)*time.Second))
	}
	if len(rec.Members) != 0 {
		t.Errorf("a uniformly slow group has outliers: %+v", rec.Members)
	}
	// Over the factor but within min delta: not an outlier.
	fast := latencies(1, 1, 1, 5)
	rec = OutlierRecord{}
	for i := range 5 {
		rec = judge(p, namesOf(fast), fast, rec, now.Add(time.Duration(i)*time.Second))
	}
	if stateOf(rec, "d") != nil {
		t.Errorf("5ms against 1ms, under the 10ms minimum delta, made an outlier")
	}
	// Fewer members with a latency than MinMembers: nothing judged.
	two := latencies(4, 40)
	rec = OutlierRecord{}
	for i := range 5 {
		rec = judge(p, namesOf(two), two, rec, now.Add(time.Duration(i)*time.Second))
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
	p := OutlierPolicy{LatencyFactor: 3, Consecutive: 1, Enforce: true, BaseEjectionTime: 30 * time.Second}.withDefaults()
	now := time.Unix(1_800_000_000, 0)
	s := latencies(4, 4, 4, 4, 4, 4, 4, 4, 50, 60) // two slow of ten: at most 10%, one ejected
	rec := judge(p, namesOf(s), s, OutlierRecord{}, now)
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
	s["i"] = OutlierSample{Target: "i", Latency: 4 * time.Millisecond, Probes: 10}
	rec = judge(p, namesOf(s), s, rec, now.Add(10*time.Second))
	if st := stateOf(rec, "i"); st == nil || !st.Ejected {
		t.Errorf("i before its time: %+v; want still ejected", st)
	}
	// Its time up: back, and then j can be ejected.
	rec = judge(p, namesOf(s), s, rec, now.Add(31*time.Second))
	if st := stateOf(rec, "i"); st != nil {
		t.Errorf("i after its time: %+v; want back", st)
	}
	if st := stateOf(rec, "j"); st == nil || !st.Ejected {
		t.Errorf("j once i is back: %+v; want ejected", st)
	}
	// i slow again at once: its second ejection in a row lasts 60s.
	s["i"] = OutlierSample{Target: "i", Latency: 70 * time.Millisecond, Probes: 10}
	s["j"] = OutlierSample{Target: "j", Latency: 4 * time.Millisecond, Probes: 10}
	rec = judge(p, namesOf(s), s, rec, now.Add(100*time.Second)) // j's time up too
	st := stateOf(rec, "i")
	if st == nil || !st.Ejected || st.Ejections != 2 || !st.Until.Equal(now.Add(160*time.Second)) {
		t.Errorf("i ejected again: %+v; want its second, for 60s", st)
	}
}

// Envoy's passive rules: the success rate far below the group's, and a
// failure percentage over the threshold, each with its request volume.
func TestJudgePassiveRules(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	outcomes := func(passes ...int) map[string]OutlierSample {
		out := map[string]OutlierSample{}
		for i, ps := range passes {
			name := string(rune('a' + i))
			out[name] = OutlierSample{Target: name, Passes: ps, Failures: 200 - ps}
		}
		return out
	}
	sr := OutlierPolicy{SuccessRateStdevFactor: 1.9}.withDefaults()
	s := outcomes(200, 199, 200, 198, 200, 120)
	rec := judge(sr, namesOf(s), s, OutlierRecord{}, now)
	if st := stateOf(rec, "f"); st == nil || !strings.HasPrefix(st.Reason, "success rate 60.0% vs group") {
		t.Errorf("f at 60%% among ~99.6%%: %+v; want an outlier by success rate", st)
	}
	if n := len(rec.Members); n != 1 {
		t.Errorf("%d outliers, want 1: %+v", n, rec.Members)
	}
	// Too little volume: not judged.
	low := map[string]OutlierSample{}
	for n, smp := range s {
		smp.Passes, smp.Failures = smp.Passes/10, smp.Failures/10
		low[n] = smp
	}
	if rec := judge(sr, namesOf(low), low, OutlierRecord{}, now); len(rec.Members) != 0 {
		t.Errorf("under the request volume: %+v", rec.Members)
	}

	fp := OutlierPolicy{FailurePercentage: 50}.withDefaults()
	s = outcomes(200, 200, 60)
	rec = judge(fp, namesOf(s), s, OutlierRecord{}, now)
	if st := stateOf(rec, "c"); st == nil || st.Reason != "140 of 200 outcomes failed (70%)" {
		t.Errorf("c failing 70%%: %+v", st)
	}
}

// The policy's bounds name the field.
func TestOutlierPolicyBounds(t *testing.T) {
	for _, tt := range []struct {
		p    OutlierPolicy
		want string
	}{
		{OutlierPolicy{LatencyFactor: 0.5}, "outlier.latency_factor: must be 0 (off) or between 1 and 1000, got 0.5"},
		{OutlierPolicy{Interval: time.Millisecond}, "outlier.interval: must be between 1s and 1h0m0s"},
		{OutlierPolicy{MinMembers: 1}, "outlier.min_members: must be 0 (3) or at least 2, got 1"},
		{OutlierPolicy{FailurePercentage: 101}, "outlier.failure_percentage"},
		{OutlierPolicy{MaxEjectionPercent: -1}, "outlier.max_ejection_percent"},
	} {
		if err := tt.p.validate(); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.p, err, tt.want)
		}
	}
	if err := (OutlierPolicy{LatencyFactor: 3, Enforce: true}).validate(); err != nil {
		t.Errorf("a valid policy: %v", err)
	}
}

// BenchmarkPerfJudgeOutliers10k: one judgement of a group of 10,000, one
// member slow, once per interval (10s by default).
func BenchmarkPerfJudgeOutliers10k(b *testing.B) {
	p := OutlierPolicy{LatencyFactor: 3, SuccessRateStdevFactor: 1.9, FailurePercentage: 85}.withDefaults()
	samples := map[string]OutlierSample{}
	var names []string
	for i := range 10000 {
		n := fmt.Sprintf("t%05d", i)
		names = append(names, n)
		samples[n] = OutlierSample{Target: n, Latency: time.Duration(4000+i%100) * time.Microsecond, Probes: 10, Passes: 200}
	}
	samples["t00042"] = OutlierSample{Target: "t00042", Latency: 900 * time.Millisecond, Probes: 10, Passes: 200}
	now := time.Unix(1_800_000_000, 0)
	var rec OutlierRecord
	b.ReportAllocs()
	for b.Loop() {
		rec = judge(p, names, samples, rec, now)
		now = now.Add(10 * time.Second)
	}
	if len(rec.Members) != 1 {
		b.Fatalf("%d members in the record, want 1", len(rec.Members))
	}
}

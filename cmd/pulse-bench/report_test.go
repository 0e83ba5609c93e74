package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // 100ms .. 1ms, unsorted
		samples = append(samples, time.Duration(i)*ms)
	}
	got := summarize(samples, 110)
	want := Latency{N: 100, Expected: 110, P50: 50 * ms, P99: 99 * ms, Max: 100 * ms}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if got.Missing() != 10 {
		t.Errorf("Missing = %d, want 10", got.Missing())
	}
	if samples[0] != 100*ms {
		t.Error("summarize sorted its argument")
	}
	one := summarize([]time.Duration{7 * ms}, 1)
	if one.P50 != 7*ms || one.P99 != 7*ms || one.Max != 7*ms || one.Missing() != 0 {
		t.Errorf("one sample: %+v", one)
	}
	if none := summarize(nil, 5); none.N != 0 || none.Missing() != 5 {
		t.Errorf("no samples: %+v", none)
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		a, b float64
		want float64
		ok   bool
	}{
		{a: 30, b: 60, want: 0.5, ok: true},
		{a: 90, b: 60, want: 1.5, ok: true},
		{a: 30, b: 0},
		{a: 0, b: 60},
		{a: math.NaN(), b: 1},
		{a: 1, b: math.Inf(1)},
	} {
		got, ok := ratio(tc.a, tc.b)
		if ok != tc.ok || (ok && math.Abs(got-tc.want) > 1e-12) {
			t.Errorf("ratio(%v, %v) = %v, %v; want %v, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
	if got := fmtRatio(1, 0); got != "n/a" {
		t.Errorf("fmtRatio(1, 0) = %q, want n/a", got)
	}
	if got := fmtRatio(1, 3); got != "0.33" {
		t.Errorf("fmtRatio(1, 3) = %q, want 0.33", got)
	}
}

func TestSystemResultDerivedNumbers(t *testing.T) {
	r := &SystemResult{
		Targets: 10000, Interval: time.Second, Window: 20 * time.Second,
		Probes: 199000, Late: 1990, Conns: 99500,
		CPU:     19900 * time.Millisecond, // 100µs a probe
		FarmCPU: 10 * time.Second, OtherCPU: 2 * time.Second,
		RSS: 100 << 20, BaseRSS: 20 << 20,
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"Scheduled", r.Scheduled(), 200000},
		{"DoneFraction", r.DoneFraction(), 0.995},
		{"LateFraction", r.LateFraction(), 0.01},
		{"CPUPerProbe", r.CPUPerProbe(), 100},
		{"ConnsPerProbe", r.ConnsPerProbe(), 0.5},
		{"Cores", r.Cores(), 0.995},
		{"FarmCores", r.FarmCores(), 0.5},
		{"OtherCores", r.OtherCores(), 0.1},
		{"RSSPerTarget", r.RSSPerTarget(), 10.24},
		{"MarginalRSSPerTarget", r.MarginalRSSPerTarget(), 8.192},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Read through the window, the mean is what the report gives.
	r.MeanRSS = 60 << 20
	if got, want := r.RSSPerTarget(), 6.144; math.Abs(got-want) > 1e-9 {
		t.Errorf("RSSPerTarget with a window mean = %v, want %v", got, want)
	}
	if got, want := r.MarginalRSSPerTarget(), 4.096; math.Abs(got-want) > 1e-9 {
		t.Errorf("MarginalRSSPerTarget with a window mean = %v, want %v", got, want)
	}
	var zero SystemResult
	for name, v := range map[string]float64{
		"Scheduled": zero.Scheduled(), "DoneFraction": zero.DoneFraction(), "LateFraction": zero.LateFraction(),
		"CPUPerProbe": zero.CPUPerProbe(), "ConnsPerProbe": zero.ConnsPerProbe(), "Cores": zero.Cores(), "RSSPerTarget": zero.RSSPerTarget(),
		"MarginalRSSPerTarget": zero.MarginalRSSPerTarget(),
	} {
		if v != 0 {
			t.Errorf("zero result: %s = %v, want 0", name, v)
		}
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "0",
		940 * time.Microsecond:   "940µs",
		4400 * time.Microsecond:  "4.4ms",
		2 * time.Second:          "2.00s",
		2934 * time.Millisecond:  "2.93s",
		-1:                       "0",
		999999 * time.Nanosecond: "999µs",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", time.Duration(d), got, want)
		}
	}
	if got := fmtLat(Latency{Expected: 3}); got != "none of 3" {
		t.Errorf("fmtLat without samples = %q", got)
	}
	if got := fmtLat(Latency{N: 2, Expected: 3, P50: time.Second, P99: 2 * time.Second}); got != "1.00s / 2.00s (1 of 3 missing)" {
		t.Errorf("fmtLat with a missing sample = %q", got)
	}
	if got := fmtCount(10000) + " " + fmtCount(1500); got != "10k 1500" {
		t.Errorf("fmtCount = %q", got)
	}
}

// sampleReport is a fixed report: one point with both checkers, one with
// Pulse alone.
func sampleReport() Report {
	ms := time.Millisecond
	pulse := &SystemResult{
		System: "Pulse", Targets: 1000, Interval: time.Second, Healthy: 1000,
		Window: 20 * time.Second, Probes: 20000, Late: 0, Conns: 0,
		GapP50: 1010 * ms, GapP99: 1010 * ms, GapMax: 1020 * ms,
		CPU: 600 * ms, FarmCPU: 400 * ms, RSS: 30 << 20, PeakRSS: 31 << 20, BaseRSS: 20 << 20,
		Flipped: 100,
		Detect:  Latency{N: 100, Expected: 100, P50: 2500 * ms, P99: 2980 * ms, Max: 2990 * ms},
		DetectFirstFail: Latency{N: 100, Expected: 100, P50: 2000 * ms, P99: 2010 * ms,
			Max: 2020 * ms},
		Subscribers: 1000,
		Delivery:    Latency{N: 100000, Expected: 100000, P50: 3 * ms, P99: 12 * ms, Max: 15 * ms},
	}
	hap := &SystemResult{
		System: "HAProxy", Targets: 1000, Interval: time.Second, Healthy: 1000,
		Window: 20 * time.Second, Probes: 19800, Late: 198, Conns: 19800,
		GapP50: 1010 * ms, GapP99: 1020 * ms, GapMax: 1600 * ms,
		CPU: 1200 * ms, FarmCPU: 600 * ms, OtherCPU: 200 * ms, RSS: 15 << 20,
		Flipped:         100,
		Detect:          Latency{N: 100, Expected: 100, P50: 2500 * ms, P99: 3000 * ms, Max: 3000 * ms},
		DetectFirstFail: Latency{N: 99, Expected: 100, P50: 2000 * ms, P99: 2020 * ms, Max: 2030 * ms},
		Notes:           []string{"one server never went down"},
	}
	alone := &SystemResult{
		System: "Pulse", Targets: 100000, Interval: 10 * time.Second, Healthy: 100000,
		Window: 30 * time.Second, Probes: 297000, Late: 6000,
		CPU: 30 * time.Second, RSS: 400 << 20,
	}
	return Report{
		Command: "pulse-bench -points 1000@1s",
		Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		Machine: Machine{CPUs: 2, Model: "AMD EPYC", Kernel: "6.1", Go: "go1.26", HAProxyVersion: "HAProxy version 2.6.12"},
		Source:  "commit abc1234",
		Rise:    2, Fall: 3,
		Points: []Point{
			{Targets: 1000, Interval: time.Second, Pulse: pulse, HAProxy: hap},
			{Targets: 100000, Interval: 10 * time.Second, Pulse: alone},
		},
	}
}

func TestReportMarkdown(t *testing.T) {
	got := sampleReport().Markdown()
	for _, want := range []string{
		"Run 2026-11-30T10:00:00Z on 2 CPUs (AMD EPYC), Linux 6.1, go1.26, HAProxy version 2.6.12; rise 2, fall 3.",
		"Command: `pulse-bench -points 1000@1s`",
		"Source: commit abc1234.",
		"| 1k | 1s | Pulse | 1000 | 20000 / 20000 (100.0%) | 0.00% | 1.01s / 1.01s / 1.02s | 0.00 | 30.0 | 0.03 (0.02, 0.00) | 30.0 | 30.72 (+10.24) | 2.50s / 2.98s | 2.00s / 2.01s | 3.0ms / 12.0ms / 15.0ms (1000 subs) |",
		"| 1k | 1s | HAProxy | 1000 | 19800 / 20000 (99.0%) | 1.00% | 1.01s / 1.02s / 1.60s | 1.00 | 60.6 | 0.06 (0.03, 0.01) | 15.0 | 15.36 | 2.50s / 3.00s | 2.00s / 2.02s (1 of 100 missing) | n/a |",
		"| 100k | 10s | Pulse | 100000 | 297000 / 300000 (99.0%) | 2.02% |",
		// The ratios: 30.0/60.6 and 30 MiB / 15 MiB; no row for the point without HAProxy.
		"| 1k | 1s | 0.49 | 2.00 | 2.01s vs 2.02s |",
		"- CPU per probe at most half of HAProxy's, 1k targets at 1s: met (30.0 vs 60.6 µs, ratio 0.49, target 0.50)",
		"- RSS at most 5 KiB per target, 1k targets at 1s: MISSED (30.72 KiB)",
		"- under 1% late probes, 1k targets at 1s: met (0.00% late, 0.00% of scheduled probes not done)",
		"- detection p99 within one interval of the floor, 1k targets at 1s: met (p99 2.01s after the first failed probe; floor 2.00s, bound 3.00s)",
		"- delivery p99 under 10ms to 1000 subscribers, 1k targets at 1s: MISSED (p99 12.0ms)",
		"- under 1% late probes, 100k targets at 10s: MISSED (2.02% late, 1.00% of scheduled probes not done)",
		"- 1k targets, HAProxy: one server never went down",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "| 100k | 10s | n/a") {
		t.Errorf("a ratio row for the point without HAProxy:\n%s", got)
	}
}

func TestVerdictsBoundaries(t *testing.T) {
	r := sampleReport()
	p := r.Points[0]
	p.Pulse.CPU = 1200 * time.Millisecond * 20000 / 19800 / 2 // exactly half of HAProxy's per probe
	p.Pulse.Delivery.P99 = 10 * time.Millisecond              // "under 10ms": not met at 10ms
	p.Pulse.DetectFirstFail.P99 = 3 * time.Second             // at the bound: met
	v := strings.Join(r.Verdicts(), "\n")
	for _, want := range []string{
		"CPU per probe at most half of HAProxy's, 1k targets at 1s: met",
		"delivery p99 under 10ms to 1000 subscribers, 1k targets at 1s: MISSED (p99 10.0ms)",
		"detection p99 within one interval of the floor, 1k targets at 1s: met (p99 3.00s",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("verdicts lack %q:\n%s", want, v)
		}
	}
	p.Pulse.DetectFirstFail.N = 99 // one never detected
	if v := strings.Join(r.Verdicts(), "\n"); !strings.Contains(v, "detection p99 within one interval of the floor, 1k targets at 1s: MISSED") {
		t.Errorf("a missed detection does not miss the target:\n%s", v)
	}
}

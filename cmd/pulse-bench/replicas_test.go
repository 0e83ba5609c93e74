package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseReplicas(t *testing.T) {
	got, err := parseReplicas(" 1, 2,3 ,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("parseReplicas = %v, want %v", got, want)
	}
	if got, err := parseReplicas(""); err != nil || len(got) != 0 {
		t.Errorf("parseReplicas(\"\") = %v, %v; want none (the mode is off)", got, err)
	}
	for _, bad := range []string{"0", "-1", "x", "1,1", "65", "1.5"} {
		if _, err := parseReplicas(bad); err == nil {
			t.Errorf("parseReplicas(%q) succeeded", bad)
		}
	}
}

func TestParseFlagsReplicas(t *testing.T) {
	f, err := parseFlags([]string{"-replicas", "1,3", "-etcd", "/bin/etcd", "-points", "2k@1s"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.opts.Replicas, []int{1, 3}) || f.opts.EtcdBin != "/bin/etcd" {
		t.Errorf("Replicas %v, EtcdBin %q", f.opts.Replicas, f.opts.EtcdBin)
	}
	if _, err := parseFlags([]string{"-replicas", "2,x"}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "-replicas") {
		t.Errorf("a bad -replicas: %v", err)
	}
}

func TestCountWriters(t *testing.T) {
	records := [][]byte{
		[]byte(`{"v":1,"state":"healthy","writer":"r1","applies_to":3}`),
		[]byte(`{"v":1,"writer":"r2"}`),
		[]byte(`{"v":1,"writer":"r1"}`),
		[]byte(`{"v":1,"writer":"host-77-abc"}`), // a replica of another run
		[]byte(`{"v":1}`),                        // no writer
		[]byte(`not json`),
	}
	owned, others := countWriters(records, []string{"r1", "r2", "r3"})
	if want := []int{2, 1, 0}; !slices.Equal(owned, want) || others != 3 {
		t.Errorf("countWriters = %v, %d others; want %v, 3 others", owned, others, want)
	}
}

func TestParseEtcdVersion(t *testing.T) {
	out := "etcd Version: 3.7.3\nGit SHA: Not provided (use ./build instead of go build)\nGo Version: go1.26.8\n"
	if v, ok := parseEtcdVersion(out); !ok || v != "3.7.3" {
		t.Errorf("parseEtcdVersion = %q, %v; want 3.7.3", v, ok)
	}
	if _, ok := parseEtcdVersion("etcd: unknown flag\n"); ok {
		t.Error("parseEtcdVersion found a version in an error")
	}
}

func TestPulsedArgsRegistry(t *testing.T) {
	o := Options{Timeout: time.Second, Rise: 2, Fall: 3}
	got := strings.Join(pulsedArgs(o, time.Second, "-registry", "etcd", "-etcd-prefix", "/bench-5000-1s-2/"), " ")
	if strings.Contains(got, "-data-dir") {
		t.Errorf("etcd mode's args %q name -data-dir, which pulsed refuses with -registry etcd", got)
	}
	for _, want := range []string{"-listen 127.0.0.1:0 -registry etcd -etcd-prefix /bench-5000-1s-2/ -http-listen  -rate-limit 0", "-interval 1s -timeout 1s -rise 2 -fall 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("pulsed args %q lack %q", got, want)
		}
	}
	if got := strings.Join(pulsedArgs(o, time.Second, "-data-dir", "/d"), " "); !strings.Contains(got, "-data-dir /d -http-listen") {
		t.Errorf("embedded args %q lack the data dir", got)
	}
}

func TestReplicaNames(t *testing.T) {
	p := ScalePoint{Targets: 5000, Interval: time.Second}
	seen := map[string]bool{}
	for _, k := range []int{1, 2, 3} {
		seen[replicaPrefix(p, k)] = true
	}
	seen[replicaPrefix(ScalePoint{Targets: 2000, Interval: time.Second}, 1)] = true
	if len(seen) != 4 {
		t.Errorf("runs share a prefix: %v", seen)
	}
	if got := replicaPrefix(p, 2); got != "/bench-5000-1s-2/" {
		t.Errorf("replicaPrefix = %q", got)
	}
	if got := replicaSystem(3); got != "Pulse (etcd, 3 replicas)" {
		t.Errorf("replicaSystem(3) = %q", got)
	}
	if got := fileSafe(replicaSystem(2)); got != "pulse-etcd-2-replicas" {
		t.Errorf("fileSafe = %q", got)
	}
	if got := fileSafe("HAProxy"); got != "haproxy" {
		t.Errorf("fileSafe(HAProxy) = %q: the existing profile names changed", got)
	}
}

func TestFmtShares(t *testing.T) {
	if got, want := fmtShares([]int{1012, 988}, 0), "r1 1012 (51%), r2 988 (49%)"; got != want {
		t.Errorf("fmtShares = %q, want %q", got, want)
	}
	if got, want := fmtShares([]int{50, 25}, 25), "r1 50 (50%), r2 25 (25%), none of them 25"; got != want {
		t.Errorf("fmtShares = %q, want %q", got, want)
	}
	if got := fmtShares([]int{0}, 0); got != "n/a" {
		t.Errorf("fmtShares of nothing = %q", got)
	}
}

func sampleReplicaReport() Report {
	run := func(k int, cpu, etcd time.Duration, owned []int, rss ...uint64) *ReplicaResult {
		r := &ReplicaResult{
			Replicas: k,
			SystemResult: SystemResult{
				System: replicaSystem(k), Targets: 2000, Interval: time.Second, Healthy: 2000,
				Window: 20 * time.Second, Probes: 40000, CPU: cpu, EtcdCPU: etcd,
				FarmCPU: 4 * time.Second, OtherCPU: time.Second, RSS: 60 << 20,
			},
			Owned: owned, Setup: 3 * time.Second, SetupCPU: 2 * time.Second, SetupEtcdCPU: time.Second,
		}
		if k > 0 {
			r.EtcdRSS = 40 << 20
		}
		if len(rss) > 1 {
			r.ProcRSS = rss
		}
		return r
	}
	return Report{
		Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		Machine: Machine{CPUs: 2, Model: "AMD EPYC", Kernel: "6.1", Go: "go1.26", EtcdVersion: "3.7.3"},
		Rise:    2, Fall: 3,
		ReplicaPoints: []ReplicaPoint{{Targets: 2000, Interval: time.Second, Runs: []*ReplicaResult{
			run(0, 8*time.Second, 0, nil),
			run(1, 8*time.Second, 400*time.Millisecond, []int{2000}),
			run(2, 10*time.Second, 400*time.Millisecond, []int{1000, 1000}, 30<<20, 31<<20),
		}}},
	}
}

func TestReplicaMarkdown(t *testing.T) {
	rep := sampleReplicaReport()
	rep.ReplicaPoints[0].Runs[2].Notes = []string{"only 1999 of 2000 targets became healthy before the window"}
	got := rep.Markdown()
	for _, want := range []string{
		"HAProxy not run, etcd 3.7.3; rise 2, fall 3.",
		// 8 s over 40,000 probes is 200 µs; etcd's 0.4 s is 10 µs; 2,000 probes/s.
		"| 2k | 1s | embedded | 2000 | 40000 / 40000 (100.0%) | 2000 | 0.00% |",
		"| 200.0 + 0.0 = 200.0 | 1 (base) | 0.40 + 0.00 (0.20, 0.05) | 60.0 | n/a | 3.00s, 1000 + 500 |",
		"| 2k | 1s | etcd, 1 replica | 2000 |",
		"| 200.0 + 10.0 = 210.0 | 1.05 | 0.40 + 0.02 (0.20, 0.05) | 60.0 (40.0) | r1 2000 (100%) |",
		"| 250.0 + 10.0 = 260.0 | 1.30 | 0.50 + 0.02 (0.20, 0.05) | 30.0 / 31.0 (40.0) | r1 1000 (50%), r2 1000 (50%) |",
		"- 2k targets at 1s: probes/s: embedded 2000; etcd, 1 replica 2000; etcd, 2 replicas 2000 (scheduled 2000).",
		"- 2k targets at 1s: CPU per probe of etcd mode (replicas + etcd) / embedded: etcd, 1 replica 1.05 (210.0 vs 200.0 µs); etcd, 2 replicas 1.30 (260.0 vs 200.0 µs).",
		"share this machine's 2 CPUs",
		"cannot add probes per second here",
		"- 2k targets, etcd, 2 replicas: only 1999 of 2000 targets became healthy before the window",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "| checker |") || strings.Contains(got, "Performance targets") {
		t.Errorf("a replicas-only report shows the Pulse/HAProxy tables:\n%s", got)
	}
	if strings.Contains(sampleReport().Markdown(), "Replicas on etcd") {
		t.Error("a report without -replicas shows the replica section")
	}
}

package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 1234, stime 566.
	stat := "4242 (pulse d) (x)) S 1 4242 4242 0 -1 4194560 2011 0 0 0 1234 566 0 0 20 0 9 0 123 456 789"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 18 * time.Second; got != want { // (1234+566) ticks at 100 a second
		t.Errorf("parseStatCPU = %v, want %v", got, want)
	}
	if user, sys, err := parseStatTimes(stat); err != nil || user != 12340*time.Millisecond || sys != 5660*time.Millisecond {
		t.Errorf("parseStatTimes = %v, %v, %v; want 12.34s, 5.66s", user, sys, err)
	}
	for _, bad := range []string{"", "4242 pulsed S 1", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 5 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
}

func TestParseStatusMem(t *testing.T) {
	status := "Name:\tpulsed\nVmPeak:\t 999 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n"
	rss, peak, err := parseStatusMem(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 20<<20 || peak != 40<<20 {
		t.Errorf("rss %d, peak %d; want %d and %d", rss, peak, 20<<20, 40<<20)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t 12 MB\n", "VmRSS:\t x kB\n"} {
		if _, _, err := parseStatusMem(strings.NewReader(bad)); err == nil {
			t.Errorf("parseStatusMem(%q) succeeded", bad)
		}
	}
}

func TestParseHostBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseHostBusy("cpu  100 1 50 9000 40 2 3 4 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 1600 * time.Millisecond; got != want { // 100+1+50+2+3+4 = 160 ticks
		t.Errorf("parseHostBusy = %v, want %v", got, want)
	}
	if _, err := parseHostBusy("intr 1 2 3\n"); err == nil {
		t.Error("parseHostBusy accepted a line that is not cpu")
	}
}

func TestProcOfThisProcess(t *testing.T) {
	// The real files parse; no value is asserted beyond being there.
	if _, err := procCPU(1); err != nil {
		t.Errorf("procCPU(1): %v", err)
	}
	if _, err := hostBusy(); err != nil {
		t.Errorf("hostBusy: %v", err)
	}
}

func TestParsePoints(t *testing.T) {
	got, err := parsePoints(" 1000@1s, 10k@1s,50000@10s,200 ", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []ScalePoint{{1000, time.Second}, {10000, time.Second}, {50000, 10 * time.Second}, {200, 2 * time.Second}}
	if !slices.Equal(got, want) {
		t.Errorf("parsePoints = %v, want %v", got, want)
	}
	for _, bad := range []string{"", ",", "0@1s", "-5", "x@1s", "100@fast", "100@10ms", "1e3"} {
		if _, err := parsePoints(bad, time.Second); err == nil {
			t.Errorf("parsePoints(%q) succeeded", bad)
		}
	}
}

func TestFlipSet(t *testing.T) {
	if got, want := flipSet(35, 0.1), []int{0, 10, 20, 30}; !slices.Equal(got, want) {
		t.Errorf("flipSet(35, 0.1) = %v, want %v", got, want)
	}
	if got := len(flipSet(10000, 0.1)); got != 1000 {
		t.Errorf("flipSet(10000, 0.1) has %d targets, want 1000", got)
	}
	if got, want := flipSet(5, 0.5), []int{0, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("flipSet(5, 0.5) = %v, want %v", got, want)
	}
	if got := flipSet(10, 0); got != nil {
		t.Errorf("flipSet(10, 0) = %v, want none", got)
	}
}

func TestTargetNames(t *testing.T) {
	for _, i := range []int{0, 7, 99999, 123456} {
		if got := targetIndex(targetName(i)); got != i {
			t.Errorf("targetIndex(targetName(%d)) = %d", i, got)
		}
	}
	for _, bad := range []string{"", "web-1", "t12345", "x000001", "t-00001", "t00000a"} {
		if got := targetIndex(bad); got != -1 {
			t.Errorf("targetIndex(%q) = %d, want -1", bad, got)
		}
	}
}

func TestPulsedArgs(t *testing.T) {
	o := Options{Timeout: time.Second, Rise: 2, Fall: 3, PulsedArgs: []string{"-max-concurrent-probes", "512"}}
	got := strings.Join(pulsedArgs(o, 500*time.Millisecond), " ")
	for _, want := range []string{
		"-listen 127.0.0.1:0", "-data-dir  -http-listen  -rate-limit 0", "-max-targets 0 -max-targets-per-group 0 -max-watchers-per-source 0",
		"-interval 500ms -timeout 500ms -rise 2 -fall 3", "-max-concurrent-probes 512",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("pulsed args %q lack %q", got, want)
		}
	}
}

func TestCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9R14\n"
	if got := cpuModel(info); got != "AMD EPYC 9R14" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel("processor: 0\n"); got != "unknown" {
		t.Errorf("cpuModel without a model = %q", got)
	}
}

func TestParseFlags(t *testing.T) {
	var stderr strings.Builder
	f, err := parseFlags([]string{"-points", "10k@10s", "-flip-mode", "hang", "-pulsed-args", "-a 1  -b"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.FlipMode != ModeHang || !slices.Equal(f.opts.PulsedArgs, []string{"-a", "1", "-b"}) || f.opts.Points[0].Targets != 10000 {
		t.Errorf("parsed %+v", f.opts)
	}
	if f.opts.DataDir {
		t.Error("pulsed runs with a data directory without -data-dir")
	}
	if f, err := parseFlags([]string{"-data-dir"}, &stderr); err != nil || !f.opts.DataDir {
		t.Errorf("-data-dir: DataDir %v, %v", f.opts.DataDir, err)
	}
	for _, bad := range [][]string{
		{"-flip-mode", "ok"}, {"-flip-fraction", "0.9"}, {"-rise", "0"}, {"-points", "x"}, {"extra"},
	} {
		if _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

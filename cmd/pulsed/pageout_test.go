package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/pageout"
	"github.com/pulsehealth/pulse/internal/testscale"
)

var pagedOut = regexp.MustCompile(`paged out pulsed's binary.* resident_file_bytes_before=(\d+) resident_file_bytes_after=(\d+)`)

// The page-outs after the first come at twice, four times, ... the first's
// time after start, an hour apart at most.
func TestNextPageOut(t *testing.T) {
	var at []time.Duration
	elapsed := 10 * time.Second
	for range 12 {
		at = append(at, elapsed)
		elapsed += nextPageOut(elapsed)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 320 * time.Second, 640 * time.Second, 1280 * time.Second, 2560 * time.Second,
		5120 * time.Second, 5120*time.Second + time.Hour, 5120*time.Second + 2*time.Hour}
	if !slices.Equal(at, want) {
		t.Errorf("page-outs at %v, want %v", at, want)
	}
	if got := nextPageOut(maxPageOutAfter); got != time.Hour {
		t.Errorf("after a first page-out at %v the next is in %v, want 1h", maxPageOutAfter, got)
	}
}

// pulsed gives back its binary's resident pages -page-out-after its start,
// says so, goes on serving from the pages it reads back, and pages out
// again later.
func TestPageOutAfter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("paging out needs Linux")
	}
	p := startPulsed(t, buildPulsed(t), "-page-out-after", "300ms", "-log-level", "debug")
	var m []string
	deadline := time.Now().Add(testscale.D(30 * time.Second))
	for m == nil && time.Now().Before(deadline) {
		if strings.Contains(p.Logs(), "stays resident") {
			t.Skipf("this kernel cannot page out on request:\n%s", p.Logs())
		}
		m = pagedOut.FindStringSubmatch(p.Logs())
		time.Sleep(10 * time.Millisecond)
	}
	if m == nil {
		t.Fatalf("pulsed did not say it paged out its binary:\n%s", p.Logs())
	}
	// Its data dir's store (startPulsed gives it one) is paged out with it.
	if !regexp.MustCompile(`paged out pulsed's binary.* store_mapped_bytes=[1-9]`).MatchString(p.Logs()) {
		t.Errorf("the page-out does not name the store's mapping:\n%s", p.Logs())
	}
	before, _ := strconv.ParseUint(m[1], 10, 64)
	now, ok := pageout.ResidentFile(p.PID())
	if !ok {
		t.Fatalf("no RssFile in /proc/%d/status", p.PID())
	}
	t.Logf("resident file pages: %s bytes before, %s after, %d now", m[1], m[2], now)
	if now >= before/2 {
		t.Errorf("pulsed's resident file pages are %d KiB, %d before it paged out: want less than half", now>>10, before>>10)
	}
	// It still serves: a target added now is probed and found healthy.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer web.Close()
	req := `{"target": {"name": "web", "http": {"url": "` + web.URL + `"}, "interval": "200ms", "rise": 1}}`
	if out, err := goTool(t, "grpcurl", "-plaintext", "-d", req, p.Addr, "pulse.v1.HealthChecker/AddTarget"); err != nil {
		t.Fatalf("AddTarget after the page-out: %v\n%s", err, out)
	}
	for {
		out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "web"}`, p.Addr, "pulse.v1.HealthChecker/State")
		if err == nil && strings.Contains(out, "STATE_HEALTHY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target added after the page-out is not healthy: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The later page-outs, at 600ms and 1.2s, at debug level.
	for len(pagedOut.FindAllString(p.Logs(), -1)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("pulsed did not page out its binary three times:\n%s", p.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.Logs(), "level=DEBUG msg=\"paged out pulsed's binary") {
		t.Errorf("the later page-outs are not logged at debug level:\n%s", p.Logs())
	}
	p.stop(t)
}

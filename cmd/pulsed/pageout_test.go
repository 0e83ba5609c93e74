package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/pageout"
	"github.com/pulsehealth/pulse/internal/testscale"
)

var pagedOut = regexp.MustCompile(`paged out pulsed's binary.* resident_file_bytes_before=(\d+) resident_file_bytes_after=(\d+)`)

// pulsed gives back its binary's resident pages -page-out-after its start,
// says so, and goes on serving from the pages it reads back.
func TestPageOutAfter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("paging out needs Linux")
	}
	p := startPulsed(t, buildPulsed(t), "-page-out-after", "300ms")
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
	p.stop(t)
}

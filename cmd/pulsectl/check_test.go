package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// checkServer serves the paths the check tests use: /ok (200), /flaky (503
// twice, then 200), /broken (500), /gone (404) and /hang (answers when the
// client gives up).
func checkServer(t *testing.T) *httptest.Server {
	t.Helper()
	var flaky atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, _ *http.Request) {
		if flaky.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/gone", http.NotFound)
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckEndToEnd runs pulsectl check on a YAML file against real HTTP
// and TCP targets on 127.0.0.1: the report, the exit code and the metrics
// file.
func TestCheckEndToEnd(t *testing.T) {
	srv := checkServer(t)
	refused := closedAddr(t)
	file := writeFile(t, "targets.yaml", `
targets:
  - name: ok
    url: `+srv.URL+`/ok
  - name: flaky
    url: `+srv.URL+`/flaky
    timeout_s: 1.5
  - name: broken
    url: `+srv.URL+`/broken
  - name: gone
    url: `+srv.URL+`/gone
    critical: false
  - name: hang
    url: `+srv.URL+`/hang
    timeout: 100ms
    critical: false
  - name: port
    kind: tcp
    address: `+srv.Listener.Addr().String()+`
  - name: closed
    kind: tcp
    address: `+refused+`
    critical: false
`)
	metrics := filepath.Join(t.TempDir(), "healthcheck.prom")
	start := time.Now()
	r := pulsectl(t, "check", "--deadline", "10s", "--retries", "2", "--metrics", metrics, file)
	if elapsed := time.Since(start); elapsed > 8*time.Second {
		t.Errorf("check took %v", elapsed)
	}
	if r.code != exitCriticalDown {
		t.Errorf("exit %d, want %d (broken is critical)\n%s%s", r.code, exitCriticalDown, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stderr, "done") {
		t.Errorf("progress written to a stderr that is not a terminal: %q", r.stderr)
	}
	for _, re := range []string{
		`^OUTCOME\s+TARGET\s+LATENCY\s+ATTEMPTS\s+REASON\n`,
		`(?m)^healthy\s+ok\s+\S+\s+1\s+ok$`,
		`(?m)^degraded\s+flaky\s+\S+\s+3\s+ok after 2 retries$`,
		`(?m)^down\s+broken\s+\S+\s+3\s+still failing after 2 retries \(status 500\)$`,
		`(?m)^down\s+gone \(non-critical\)\s+\S+\s+1\s+status 404, not retried$`,
		`(?m)^down\s+hang \(non-critical\)\s+\S+\s+3\s+still failing after 2 retries \(timeout after 100ms\)$`,
		`(?m)^healthy\s+port\s+\S+\s+1\s+ok$`,
		`(?m)^down\s+closed \(non-critical\)\s+\S+\s+3\s+still failing after 2 retries \(connection refused\)$`,
		`(?m)^healthy=2 degraded=1 down=4 p50=\d+\.\dms p95=\d+\.\dms retries=8$`,
		`(?m)^critical down: broken$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("report does not match %s:\n%s", re, r.stdout)
		}
	}
	// The rows keep the file's order.
	var order []string
	for _, l := range lines(r.stdout)[1:8] {
		order = append(order, strings.Fields(l)[1])
	}
	if got := strings.Join(order, " "); got != "ok flaky broken gone hang port closed" {
		t.Errorf("rows in order %s", got)
	}

	prom, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE healthcheck_up gauge\n",
		`healthcheck_up{target="ok"} 1` + "\n",
		`healthcheck_up{target="flaky"} 1` + "\n",
		`healthcheck_up{target="broken"} 0` + "\n",
		"# TYPE healthcheck_latency_ms gauge\n",
		"# TYPE healthcheck_attempts_total counter\n",
		`healthcheck_attempts_total{target="gone"} 1` + "\n",
		`healthcheck_attempts_total{target="broken"} 3` + "\n",
	} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics file lacks %q:\n%s", want, prom)
		}
	}
	// hang's attempt ended at its 100ms timeout, not before; how long
	// after depends on the machine's load, which a test does not assert.
	if m := regexp.MustCompile(`(?m)^healthcheck_latency_ms\{target="hang"\} (\d+\.\d{3})$`).FindSubmatch(prom); m == nil {
		t.Errorf("metrics file has no latency for hang:\n%s", prom)
	} else if ms, _ := strconv.ParseFloat(string(m[1]), 64); ms < 100 {
		t.Errorf("hang's latency is %vms, under its 100ms timeout:\n%s", ms, prom)
	}
	if entries, _ := os.ReadDir(filepath.Dir(metrics)); len(entries) != 1 {
		t.Errorf("metrics directory holds %d entries, want the file alone", len(entries))
	}
}

// TestCheckJSON: all targets up, a targets file in the JSON list form
// (url, expected_status, timeout_s, critical), -o json.
func TestCheckJSON(t *testing.T) {
	srv := checkServer(t)
	file := writeFile(t, "targets.json", `[
  {"name": "ok", "url": "`+srv.URL+`/ok", "expected_status": 200, "timeout_s": 2.0, "critical": true},
  {"name": "port", "kind": "tcp", "address": "`+srv.Listener.Addr().String()+`"}
]`)
	r := pulsectl(t, "check", "-o", "json", file)
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var doc struct {
		Results []struct {
			Name, Kind, Outcome, Reason string
			Attempts                    []struct {
				Status *int
			}
		}
		Summary struct {
			Healthy, Degraded, Down, Total int
			CriticalDown                   []string `json:"criticalDown"`
			TotalRetries                   int      `json:"totalRetries"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	s := doc.Summary
	if s.Healthy != 2 || s.Total != 2 || s.CriticalDown == nil || len(s.CriticalDown) != 0 || s.TotalRetries != 0 {
		t.Errorf("summary %+v", s)
	}
	if len(doc.Results) != 2 || doc.Results[0].Kind != "http" || *doc.Results[0].Attempts[0].Status != 200 ||
		doc.Results[1].Kind != "tcp" || doc.Results[1].Attempts[0].Status != nil {
		t.Errorf("results %+v", doc.Results)
	}
}

// TestCheckDeadline: a target that never answers cannot hold the run past
// --deadline (given in seconds).
func TestCheckDeadline(t *testing.T) {
	srv := checkServer(t)
	file := writeFile(t, "targets.yaml", "- name: hang\n  url: "+srv.URL+"/hang\n  timeout: 5s\n")
	start := time.Now()
	r := pulsectl(t, "check", "--deadline", "0.3", file)
	if elapsed := time.Since(start); elapsed > testscale.D(3*time.Second) {
		t.Errorf("check with a 0.3s deadline took %v", elapsed)
	}
	// The one attempt is clipped to the deadline: it lasts 300ms, plus
	// what a loaded machine adds.
	m := regexp.MustCompile(`(?m)^down\s+hang\s+(\S+)\s+1\s+global deadline reached`).FindStringSubmatch(r.stdout)
	if r.code != exitCriticalDown || m == nil {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The attempt starts a moment after the deadline's clock does, so it
	// may read a little under 300ms (299ms was seen); never much over.
	if lat, err := time.ParseDuration(m[1]); err != nil || lat < 250*time.Millisecond || lat > 300*time.Millisecond+testscale.D(100*time.Millisecond) {
		t.Errorf("the attempt lasted %s, want about the 0.3s deadline (250ms to 300ms plus %v):\n%s", m[1], testscale.D(100*time.Millisecond), r.stdout)
	}
}

func TestCheckFileErrors(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "- name: a\n  url: http://127.0.0.1:1/\n- name: b\n  kind: tcp\n")
	r := pulsectl(t, "check", bad)
	if r.code != exitUsage || !strings.Contains(r.stderr, `target 2 (b): address: is required`) || r.stdout != "" {
		t.Errorf("invalid file: %+v", r)
	}
	r = pulsectl(t, "check", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing file: %+v", r)
	}
	ok := writeFile(t, "ok.yaml", "- name: a\n  kind: tcp\n  address: "+closedAddr(t)+"\n  critical: false\n")
	r = pulsectl(t, "check", "--retries", "0", "--metrics", filepath.Join(t.TempDir(), "no", "such", "dir.prom"), ok)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--metrics") || !strings.Contains(r.stdout, "healthy=0") {
		t.Errorf("unwritable metrics: %+v", r)
	}
}

// TestExampleFile: the README's example parses.
func TestExampleFile(t *testing.T) {
	targets, err := loadTargets(filepath.Join("testdata", "example.yaml"))
	if err != nil || len(targets) != 4 {
		t.Fatalf("example.yaml: %d targets, %v", len(targets), err)
	}
}

func TestProgressLine(t *testing.T) {
	var b strings.Builder
	p := &progressLine{w: &b}
	p.clear()
	if b.Len() != 0 {
		t.Errorf("clear before any update wrote %q", b.String())
	}
	p.update(0, 3, 0)
	p.update(1, 3, 1)
	p.clear()
	if want := "\r\033[K0/3 done, 0 failing\r\033[K1/3 done, 1 failing\r\033[K"; b.String() != want {
		t.Errorf("progress wrote %q, want %q", b.String(), want)
	}
	var nilLine *progressLine
	nilLine.clear() // no terminal: nothing to do
	if isTerminal(&b) {
		t.Error("a strings.Builder is a terminal")
	}
}

// check follows redirects, up to 10, and judges the final answer; with
// --no-follow-redirects it judges the first.
func TestCheckFollowsRedirects(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	file := writeFile(t, "targets.yaml", "- name: moved\n  url: "+srv.URL+"/moved\n- name: loop\n  url: "+srv.URL+"/loop\n  critical: false\n")
	r := pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitOK || !regexp.MustCompile(`(?m)^healthy\s+moved\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^down\s+loop \(non-critical\)\s.*stopped after 10 redirects`).MatchString(r.stdout) {
		t.Errorf("following redirects: %+v", r)
	}
	r = pulsectl(t, "check", "--retries", "0", "--no-follow-redirects", file)
	if r.code != exitCriticalDown || !regexp.MustCompile(`(?m)^down\s+moved\s.*status 302`).MatchString(r.stdout) {
		t.Errorf("--no-follow-redirects: %+v", r)
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// switchServer is an HTTP target on 127.0.0.1 that answers 200 while up
// and 503 once failed, and counts its probes.
type switchServer struct {
	*httptest.Server
	down   atomic.Bool
	probes atomic.Int64
}

func newSwitchServer(t *testing.T) *switchServer {
	t.Helper()
	s := &switchServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.probes.Add(1)
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

// startPulsedJSON starts pulsed with -log-format json, both listeners on
// free loopback ports and targets in memory only, and returns it with its HTTP listener's base URL,
// read from its `"msg":"http listening"` line.
func startPulsedJSON(t *testing.T, bin string, args ...string) (*pulsed, string) {
	t.Helper()
	httpAddr := make(chan string, 1)
	p := startPulsedLines(t, bin, func(line string) {
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http listening" {
			httpAddr <- l.Addr
		}
	}, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-log-format", "json", "-data-dir", ""}, args...)...)
	select {
	case a := <-httpAddr:
		return p, "http://" + a
	case <-p.Done():
		t.Fatalf("pulsed exited: %v\n%s", p.Err(), p.Logs())
	case <-time.After(testscale.D(time.Minute)):
		t.Fatalf("pulsed did not log its HTTP address:\n%s", p.Logs())
	}
	return nil, ""
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// addHTTPTarget registers name in group edge, probing url/healthz.
func addHTTPTarget(t *testing.T, client pb.HealthCheckerClient, name, url string) {
	t.Helper()
	_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: name, Group: "edge",
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: url + "/healthz"}},
	}})
	if err != nil {
		t.Fatalf("AddTarget(%s): %v", name, err)
	}
}

// The HTTP listener of a real pulsed: liveness and readiness, metrics that
// follow a real target up and down, the page's data, a JSON log line per
// transition and none per failed probe, and a shutdown within its bound
// with a status-page feed open.
func TestHTTPListener(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	bin := buildPulsed(t)
	target := newSwitchServer(t)
	p, base := startPulsedJSON(t, bin, "-interval", "100ms", "-timeout", "80ms", "-rise", "1", "-fall", "2", "-shutdown-timeout", "5s")

	if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	eventually(t, "/readyz to answer 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })

	client := dial(t, p.Addr)
	addHTTPTarget(t, client, "web-1", target.URL)
	metricsShow := func(lines ...string) func() bool {
		return func() bool {
			_, body := httpGet(t, base+"/metrics")
			for _, l := range lines {
				if !strings.Contains(body, l+"\n") {
					return false
				}
			}
			return true
		}
	}
	eventually(t, "web-1 up in /metrics", metricsShow(`pulse_target_up{group="edge",target="web-1"} 1`))
	target.down.Store(true)
	eventually(t, "web-1 down in /metrics", metricsShow(
		`pulse_target_up{group="edge",target="web-1"} 0`,
		`pulse_targets{group="edge",state="unhealthy"} 1`,
		`pulse_transitions_total{from="healthy",group="edge",to="unhealthy"} 1`,
	))
	_, body := httpGet(t, base+"/metrics")
	for _, s := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="AddTarget",grpc_service="pulse.v1.HealthChecker",grpc_type="unary"} 1`,
		`grpc_server_handling_seconds_bucket{grpc_method="AddTarget"`,
		`pulse_probes_total{kind="http",result="fail"} `,
		`pulse_probe_duration_seconds_bucket{kind="http",result="pass",le="0.005"} `,
		`pulse_target_last_latency_seconds{group="edge",target="web-1"} `,
		`pulse_build_info{goversion="go`,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}

	var page struct {
		Targets []struct{ Name, State, Streak, LastError string }
	}
	_, body = httpGet(t, base+"/api/targets?q=web")
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("/api/targets: %v\n%s", err, body)
	}
	if len(page.Targets) != 1 || page.Targets[0].State != "unhealthy" || page.Targets[0].LastError != "status 503" {
		t.Errorf("/api/targets: %s", body)
	}

	// A status-page feed is open when pulsed is told to stop: it ends
	// with the checker and shutdown stays within its bound.
	resp, err := http.Get(base + "/events?names=web-1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	feed := bufio.NewReader(resp.Body)
	if line, err := feed.ReadString('\n'); err != nil || line != "retry: 2000\n" {
		t.Fatalf("the feed began %q, %v", line, err)
	}
	start := time.Now()
	p.stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("pulsed took %v to stop with a feed open; the bound is 5s", d)
	}
	if rest, _ := io.ReadAll(feed); !bytes.Contains(rest, []byte("event: end\n")) {
		t.Errorf("the feed did not end with an end event:\n%s", rest)
	}

	// One JSON line for the fall, with its attributes; no line per failed
	// probe at the default level.
	var fall map[string]any
	for _, line := range strings.Split(p.Logs(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch l["msg"] {
		case "web-1: healthy -> unhealthy":
			fall = l
		case "probe failed":
			t.Errorf("a failed probe was logged at info: %s", line)
		}
	}
	if fall == nil {
		t.Fatalf("no JSON line for web-1's fall:\n%s", p.Logs())
	}
	rev, _ := fall["revision"].(float64)
	got := fmt.Sprintf("level=%v component=%v target=%v group=%v from=%v to=%v error=%v", fall["level"], fall["component"], fall["target"], fall["group"], fall["from"], fall["to"], fall["error"])
	if want := "level=INFO component=checker target=web-1 group=edge from=healthy to=unhealthy error=status 503"; got != want || rev <= 0 {
		t.Errorf("the fall's line has %s revision=%v, want %s and a revision", got, fall["revision"], want)
	}
}

func TestHTTPFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, err := parseFlags(nil, &stderr)
	if err != nil || cfg.httpListen != "127.0.0.1:9090" || !cfg.metricsPerTarget {
		t.Errorf("defaults: -http-listen %q -metrics-per-target %v, %v", cfg.httpListen, cfg.metricsPerTarget, err)
	}
	cfg, err = parseFlags([]string{"-http-listen", "", "-metrics-per-target=false"}, &stderr)
	if err != nil || cfg.httpListen != "" || cfg.metricsPerTarget {
		t.Errorf("-http-listen '' -metrics-per-target=false: %q %v, %v", cfg.httpListen, cfg.metricsPerTarget, err)
	}
}

// Without a status page (-http-listen "") the observer keeps no recent
// results per target, only the metrics; with one it keeps them.
func TestRecentResultsOnlyWithAStatusPage(t *testing.T) {
	for _, addr := range []string{"", "127.0.0.1:0"} {
		t.Run(fmt.Sprintf("-http-listen %q", addr), func(t *testing.T) {
			o := newObservability(true, slog.New(slog.DiscardHandler))
			startObservability(t, o, addr)
			o.observer.ObserveProbe(checker.Spec{Name: "web-1"}, checker.Result{Err: "status 503"})
			got := len(o.observer.Recent("web-1"))
			if want := map[string]int{"": 0, "127.0.0.1:0": 1}[addr]; got != want {
				t.Errorf("%d recent results kept, want %d", got, want)
			}
		})
	}
}

// startObservability starts o's HTTP listener on addr ("": none) over a
// new checker; the test's cleanup stops them.
func startObservability(t *testing.T, o *observability, addr string) {
	t.Helper()
	c, err := checker.New(checker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	t.Cleanup(func() {
		<-o.shutdown(5 * time.Second)
		gs.Stop()
		c.Close()
	})
	var lis net.Listener
	if addr != "" {
		if lis, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	}
	o.start(lis, c, gs)
}

// A kept-alive connection that sends no next request is closed after the
// idle timeout, so it gives its slot of -max-connections(-per-source)
// back; headers past httpMaxHeaderBytes are refused.
func TestHTTPIdleConnectionAndHeaderLimits(t *testing.T) {
	var logs strings.Builder
	o := newObservability(false, slog.New(slog.NewTextHandler(&logs, nil)))
	o.idleTimeout = 200 * time.Millisecond
	startObservability(t, o, "127.0.0.1:0")
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", logs.String())
	}
	conn, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: pulsed\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %d %q %v (close %v), want 200 on a kept-alive connection", resp.StatusCode, body, err, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("reading the idle connection: %v, want EOF (closed by pulsed)", err)
	}

	// Headers past the bound are refused, not held. (net/http reads 4 KiB
	// past it before it refuses.)
	req, err := http.NewRequest("GET", "http://"+m[1]+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Pad", strings.Repeat("x", httpMaxHeaderBytes+8<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with %d bytes of headers: %d, want 431", httpMaxHeaderBytes+8<<10, resp.StatusCode)
	}
}

// metricValue returns the value of the unlabelled metric name in a
// /metrics body, and whether it is there.
func metricValue(body, name string) (float64, bool) {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestCollectorHeadroomFromTheLiveHeap: unless GOGC is set in its
// environment, pulsed sets the collector's pace from its live heap (a
// quarter of it as headroom, at least 2 MiB): an idle pulsed, a few MiB
// live, runs below Go's default of 100, as /metrics shows. With GOGC set,
// pulsed says so and leaves it.
func TestCollectorHeadroomFromTheLiveHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	bin := buildPulsed(t)
	t.Setenv("GOGC", "")
	p, base := startPulsedJSON(t, bin)
	var gogc float64
	eventually(t, "go_gc_gogc_percent below 100", func() bool {
		_, body := httpGet(t, base+"/metrics")
		v, ok := metricValue(body, "go_gc_gogc_percent")
		gogc = v
		return ok && v > 0 && v < 100
	})
	if !strings.Contains(p.Logs(), "headroom a quarter of the live heap and at least 2 MiB") {
		t.Errorf("pulsed does not say how it sizes the headroom:\n%s", p.Logs())
	}
	t.Logf("idle pulsed: GOGC %v", gogc)

	t.Setenv("GOGC", "100")
	p, base = startPulsedJSON(t, bin)
	if !strings.Contains(p.Logs(), "GOGC is set; pulsed leaves the collector's headroom to it") {
		t.Errorf("pulsed with GOGC set does not say it leaves it:\n%s", p.Logs())
	}
	_, body := httpGet(t, base+"/metrics")
	if v, ok := metricValue(body, "go_gc_gogc_percent"); !ok || v != 100 {
		t.Errorf("with GOGC=100: go_gc_gogc_percent %v (present %v), want 100", v, ok)
	}
}

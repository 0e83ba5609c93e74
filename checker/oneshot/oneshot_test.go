package oneshot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker/probe"
)

func seededRand() func() float64 { return rand.New(rand.NewPCG(7, 7)).Float64 }

// selfCheckTargets are the self-check scenario's six targets: every target
// expects 200 and times out after 2s, except cache (1s), and every target is
// critical except old.
func selfCheckTargets() []Target {
	mk := func(name string, timeout time.Duration, critical bool) Target {
		s := httpSpec(fakeURL(name))
		s.HTTP.ExpectedStatus = []int{200}
		return Target{Name: name, Probe: s, Timeout: timeout, Critical: critical}
	}
	return []Target{
		mk("api", 2*time.Second, true),
		mk("auth", 2*time.Second, true),
		mk("db", 2*time.Second, true),
		mk("cache", time.Second, true),
		mk("old", 2*time.Second, false),
		mk("slow", 2*time.Second, true),
	}
}

// selfCheckServer scripts one behaviour per self-check target: healthy,
// transient then recovering, a permanent 5xx, no answer, a 4xx and a slow
// answer.
func selfCheckServer() *fakeServer {
	return newFakeServer(map[string][]reply{
		fakeURL("api"):   script(code(200)),
		fakeURL("auth"):  script(code(503), code(502), code(200)), // transient, recovers
		fakeURL("db"):    script(code(500)),                       // permanent 5xx
		fakeURL("cache"): script(timeoutReply()),                  // never answers
		fakeURL("old"):   script(code(404)),                       // 4xx, must not retry
		fakeURL("slow"):  script(slow(350*time.Millisecond), code(200)),
	})
}

// runSelfCheck runs the self-check scenario: 4 workers, a 30s deadline,
// 3 retries.
func runSelfCheck(t *testing.T) ([]Result, *fakeServer) {
	t.Helper()
	srv := selfCheckServer()
	opts := fakeOptions(srv)
	opts.Workers = 4
	opts.Deadline = 30 * time.Second
	opts.MaxRetries = 3
	return Run(t.Context(), selfCheckTargets(), opts), srv
}

// TestSelfCheckOutcomes checks the self-check scenario target by target
// (healthy at once, degraded after retries, down on a 5xx, a timeout or an
// unretried 4xx, a slow answer's latency recorded), then its summary,
// critical_down and metrics.
func TestSelfCheckOutcomes(t *testing.T) {
	results, srv := runSelfCheck(t)
	by := map[string]Result{}
	for _, r := range results {
		by[r.Target.Name] = r
	}

	if r := by["api"]; r.Outcome != Healthy || r.Retries() != 0 {
		t.Errorf("api: %s after %d retries, want healthy on the first attempt", r.Outcome, r.Retries())
	}
	if r := by["auth"]; r.Outcome != Degraded || r.Retries() != 2 || r.Reason != "ok after 2 retries" {
		t.Errorf("auth: %s after %d retries (%q), want degraded after 2 retries", r.Outcome, r.Retries(), r.Reason)
	}
	if r := by["db"]; r.Outcome != Down || len(r.Attempts) != 4 {
		t.Errorf("db: %s after %d attempts, want down after 4 (500 retried 3 times)", r.Outcome, len(r.Attempts))
	}
	cache := by["cache"]
	if cache.Outcome != Down || len(cache.Attempts) != 4 {
		t.Errorf("cache: %s after %d attempts, want down after 4", cache.Outcome, len(cache.Attempts))
	}
	for i, a := range cache.Attempts {
		if a.Answered || a.Err != "timeout after 1s" || a.Latency != time.Second {
			t.Errorf("cache attempt %d = %+v, want an unanswered 1s timeout", i, a)
		}
	}
	if r := by["old"]; r.Outcome != Down || len(r.Attempts) != 1 || r.Reason != "status 404, not retried" {
		t.Errorf("old: %s after %d attempts (%q), want down after 1 attempt, no retry", r.Outcome, len(r.Attempts), r.Reason)
	}
	if n := srv.callCount(fakeURL("old")); n != 1 {
		t.Errorf("the fake server saw %d calls for the 404 target, want exactly 1", n)
	}
	if r := by["slow"]; r.Outcome != Healthy || r.Attempts[0].Latency < 349*time.Millisecond {
		t.Errorf("slow: %s, latency %v; want healthy with latency >= 349ms recorded", r.Outcome, r.Attempts[0].Latency)
	}

	rep := Summarize(results)
	if rep.Healthy != 2 || rep.Degraded != 1 || rep.Down != 3 || rep.Total != 6 {
		t.Errorf("report counts %+v, want healthy 2, degraded 1, down 3 of 6", rep)
	}
	if diff := cmp.Diff([]string{"db", "cache"}, rep.CriticalDown); diff != "" {
		t.Errorf("critical_down (-want +got), must list db and cache but not the non-critical 404:\n%s", diff)
	}
	if rep.TotalRetries != 2+3+3 {
		t.Errorf("total retries = %d, want 8", rep.TotalRetries)
	}
	if rep.P50 != 10*time.Millisecond || rep.P95 != 350*time.Millisecond {
		t.Errorf("p50 %v, p95 %v; want 10ms and 350ms", rep.P50, rep.P95)
	}

	var text strings.Builder
	if err := WriteMetrics(&text, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`healthcheck_up{target="auth"} 1`,
		`healthcheck_up{target="db"} 0`,
		`healthcheck_attempts_total{target="old"} 1`,
	} {
		if !strings.Contains(text.String(), want+"\n") {
			t.Errorf("prometheus text lacks %q:\n%s", want, text.String())
		}
	}

	// Exit code would be 2: critical targets are down.
	if len(rep.CriticalDown) == 0 {
		t.Error("no critical target down; pulsectl check would exit 0")
	}
}

// TestSelfCheckResults pins every result of the self-check scenario,
// reasons included. The fake timelines make it exact whatever the
// goroutines' order.
func TestSelfCheckResults(t *testing.T) {
	results, _ := runSelfCheck(t)
	type row struct {
		Name     string
		Outcome  Outcome
		Reason   string
		Statuses []int
		Latency  time.Duration
	}
	var got []row
	for _, r := range results {
		last, _ := r.Last()
		var statuses []int
		for _, a := range r.Attempts {
			statuses = append(statuses, a.Status)
		}
		got = append(got, row{r.Target.Name, r.Outcome, r.Reason, statuses, last.Latency})
	}
	ms := time.Millisecond
	want := []row{
		{"api", Healthy, "ok", []int{200}, 10 * ms},
		{"auth", Degraded, "ok after 2 retries", []int{503, 502, 200}, 10 * ms},
		{"db", Down, "still failing after 3 retries (status 500)", []int{500, 500, 500, 500}, 10 * ms},
		{"cache", Down, "still failing after 3 retries (timeout after 1s)", []int{0, 0, 0, 0}, time.Second},
		{"old", Down, "status 404, not retried", []int{404}, 10 * ms},
		{"slow", Healthy, "ok", []int{200}, 350 * ms},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// TestSelfCheckMetricsText pins the whole exposition of the self-check
// scenario.
func TestSelfCheckMetricsText(t *testing.T) {
	results, _ := runSelfCheck(t)
	var text strings.Builder
	if err := WriteMetrics(&text, results); err != nil {
		t.Fatal(err)
	}
	want := `# HELP healthcheck_up 1 if the last attempt returned the expected status.
# TYPE healthcheck_up gauge
healthcheck_up{target="api"} 1
healthcheck_up{target="auth"} 1
healthcheck_up{target="db"} 0
healthcheck_up{target="cache"} 0
healthcheck_up{target="old"} 0
healthcheck_up{target="slow"} 1
# HELP healthcheck_latency_ms Latency of the last attempt in milliseconds.
# TYPE healthcheck_latency_ms gauge
healthcheck_latency_ms{target="api"} 10.000
healthcheck_latency_ms{target="auth"} 10.000
healthcheck_latency_ms{target="db"} 10.000
healthcheck_latency_ms{target="cache"} 1000.000
healthcheck_latency_ms{target="old"} 10.000
healthcheck_latency_ms{target="slow"} 350.000
# HELP healthcheck_attempts_total Attempts made in this run, including retries.
# TYPE healthcheck_attempts_total counter
healthcheck_attempts_total{target="api"} 1
healthcheck_attempts_total{target="auth"} 3
healthcheck_attempts_total{target="db"} 4
healthcheck_attempts_total{target="cache"} 4
healthcheck_attempts_total{target="old"} 1
healthcheck_attempts_total{target="slow"} 1
`
	if diff := cmp.Diff(want, text.String()); diff != "" {
		t.Errorf("exposition (-want +got):\n%s", diff)
	}
}

// TestBackoffBounds: full jitter never leaves [0, min(cap, base*2^attempt)]
// over 1600 samples, and a rng at its extremes reaches both ends.
func TestBackoffBounds(t *testing.T) {
	base, capDelay := 200*time.Millisecond, 5*time.Second
	rng := seededRand()
	for attempt := range 8 {
		ceiling := min(capDelay, base*time.Duration(1<<attempt))
		for range 200 {
			if d := Backoff(attempt, base, capDelay, rng); d < 0 || d > ceiling {
				t.Fatalf("Backoff(%d) = %v, want within [0, %v]", attempt, d, ceiling)
			}
		}
		if d := Backoff(attempt, base, capDelay, func() float64 { return 0 }); d != 0 {
			t.Errorf("Backoff(%d) with rng 0 = %v, want 0", attempt, d)
		}
		if d := Backoff(attempt, base, capDelay, func() float64 { return 1 }); d != ceiling {
			t.Errorf("Backoff(%d) with rng 1 = %v, want the ceiling %v", attempt, d, ceiling)
		}
	}
	// Far past the cap the ceiling stays the cap: no overflow.
	for _, attempt := range []int{62, 63, 64, 1000, 1 << 40} {
		if d := Backoff(attempt, base, capDelay, func() float64 { return 1 }); d != capDelay {
			t.Errorf("Backoff(%d) with rng 1 = %v, want the cap %v", attempt, d, capDelay)
		}
	}
}

// TestClassify: which HTTP and gRPC outcomes are transient (5xx, timeouts,
// transport errors, UNAVAILABLE, RESOURCE_EXHAUSTED) and so retried, and
// what each attempt records.
func TestClassify(t *testing.T) {
	httpTarget := probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://x", ExpectedStatus: []int{200}}}
	grpcTarget := probe.Spec{GRPC: &probe.GRPCSpec{Address: "x:1"}}
	tests := []struct {
		name      string
		spec      probe.Spec
		err       error
		want      Attempt
		transient bool
	}{
		{"pass", httpTarget, nil, Attempt{Answered: true, Status: 200}, false},
		{"404", httpTarget, &probe.StatusError{Code: 404}, Attempt{Answered: true, Status: 404, Err: "status 404"}, false},
		{"503", httpTarget, &probe.StatusError{Code: 503}, Attempt{Answered: true, Status: 503, Err: "status 503"}, true},
		{"unexpected 200", httpTarget, &probe.StatusError{Code: 204}, Attempt{Answered: true, Status: 204, Err: "status 204"}, false},
		{"timeout", httpTarget, context.DeadlineExceeded, Attempt{Err: "timeout after 1.5s"}, true},
		{"transport", httpTarget, errors.New("connection reset by peer"), Attempt{Err: "connection reset by peer"}, true},
		{"grpc unavailable", grpcTarget, status.Error(codes.Unavailable, "connection refused"), Attempt{Err: "connection refused"}, true},
		{"grpc unimplemented", grpcTarget, status.Error(codes.Unimplemented, "unknown service grpc.health.v1.Health"), Attempt{Answered: true, Err: "Unimplemented: unknown service grpc.health.v1.Health"}, false},
		{"grpc overloaded", grpcTarget, status.Error(codes.ResourceExhausted, "busy"), Attempt{Answered: true, Err: "ResourceExhausted: busy"}, true},
		{"panic", httpTarget, &panicError{v: "boom"}, Attempt{Err: "probe panicked: boom"}, false},
		{"599", httpTarget, &probe.StatusError{Code: 599}, Attempt{Answered: true, Status: 599, Err: "status 599"}, true},
		{"600", httpTarget, &probe.StatusError{Code: 600}, Attempt{Answered: true, Status: 600, Err: "status 600"}, false},
		{"499", httpTarget, &probe.StatusError{Code: 499}, Attempt{Answered: true, Status: 499, Err: "status 499"}, false},
		{"body expectation", httpTarget, &probe.ExpectError{Text: `body: "ready" not found in first 64 KiB`}, Attempt{Answered: true, Err: `body: "ready" not found in first 64 KiB`}, false},
		{"tcp step", probe.Spec{TCP: &probe.TCPSpec{Address: "x:1"}}, fmt.Errorf("wrapped: %w", &probe.ExpectError{Text: "step 2: expected \"+PONG\", got different bytes"}), Attempt{Answered: true, Err: "wrapped: step 2: expected \"+PONG\", got different bytes"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Attempt
			transient := classify(&got, tt.err, tt.spec, 1500*time.Millisecond)
			if diff := cmp.Diff(tt.want, got); diff != "" || transient != tt.transient {
				t.Errorf("classify: transient %v, want %v; attempt (-want +got):\n%s", transient, tt.transient, diff)
			}
		})
	}
}

// TestGlobalDeadlineCutsRetries: a 2s budget cannot fit a 1s timeout
// retried 3 times. The first attempt times out at 1s, the second, clipped
// to what is left, at 2s exactly; the next backoff would cross the
// deadline.
func TestGlobalDeadlineCutsRetries(t *testing.T) {
	srv := newFakeServer(map[string][]reply{fakeURL("x"): script(timeoutReply())})
	opts := fakeOptions(srv)
	opts.Deadline = 2 * time.Second
	opts.MaxRetries = 3
	clock := newTimeline()
	opts.TargetClock = func(int) Clock { return clock }
	r := Run(t.Context(), []Target{{Name: "x", Probe: httpSpec(fakeURL("x")), Timeout: time.Second, Critical: true}}, opts)[0]

	if r.Outcome != Down || !strings.Contains(r.Reason, "deadline") || len(r.Attempts) > 3 {
		t.Errorf("%s after %d attempts (%q), want down within 3 attempts with a reason about the deadline", r.Outcome, len(r.Attempts), r.Reason)
	}
	if r.Reason != "global deadline reached while backing off" || len(r.Attempts) != 2 {
		t.Errorf("reason %q after %d attempts, want the backoff cut after 2", r.Reason, len(r.Attempts))
	}
	deadline := start.Add(2 * time.Second)
	for i, at := range srv.startTimes(fakeURL("x")) {
		if !at.Before(deadline) {
			t.Errorf("attempt %d started at +%v, at or after the deadline", i, at.Sub(start))
		}
	}
	if spent := clock.Now().Sub(start); spent > 2*time.Second {
		t.Errorf("the check ran for %v, past the 2s deadline", spent)
	}
	if len(r.Attempts) == 2 {
		second := r.Attempts[1]
		if end := second.Start.Add(second.Latency); !end.Equal(deadline) || second.Latency >= time.Second {
			t.Errorf("second attempt ran %v from +%v, want its 1s timeout clipped to end at the deadline", second.Latency, second.Start.Sub(start))
		}
	}
}

// TestDeadlineBeforeCheck: with one worker and one shared clock, a target
// still queued when the deadline passes makes no attempt at all.
func TestDeadlineBeforeCheck(t *testing.T) {
	srv := newFakeServer(map[string][]reply{
		fakeURL("a"): script(timeoutReply()),
		fakeURL("b"): script(code(200)),
	})
	opts := fakeOptions(srv)
	clock := newTimeline()
	opts.Clock, opts.TargetClock = clock, nil
	opts.Workers = 1
	opts.Deadline = time.Second
	opts.MaxRetries = 3
	results := Run(t.Context(), []Target{
		{Name: "a", Probe: httpSpec(fakeURL("a")), Timeout: 5 * time.Second},
		{Name: "b", Probe: httpSpec(fakeURL("b"))},
	}, opts)
	if len(results) != 2 {
		t.Fatalf("%d results for 2 targets", len(results))
	}
	if r := results[0]; r.Reason != "global deadline reached while backing off" || len(r.Attempts) != 1 || r.Attempts[0].Latency != time.Second {
		t.Errorf("a: %q after %+v, want one attempt clipped to the 1s deadline", r.Reason, r.Attempts)
	}
	if r := results[1]; r.Outcome != Down || r.Reason != "global deadline reached before the check ran" || len(r.Attempts) != 0 {
		t.Errorf("b: %s %q after %d attempts, want down before any attempt", r.Outcome, r.Reason, len(r.Attempts))
	}
	if n := srv.callCount(fakeURL("b")); n != 0 {
		t.Errorf("b was probed %d times after the deadline", n)
	}
}

func TestNoRetries(t *testing.T) {
	srv := newFakeServer(map[string][]reply{fakeURL("db"): script(code(500))})
	opts := fakeOptions(srv)
	r := Run(t.Context(), []Target{{Name: "db", Probe: httpSpec(fakeURL("db"))}}, opts)[0]
	if r.Reason != "still failing after 0 retries (status 500)" || len(r.Attempts) != 1 {
		t.Errorf("MaxRetries 0: %q after %d attempts, want one attempt", r.Reason, len(r.Attempts))
	}
}

func TestPanickingProbeIsDown(t *testing.T) {
	srv := newFakeServer(map[string][]reply{fakeURL("p"): {{panics: true}}})
	opts := fakeOptions(srv)
	opts.MaxRetries = 3
	r := Run(t.Context(), []Target{{Name: "p", Probe: httpSpec(fakeURL("p"))}}, opts)[0]
	if r.Outcome != Down || r.Reason != "probe panicked: boom, not retried" {
		t.Errorf("%s %q, want down, not retried", r.Outcome, r.Reason)
	}
}

func TestInvalidProbe(t *testing.T) {
	r := Run(t.Context(), []Target{{Name: "bad", Probe: httpSpec("ftp://x")}}, fakeOptions(newFakeServer(nil)))[0]
	if r.Outcome != Down || !strings.HasPrefix(r.Reason, "invalid probe: http.url: unknown scheme") {
		t.Errorf("%s %q, want down naming the field", r.Outcome, r.Reason)
	}
}

func TestProgress(t *testing.T) {
	type call struct{ done, total, failing int }
	var calls []call
	opts := fakeOptions(selfCheckServer())
	opts.Workers = 3
	opts.MaxRetries = 3
	opts.Progress = func(done, total, failing int) { calls = append(calls, call{done, total, failing}) }
	Run(t.Context(), selfCheckTargets(), opts)
	if len(calls) != 6 {
		t.Fatalf("Progress called %d times, want 6: %v", len(calls), calls)
	}
	for i, c := range calls {
		if c.done != i+1 || c.total != 6 || c.failing > c.done {
			t.Errorf("call %d = %+v", i, c)
		}
	}
	if last := calls[5]; last.failing != 3 {
		t.Errorf("last call %+v, want 3 failing", last)
	}

	// One worker takes the targets in order, so every call is known:
	// healthy, degraded, then three down (db, cache, old), then healthy.
	calls = nil
	opts = fakeOptions(selfCheckServer())
	opts.Workers = 1
	opts.MaxRetries = 3
	opts.Progress = func(done, total, failing int) { calls = append(calls, call{done, total, failing}) }
	Run(t.Context(), selfCheckTargets(), opts)
	want := []call{{1, 6, 0}, {2, 6, 0}, {3, 6, 1}, {4, 6, 2}, {5, 6, 3}, {6, 6, 3}}
	if diff := cmp.Diff(want, calls, cmp.AllowUnexported(call{})); diff != "" {
		t.Errorf("Progress with one worker (-want +got):\n%s", diff)
	}
}

// TestResultsKeepInputOrder: many targets through few workers come back in
// the order given.
func TestResultsKeepInputOrder(t *testing.T) {
	scripts := map[string][]reply{}
	var targets []Target
	for i := range 50 {
		name := fmt.Sprintf("t%02d", i)
		scripts[fakeURL(name)] = script(code(200 + (i%2)*300))
		targets = append(targets, Target{Name: name, Probe: httpSpec(fakeURL(name))})
	}
	opts := fakeOptions(newFakeServer(scripts))
	opts.Workers = 3
	results := Run(t.Context(), targets, opts)
	if len(results) != len(targets) {
		t.Fatalf("%d results for %d targets", len(results), len(targets))
	}
	for i, r := range results {
		if r.Target.Name != targets[i].Name {
			t.Fatalf("result %d is %s, want %s", i, r.Target.Name, targets[i].Name)
		}
	}
}

// blockingFactory's probers block until their context ends, and tell the
// test when the first one has started.
type blockingFactory struct {
	once    sync.Once
	started chan struct{}
}

func (f *blockingFactory) New(probe.Spec) (probe.Prober, error) { return f, nil }

func (f *blockingFactory) Probe(ctx context.Context) error {
	f.once.Do(func() { close(f.started) })
	<-ctx.Done()
	return ctx.Err()
}

// TestCancel: cancelling the run ends the check in progress and skips the
// rest, without waiting for any timeout.
func TestCancel(t *testing.T) {
	f := &blockingFactory{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []Result)
	go func() {
		done <- Run(ctx, []Target{
			{Name: "a", Probe: httpSpec("http://127.0.0.1:1/"), Timeout: time.Hour},
			{Name: "b", Probe: httpSpec("http://127.0.0.1:1/"), Timeout: time.Hour},
		}, Options{Factory: f, Workers: 1})
	}()
	<-f.started
	cancel()
	for _, r := range <-done {
		if r.Outcome != Down || r.Reason != "check canceled" {
			t.Errorf("%s: %s %q, want down, check canceled", r.Target.Name, r.Outcome, r.Reason)
		}
	}
}

// Target.Validate bounds the timeout and the probe spec, naming the field
// and the bound.
func TestTargetValidate(t *testing.T) {
	tcp := probe.Spec{TCP: &probe.TCPSpec{Address: "x:1"}}
	for _, tt := range []struct {
		t    Target
		want string // "" means valid
	}{
		{Target{Name: "a", Probe: tcp}, ""},
		{Target{Name: "a", Probe: tcp, Timeout: MaxTimeout}, ""},
		{Target{Name: "a", Probe: tcp, Timeout: MaxTimeout + time.Nanosecond}, "timeout: must be at most 1h0m0s, got 1h0m0.000000001s"},
		{Target{Name: "a", Probe: tcp, Timeout: -time.Second}, "timeout: must be positive when set, got -1s"},
		{Target{Name: "a", Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: "x:1", Service: strings.Repeat("s", probe.MaxServiceLen+1)}}}, "grpc.service: must be at most 1024 bytes, got 1025"},
	} {
		err := tt.t.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tt.t, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%+v: %v, want %q", tt.t, err, tt.want)
		}
	}
}

// TestDefaultBackoff pins the zero Options' backoff through the retry times
// on a fake timeline: with the jitter at its top, the waits between
// attempts are the ceilings 0.2s, 0.4s, ... doubling up to the 5s cap.
func TestDefaultBackoff(t *testing.T) {
	srv := newFakeServer(map[string][]reply{fakeURL("db"): script(code(500))})
	opts := fakeOptions(srv)
	opts.MaxRetries = 7 // 16.2s of backoff: within the default 20s deadline
	opts.Rand = func() float64 { return 1 }
	if opts.BackoffBase != 0 || opts.BackoffCap != 0 || opts.Deadline != 0 || opts.Workers != 0 {
		t.Fatalf("fakeOptions sets fields this test needs zero: %+v", opts)
	}
	results := Run(t.Context(), []Target{{Name: "db", Probe: httpSpec(fakeURL("db"))}}, opts)
	if len(results) != 1 || len(results[0].Attempts) != 8 {
		t.Fatalf("results %+v, want one target with 8 attempts", results)
	}
	starts := srv.startTimes(fakeURL("db"))
	var waits []time.Duration
	for i := 1; i < len(starts); i++ {
		waits = append(waits, starts[i].Sub(starts[i-1])-10*time.Millisecond) // each attempt takes 10ms
	}
	ms := time.Millisecond
	want := []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("waits between attempts with the default backoff (-want +got):\n%s", diff)
	}
}

package oneshot

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/checker/probe"
)

// TestRealProbes runs the checker with the real probe.Factory against
// HTTP, TCP and gRPC servers on 127.0.0.1: the one-shot checker probes
// exactly as pulsed does.
func TestRealProbes(t *testing.T) {
	var flaky atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, _ *http.Request) {
		if flaky.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/gone", http.NotFound)
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	web := httptest.NewServer(mux)
	defer web.Close()

	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); gs.Serve(ln) }()
	defer func() { gs.Stop(); <-served }()
	grpcAddr := ln.Addr().String()

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()

	get := func(path string) probe.Spec {
		return probe.Spec{HTTP: &probe.HTTPSpec{URL: web.URL + path, ExpectedStatus: []int{200}}}
	}
	grpcSpec := func(svc string) probe.Spec { return probe.Spec{GRPC: &probe.GRPCSpec{Address: grpcAddr, Service: svc}} }
	targets := []Target{
		{Name: "ok", Probe: get("/ok")},
		{Name: "flaky", Probe: get("/flaky")},
		{Name: "gone", Probe: get("/gone")},
		{Name: "hang", Probe: get("/hang"), Timeout: 50 * time.Millisecond},
		{Name: "tcp-up", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: web.Listener.Addr().String()}}},
		{Name: "tcp-refused", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: refused}}},
		{Name: "grpc-up", Probe: grpcSpec("up")},
		{Name: "grpc-down", Probe: grpcSpec("down")},
		{Name: "grpc-unknown", Probe: grpcSpec("nope")},
	}
	f := probe.NewFactory()
	defer f.Close()
	results := Run(t.Context(), targets, Options{
		Factory:     f,
		Deadline:    10 * time.Second,
		MaxRetries:  2,
		BackoffBase: time.Millisecond,
		BackoffCap:  time.Millisecond,
	})
	want := map[string]struct {
		outcome  Outcome
		reason   string
		attempts int
	}{
		"ok":           {Healthy, "ok", 1},
		"flaky":        {Degraded, "ok after 2 retries", 3},
		"gone":         {Down, "status 404, not retried", 1},
		"hang":         {Down, "still failing after 2 retries (timeout after 50ms)", 3},
		"tcp-up":       {Healthy, "ok", 1},
		"tcp-refused":  {Down, "still failing after 2 retries (connection refused)", 3},
		"grpc-up":      {Healthy, "ok", 1},
		"grpc-down":    {Down, "still failing after 2 retries (NOT_SERVING)", 3},
		"grpc-unknown": {Down, "SERVICE_UNKNOWN, not retried", 1},
	}
	if len(results) != len(targets) {
		t.Fatalf("%d results for %d targets", len(results), len(targets))
	}
	for i, r := range results {
		w, ok := want[r.Target.Name]
		if !ok || r.Target.Name != targets[i].Name {
			t.Errorf("result %d is for %q, want %q", i, r.Target.Name, targets[i].Name)
			continue
		}
		if r.Outcome != w.outcome || r.Reason != w.reason || len(r.Attempts) != w.attempts {
			t.Errorf("%s: %s %q after %d attempts, want %s %q after %d", r.Target.Name, r.Outcome, r.Reason, len(r.Attempts), w.outcome, w.reason, w.attempts)
		}
	}
	if last, _ := results[0].Last(); last.Status != 200 || !last.Answered || last.Latency <= 0 {
		t.Errorf("ok's last attempt = %+v, want status 200 with a latency", last)
	}
}

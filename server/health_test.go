package server_test

import (
	"context"
	"errors"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/checker"
)

// pulsed's own service follows its liveness: NOT_SERVING while SetLive
// says it is not live, SERVING again when it is, NOT_SERVING for good
// after Shutdown. Watch streams hear of each change; groups are not
// affected.
func TestHealthFollowsLiveness(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, healthyTarget("web-1", "edge"))

	hc := healthpb.NewHealthClient(e.conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		return resp.GetStatus()
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: ""})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("Watch(\"\"): %v", err)
		}
		return resp.GetStatus()
	}
	const serving, notServing = healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	expect := func(when string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, svc := range []string{"", "pulse.v1.HealthChecker"} {
			if got := check(svc); got != want {
				t.Errorf("%s: Check(%q) = %v, want %v", when, svc, got, want)
			}
		}
		if got := next(); got != want {
			t.Errorf("%s: Watch(\"\") sent %v, want %v", when, got, want)
		}
		if got := check("edge"); got != serving {
			t.Errorf("%s: Check(edge) = %v, want SERVING: a group's health is its targets'", when, got)
		}
	}

	expect("live", serving)
	e.health.SetLive(errors.New("scheduler: no progress for 41s"))
	expect("stalled", notServing)
	e.health.SetLive(errors.New("scheduler: no progress for 42s")) // still stalled: no new message
	e.health.SetLive(nil)
	expect("recovered", serving)
	e.health.Shutdown()
	expect("shutting down", notServing)
	e.health.SetLive(nil)
	if got := check(""); got != notServing {
		t.Errorf("live again after Shutdown: Check(\"\") = %v, want NOT_SERVING", got)
	}
}

package xds_test

import (
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/xds"
)

// A draining target is sent as DRAINING (Envoy lets its requests in flight
// finish and sends it no new ones), one in maintenance as UNHEALTHY;
// active again, it is HEALTHY as its probes say (web-2's last result is
// younger than one interval: carried over out of maintenance).
func TestModesAsHealthStatus(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true,
		tcpTarget("web-1", "edge", "127.0.0.1:8081"),
		tcpTarget("web-2", "edge", "127.0.0.2:8082"),
	)
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	if got := health(t, s.next("edge")); got["edge"] != "127.0.0.1:8081 HEALTHY, 127.0.0.2:8082 HEALTHY" {
		t.Fatalf("edge: %v", got)
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, s.next("edge")); got["edge"] != "127.0.0.1:8081 DRAINING, 127.0.0.2:8082 HEALTHY" {
		t.Fatalf("web-1 draining: %v", got)
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-2", Mode: checker.ModeMaintenance}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, s.next("edge")); got["edge"] != "127.0.0.1:8081 DRAINING, 127.0.0.2:8082 UNHEALTHY" {
		t.Fatalf("web-2 in maintenance: %v", got)
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Group: "edge", Mode: checker.ModeActive}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, s.next("edge")); got["edge"] != "127.0.0.1:8081 HEALTHY, 127.0.0.2:8082 HEALTHY" {
		t.Fatalf("back to active: %v", got)
	}
}

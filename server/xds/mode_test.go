package xds_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

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
	// The group's two targets change at two revisions: on a loaded
	// machine the 1ms coalescing window can close between them, and a
	// push carry the first alone.
	got := health(t, s.next("edge"))
	if got["edge"] == "127.0.0.1:8081 HEALTHY, 127.0.0.2:8082 UNHEALTHY" {
		got = health(t, s.next("edge"))
	}
	if got["edge"] != "127.0.0.1:8081 HEALTHY, 127.0.0.2:8082 HEALTHY" {
		t.Fatalf("back to active: %v", got)
	}
}

// weights renders an assignment's endpoint weights as "host:port weight"
// lines, sorted; 0 for an endpoint without one.
func weights(t testing.TB, r *discoverypb.DiscoveryResponse) string {
	t.Helper()
	var lines []string
	for _, a := range r.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		for _, l := range cla.GetEndpoints() {
			for _, ep := range l.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				lines = append(lines, fmt.Sprintf("%s:%d %d", sa.GetAddress(), sa.GetPortValue(), ep.GetLoadBalancingWeight().GetValue()))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, ", ")
}

// A target in its slow start is sent with its share as the endpoint's
// load_balancing_weight (at least 1), and every other endpoint of the
// group with 100; without a slow start no endpoint has a weight.
func TestSlowStartAsLoadBalancingWeight(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	slow := tcpTarget("web-2", "edge", "127.0.0.2:8082")
	slow.Lifecycle = &checker.Lifecycle{SlowStart: time.Hour}
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	e.add(t, false, slow)
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	if got := weights(t, s.next("edge")); got != "127.0.0.1:8081 0, 127.0.0.2:8082 0" {
		t.Fatalf("no slow start yet: %s", got)
	}
	e.set("127.0.0.2:8082", true)
	e.round(t)
	if got := weights(t, s.next("edge")); got != "127.0.0.1:8081 100, 127.0.0.2:8082 1" {
		t.Fatalf("web-2 starting its hour-long slow start: %s", got)
	}
}

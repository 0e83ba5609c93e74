package client_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/server"
)

type fixedDiscovery []server.DiscoveryGroupStatus

func (f fixedDiscovery) DiscoveryGroups() []server.DiscoveryGroupStatus { return f }

// TestDiscovery reads pulsed's discovery groups, and gets a discovery
// event from the stream with its source and error.
func TestDiscovery(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d := fixedDiscovery{{
		Name: "api", Source: "discovery:api", Targets: 2, LastApply: t0,
		Sources: []server.DiscoverySourceStatus{{Name: "http_sd 0", Detail: "url http://127.0.0.1:1/sd", LastRefresh: t0, Targets: 2, LastError: "server returned HTTP status 500", ErrorSince: t0}},
	}}
	e := newEnv(t, 1, checker.Config{}, server.WithDiscovery(d))
	c := e.client(t)
	got, err := c.Discovery(within(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []client.DiscoveryGroup{{
		Name: "api", Source: "discovery:api", Targets: 2, LastApply: t0,
		Sources: []client.DiscoverySource{{Name: "http_sd 0", Detail: "url http://127.0.0.1:1/sd", LastRefresh: t0, Targets: 2, LastError: "server returned HTTP status 500", ErrorSince: t0}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discovery (-want +got):\n%s", diff)
	}
	if client.PolicyDiscoveryFailed.String() != "discovery_failed" {
		t.Errorf("kind %s", client.PolicyDiscoveryFailed)
	}
}

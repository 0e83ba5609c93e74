package web_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
)

type fakeDiscovery []server.DiscoveryGroupStatus

func (f fakeDiscovery) DiscoveryGroups() []server.DiscoveryGroupStatus { return f }

// A failing discovery source shows among the page's alerts, with since
// when and why; a source that answers does not.
func TestPageShowsFailingDiscoverySources(t *testing.T) {
	since := time.Date(2026, 12, 4, 10, 3, 0, 0, time.UTC)
	e := newEnv(t, checker.Config{}, web.Config{Discovery: fakeDiscovery{{
		Name: "api", Source: "discovery:api",
		Sources: []server.DiscoverySourceStatus{
			{Name: "file_sd 0", LastRefresh: since},
			{Name: "http_sd 0", LastError: "server returned HTTP status 500", ErrorSince: since},
		},
	}}})
	_, body := do(t, e, "/api/targets", "")
	var page struct {
		Checker struct {
			DiscoveryFailing []struct{ Source, Since, Error string } `json:"discoveryFailing"`
		}
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	f := page.Checker.DiscoveryFailing
	if len(f) != 1 || f[0].Source != "api (http_sd 0)" || f[0].Error != "server returned HTTP status 500" || f[0].Since != "2026-12-04T10:03:00Z" {
		t.Errorf("failing discovery sources = %+v, want api (http_sd 0) since 10:03 with its error", f)
	}
}

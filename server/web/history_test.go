package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

func TestAPIHistory(t *testing.T) {
	e, rec := historyEnv(t, web.Config{Tokens: tokens(t)})
	rec.ObserveTransition(checker.Transition{Target: "web-1", Group: "edge", From: checker.StateHealthy, To: checker.StateUnhealthy,
		Time: time.Now().Add(-time.Minute), Result: checker.Result{Err: "status 503"}})
	rec.ObservePolicy(checker.EventPanicEntered, time.Now().Add(-30*time.Second), checker.PolicyChange{Group: "edge", Text: "edge: panic entered"})
	if resp, _ := do(t, e, "/api/history?target=web-1", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
	resp, body := do(t, e, "/api/history?target=web-1", "Bearer "+readToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var h struct {
		Target, Group string
		Uptime        map[string]*float64
		Latency       []struct {
			Probes     uint64
			P95Seconds *float64
		}
		Events []struct{ From, To, Error, Mode, Kind, Text string }
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"1h", "24h", "7d", "30d"} {
		if u := h.Uptime[w]; u == nil || *u != 0.99 {
			t.Errorf("uptime %s = %v, want 0.99", w, u)
		}
	}
	if h.Group != "edge" || len(h.Latency) != 24 {
		t.Fatalf("group %q, %d hours of latency; want edge, 24", h.Group, len(h.Latency))
	}
	var probes uint64
	for _, l := range h.Latency {
		probes += l.Probes
		if l.Probes > 0 && (l.P95Seconds == nil || *l.P95Seconds != 0.05) {
			t.Errorf("an hour's p95 = %v, want 0.05 (30ms is in the 50ms bucket)", l.P95Seconds)
		}
	}
	if probes != 100 {
		t.Errorf("%d probes over the 24 hours, want 100", probes)
	}
	if len(h.Events) != 2 || h.Events[0].To != "unhealthy" || h.Events[0].Error != "status 503" || h.Events[0].Mode != "active" ||
		h.Events[1].Kind != "PANIC_ENTERED" || h.Events[1].Text != "edge: panic entered" || h.Events[1].To != "" {
		t.Errorf("events = %+v, want the transition then the group's panic", h.Events)
	}
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"/api/history", http.StatusBadRequest, "target: is required"},
		{"/api/history?target=nobody", http.StatusNotFound, `no target "nobody"`},
	} {
		resp, body := do(t, e, c.path, "Bearer "+readToken)
		if resp.StatusCode != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("GET %s: %d %q; want %d %q", c.path, resp.StatusCode, body, c.code, c.msg)
		}
	}
}

package web_test

import (
	"encoding/xml"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	"github.com/pulsehealth/pulse/server/web"
)

// badgeEnv serves the badges over a recorder fed directly, with results
// of now (the badges read the real clock): web-1 passes 99 probes of 100
// at 30ms; web-2, in the same group, fails all of its 100.
func badgeEnv(t *testing.T, wcfg web.Config) *env {
	t.Helper()
	e, _ := historyEnv(t, wcfg)
	return e
}

func historyEnv(t *testing.T, wcfg web.Config) (*env, *history.Recorder) {
	t.Helper()
	rec := history.New(history.Options{})
	now := time.Now()
	for i := 0; i < 100; i++ {
		at := now.Add(-time.Duration(i) * time.Second)
		rec.ObserveProbe(checker.Spec{Name: "web-1", Group: "edge"}, checker.Result{Pass: i != 0, Latency: 30 * time.Millisecond, Time: at})
		rec.ObserveProbe(checker.Spec{Name: "web-2", Group: "edge"}, checker.Result{Latency: 900 * time.Millisecond, Time: at})
		rec.ObserveProbe(checker.Spec{Name: "fast"}, checker.Result{Pass: true, Latency: 800 * time.Microsecond, Time: at})
	}
	wcfg.History = rec
	return newEnv(t, checker.Config{}, wcfg), rec
}

func TestBadges(t *testing.T) {
	e := badgeEnv(t, web.Config{})
	for _, c := range []struct {
		path, label, value, color string
	}{
		{"/badge/web-1/uptime/7d.svg", "uptime 7d", "99%", "#40cc11"},
		{"/badge/web-1/uptime/1h.svg", "uptime 1h", "99%", "#40cc11"},
		{"/badge/edge/uptime/24h.svg", "uptime 24h", "49.5%", "#c7130a"},
		{"/badge/web-1/response-time/30d.svg", "response time 30d", "30ms", "#40cc11"},
		{"/badge/web-2/response-time/1h.svg", "response time 1h", "900ms", "#c7130a"},
		{"/badge/fast/response-time/1h.svg", "response time 1h", "0.8ms", "#40cc11"},
	} {
		resp, body := do(t, e, c.path, "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" {
			t.Errorf("GET %s: %d %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
			continue
		}
		if err := xml.Unmarshal([]byte(body), new(struct{})); err != nil {
			t.Errorf("GET %s: not XML: %v\n%s", c.path, err, body)
		}
		for _, want := range []string{">" + c.label + "<", ">" + c.value + "<", `fill="` + c.color + `"`} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s: no %q in\n%s", c.path, want, body)
			}
		}
	}
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"/badge/web-1/uptime/2d.svg", http.StatusBadRequest, "the file must be 1h.svg, 24h.svg, 7d.svg or 30d.svg"},
		{"/badge/web-1/uptime/7d.png", http.StatusBadRequest, "the file must be"},
		{"/badge/nobody/uptime/7d.svg", http.StatusNotFound, `no target or group "nobody"`},
		{"/badge/web-1/latency/7d.svg", http.StatusNotFound, ""},
	} {
		resp, body := do(t, e, c.path, "")
		if resp.StatusCode != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("GET %s: %d %q; want %d and %q", c.path, resp.StatusCode, body, c.code, c.msg)
		}
	}
}

func TestBadgesNeedTheReadToken(t *testing.T) {
	e := badgeEnv(t, web.Config{Tokens: tokens(t)})
	const path = "/badge/web-1/uptime/7d.svg"
	if resp, _ := do(t, e, path, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
	if resp, body := do(t, e, path, "Bearer "+readToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, ">99%<") {
		t.Errorf("with the read token: %d %q", resp.StatusCode, body)
	}
}

package web_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
)

const (
	readToken  = "reader-token-0123456789"
	writeToken = "writer-token-0123456789"
)

func tokens(t *testing.T) *server.Tokens {
	t.Helper()
	tk, err := server.ParseTokens(strings.NewReader("read " + readToken + " dashboards\nwrite " + writeToken + " deployer\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// do sends GET path with an Authorization header (none if empty) and
// returns the response with its body read, up to 4 KiB (the feed never
// ends on its own).
func do(t *testing.T, e *env, path, auth string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body []byte
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
	}
	return resp, string(body)
}

// With tokens, every path but /healthz, /readyz and the page's static
// shell needs one: read for the data, write for /backup.
func TestTokensGuardEveryPath(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{
		Tokens:   tokens(t),
		Gatherer: prometheus.NewRegistry(),
		Backup:   func() (web.Snapshot, error) { return newSnapshot("the-store"), nil },
	})
	e.add(t, tcpSpec("web-1", "edge"))
	e.rounds(1)

	const (
		none  = ""
		bad   = "Bearer not-a-known-token-at-all"
		read  = "Bearer " + readToken
		write = "Bearer " + writeToken
	)
	for _, tt := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", none, 200},
		{"/readyz", none, 200},
		{"/", none, 200},
		{"/app.js", none, 200},
		{"/style.css", none, 200},
		{"/api/targets", none, 401},
		{"/api/targets", bad, 401},
		{"/api/targets", "Basic " + readToken, 401},
		{"/api/targets", read, 200},
		{"/api/targets", "bearer " + readToken, 200}, // the scheme is case-insensitive
		{"/api/targets", write, 200},
		{"/events?names=web-1", none, 401},
		{"/events?names=web-1", read, 200},
		{"/metrics", none, 401},
		{"/metrics", read, 200},
		{"/backup", none, 401},
		{"/backup", bad, 401},
		{"/backup", read, 403},
		{"/backup", write, 200},
		{"/no-such-page", none, 401},
		{"/no-such-page", read, 404},
	} {
		resp, body := do(t, e, tt.path, tt.auth)
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s with %q: %d %q, want %d", tt.path, tt.auth, resp.StatusCode, body, tt.want)
			continue
		}
		switch tt.want {
		case 401:
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("GET %s with %q: WWW-Authenticate %q, want Bearer", tt.path, tt.auth, got)
			}
		case 403:
			if want := `token "dashboards" has the read role; /backup needs write`; !strings.Contains(body, want) {
				t.Errorf("GET %s with %q: %q, want %q", tt.path, tt.auth, body, want)
			}
		}
		if tt.want != 200 && strings.Contains(body, "web-1") || tt.path == "/" && strings.Contains(body, "web-1") {
			t.Errorf("GET %s with %q shows target data: %q", tt.path, tt.auth, body)
		}
	}
	if _, body := do(t, e, "/api/targets", none); !strings.Contains(body, `missing token: send the header "Authorization: Bearer <token>"`) {
		t.Errorf("401 without a token says %q", body)
	}
	if _, body := do(t, e, "/backup", write); body != "the-store" {
		t.Errorf("/backup with a write token: %q", body)
	}
	// Other spellings of /backup are no way around its rule.
	for _, path := range []string{"/%62ackup", "//backup", "/./backup", "/api/../backup"} {
		if resp, body := do(t, e, path, read); resp.StatusCode == 200 || strings.Contains(body, "the-store") {
			t.Errorf("GET %s with a read token: %d %q", path, resp.StatusCode, body)
		}
	}
	resp, _ := do(t, e, "/", none)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("the page's Content-Security-Policy: %q", csp)
	}
}

// Without tokens the listener is open, as it was.
func TestNoTokensNoGuard(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{Gatherer: prometheus.NewRegistry()})
	for _, path := range []string{"/api/targets", "/metrics", "/"} {
		if resp, body := do(t, e, path, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s without tokens: %d %q", path, resp.StatusCode, body)
		}
	}
}

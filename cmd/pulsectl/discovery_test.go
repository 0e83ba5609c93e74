package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDiscoveryCommand: pulsectl discovery shows each group and source of
// a real pulsed (a file source and an HTTP SD endpoint on loopback, which
// then fails), its targets and its error, never the source's secret; -o
// json is the ListDiscoveryResponse; ls -o wide shows each target's source.
func TestDiscoveryCommand(t *testing.T) {
	const secret = "pulsectl-sd-secret-91c2"
	dir := t.TempDir()
	file := filepath.Join(dir, "api.json")
	if err := os.WriteFile(file, []byte(`[{"targets": ["127.0.0.1:9", "127.0.0.1:10"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"targets": ["127.0.0.1:11"]}]`)
	}))
	defer sd.Close()
	cfg := filepath.Join(dir, "discovery.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `groups:
  - name: api
    file_sd_configs: [{files: [api.json]}]
    http_sd_configs: [{url: %q, refresh_interval: 100ms, basic_auth: {username: u, password: %s}}]
    template: {tcp: {}}
`, sd.URL+"/sd", secret), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPulsed(t, "-discovery-config", cfg)
	addr := "--addr=" + p.Addr

	eventually(t, "three targets", func() bool { return strings.Count(mustRun(t, "ls", addr), "\napi-") == 3 })
	ls := mustRun(t, "ls", addr, "-o", "wide")
	if !strings.Contains(strings.SplitN(ls, "\n", 2)[0], "SOURCE") || !regexp.MustCompile(`(?m)^api-127\.0\.0\.1:11 .*discovery:api\s*$`).MatchString(ls) {
		t.Errorf("ls -o wide does not show the source:\n%s", ls)
	}

	row := func(out, source string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "api" && strings.HasPrefix(strings.TrimSpace(l[len(f[0]):]), source+" ") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		return ""
	}
	out := mustRun(t, "discovery", addr)
	if !strings.HasPrefix(out, "GROUP") || !regexp.MustCompile(`^api \(group\) 3 \d+s - -$`).MatchString(row(out, "(group)")) ||
		!regexp.MustCompile(`^api file_sd 0 2 \d+s - -$`).MatchString(row(out, "file_sd 0")) ||
		!regexp.MustCompile(`^api http_sd 0 1 \d+s - -$`).MatchString(row(out, "http_sd 0")) {
		t.Errorf("discovery:\n%s", out)
	}

	failing.Store(true)
	defer func() {
		if t.Failed() {
			t.Log(p.Logs())
		}
	}()
	eventually(t, "the failing source", func() bool {
		return strings.Contains(row(mustRun(t, "discovery", addr), "http_sd 0"), "503")
	})
	out = mustRun(t, "discovery", addr, "-o", "wide")
	if !regexp.MustCompile(`^api http_sd 0 1 \d+s \d+s server returned HTTP status 503 Service Unavailable url `+regexp.QuoteMeta(sd.URL+"/sd")+`$`).MatchString(row(out, "http_sd 0")) ||
		!strings.Contains(row(out, "file_sd 0"), "files "+file) {
		t.Errorf("discovery -o wide while failing:\n%s", out)
	}
	if ls := mustRun(t, "ls", addr); strings.Count(ls, "\napi-") != 3 {
		t.Errorf("the last good set did not stay:\n%s", ls)
	}

	js := mustRun(t, "discovery", addr, "-o", "json")
	var resp struct {
		Groups []struct {
			Name    string
			Source  string
			Targets int
			Sources []struct {
				Name       string
				LastError  string
				ErrorSince string
			}
		}
	}
	if err := json.Unmarshal([]byte(js), &resp); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if len(resp.Groups) != 1 || resp.Groups[0].Source != "discovery:api" || resp.Groups[0].Targets != 3 || len(resp.Groups[0].Sources) != 2 ||
		resp.Groups[0].Sources[1].Name != "http_sd 0" || resp.Groups[0].Sources[1].ErrorSince == "" {
		t.Errorf("-o json:\n%s", js)
	}
	for _, shown := range []string{out, js, mustRun(t, "discovery", addr, "-o", "yaml")} {
		if strings.Contains(shown, secret) {
			t.Errorf("the secret is shown:\n%s", shown)
		}
	}
}

// TestDiscoveryCommandNone: without -discovery-config, discovery says
// there is no group.
func TestDiscoveryCommandNone(t *testing.T) {
	p := startPulsed(t)
	r := pulsectl(t, "discovery", "--addr="+p.Addr)
	if r.code != exitOK || r.stdout != "" || !strings.Contains(r.stderr, "no discovery groups") {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

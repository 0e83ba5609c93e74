package main

import (
	"context"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadTargets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, `
targets:
  - name: web-1
    group: edge
    http: {url: "http://127.0.0.1:8080/healthz", expected_status: [200, 204]}
    interval: 1s
    rise: 3
  - name: db-1
    tcp: {address: "127.0.0.1:5432"}
    model: MODEL_THREE_STATE
`)
	specs, err := loadTargets(path, checker.StandardDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 {
		t.Fatalf("%d specs", len(specs))
	}
	web, db := specs[0], specs[1]
	if web.Name != "web-1" || web.Group != "edge" || web.Interval != time.Second || web.Rise != 3 ||
		web.Probe.HTTP == nil || !cmp.Equal(web.Probe.HTTP.ExpectedStatus, []int{200, 204}) || web.Source != checker.SourceFile {
		t.Errorf("web-1: %+v", web)
	}
	if db.Probe.TCP.Address != "127.0.0.1:5432" || db.Model != checker.ModelThreeState {
		t.Errorf("db-1: %+v", db)
	}
}

// Every probe option has its YAML field, as in AddTarget's JSON.
func TestLoadTargetsProbeOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, `
targets:
  - name: web
    http:
      url: "https://127.0.0.1:8443/ready"
      expected_status_ranges: ["200-399"]
      body_contains: ready
      header_matches: [{name: X-Status, regex: "^ok$"}]
      follow_redirects: true
      tls: {server_name: web.internal, min_version: "1.3", cert_expiry_warn: 2592000s, cert_expiry_fail: 604800s}
  - name: cache
    tcp:
      address: "127.0.0.1:6379"
      steps: [{send: "PING\r\n"}, {expect: "+PONG\r\n"}]
  - name: api
    grpc: {address: "127.0.0.1:50051", authority: api.internal, metadata: {x-api-key: k}, expected_statuses: [SERVING, NOT_SERVING]}
  - name: resolver
    dns: {name: api.internal, server: "127.0.0.1:53", type: SRV, answer_regex: "db-\\d"}
`)
	specs, err := loadTargets(path, checker.StandardDefaults())
	if err != nil {
		t.Fatal(err)
	}
	web, cache, api, resolver := specs[0].Probe, specs[1].Probe, specs[2].Probe, specs[3].Probe
	if h := web.HTTP; h.BodyContains != "ready" || h.ExpectedStatusRanges[0] != "200-399" || h.HeaderMatches[0].Regex != "^ok$" ||
		!h.FollowRedirects || h.TLS.ServerName != "web.internal" || h.TLS.CertExpiryWarn != 720*time.Hour || h.TLS.CertExpiryFail != 168*time.Hour {
		t.Errorf("web: %+v %+v", h, h.TLS)
	}
	if s := cache.TCP.Steps; len(s) != 2 || s[0].Send != "PING\r\n" || s[1].Expect != "+PONG\r\n" {
		t.Errorf("cache steps: %+v", s)
	}
	if g := api.GRPC; g.Authority != "api.internal" || g.Metadata["x-api-key"] != "k" || len(g.ExpectedStatuses) != 2 {
		t.Errorf("api: %+v", g)
	}
	if d := resolver.DNS; d.Type != "SRV" || d.AnswerRegex != `db-\d` {
		t.Errorf("resolver: %+v", d)
	}
}

func TestLoadTargetsErrorsNameTheLine(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n  - name: b\n    rise: 0\n    tcp: {address: \"127.0.0.1:1\"}\n", `:4: target "b": rise: must be at least 1, got 0`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n  - name: a\n    tcp: {address: \"127.0.0.1:2\"}\n", `:4: target "a" is already declared on line 2`},
		{"targets:\n  - name: a\n    tpc: {address: \"127.0.0.1:1\"}\n", `:3:5 unknown field "tpc", expected one of [name group`},
		{"targets:\n  - name: a\n    tpc: {address: \"127.0.0.1:1\"}\n", "\nDid you mean \"tcp\"?"},
		{"targets:\n  - name: a\n    tcp: {adress: \"127.0.0.1:1\"}\n", "\nDid you mean \"address\"?"},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    rise: many\n", `:4:11 invalid integer`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    interval: soon\n", `:4:15 invalid number`},
		{"- name: a\n  tcp: {address: \"127.0.0.1:1\"}\n", `:1: the file must be a mapping with one key, targets`},
		{"targets:\n  - name: a\n    http: {url: \"ftp://x\"}\n", `:2: target "a": http.url:`},
		{"targets:\n  - name: a\n    http: {url: \"http://127.0.0.1:1/\", headers: {Authorization: \"<redacted>\"}}\n", `:2: target "a": http.headers["Authorization"]: is "<redacted>", the placeholder pulsed shows for a value: a targets file must hold the value itself`},
		{"tragets: []\n", `:1: unknown key "tragets"`},
		{"targets:\n  - name: a\n    http: {url: \"http://127.0.0.1:1/\", body_regex: \"(x\"}\n", `:2: target "a": http.body_regex: is not a valid RE2 regular expression`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\", steps: [{}]}\n", `:2: target "a": tcp.steps[0]: set one of send`},
		{"targets:\n  - name: a\n    grpc: {address: \"127.0.0.1:1\", metadata: {k: \"<redacted>\"}}\n", `:2: target "a": grpc.metadata["k"]: is "<redacted>"`},
		{"targets: {name: a}\n", `:1: targets must be a list`},
		{"targets:\n  - name: [\n", `yaml:`},
		// Out-of-bound values: the field and the bound.
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    interval: 100000000000s\n", `:2: target "a": interval: must be at most 24h0m0s, got more than 292 years`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    interval: 90000s\n", `:2: target "a": interval: must be at most 24h0m0s, got 25h0m0s`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    rise: 5000\n", `:2: target "a": rise: must be between 1 and 1000, got 5000`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    fast_interval: 0.001s\n", `:2: target "a": fast_interval: must be at least the timeout (1s), got 1ms: set timeout to at most 1ms, or a longer fast_interval`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    flapThreshold: 300\n", `:2: target "a": flap_threshold: must be at most 256`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    timeout: 7200s\n    interval: 86400s\n", `:2: target "a": timeout: must be at most 1h0m0s, got 2h0m0s`},
	} {
		path := filepath.Join(t.TempDir(), "targets.yaml")
		writeFile(t, path, tt.body)
		_, err := loadTargets(path, checker.StandardDefaults())
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), path) {
			t.Errorf("%q: error %v, want one naming %s and containing %q", tt.body, err, path, tt.want)
		}
	}
}

// TestLoadTargetsWithOtherLineEndings: a file written with CR LF or CR
// alone ending its lines reads as with LF, and an error in it names and
// quotes its line (a decoder that split the text at LF alone quoted the
// wrong line, or panicked past the last one).
func TestLoadTargetsWithOtherLineEndings(t *testing.T) {
	for _, eol := range []string{"\r\n", "\r"} {
		good := strings.ReplaceAll("targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    rise: 3\n", "\n", eol)
		path := filepath.Join(t.TempDir(), "targets.yaml")
		writeFile(t, path, good)
		specs, err := loadTargets(path, checker.StandardDefaults())
		if err != nil || len(specs) != 1 || specs[0].Rise != 3 {
			t.Errorf("%q: %+v, %v", good, specs, err)
		}
		bad := strings.ReplaceAll("targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    rise: many\n", "\n", eol)
		writeFile(t, path, bad)
		_, err = loadTargets(path, checker.StandardDefaults())
		if want := path + ":4:11 invalid integer"; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "   4 |     rise: many\n") {
			t.Errorf("%q: error %v, want one starting %q and quoting line 4", bad, err, want)
		}
	}
}

func TestApplyTargetsOwnsOnlyFileTargets(t *testing.T) {
	c, err := checker.New(checker.Config{NewProber: func(probe.Spec) (checker.Prober, error) { return nopProber{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	logger := slog.New(slog.DiscardHandler)
	tcp := func(name string) checker.Spec {
		s := checker.Spec{Name: name, Source: checker.SourceFile}
		s.Probe.TCP = &probe.TCPSpec{Address: "127.0.0.1:1"}
		return s
	}
	if err := applyTargets(c, []checker.Spec{tcp("a"), tcp("b")}, logger); err != nil {
		t.Fatal(err)
	}
	api := tcp("api")
	api.Source = ""
	c.Add(api)
	changed := tcp("b")
	changed.Rise = 5
	if err := applyTargets(c, []checker.Spec{changed}, logger); err != nil {
		t.Fatal(err)
	}
	list, _ := c.List("")
	var got []string
	for _, st := range list {
		got = append(got, st.Spec.Name+":"+st.Spec.Source)
	}
	if diff := cmp.Diff([]string{"api:", "b:file"}, got); diff != "" {
		t.Errorf("after the reload (-want +got):\n%s", diff)
	}
	if st, _ := c.Status("b"); st.Spec.Rise != 5 {
		t.Errorf("b's rise %d, want 5", st.Spec.Rise)
	}
}

// pulsed -targets loads the file at start and again on SIGHUP; a file with
// errors changes nothing and the log names the line.
func TestTargetsFileAndSIGHUP(t *testing.T) {
	bin := buildPulsed(t)
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, "targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:9\"}\n  - name: b\n    tcp: {address: \"127.0.0.1:9\"}\n")
	p := startPulsed(t, bin, "-targets", path)
	client := dial(t, p.Addr)
	names := func() []string {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range list.GetTargets() {
			out = append(out, st.GetSpec().GetName()+":"+st.GetSource())
		}
		return out
	}
	if diff := cmp.Diff([]string{"a:file", "b:file"}, names()); diff != "" {
		t.Fatalf("at start (-want +got):\n%s", diff)
	}
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "api", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}}}); err != nil {
		t.Fatal(err)
	}

	writeFile(t, path, "targets:\n  - name: b\n    tcp: {address: \"127.0.0.1:9\"}\n  - name: c\n    tcp: {address: \"127.0.0.1:9\"}\n")
	p.Signal(syscall.SIGHUP)
	eventually(t, "the reload", func() bool { return cmp.Equal(names(), []string{"api:api", "b:file", "c:file"}) })

	writeFile(t, path, "targets:\n  - name: d\n    tcp: {address: \"127.0.0.1:9\"}\n  - name: e\n    fall: -1\n    tcp: {address: \"127.0.0.1:9\"}\n")
	p.Signal(syscall.SIGHUP)
	eventually(t, "the bad file's log line", func() bool {
		return strings.Contains(p.Logs(), `targets file not applied: nothing changed`) && strings.Contains(p.Logs(), `targets.yaml:4: target \"e\": fall: must be at least 1, got -1`)
	})
	if diff := cmp.Diff([]string{"api:api", "b:file", "c:file"}, names()); diff != "" {
		t.Errorf("a bad file changed targets (-want +got):\n%s", diff)
	}

	// The Reload call does what SIGHUP does, and says how it went.
	resp, err := client.Reload(t.Context(), &pb.ReloadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f := resp.GetFiles(); len(f) != 1 || f[0].GetKind() != "targets" || f[0].GetPath() != path ||
		!strings.Contains(f[0].GetError(), `targets.yaml:4: target "e": fall: must be at least 1, got -1`) {
		t.Errorf("Reload of the bad file: %v", f)
	}
	writeFile(t, path, "targets:\n  - name: d\n    tcp: {address: \"127.0.0.1:9\"}\n")
	if resp, err = client.Reload(t.Context(), &pb.ReloadRequest{}); err != nil || resp.GetFiles()[0].GetError() != "" {
		t.Fatalf("Reload of the fixed file: %v, %v", resp, err)
	}
	if diff := cmp.Diff([]string{"api:api", "d:file"}, names()); diff != "" {
		t.Errorf("after Reload (-want +got):\n%s", diff)
	}
	p.stop(t)
}

// Reload without a file to reload says so.
func TestReloadWithoutFiles(t *testing.T) {
	p := startPulsed(t, buildPulsed(t))
	_, err := dial(t, p.Addr).Reload(t.Context(), &pb.ReloadRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no file to reload") {
		t.Errorf("Reload: %v, want FAILED_PRECONDITION saying there is no file", err)
	}
	p.stop(t)
}

type nopProber struct{}

func (nopProber) Probe(context.Context) error { return nil }

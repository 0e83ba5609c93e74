package discovery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// announced records the events a Manager announces.
type announced struct {
	mu  sync.Mutex
	evs []string // "DISCOVERY_FAILED discovery:api/file_sd 0: error"
	all []checker.PolicyChange
}

func (a *announced) Announce(k checker.EventKind, pc checker.PolicyChange) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, k.String()+" "+pc.Source+"/"+pc.SDConfig)
	a.all = append(a.all, pc)
	return nil
}

func (a *announced) kinds() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.evs, ", ")
}

// syncBuffer is a log sink that tests read while the manager writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startManagerWith(t *testing.T, yaml string, reg Registry, opts Options, logs io.Writer) (*Manager, *prometheus.Registry) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "discovery.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	metrics := prometheus.NewRegistry()
	opts.UpdateEvery = 20 * time.Millisecond
	m, err := NewManager(ctx, cfg, reg, metrics, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, metrics
}

// sourceLine describes a group's first source: "targets=N error=E".
func sourceLine(m *Manager) string {
	gs := m.DiscoveryGroups()
	if len(gs) == 0 || len(gs[0].Sources) == 0 {
		return "no source"
	}
	s := gs[0].Sources[0]
	errText := "none"
	if s.LastError != "" {
		errText = "yes"
	}
	return fmt.Sprintf("targets=%d refreshed=%v error=%s since=%v", s.Targets, !s.LastRefresh.IsZero(), errText, !s.ErrorSince.IsZero())
}

// TestSourceStatusFile: a file source's status follows its file through a
// bad rewrite and back, and says so on the stream once per failure, not
// at every refresh, and in pulse_discovery_source_up.
func TestSourceStatusFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001", "127.0.0.1:8002"]}]`)
	ann := &announced{}
	reg := newFakeRegistry()
	m, metrics := startManagerWith(t, fmt.Sprintf(`
groups:
  - name: api
    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]
    template: {tcp: {}}
`, file), reg, Options{Announce: ann}, io.Discard)

	waitFor(t, "first answer", func() string { return sourceLine(m) }, "targets=2 refreshed=true error=none since=false")
	waitFor(t, "first answer applied", func() string { return fmt.Sprint(m.DiscoveryGroups()[0].Targets) }, "2")
	gs := m.DiscoveryGroups()
	if gs[0].Name != "api" || gs[0].Source != "discovery:api" || gs[0].Targets != 2 || gs[0].Sources[0].Name != "file_sd 0" || gs[0].Sources[0].Detail != "files "+file {
		t.Errorf("status %+v", gs)
	}
	up := func() string {
		return fmt.Sprint(testutil.ToFloat64(m.sourceUp.WithLabelValues("api", "file_sd 0")))
	}
	waitFor(t, "source up", up, "1")

	writeAtomic(t, file, `[{"targets": [`)
	waitFor(t, "failing", func() string { return sourceLine(m) }, "targets=2 refreshed=true error=yes since=true")
	waitFor(t, "source down", up, "0")
	// Several refreshes later (50ms each), still one event.
	before := sumCounter(t, metrics, "pulse_discovery_prometheus_sd_file_read_errors_total")
	waitFor(t, "three more failed reads", func() string {
		return fmt.Sprint(sumCounter(t, metrics, "pulse_discovery_prometheus_sd_file_read_errors_total") >= before+3)
	}, "true")
	if got := ann.kinds(); got != "DISCOVERY_FAILED discovery:api/file_sd 0" {
		t.Errorf("events %q, want one DISCOVERY_FAILED", got)
	}
	st := m.DiscoveryGroups()[0].Sources[0]
	if !strings.Contains(st.LastError, file) || !strings.Contains(ann.all[0].Error, file) {
		t.Errorf("error %q / event %+v does not name the file", st.LastError, ann.all[0])
	}
	if got := reg.modes(); got != "api-127.0.0.1:8001=active api-127.0.0.1:8002=active" {
		t.Errorf("while failing: %s, want the last good set", got)
	}

	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001"]}]`)
	waitFor(t, "recovered", func() string { return sourceLine(m) }, "targets=1 refreshed=true error=none since=false")
	waitFor(t, "recovered event", ann.kinds, "DISCOVERY_FAILED discovery:api/file_sd 0, DISCOVERY_RECOVERED discovery:api/file_sd 0")
	waitFor(t, "source up again", up, "1")
}

// TestSourceStatusHTTPSecrets: an http_sd source that fails says so once,
// a redirect to an address the egress policy denies is not followed, and
// the secrets of its configuration appear nowhere: not in the log, the
// status or the events, even when an error quotes them.
func TestSourceStatusHTTPSecrets(t *testing.T) {
	const (
		cred  = "cred-8f3a1c"
		pass  = "urlpass-5d2e"
		token = "qtok-77b1f0"
	)
	// The address a redirect points to, which the policy denies: it must
	// never be asked.
	var deniedHits atomic.Int64
	deniedLis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	denied := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deniedHits.Add(1)
		fmt.Fprint(w, `[{"targets": ["127.0.0.1:9"]}]`)
	}))
	denied.Listener.Close()
	denied.Listener = deniedLis
	denied.Start()
	defer denied.Close()

	var mode atomic.Value
	mode.Store("ok")
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "500":
			w.WriteHeader(500)
		case "redirect": // quotes the secrets the request carried
			w.Header().Set("Location", denied.URL+"/sd?echo="+r.Header.Get("Authorization")+"&tok="+r.URL.Query().Get("token"))
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[{"targets": ["127.0.0.1:1"]}]`)
		}
	}))
	defer sd.Close()

	policy, err := probe.ParseEgressPolicy(nil, []string{"127.0.0.2/32"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ann := &announced{}
	reg := newFakeRegistry()
	u := strings.Replace(sd.URL, "http://", "http://user:"+pass+"@", 1) + "/sd?token=" + token
	m, _ := startManagerWith(t, fmt.Sprintf(`
groups:
  - name: h
    http_sd_configs:
      - url: %s
        refresh_interval: 100ms
        authorization: {credentials: %s}
    template: {tcp: {}}
`, u, cred), reg, Options{Announce: ann, Egress: policy}, logs)
	waitFor(t, "first answer", func() string { return sourceLine(m) }, "targets=1 refreshed=true error=none since=false")

	mode.Store("500")
	waitFor(t, "failing", func() string { return sourceLine(m) }, "targets=1 refreshed=true error=yes since=true")
	mode.Store("redirect")
	waitFor(t, "redirect refused", func() string {
		return fmt.Sprint(strings.Contains(m.DiscoveryGroups()[0].Sources[0].LastError, "denied by egress policy"))
	}, "true")
	if got := ann.kinds(); got != "DISCOVERY_FAILED discovery:h/http_sd 0" {
		t.Errorf("events %q, want one DISCOVERY_FAILED for the whole failure", got)
	}
	if n := deniedHits.Load(); n != 0 {
		t.Errorf("the denied address was asked %d times", n)
	}
	mode.Store("ok")
	waitFor(t, "recovered", ann.kinds, "DISCOVERY_FAILED discovery:h/http_sd 0, DISCOVERY_RECOVERED discovery:h/http_sd 0")
	if got := reg.modes(); got != "h-127.0.0.1:1=active" {
		t.Errorf("targets %s", got)
	}

	everything := logs.String() + fmt.Sprintf("%+v %+v", m.DiscoveryGroups(), ann.all)
	if !strings.Contains(everything, "denied by egress policy") || !strings.Contains(everything, "500") {
		t.Fatalf("the log and status do not tell the failures:\n%s", everything)
	}
	for _, secret := range []string{cred, pass, token} {
		if strings.Contains(everything, secret) {
			t.Errorf("secret %q shown:\n%s", secret, everything)
		}
	}
	if d := m.DiscoveryGroups()[0].Sources[0].Detail; d != "url "+sd.URL+"/sd" {
		t.Errorf("detail %q", d)
	}
}

// TestConfigCheckEgress: an http_sd URL at an address the egress policy
// denies is a configuration error naming the field; a host name passes.
func TestConfigCheckEgress(t *testing.T) {
	policy, err := probe.ParseEgressPolicy(nil, []string{"127.0.0.2/32"})
	if err != nil {
		t.Fatal(err)
	}
	parse := func(url string) *Config {
		t.Helper()
		cfg, err := ParseConfig(fmt.Appendf(nil, "groups:\n  - name: a\n    http_sd_configs: [{url: %q}]\n    template: {tcp: {}}\n", url), ".")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	err = parse("http://127.0.0.2:8080/sd?token=abc").CheckEgress(policy)
	if err == nil || !strings.Contains(err.Error(), `groups[0] ("a"): http_sd_configs[0].url`) || !strings.Contains(err.Error(), "denied by egress policy") || strings.Contains(err.Error(), "abc") {
		t.Errorf("denied URL: %v", err)
	}
	if err := parse("http://127.0.0.1:8080/sd").CheckEgress(policy); err != nil {
		t.Errorf("permitted URL: %v", err)
	}
	if err := parse("http://sd.example:8080/sd").CheckEgress(policy); err != nil {
		t.Errorf("a host name: %v", err)
	}
	if err := parse("http://169.254.169.254/sd").CheckEgress(nil); err == nil {
		t.Error("the metadata address passed the default policy")
	}
}

// TestRefusalSaysSo: an answer over the maximum is refused whole with an
// error giving the count and the bound, the last good set stays, and the
// refusal is one DISCOVERY_FAILED of the group (no SD config), ended by
// the next answer that applies.
func TestRefusalSaysSo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:1"]}]`)
	ann := &announced{}
	reg := newFakeRegistry()
	m, _ := startManagerWith(t, fmt.Sprintf("groups:\n  - name: a\n    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]\n    template: {tcp: {}}\n", file), reg, Options{Announce: ann}, io.Discard)
	waitFor(t, "first answer", reg.modes, "a-127.0.0.1:1=active")

	var big strings.Builder
	big.WriteString(`[{"targets": [`)
	for i := range MaxTargetsPerGroup + 1 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `"127.0.%d.%d:80"`, i/250, i%250+1)
	}
	big.WriteString(`]}]`)
	writeAtomic(t, file, big.String())
	waitFor(t, "refused", ann.kinds, "DISCOVERY_FAILED discovery:a/")
	g := m.DiscoveryGroups()[0]
	if want := fmt.Sprintf("the sources answered %d targets, more than the maximum of %d", MaxTargetsPerGroup+1, MaxTargetsPerGroup); !strings.Contains(g.LastError, want) || g.ErrorSince.IsZero() || g.Targets != 1 {
		t.Errorf("group status %+v, want its error to say %q", g, want)
	}
	if got := reg.modes(); got != "a-127.0.0.1:1=active" {
		t.Errorf("after a huge answer: %s, want the last good set", got)
	}
	// The source itself answered: it does not fail.
	if s := g.Sources[0]; s.LastError != "" || s.Targets != MaxTargetsPerGroup+1 {
		t.Errorf("source %+v", s)
	}

	writeAtomic(t, file, `[{"targets": ["127.0.0.1:2"]}]`)
	waitFor(t, "applied again", ann.kinds, "DISCOVERY_FAILED discovery:a/, DISCOVERY_RECOVERED discovery:a/")
	if g := m.DiscoveryGroups()[0]; g.LastError != "" || !g.ErrorSince.IsZero() || g.Targets != 1 {
		t.Errorf("group status %+v", g)
	}
}

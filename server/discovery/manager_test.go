package discovery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRegistry records the operations discovery makes, as the checker's
// public operations would apply them.
type fakeRegistry struct {
	mu      sync.Mutex
	specs   map[string]checker.Spec
	created map[string]int // how many times each name was created
	refuse  string         // Add refuses this name
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{specs: map[string]checker.Spec{}, created: map[string]int{}}
}

func (f *fakeRegistry) AddMany(specs []checker.Spec) ([]checker.AddResult, error) {
	out := make([]checker.AddResult, len(specs))
	for i, s := range specs {
		out[i].Status, out[i].Created, out[i].Err = f.add(s)
	}
	return out, nil
}

func (f *fakeRegistry) add(s checker.Spec) (checker.Status, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Name == f.refuse {
		return checker.Status{}, false, &checker.FieldError{Field: "tcp.address", Reason: "refused by the egress policy"}
	}
	old, ok := f.specs[s.Name]
	if ok {
		s.Lifecycle = old.Lifecycle // Add keeps the mode
	} else {
		f.created[s.Name]++
	}
	f.specs[s.Name] = s
	return checker.Status{Spec: s}, !ok, nil
}

func (f *fakeRegistry) Drain(name string, d time.Duration) (checker.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.specs[name].WithAdmin(checker.Admin{Mode: checker.ModeDraining, RemoveAt: time.Unix(1e9, 0).Add(d)})
	f.specs[name] = s
	return checker.Status{Spec: s}, nil
}

func (f *fakeRegistry) Remove(name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.specs[name]
	delete(f.specs, name)
	return ok, nil
}

func (f *fakeRegistry) SetMode(r checker.ModeRequest) ([]checker.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.specs[r.Target].WithAdmin(checker.Admin{Mode: r.Mode, Reason: r.Reason})
	f.specs[r.Target] = s
	return []checker.Status{{Spec: s}}, nil
}

func (f *fakeRegistry) List(string) ([]checker.Status, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []checker.Status
	for _, n := range slices.Sorted(maps.Keys(f.specs)) {
		out = append(out, checker.Status{Spec: f.specs[n]})
	}
	return out, 0
}

func (f *fakeRegistry) Defaults() checker.Defaults { return checker.StandardDefaults() }

// modes returns each target's name and mode, e.g. "a-x:1=active".
func (f *fakeRegistry) modes() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range slices.Sorted(maps.Keys(f.specs)) {
		out = append(out, n+"="+f.specs[n].Admin().Mode.String())
	}
	return strings.Join(out, " ")
}

// writeAtomic replaces path's content by a rename, as deploy tools do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, f func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		if got = f(); got == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: got %q, want %q", what, got, want)
}

func startManager(t *testing.T, yaml string, reg Registry) (*Manager, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "discovery.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	metrics := prometheus.NewRegistry()
	m, err := NewManager(ctx, cfg, reg, metrics, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{UpdateEvery: 20 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, metrics
}

// TestManagerFileSource follows a real file rewritten atomically,
// truncated, made invalid and restored.
func TestManagerFileSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001", "127.0.0.2:8001"]}]`)
	reg := newFakeRegistry()
	m, metrics := startManager(t, fmt.Sprintf(`
groups:
  - name: api
    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]
    template: {tcp: {}}
    on_disappear: drain 5s
`, file), reg)

	waitFor(t, "first answer", reg.modes, "api-127.0.0.1:8001=active api-127.0.0.2:8001=active")
	if got, _ := reg.List(""); got[0].Spec.Source != "discovery:api" {
		t.Errorf("source %q", got[0].Spec.Source)
	}

	// An operator's mode sticks across refreshes.
	if _, err := reg.SetMode(checker.ModeRequest{Target: "api-127.0.0.2:8001", Mode: checker.ModeMaintenance}); err != nil {
		t.Fatal(err)
	}

	// Gone from the file: drained, not removed.
	writeAtomic(t, file, `[{"targets": ["127.0.0.2:8001"]}]`)
	waitFor(t, "after a removal", reg.modes, "api-127.0.0.1:8001=draining api-127.0.0.2:8001=maintenance")

	// Back within the drain: active again, never created twice.
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001", "127.0.0.2:8001"]}]`)
	waitFor(t, "back within the drain", reg.modes, "api-127.0.0.1:8001=active api-127.0.0.2:8001=maintenance")
	reg.mu.Lock()
	n := reg.created["api-127.0.0.1:8001"]
	reg.mu.Unlock()
	if n != 1 {
		t.Errorf("created %d times, want once: its history must stay", n)
	}

	// Invalid, then truncated: each read fails, is counted, and the last
	// good set stays.
	readErrors := func() float64 {
		mfs, err := metrics.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() == "pulse_discovery_prometheus_sd_file_read_errors_total" {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	for _, bad := range []string{`[{"targets": [`, ``} {
		before := readErrors()
		if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("read error counted for %q", bad), func() string { return fmt.Sprint(readErrors() > before) }, "true")
		if got := reg.modes(); got != "api-127.0.0.1:8001=active api-127.0.0.2:8001=maintenance" {
			t.Fatalf("after %q: %s, want the last good set", bad, got)
		}
	}

	// Restored.
	writeAtomic(t, file, `[{"targets": ["127.0.0.3:8001"]}]`)
	waitFor(t, "restored", reg.modes, "api-127.0.0.1:8001=draining api-127.0.0.2:8001=draining api-127.0.0.3:8001=active")
	waitFor(t, "the status after the restore", func() string { return fmt.Sprint(m.Status()[0].Targets) }, "1")
	st := m.Status()
	if len(st) != 1 || st[0].Targets != 1 || st[0].Sources[0].Name != "file_sd 0" || st[0].LastApply.IsZero() {
		t.Errorf("status %+v", st)
	}
}

// TestManagerRefusals: an answer over the maximum is refused whole, and a
// target the registry refuses is left out and counted.
func TestManagerRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]`)
	reg := newFakeRegistry()
	reg.refuse = "a-127.0.0.1:2"
	m, _ := startManager(t, fmt.Sprintf("groups:\n  - name: a\n    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]\n    template: {tcp: {}}\n    on_disappear: remove\n", file), reg)
	waitFor(t, "first answer", reg.modes, "a-127.0.0.1:1=active")
	waitFor(t, "skipped counted", func() string {
		return fmt.Sprint(testutil.ToFloat64(m.skipped.WithLabelValues("a")))
	}, "1")
	waitFor(t, "the status says why a target was left out", func() string {
		return fmt.Sprint(strings.Contains(m.Status()[0].LastError, "egress"))
	}, "true")

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
	waitFor(t, "refused counted", func() string {
		return fmt.Sprint(testutil.ToFloat64(m.refused.WithLabelValues("a")))
	}, "1")
	if got := reg.modes(); got != "a-127.0.0.1:1=active" {
		t.Errorf("after a huge answer: %s, want the last good set", got)
	}
	waitFor(t, "the status says the answer was refused", func() string {
		return fmt.Sprint(strings.Contains(m.Status()[0].LastError, "maximum"))
	}, "true")

	// on_disappear: remove.
	writeAtomic(t, file, `[]`)
	waitFor(t, "removed", reg.modes, "")
}

// A group dropped from the configuration retires its targets as its
// on_disappear says (with RetireRemoved, as pulsed sets it alone); the
// other groups' stay.
func TestManagerRetiresARemovedGroup(t *testing.T) {
	dir := t.TempDir()
	api, web := filepath.Join(dir, "api.json"), filepath.Join(dir, "web.json")
	writeAtomic(t, api, `[{"targets": ["127.0.0.1:8001"]}]`)
	writeAtomic(t, web, `[{"targets": ["127.0.0.1:8002"]}]`)
	group := func(name, file, disappear string) string {
		return fmt.Sprintf("  - name: %s\n    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]\n    template: {tcp: {}}\n    on_disappear: %s\n", name, file, disappear)
	}
	load := func(yaml string) *Config {
		t.Helper()
		cfg, err := ParseConfig([]byte(yaml), dir)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	reg := newFakeRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := NewManager(ctx, load("groups:\n"+group("api", api, "remove")+group("web", web, "drain 5s")), reg, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), Options{UpdateEvery: 20 * time.Millisecond, RetireRemoved: true})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "both groups' targets", reg.modes, "api-127.0.0.1:8001=active web-127.0.0.1:8002=active")
	if err := m.ApplyConfig(load("groups:\n" + group("web", web, "drain 5s"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "api's target removed", reg.modes, "web-127.0.0.1:8002=active")
	if err := m.ApplyConfig(load("groups: []\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web's target drained", reg.modes, "web-127.0.0.1:8002=draining")
}

// TestManagerWaitsForASourcesFirstAnswer: until a source has answered,
// Prometheus's manager sends an empty set for it. Applied, that set would
// drain every target the group kept across a restart, or that a replica
// taking the group over finds registered.
func TestManagerWaitsForASourcesFirstAnswer(t *testing.T) {
	dir := t.TempDir()
	// An HTTP source that does not answer until the test ends: the test
	// says when it answered.
	release := make(chan struct{})
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "gone", http.StatusServiceUnavailable)
	}))
	defer sd.Close()
	defer close(release)
	cfgPath := filepath.Join(dir, "discovery.yaml")
	yaml := fmt.Sprintf("groups:\n  - name: api\n    http_sd_configs: [{url: %q}]\n    template: {tcp: {}}\n    on_disappear: drain 5s\n", sd.URL)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := newFakeRegistry()
	reg.specs["api-127.0.0.1:8001"] = checker.Spec{Name: "api-127.0.0.1:8001", Source: Source("api")} // kept from before
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := NewManager(ctx, cfg, reg, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := m.groups["api"].sources[0]
	empty := map[string][]*targetgroup.Group{src.set: {}}

	m.applyAnswer(empty) // sent before the source answered
	if got := reg.modes(); got != "api-127.0.0.1:8001=active" {
		t.Errorf("after an empty set from a source that has not answered: %s, want the target kept active", got)
	}
	src.answered(nil) // the source answered: nothing
	m.applyAnswer(empty)
	if got := reg.modes(); got != "api-127.0.0.1:8001=draining" {
		t.Errorf("after the source answered nothing: %s, want the target drained", got)
	}
}

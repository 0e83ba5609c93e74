package discovery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// replica is one pulsed's discovery in TestElector: a Manager with no
// groups of its own and an Elector that gives it those it leads.
type replica struct {
	id     string
	m      *Manager
	e      *Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, id, endpoint string, cfg *Config, reg Registry) *replica {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := prometheus.NewRegistry()
	m, err := NewManager(ctx, &Config{}, reg, metrics, logger, Options{UpdateEvery: 20 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &replica{id: id, m: m, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); m.Run(ctx) }()
	r.e, err = NewElector(m, cfg, ElectOptions{Client: cli, Prefix: "/elect-test/", ID: id, TTL: 2 * time.Second, Retry: 100 * time.Millisecond, Logger: logger, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.stop()
		cli.Close()
	})
	return r
}

// stop closes the replica's elector and manager; it is idempotent.
func (r *replica) stop() {
	r.e.Close()
	r.cancel()
	<-r.done
}

// leading returns the groups r's Manager runs.
func (r *replica) leading() string {
	var out []string
	for _, st := range r.m.Status() {
		out = append(out, st.Name)
	}
	return strings.Join(out, ",")
}

// leaders returns each group's leader as r sees it, e.g. "a=r1 b=r2".
func (r *replica) leaders() string {
	var out []string
	for _, st := range r.e.Status() {
		out = append(out, st.Name+"="+st.Leader)
	}
	return strings.Join(out, " ")
}

func loadTestConfig(t *testing.T, yaml string) *Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "discovery.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestElector: two replicas on one etcd and one shared registry; exactly
// one runs the group; when it is cut off from etcd (as a killed replica
// stops renewing its lease) the other takes over within the TTL and
// re-syncs from the source without adding a target twice; a drain the
// first leader began is left to finish; a group removed from the
// configuration resigns and the other replica takes it.
func TestElector(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	proxy := etcd.Proxy(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "api.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001", "127.0.0.2:8001"]}]`)
	yaml := fmt.Sprintf(`
groups:
  - name: api
    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]
    template: {tcp: {}}
    on_disappear: drain 5m
  - name: web
    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]
    template: {tcp: {}}
    on_disappear: remove
`, file, file)
	cfg := loadTestConfig(t, yaml)
	reg := newFakeRegistry()

	r1 := startReplica(t, "r1", proxy.Endpoint, cfg, reg)
	waitFor(t, "r1 leads both groups", r1.leading, "api,web")
	waitFor(t, "r1's targets", reg.modes, "api-127.0.0.1:8001=active api-127.0.0.2:8001=active web-127.0.0.1:8001=active web-127.0.0.2:8001=active")
	r2 := startReplica(t, "r2", etcd.Endpoint, cfg, reg)
	waitFor(t, "r2 sees r1 lead", r2.leaders, "api=r1 web=r1")
	if got := r2.leading(); got != "" {
		t.Fatalf("r2 runs %q while r1 leads", got)
	}
	if got := testutil.ToFloat64(r2.e.leader.WithLabelValues("api")); got != 0 {
		t.Errorf("r2's pulse_discovery_leader{group=api} = %v, want 0", got)
	}
	if got := testutil.ToFloat64(r1.e.leader.WithLabelValues("api")); got != 1 {
		t.Errorf("r1's pulse_discovery_leader{group=api} = %v, want 1", got)
	}

	// r1 drains a target that left the file.
	writeAtomic(t, file, `[{"targets": ["127.0.0.2:8001", "127.0.0.3:8001"]}]`)
	waitFor(t, "r1 drains", reg.modes, "api-127.0.0.1:8001=draining api-127.0.0.2:8001=active api-127.0.0.3:8001=active web-127.0.0.2:8001=active web-127.0.0.3:8001=active")
	drain := func() string {
		st, _ := reg.List("")
		return st[0].Spec.Admin().RemoveAt.String()
	}
	removeAt := drain()

	// r1 is cut off from etcd: its lease ends, and r2 leads within the
	// TTL (2s) with slack for a loaded machine.
	cut := time.Now()
	proxy.Cut()
	waitFor(t, "r2 takes over", r2.leading, "api,web")
	took := time.Since(cut)
	t.Logf("r2 took over %v after r1 was cut off (TTL 2s)", took)
	if took > 2*time.Second+testscale.D(3*time.Second) {
		t.Errorf("takeover took %v, far more than the 2s TTL", took)
	}
	// Stop r1 while it still cannot reach etcd, as a killed replica:
	// from here only r2 writes.
	r1.stop()

	// r2 re-synced from the source: the same targets, none created twice,
	// and the drain r1 began is still the same drain (the registry ends it
	// at its RemoveAt).
	writeAtomic(t, file, `[{"targets": ["127.0.0.2:8001", "127.0.0.3:8001", "127.0.0.4:8001"]}]`)
	waitFor(t, "r2 follows the file", reg.modes, "api-127.0.0.1:8001=draining api-127.0.0.2:8001=active api-127.0.0.3:8001=active api-127.0.0.4:8001=active web-127.0.0.2:8001=active web-127.0.0.3:8001=active web-127.0.0.4:8001=active")
	if got := drain(); got != removeAt {
		t.Errorf("the drain changed on handover: removal at %s, was %s", got, removeAt)
	}
	reg.mu.Lock()
	for name, n := range reg.created {
		if n != 1 {
			t.Errorf("%s created %d times", name, n)
		}
	}
	reg.mu.Unlock()

	// A third replica joins; r2 drops "web" from its configuration: it
	// resigns that group, and r3 takes it.
	proxy.Heal()
	r3 := startReplica(t, "r3", etcd.Endpoint, cfg, reg)
	waitFor(t, "r3 sees r2 lead", r3.leaders, "api=r2 web=r2")
	r2.e.ApplyConfig(loadTestConfig(t, strings.Split(yaml, "  - name: web")[0]))
	waitFor(t, "r2 runs api only", r2.leading, "api")
	waitFor(t, "r3 takes web", r3.leading, "web")
	waitFor(t, "r2's status", r2.leaders, "api=r2")
	waitFor(t, "r3's status", r3.leaders, "api=r2 web=r3")
}

// TestElectorRetiresAGroupNoReplicaHas: a group removed from the leader's
// configuration moves to a replica that still has it, and its targets
// stay; removed from the last replica's, its targets leave as
// on_disappear says: when the replicas remove it one after the other, at
// once, or while the other is cut off from etcd (its key goes with its
// lease). A replica that stops retires nothing.
func TestElectorRetiresAGroupNoReplicaHas(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	proxy := etcd.Proxy(t)
	file := filepath.Join(t.TempDir(), "hosts.json")
	writeAtomic(t, file, `[{"targets": ["127.0.0.1:8001"]}]`)
	group := func(name, onDisappear string) string {
		return fmt.Sprintf("  - name: %s\n    file_sd_configs: [{files: [%q], refresh_interval: 50ms}]\n    template: {tcp: {}}\n    on_disappear: %s\n", name, file, onDisappear)
	}
	api, db, web := group("api", "drain 5m"), group("db", "remove"), group("web", "remove")
	config := func(groups ...string) *Config {
		return loadTestConfig(t, "groups:\n"+strings.Join(groups, ""))
	}
	reg := newFakeRegistry()
	r1 := startReplica(t, "r1", etcd.Endpoint, config(api, db, web), reg)
	waitFor(t, "r1 leads", r1.leading, "api,db,web")
	all := "api-127.0.0.1:8001=active db-127.0.0.1:8001=active web-127.0.0.1:8001=active"
	waitFor(t, "r1's targets", reg.modes, all)
	r2 := startReplica(t, "r2", proxy.Endpoint, config(api, db, web), reg)
	waitFor(t, "r2 sees r1 lead", r2.leaders, "api=r1 db=r1 web=r1")

	// The leader drops web; r2 still has it: r2 runs it, and once r1 has
	// waited its longest for the election's keys to go, web's target is
	// still there.
	r1.e.ApplyConfig(config(api, db))
	waitFor(t, "r2 takes web", r2.leading, "web")
	r1.e.retiring.Wait()
	if got := reg.modes(); got != all {
		t.Fatalf("after the leader alone dropped web: %q, want %q", got, all)
	}

	// r2 drops it too: the last one, so web's target is removed.
	r2.e.ApplyConfig(config(api, db))
	waitFor(t, "web retired", reg.modes, "api-127.0.0.1:8001=active db-127.0.0.1:8001=active")

	// Both drop api at once: its target drains.
	done := make(chan struct{})
	go func() { defer close(done); r1.e.ApplyConfig(config(db)) }()
	r2.e.ApplyConfig(config(db))
	<-done
	waitFor(t, "api retired", reg.modes, "api-127.0.0.1:8001=draining db-127.0.0.1:8001=active")

	// r2 is cut off from etcd, as a killed replica, with db still in its
	// configuration; r1, which leads db, drops it: r2's key goes when its
	// lease expires (2s), and then db's target is removed.
	proxy.Cut()
	r1.e.ApplyConfig(config())
	waitFor(t, "db retired after r2's lease", reg.modes, "api-127.0.0.1:8001=draining")
	// A campaign cut off from etcd ends by resigning, which waits for
	// etcd (concurrency.Election.Campaign): heal first so that r2 stops.
	proxy.Heal()
	r2.stop()

	// A replica that stops retires nothing.
	r3 := startReplica(t, "r3", etcd.Endpoint, config(web), reg)
	waitFor(t, "r3's target", reg.modes, "api-127.0.0.1:8001=draining web-127.0.0.1:8001=active")
	r3.stop()
	if got := reg.modes(); got != "api-127.0.0.1:8001=draining web-127.0.0.1:8001=active" {
		t.Fatalf("after r3 stopped: %q", got)
	}
}

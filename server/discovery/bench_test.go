package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/probe"
)

// countingStore counts a store's spec writes, each a durable transaction
// (PutSpec, PutSpecs for a batch, DeleteTarget), and state commits.
type countingStore struct {
	checker.Store
	specWrites, commits atomic.Int64
}

func (s *countingStore) PutSpec(spec checker.Spec) error {
	s.specWrites.Add(1)
	return s.Store.PutSpec(spec)
}

func (s *countingStore) PutSpecs(specs []checker.Spec) error {
	s.specWrites.Add(1)
	return s.Store.PutSpecs(specs)
}

func (s *countingStore) DeleteTarget(name string) error {
	s.specWrites.Add(1)
	return s.Store.DeleteTarget(name)
}

func (s *countingStore) CommitStates(states []checker.StoredState, deleted []string, rev uint64) error {
	s.commits.Add(1)
	return s.Store.CommitStates(states, deleted, rev)
}

type idleProber struct{}

func (idleProber) Probe(context.Context) error { return nil }

// fileOf writes a file_sd file of the targets 10.0.x.y:80, i from lo to
// hi-1, atomically.
func fileOf(b *testing.B, path string, lo, hi int) {
	b.Helper()
	var sb strings.Builder
	sb.WriteString(`[{"targets": [`)
	for i := lo; i < hi; i++ {
		if i > lo {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"10.0.%d.%d:80"`, i/250, i%250+1)
	}
	sb.WriteString(`]}]`)
	if err := os.WriteFile(path+".tmp", []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		b.Fatal(err)
	}
}

// fileSourceRun is one measure of a 10,000-target file source applied to
// c: the time until all are registered and their writes (writes counts
// them, as the registry kept them), then the same for one target of the
// file changed (one gone, one new). The timer runs during both.
type fileSourceRun struct {
	cold, change             time.Duration
	coldWrites, changeWrites int64
}

func measureFileSource(b *testing.B, c *checker.Checker, writes func() int64) fileSourceRun {
	const n = 10000
	b.Helper()
	dir := b.TempDir()
	file := filepath.Join(dir, "api.json")
	fileOf(b, file, 0, n)
	cfg, err := ParseConfig(fmt.Appendf(nil, "groups:\n  - name: api\n    file_sd_configs: [{files: [%q]}]\n    template: {tcp: {}}\n    on_disappear: remove\n", file), dir)
	if err != nil {
		b.Fatal(err)
	}
	count := func() int {
		list, _ := c.ListNow("")
		return len(list)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var run fileSourceRun
	w0 := writes()
	b.StartTimer()
	start := time.Now()
	m, err := NewManager(ctx, cfg, c, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() { defer close(done); m.Run(ctx) }()
	// Poll at 20ms: a List of 10,000 costs about 10ms, which polling more
	// often would take from the writes measured.
	for count() != n {
		time.Sleep(20 * time.Millisecond)
	}
	run.cold = time.Since(start)
	run.coldWrites = writes() - w0

	// One target gone (the first), one new (the 10,001st).
	w1 := writes()
	start = time.Now()
	fileOf(b, file, 1, n+1)
	gone, added := "api-10.0.0.1:80", fmt.Sprintf("api-10.0.%d.%d:80", n/250, n%250+1)
	for {
		_, errGone := c.Status(gone)
		_, errAdded := c.Status(added)
		if errGone != nil && errAdded == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.change = time.Since(start)
	// Let another refresh's worth of answers pass: still 2 writes.
	time.Sleep(6 * time.Second)
	run.changeWrites = writes() - w1
	b.StopTimer()
	return run
}

// BenchmarkFileSource10k: a file source of 10,000 targets applied from
// cold to a checker on the embedded store (bbolt, each write durable when
// it returns), with pulsed's discovery settings; then one target of the
// file changed (one gone, one new). It reports the time until all 10,000
// are registered (s-cold), the time until the change is applied
// (s-change), and the store's spec writes for each (writes-cold,
// writes-change: 2, one put and one delete, not 10,000). Run it once:
//
//	go test -run '^$' -bench FileSource10k -benchtime 1x ./server/discovery/
func BenchmarkFileSource10k(b *testing.B) {
	for range b.N {
		b.StopTimer()
		bolt, err := boltstore.Open(filepath.Join(b.TempDir(), "data"), time.Second)
		if err != nil {
			b.Fatal(err)
		}
		store := &countingStore{Store: bolt}
		c, err := checker.New(checker.Config{Store: store, NewProber: func(probe.Spec) (checker.Prober, error) { return idleProber{}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		run := measureFileSource(b, c, store.specWrites.Load)
		b.ReportMetric(run.cold.Seconds(), "s-cold")
		b.ReportMetric(float64(run.coldWrites), "writes-cold")
		b.ReportMetric(run.change.Seconds(), "s-change")
		b.ReportMetric(float64(run.changeWrites), "writes-change")
		c.Close()
		bolt.Close()
	}
}

// BenchmarkFileSource10kEtcd is BenchmarkFileSource10k on a replica of an
// etcd registry (a real etcd, one replica running the group): the time
// until all 10,000 are registered and applied back, and the etcd write
// transactions (revisions) for it, then for one target changed. Run it
// once:
//
//	go test -run '^$' -bench FileSource10kEtcd -benchtime 1x ./server/discovery/
func BenchmarkFileSource10kEtcd(b *testing.B) {
	etcd := etcdtest.Start(b, 0)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	revision := func() int64 {
		resp, err := cli.Get(context.Background(), "rev")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	for i := range b.N {
		b.StopTimer()
		reg, err := etcdreg.Open(context.Background(), etcdreg.Options{Endpoints: []string{etcd.Endpoint},
			Prefix: fmt.Sprintf("/bench-%d/", i), ID: "r1", LeaseTTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		c, err := checker.New(checker.Config{Shared: reg, NewProber: func(probe.Spec) (checker.Prober, error) { return idleProber{}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		reg.Run(c)
		run := measureFileSource(b, c, revision)
		b.ReportMetric(run.cold.Seconds(), "s-cold")
		b.ReportMetric(float64(run.coldWrites), "etcd-txns-cold")
		b.ReportMetric(run.change.Seconds(), "s-change")
		b.ReportMetric(float64(run.changeWrites), "etcd-txns-change")
		c.Close()
		reg.Close()
	}
}

package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/pulsehealth/pulse/checker"
)

// Registry is what discovery needs of the checker: its public operations,
// the ones a targets file and the API use. *checker.Checker implements it.
type Registry interface {
	Add(checker.Spec) (checker.Status, bool, error)
	Drain(name string, drainFor time.Duration) (checker.Status, error)
	Remove(name string) (bool, error)
	SetMode(checker.ModeRequest) ([]checker.Status, error)
	List(group string) ([]checker.Status, uint64)
	Defaults() checker.Defaults
}

// GroupStatus is what discovery knows of one group, for status pages.
type GroupStatus struct {
	Name string
	// Sources names the group's SD configs, e.g. "file_sd 0".
	Sources []string
	// Targets is how many targets the last applied answer held.
	Targets int
	// LastApply is when an answer was last applied; zero before the first.
	LastApply time.Time
	// LastError is the last answer's refusal, or the last target it could
	// not add; empty when the last answer applied whole.
	LastError string
	// Leader is the replica that runs the group, with replicas on etcd
	// (see Elector); empty with one pulsed, or while no replica leads.
	Leader string
}

// Manager runs the discovery groups of a Config and keeps the registry's
// discovered targets those of the sources' answers. Its methods are safe
// for concurrent use; Run is called once.
type Manager struct {
	reg    Registry
	logger *slog.Logger
	prom   *discovery.Manager

	applied  *prometheus.CounterVec
	refused  *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	targets  *prometheus.GaugeVec
	lastTime *prometheus.GaugeVec

	mu     sync.Mutex // protects groups and status
	groups map[string]*Group
	status map[string]*GroupStatus
}

// Options tunes a Manager; the zero value is pulsed's.
type Options struct {
	// UpdateEvery is the shortest time between two applied answers
	// (Prometheus's discovery manager batches updates); 0 means 5s.
	UpdateEvery time.Duration
}

// NewManager returns a Manager for cfg that writes to reg and registers
// its metrics (pulse_discovery_*, and Prometheus's SD metrics prefixed
// with pulse_discovery_) on metrics. It starts nothing: call Run.
func NewManager(ctx context.Context, cfg *Config, reg Registry, metrics prometheus.Registerer, logger *slog.Logger, opts Options) (*Manager, error) {
	wrapped := prometheus.WrapRegistererWithPrefix("pulse_discovery_", metrics)
	sdMetrics, err := discovery.CreateAndRegisterSDMetrics(wrapped)
	if err != nil {
		return nil, fmt.Errorf("discovery metrics: %w", err)
	}
	var popts []func(*discovery.Manager)
	if opts.UpdateEvery > 0 {
		popts = append(popts, discovery.Updatert(opts.UpdateEvery))
	}
	m := &Manager{
		reg:    reg,
		logger: logger,
		prom:   discovery.NewManager(ctx, logger.With("component", "discovery"), wrapped, sdMetrics, popts...),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_discovery_answers_applied_total", Help: "Answers of a discovery group's sources applied to the targets.",
		}, []string{"group"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_discovery_answers_refused_total", Help: "Answers of a discovery group's sources refused whole (over the maximum of targets); the last good set stays.",
		}, []string{"group"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_discovery_targets_skipped_total", Help: "Discovered targets left out: invalid, refused by the registry (egress policy, bounds) or with a name another one has.",
		}, []string{"group"}),
		targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_discovery_targets", Help: "Targets in the last applied answer of a discovery group.",
		}, []string{"group"}),
		lastTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_discovery_last_apply_timestamp_seconds", Help: "When an answer of a discovery group was last applied (Unix seconds).",
		}, []string{"group"}),
	}
	for _, c := range []prometheus.Collector{m.applied, m.refused, m.skipped, m.targets, m.lastTime} {
		if err := metrics.Register(c); err != nil {
			return nil, fmt.Errorf("discovery metrics: %w", err)
		}
	}
	if err := m.ApplyConfig(cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// ApplyConfig makes cfg the running configuration: sources of new groups
// start, those of removed groups stop (their targets leave as on_disappear
// says on the next answer), and changed groups restart their sources.
func (m *Manager) ApplyConfig(cfg *Config) error {
	sets := make(map[string]discovery.Configs, len(cfg.Groups))
	groups := make(map[string]*Group, len(cfg.Groups))
	for _, g := range cfg.Groups {
		sets[g.Name] = g.SDConfigs
		groups[g.Name] = g
	}
	m.mu.Lock()
	m.groups = groups
	status := make(map[string]*GroupStatus, len(groups))
	for _, g := range cfg.Groups {
		st := &GroupStatus{Name: g.Name, Sources: sourceNames(g.SDConfigs)}
		if old, ok := m.status[g.Name]; ok {
			st.Targets, st.LastApply, st.LastError = old.Targets, old.LastApply, old.LastError
		}
		status[g.Name] = st
	}
	m.status = status
	m.mu.Unlock()
	return m.prom.ApplyConfig(sets)
}

func sourceNames(cs discovery.Configs) []string {
	n := map[string]int{}
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s_sd %d", c.Name(), n[c.Name()]))
		n[c.Name()]++
	}
	return out
}

// Status returns each group's status, sorted by name.
func (m *Manager) Status() []GroupStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]GroupStatus, 0, len(m.status))
	for _, name := range slices.Sorted(maps.Keys(m.status)) {
		st := *m.status[name]
		st.Sources = slices.Clone(st.Sources)
		out = append(out, st)
	}
	return out
}

// Group returns the configuration of the named group, if it runs.
func (m *Manager) Group(name string) (*Group, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.groups[name]
	return g, ok
}

// Run runs the sources and applies their answers until ctx is done; it
// returns once its goroutines stopped (the discovery manager's stop when
// the ctx given to NewManager is done).
func (m *Manager) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.prom.Run() // returns when NewManager's ctx is done
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case answer := <-m.prom.SyncCh():
			for _, name := range slices.Sorted(maps.Keys(answer)) {
				m.apply(name, answer[name])
			}
		}
	}
}

// apply makes the group's targets in the registry those of one answer.
func (m *Manager) apply(name string, tgs []*targetgroup.Group) {
	m.mu.Lock()
	g, ok := m.groups[name]
	m.mu.Unlock()
	if !ok {
		return // a group removed from the configuration: its last answer
	}
	specs, skipped, err := g.Targets(tgs, m.reg.Defaults())
	if err != nil {
		m.refused.WithLabelValues(name).Inc()
		m.logger.Error("discovery answer refused; the last good set stays", "group", name, "error", err)
		m.setStatus(name, -1, err)
		return
	}
	want := make(map[string]bool, len(specs))
	var added, removed, drained int
	for _, s := range specs {
		st, created, err := m.reg.Add(s)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("target %q: %w", s.Name, err))
			continue
		}
		want[s.Name] = true
		if created {
			added++
			continue
		}
		if a := st.Spec.Admin(); a.Mode == checker.ModeDraining && !a.RemoveAt.IsZero() {
			// Back within a drain that was to remove it: cancel the
			// drain; the target kept its history. A mode set without a
			// removal (SetMode) sticks.
			if _, err := m.reg.SetMode(checker.ModeRequest{Target: s.Name, Mode: checker.ModeActive, Reason: "back in its discovery sources"}); err != nil {
				skipped = append(skipped, fmt.Errorf("target %q: end its drain: %w", s.Name, err))
			}
		}
	}
	list, _ := m.reg.List("")
	for _, st := range list {
		if st.Spec.Source != Source(name) || want[st.Spec.Name] {
			continue
		}
		if a := st.Spec.Admin(); !a.RemoveAt.IsZero() {
			continue // already leaving
		}
		if g.Drain == 0 {
			if _, err := m.reg.Remove(st.Spec.Name); err != nil {
				skipped = append(skipped, fmt.Errorf("remove target %q: %w", st.Spec.Name, err))
				continue
			}
			removed++
			continue
		}
		if _, err := m.reg.Drain(st.Spec.Name, g.Drain); err != nil {
			skipped = append(skipped, fmt.Errorf("drain target %q: %w", st.Spec.Name, err))
			continue
		}
		drained++
	}
	for _, err := range skipped {
		m.logger.Warn("discovered target left out", "group", name, "error", err)
	}
	m.skipped.WithLabelValues(name).Add(float64(len(skipped)))
	m.applied.WithLabelValues(name).Inc()
	m.targets.WithLabelValues(name).Set(float64(len(want)))
	m.lastTime.WithLabelValues(name).SetToCurrentTime()
	m.logger.Info("discovery answer applied", "group", name, "targets", len(want), "added", added, "drained", drained, "removed", removed, "left_out", len(skipped))
	m.setStatus(name, len(want), errors.Join(skipped...))
}

// setStatus records an answer's outcome: n targets applied, or n < 0 when
// the answer was refused and the last good set stays.
func (m *Manager) setStatus(name string, n int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.status[name]
	if !ok {
		return
	}
	st.LastError = ""
	if err != nil {
		st.LastError = err.Error()
	}
	if n >= 0 {
		st.Targets = n
		st.LastApply = time.Now()
	}
}

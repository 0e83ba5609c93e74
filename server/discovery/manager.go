package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server"
)

// Registry is what discovery needs of the checker: its public operations,
// the ones a targets file and the API use. *checker.Checker implements it.
type Registry interface {
	// AddMany registers an answer's targets, each as Add would, in one
	// durable write (checker.MaxAddMany at a time).
	AddMany([]checker.Spec) ([]checker.AddResult, error)
	Drain(name string, drainFor time.Duration) (checker.Status, error)
	Remove(name string) (bool, error)
	SetMode(checker.ModeRequest) ([]checker.Status, error)
	List(group string) ([]checker.Status, uint64)
	Defaults() checker.Defaults
}

// Announcer publishes a policy event on the checker's stream;
// *checker.Checker implements it.
type Announcer interface {
	Announce(kind checker.EventKind, pc checker.PolicyChange) error
}

// GroupStatus is what discovery knows of one group and its sources, as
// ListDiscovery shows it.
type GroupStatus = server.DiscoveryGroupStatus

// groupState is what the manager keeps of a running group.
type groupState struct {
	g          *Group
	sources    []*source
	targets    int
	lastApply  time.Time
	lastError  string
	errorSince time.Time
	refused    bool // its last answer was refused whole
}

// Manager runs the discovery groups of a Config and keeps the registry's
// discovered targets those of the sources' answers. Its methods are safe
// for concurrent use; Run is called once.
type Manager struct {
	reg           Registry
	logger        *slog.Logger
	prom          *discovery.Manager
	announce      Announcer // nil: no events
	retireRemoved bool      // see Options.RetireRemoved
	secrets       atomic.Pointer[func(string) string]

	applied  *prometheus.CounterVec
	refused  *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	targets  *prometheus.GaugeVec
	lastTime *prometheus.GaugeVec
	sourceUp *prometheus.GaugeVec

	mu     sync.Mutex // protects groups; each source has its own lock, taken after it
	groups map[string]*groupState
}

// Options tunes a Manager; the zero value is pulsed's.
type Options struct {
	// UpdateEvery is the shortest time between two applied answers
	// (Prometheus's discovery manager batches updates); 0 means 5s.
	UpdateEvery time.Duration
	// Egress is the policy every connection of an http_sd source obeys,
	// redirects included (checked on the address connected to, after any
	// lookup); nil: DefaultEgressPolicy. Discovered targets obey the
	// registry's own.
	Egress *probe.EgressPolicy
	// Announce, if set, gets a DISCOVERY_FAILED event when a source
	// starts failing (or a group's answer is refused) and a
	// DISCOVERY_RECOVERED one when it answers again.
	Announce Announcer
	// RetireRemoved makes a group that ApplyConfig removes retire its
	// targets as its on_disappear says, as an empty answer would. Leave
	// it unset when another component (an Elector) moves groups between
	// managers: a group another replica now runs keeps its targets.
	RetireRemoved bool
}

// egressDialer returns a dial function that connects only to addresses p
// permits: the check runs on the socket's address just before connect(2),
// so a host name, or a redirect to another host, is checked on what it
// resolved to.
func egressDialer(p *probe.EgressPolicy) config.DialContextFunc {
	if p == nil {
		p = probe.DefaultEgressPolicy()
	}
	d := &net.Dialer{
		Timeout: 30 * time.Second,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress check: cannot parse socket address %q", address)
			}
			return p.Check(ap.Addr())
		},
	}
	return d.DialContext
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
	popts := []func(*discovery.Manager){discovery.HTTPClientOptions(config.WithDialContextFunc(egressDialer(opts.Egress)))}
	if opts.UpdateEvery > 0 {
		popts = append(popts, discovery.Updatert(opts.UpdateEvery))
	}
	m := &Manager{
		reg:           reg,
		logger:        logger,
		announce:      opts.Announce,
		retireRemoved: opts.RetireRemoved,
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
		sourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_discovery_source_up", Help: "1 when a discovery source's last refresh succeeded, 0 while it fails (its last good set stays) or before its first answer.",
		}, []string{"group", "source"}),
	}
	id := func(s string) string { return s }
	m.secrets.Store(&id)
	handler := &sourceHandler{h: logger.Handler(), redact: m.redactText}
	m.prom = discovery.NewManager(ctx, slog.New(handler), wrapped, sdMetrics, popts...)
	for _, c := range []prometheus.Collector{m.applied, m.refused, m.skipped, m.targets, m.lastTime, m.sourceUp} {
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
// start, those of removed groups stop (with RetireRemoved, their targets
// leave as the group's on_disappear says), and changed sources restart;
// an unchanged source goes on, and keeps its status.
func (m *Manager) ApplyConfig(cfg *Config) error {
	var secrets []string
	for _, g := range cfg.Groups {
		secrets = append(secrets, secretsOf(g.SDConfigs)...)
	}
	m.mu.Lock()
	for _, st := range m.groups { // old sources may log until they stop
		for _, src := range st.sources {
			secrets = append(secrets, secretsOf(discovery.Configs{src.cfg})...)
		}
	}
	redact := newRedactor(secrets)
	m.secrets.Store(&redact)
	old := m.groups
	m.groups = make(map[string]*groupState, len(cfg.Groups))
	sets := make(map[string]discovery.Configs)
	kept := map[*source]bool{}
	for _, g := range cfg.Groups {
		st := &groupState{g: g}
		if prev, ok := old[g.Name]; ok {
			st.targets, st.lastApply, st.lastError, st.errorSince, st.refused = prev.targets, prev.lastApply, prev.lastError, prev.errorSince, prev.refused
		}
		for i, name := range sourceNames(g.SDConfigs) {
			c := g.SDConfigs[i]
			var src *source
			if prev, ok := old[g.Name]; ok {
				for _, p := range prev.sources {
					if p.name == name && reflect.DeepEqual(p.cfg, c) {
						src = p
					}
				}
			}
			if src == nil {
				src = newSource(m, g.Name, name, c)
				m.sourceUp.WithLabelValues(g.Name, name).Set(0)
			}
			kept[src] = true
			st.sources = append(st.sources, src)
			sets[src.set] = discovery.Configs{trackedConfig{Config: c, src: src}}
		}
		m.groups[g.Name] = st
	}
	var retired []*source
	for _, st := range old {
		for _, src := range st.sources {
			if !kept[src] {
				retired = append(retired, src)
			}
		}
	}
	m.mu.Unlock()
	for _, src := range retired {
		src.mu.Lock()
		src.retired = true
		src.mu.Unlock()
		m.sourceUp.DeleteLabelValues(src.group, src.name)
	}
	if err := m.prom.ApplyConfig(sets); err != nil {
		return err
	}
	if m.retireRemoved {
		for name, st := range old {
			if _, kept := m.groups[name]; !kept {
				m.retire(name, st.g)
			}
		}
	}
	return nil
}

// retire makes a removed group's targets leave as its on_disappear says,
// and forgets its metrics.
func (m *Manager) retire(name string, g *Group) {
	m.apply(name, g, nil)
	for _, v := range []*prometheus.GaugeVec{m.targets, m.lastTime} {
		v.DeleteLabelValues(name)
	}
	for _, v := range []*prometheus.CounterVec{m.applied, m.refused, m.skipped} {
		v.DeleteLabelValues(name)
	}
	m.logger.Info("discovery group removed from the configuration: its targets leave", "group", name)
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

// redactText replaces the secrets of the running configuration's sources
// with "<secret>".
func (m *Manager) redactText(s string) string { return (*m.secrets.Load())(s) }

// DiscoveryGroups returns each group's status and its sources', sorted by
// name, for ListDiscovery; no secret of the sources' configuration is in
// it.
func (m *Manager) DiscoveryGroups() []GroupStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]GroupStatus, 0, len(m.groups))
	for _, name := range slices.Sorted(maps.Keys(m.groups)) {
		st := m.groups[name]
		gs := GroupStatus{
			Name:       name,
			Source:     Source(name),
			Targets:    st.targets,
			LastApply:  st.lastApply,
			LastError:  st.lastError,
			ErrorSince: st.errorSince,
		}
		for _, src := range st.sources {
			gs.Sources = append(gs.Sources, src.status())
		}
		out = append(out, gs)
	}
	return out
}

// Status is DiscoveryGroups.
func (m *Manager) Status() []GroupStatus { return m.DiscoveryGroups() }

// Group returns the configuration of the named group, if it runs.
func (m *Manager) Group(name string) (*Group, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.groups[name]
	if !ok {
		return nil, false
	}
	return st.g, true
}

// sourceChanged is told by a source that it started failing (err) or
// answers again; it runs outside every lock of the manager.
func (m *Manager) sourceChanged(src *source, failing bool, err string) {
	pc := checker.PolicyChange{Source: Source(src.group), SDConfig: src.name}
	kind := checker.EventDiscoveryRecovered
	if failing {
		kind, pc.Error = checker.EventDiscoveryFailed, err
		pc.Text = fmt.Sprintf("discovery: %s failed; its last good set stays: %s", src.set, err)
		m.logger.Warn("discovery source failed; its last good set stays", "group", src.group, "source", src.name, "error", err)
	} else {
		pc.Text = fmt.Sprintf("discovery: %s answers again", src.set)
		m.logger.Info("discovery source answers again", "group", src.group, "source", src.name)
	}
	m.emit(kind, pc)
}

func (m *Manager) emit(kind checker.EventKind, pc checker.PolicyChange) {
	if m.announce == nil {
		return
	}
	if err := m.announce.Announce(kind, pc); err != nil {
		m.logger.Debug("discovery event not sent", "event", kind.String(), "error", err)
	}
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
			m.applyAnswer(answer)
		}
	}
}

// applyAnswer applies, group by group, one answer of Prometheus's
// manager: the target groups of each source (each is a target set of its
// own there). A group whose sources are not all in the answer (one sent
// before a reload changed them), or not all answered yet, waits for the
// next.
func (m *Manager) applyAnswer(answer map[string][]*targetgroup.Group) {
	m.mu.Lock()
	type work struct {
		name string
		g    *Group
		tgs  []*targetgroup.Group
	}
	var todo []work
	for _, name := range slices.Sorted(maps.Keys(m.groups)) {
		st := m.groups[name]
		w := work{name: name, g: st.g}
		complete := true
		for _, src := range st.sources {
			tgs, ok := answer[src.set]
			src.mu.Lock()
			quiet := src.lastRefresh.IsZero()
			src.mu.Unlock()
			if !ok || quiet {
				// Prometheus's manager sends an empty set for a source
				// that has not answered yet: applied, it would drain
				// every target the group has (after a restart or a
				// takeover) until the source's first answer.
				complete = false
				break
			}
			n := 0
			for _, tg := range tgs {
				if tg != nil {
					n += len(tg.Targets)
				}
			}
			src.mu.Lock()
			src.targets = n
			src.mu.Unlock()
			w.tgs = append(w.tgs, tgs...)
		}
		if complete {
			todo = append(todo, w)
		}
	}
	m.mu.Unlock()
	for _, w := range todo {
		m.apply(w.name, w.g, w.tgs)
	}
}

// apply makes the group's targets in the registry those of one answer.
func (m *Manager) apply(name string, g *Group, tgs []*targetgroup.Group) {
	specs, skipped, err := g.Targets(tgs, m.reg.Defaults())
	if err != nil {
		m.refused.WithLabelValues(name).Inc()
		m.logger.Error("discovery answer refused; the last good set stays", "group", name, "error", err)
		m.setStatus(name, -1, err)
		return
	}
	want := make(map[string]bool, len(specs))
	var added, removed, drained int
	var results []checker.AddResult
	for lo := 0; lo < len(specs); lo += checker.MaxAddMany {
		res, err := m.reg.AddMany(specs[lo:min(lo+checker.MaxAddMany, len(specs))])
		if err != nil { // more than MaxAddMany: cannot happen here
			res = make([]checker.AddResult, min(checker.MaxAddMany, len(specs)-lo))
			for i := range res {
				res[i].Err = err
			}
		}
		results = append(results, res...)
	}
	for i, s := range specs {
		st, created, err := results[i].Status, results[i].Created, results[i].Err
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
// the answer was refused and the last good set stays. A refusal starts a
// failure of the group, which the next applied answer ends.
func (m *Manager) setStatus(name string, n int, err error) {
	m.mu.Lock()
	st, ok := m.groups[name]
	if !ok {
		m.mu.Unlock()
		return
	}
	msg := ""
	if err != nil {
		msg = m.redactText(err.Error())
	}
	if msg != "" && st.lastError == "" {
		st.errorSince = time.Now()
	}
	if msg == "" {
		st.errorSince = time.Time{}
	}
	st.lastError = msg
	wasRefused := st.refused
	st.refused = n < 0
	if n >= 0 {
		st.targets = n
		st.lastApply = time.Now()
	}
	m.mu.Unlock()
	pc := checker.PolicyChange{Source: Source(name)}
	switch {
	case n < 0 && !wasRefused:
		pc.Error = msg
		pc.Text = fmt.Sprintf("discovery: %s: answer refused; the last good set stays: %s", name, msg)
		m.emit(checker.EventDiscoveryFailed, pc)
	case n >= 0 && wasRefused:
		pc.Text = fmt.Sprintf("discovery: %s: an answer applies again", name)
		m.emit(checker.EventDiscoveryRecovered, pc)
	}
}

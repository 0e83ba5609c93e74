package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/discovery"
)

// discoveryRunner runs the -discovery-config groups; without the flag it
// does nothing. It is the server's DiscoveryStatus (ListDiscovery) and the
// status page's, before and after it starts.
type discoveryRunner struct {
	path   string
	egress *probe.EgressPolicy
	m      atomic.Pointer[discovery.Manager] // set once by start
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// newDiscoveryRunner returns a runner for the -discovery-config file,
// started by start; egress is the probes' policy, which http_sd URLs obey
// too.
func newDiscoveryRunner(cfg config, egress *probe.EgressPolicy, logger *slog.Logger) *discoveryRunner {
	return &discoveryRunner{path: cfg.discoveryConfig, egress: egress, logger: logger.With("component", "discovery")}
}

// load reads and checks the file: its own rules, then the egress policy.
func (r *discoveryRunner) load() (*discovery.Config, error) {
	dcfg, err := discovery.LoadConfig(r.path)
	if err != nil {
		return nil, err
	}
	if err := dcfg.CheckEgress(r.egress); err != nil {
		return nil, fmt.Errorf("%s: %w", r.path, err)
	}
	return dcfg, nil
}

// start loads the file and starts its groups. A bad file is an error:
// pulsed does not start.
func (r *discoveryRunner) start(c *checker.Checker, reg prometheus.Registerer) error {
	if r.path == "" {
		return nil
	}
	dcfg, err := r.load()
	if err != nil {
		return fmt.Errorf("-discovery-config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := discovery.NewManager(ctx, dcfg, c, reg, r.logger, discovery.Options{Egress: r.egress, Announce: c})
	if err != nil {
		cancel()
		return fmt.Errorf("-discovery-config: %w", err)
	}
	r.cancel, r.done = cancel, make(chan struct{})
	r.m.Store(m)
	go func() {
		defer close(r.done)
		m.Run(ctx)
	}()
	r.logger.Info("discovery started", "file", r.path, "groups", len(dcfg.Groups))
	return nil
}

// DiscoveryGroups returns the groups' status; none before start or
// without the flag.
func (r *discoveryRunner) DiscoveryGroups() []server.DiscoveryGroupStatus {
	if m := r.m.Load(); m != nil {
		return m.DiscoveryGroups()
	}
	return nil
}

// reload re-reads the file on SIGHUP. A bad file keeps the running
// configuration, and the log says so.
func (r *discoveryRunner) reload() {
	m := r.m.Load()
	if m == nil {
		return
	}
	dcfg, err := r.load()
	if err == nil {
		err = m.ApplyConfig(dcfg)
	}
	if err != nil {
		r.logger.Error("discovery config not reloaded: the running configuration stays", "error", err)
		return
	}
	r.logger.Info("discovery config reloaded", "groups", len(dcfg.Groups))
}

// stop stops the sources and waits for them; it is idempotent.
func (r *discoveryRunner) stop() {
	if r.m.Load() == nil {
		return
	}
	r.cancel()
	<-r.done
}

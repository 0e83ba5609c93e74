package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/discovery"
)

// discoveryRunner runs the -discovery-config groups; its zero value (no
// flag) does nothing.
type discoveryRunner struct {
	path   string
	m      *discovery.Manager
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// startDiscovery loads the -discovery-config file and starts its groups. A
// bad file is an error: pulsed does not start.
func startDiscovery(cfg config, c *checker.Checker, reg prometheus.Registerer, logger *slog.Logger) (*discoveryRunner, error) {
	r := &discoveryRunner{path: cfg.discoveryConfig, logger: logger.With("component", "discovery")}
	if r.path == "" {
		return r, nil
	}
	dcfg, err := discovery.LoadConfig(r.path)
	if err != nil {
		return nil, fmt.Errorf("-discovery-config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := discovery.NewManager(ctx, dcfg, c, reg, r.logger, discovery.Options{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("-discovery-config: %w", err)
	}
	r.m, r.cancel, r.done = m, cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		m.Run(ctx)
	}()
	r.logger.Info("discovery started", "file", r.path, "groups", len(dcfg.Groups))
	return r, nil
}

// reload re-reads the file on SIGHUP. A bad file keeps the running
// configuration, and the log says so.
func (r *discoveryRunner) reload() {
	if r.m == nil {
		return
	}
	dcfg, err := discovery.LoadConfig(r.path)
	if err == nil {
		err = r.m.ApplyConfig(dcfg)
	}
	if err != nil {
		r.logger.Error("discovery config not reloaded: the running configuration stays", "error", err)
		return
	}
	r.logger.Info("discovery config reloaded", "groups", len(dcfg.Groups))
}

// stop stops the sources and waits for them; it is idempotent.
func (r *discoveryRunner) stop() {
	if r.m == nil {
		return
	}
	r.cancel()
	<-r.done
}

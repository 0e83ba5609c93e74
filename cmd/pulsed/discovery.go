package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/server/discovery"
)

// discoveryRunner runs the -discovery-config groups; its zero value (no
// flag) does nothing. With -registry etcd, an elector runs each group on
// one replica at a time.
type discoveryRunner struct {
	path   string
	m      *discovery.Manager
	elect  *discovery.Elector // nil without -registry etcd
	cli    *clientv3.Client   // the elector's
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// startDiscovery loads the -discovery-config file and starts its groups;
// with shared (-registry etcd) it campaigns for each group and runs the
// ones this replica leads. A bad file is an error: pulsed does not start.
func startDiscovery(cfg config, c *checker.Checker, shared *etcdreg.Registry, reg prometheus.Registerer, logger *slog.Logger) (*discoveryRunner, error) {
	r := &discoveryRunner{path: cfg.discoveryConfig, logger: logger.With("component", "discovery")}
	if r.path == "" {
		return r, nil
	}
	dcfg, err := discovery.LoadConfig(r.path)
	if err != nil {
		return nil, fmt.Errorf("-discovery-config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := dcfg
	if shared != nil {
		run = &discovery.Config{} // the elector gives it the groups this replica leads
	}
	m, err := discovery.NewManager(ctx, run, c, reg, r.logger, discovery.Options{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("-discovery-config: %w", err)
	}
	r.m, r.cancel, r.done = m, cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		m.Run(ctx)
	}()
	if shared != nil {
		if err := r.startElector(cfg.registry, shared.ID(), dcfg, reg); err != nil {
			r.stop()
			return nil, fmt.Errorf("-discovery-config: %w", err)
		}
	}
	r.logger.Info("discovery started", "file", r.path, "groups", len(dcfg.Groups), "elected", shared != nil)
	return r, nil
}

// startElector connects to the registry's etcd with a client of its own
// and campaigns for each group, on leases of -etcd-lease-ttl.
func (r *discoveryRunner) startElector(rf registryFlags, id string, dcfg *discovery.Config, reg prometheus.Registerer) error {
	tlsCfg, err := rf.tlsConfig()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: rf.endpointList(), TLS: tlsCfg, Logger: zap.NewNop(), DialTimeout: rf.leaseTTL})
	if err != nil {
		return fmt.Errorf("discovery elections: %w", err)
	}
	e, err := discovery.NewElector(r.m, dcfg, discovery.ElectOptions{
		Client: cli, Prefix: rf.prefix, ID: id, TTL: rf.leaseTTL, Logger: r.logger, Metrics: reg,
	})
	if err != nil {
		cli.Close()
		return err
	}
	r.elect, r.cli = e, cli
	return nil
}

// reload re-reads the file, on SIGHUP and for the Reload call. A bad
// file keeps the running configuration, and the log and the error say so.
func (r *discoveryRunner) reload() error {
	if r.m == nil {
		return nil
	}
	dcfg, err := discovery.LoadConfig(r.path)
	if err == nil {
		if r.elect != nil {
			r.elect.ApplyConfig(dcfg) // a removed group resigns
		} else {
			err = r.m.ApplyConfig(dcfg)
		}
	}
	if err != nil {
		r.logger.Error("discovery config not reloaded: the running configuration stays", "error", err)
		return fmt.Errorf("not reloaded, the running configuration stays: %w", err)
	}
	r.logger.Info("discovery config reloaded", "groups", len(dcfg.Groups))
	return nil
}

// stop stops the sources and waits for them; it is idempotent.
func (r *discoveryRunner) stop() {
	if r.m == nil {
		return
	}
	if r.elect != nil {
		r.elect.Close() // stops the groups it runs, then resigns
		r.cli.Close()
		r.elect = nil
	}
	r.cancel()
	<-r.done
}

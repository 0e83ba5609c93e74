package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/discovery"
)

// discoveryRunner runs the -discovery-config groups; without the flag it
// does nothing. With -registry etcd, an elector runs each group on one
// replica at a time. It is the server's DiscoveryStatus (ListDiscovery)
// and the status page's, before and after it starts.
type discoveryRunner struct {
	path   string
	egress *probe.EgressPolicy
	m      atomic.Pointer[discovery.Manager] // set once by start
	elect  atomic.Pointer[discovery.Elector] // set once by start, with -registry etcd
	cli    *clientv3.Client                  // the elector's
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

// start starts the groups of dcfg, the file as load read it (nil: no
// file); with shared (-registry etcd) it campaigns for each group and runs
// the ones this replica leads.
func (r *discoveryRunner) start(c *checker.Checker, dcfg *discovery.Config, shared *etcdreg.Registry, rf registryFlags, reg prometheus.Registerer) error {
	if dcfg == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := dcfg
	if shared != nil {
		run = &discovery.Config{} // the elector gives it the groups this replica leads
	}
	// With one pulsed, a group dropped from the file retires its targets;
	// with an elector, a group this replica stops running goes on
	// elsewhere.
	m, err := discovery.NewManager(ctx, run, c, reg, r.logger, discovery.Options{Egress: r.egress, Announce: c, RetireRemoved: shared == nil})
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
	if shared != nil {
		if err := r.startElector(rf, shared.ID(), dcfg, reg); err != nil {
			r.stop()
			return fmt.Errorf("-discovery-config: %w", err)
		}
	}
	r.logger.Info("discovery started", "file", r.path, "groups", len(dcfg.Groups), "elected", shared != nil)
	return nil
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
	e, err := discovery.NewElector(r.m.Load(), dcfg, discovery.ElectOptions{
		Client: cli, Prefix: rf.prefix, ID: id, TTL: rf.leaseTTL, Logger: r.logger, Metrics: reg,
	})
	if err != nil {
		cli.Close()
		return err
	}
	r.cli = cli
	r.elect.Store(e)
	return nil
}

// DiscoveryGroups returns the groups' status: with replicas on etcd every
// configured group, with the replica that leads it; none before start or
// without the flag.
func (r *discoveryRunner) DiscoveryGroups() []server.DiscoveryGroupStatus {
	if e := r.elect.Load(); e != nil {
		return e.Status()
	}
	if m := r.m.Load(); m != nil {
		return m.DiscoveryGroups()
	}
	return nil
}

// reload re-reads the file, on SIGHUP and for the Reload call. A bad
// file keeps the running configuration, and the log and the error say so.
func (r *discoveryRunner) reload() error {
	m := r.m.Load()
	if m == nil {
		return nil
	}
	dcfg, err := r.load()
	if err == nil {
		if e := r.elect.Load(); e != nil {
			e.ApplyConfig(dcfg) // a removed group resigns
		} else {
			err = m.ApplyConfig(dcfg)
		}
	}
	if err != nil {
		r.logger.Error("discovery config not reloaded: the running configuration stays", "error", err)
		return fmt.Errorf("not reloaded, the running configuration stays: %w", err)
	}
	r.logger.Info("discovery config reloaded", "groups", len(dcfg.Groups))
	return nil
}

// resignWait bounds how long stop waits for etcd to take the elections'
// resignations, as the registry bounds its own lease's revocation: a
// replica cut off from etcd still stops within its shutdown timeout.
const resignWait = 2 * time.Second

// stop stops the sources and waits for them; it is idempotent.
func (r *discoveryRunner) stop() {
	if r.m.Load() == nil {
		return
	}
	if e := r.elect.Swap(nil); e != nil {
		// Close stops the groups it runs, then resigns. A campaign cut off
		// from etcd resigns through the client, which waits for etcd for
		// as long as the client is open. Past resignWait, closing the
		// client ends the wait: the other replicas then take the groups
		// over when this replica's lease expires instead of at once.
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			e.Close()
		}()
		select {
		case <-closed:
		case <-time.After(resignWait):
			r.logger.Warn("discovery elections: etcd did not answer the resignation; closing its client: the other replicas take the groups over when the lease expires", "waited", resignWait.String())
			r.cli.Close()
			<-closed
		}
		r.cli.Close()
	}
	r.cancel()
	<-r.done
}

package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	pulsexds "github.com/pulsehealth/pulse/server/xds"
)

// xdsFlags are the xDS interface's flags (see the README's "Envoy and
// xDS").
type xdsFlags struct {
	enabled  bool
	coalesce time.Duration
}

func (f *xdsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "xds", false, "serve xDS v3 (Aggregated Discovery Service, State of the World and Delta) on the gRPC listener: each group is a cluster, its targets endpoints with their health; with -token-file it needs a read token")
	fs.DurationVar(&f.coalesce, "xds-coalesce", pulsexds.DefaultCoalesce, "xDS pushes gather the changes made within this window: a burst of transitions is one push per group (at most 10s)")
}

// config turns the flags into the xDS server's config.
func (f *xdsFlags) config(logger *slog.Logger) (pulsexds.Config, error) {
	cfg := pulsexds.Config{Coalesce: f.coalesce, Logger: logger}
	// Config takes 0 as its default; the flag's default is explicit.
	if f.coalesce <= 0 || cfg.Validate() != nil {
		return cfg, fmt.Errorf("-xds-coalesce must be positive and at most 10s, got %v", f.coalesce)
	}
	return cfg, nil
}

// check reports what is wrong with the flags, so that pulsed stops before
// it opens anything; set flags are checked even with -xds off.
func (f *xdsFlags) check() error {
	_, err := f.config(nil)
	return err
}

// startXDS registers the xDS service on gs when -xds is set; gs must not
// be serving yet. The returned stop is never nil and may be called more
// than once. The streams also end when the checker closes, so that a
// graceful stop does not wait for them.
func startXDS(cfg config, c *checker.Checker, gs *grpc.Server, reg prometheus.Registerer, logger *slog.Logger) (stop func(), err error) {
	f := cfg.xds
	if !f.enabled {
		return func() {}, nil
	}
	logger = logger.With("component", "xds")
	xcfg, err := f.config(logger)
	if err != nil {
		return nil, err
	}
	s, err := pulsexds.New(c, xcfg)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	s.Register(gs)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pulse_xds_streams", Help: "xDS (ADS) streams open."},
			func() float64 { return float64(s.Stats().Streams) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pulse_xds_resource_updates_total", Help: "xDS resources updated or removed, each pushed to every client watching it."},
			func() float64 { return float64(s.Stats().Pushes) }),
	)
	logger.Info("xds serving", "service", pulsexds.ServiceName, "coalesce", xcfg.Coalesce.String())
	return func() { s.Close() }, nil
}

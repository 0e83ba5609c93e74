package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	pulsexds "github.com/pulsehealth/pulse/server/xds"
)

// xdsFlags are the xDS interface's flags (docs/integrations/xds.md).
type xdsFlags struct {
	enabled               bool
	coalesce              time.Duration
	maxStreams, perSource int
}

func (f *xdsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "xds", false, "serve xDS v3 (Aggregated Discovery Service, State of the World and Delta) on the gRPC listener: each group is a cluster, its targets endpoints with their health; with -token-file it needs a read token")
	fs.DurationVar(&f.coalesce, "xds-coalesce", pulsexds.DefaultCoalesce, "xDS pushes gather the changes made within this window: a burst of transitions is one push per group (at most 10s)")
	fs.IntVar(&f.maxStreams, "xds-max-streams", 10000, "most xDS (ADS) streams open at once; past it a new stream is refused with RESOURCE_EXHAUSTED (counted in pulse_xds_streams_refused_total); 0: no limit")
	fs.IntVar(&f.perSource, "xds-max-streams-per-source", 1000, "most xDS (ADS) streams open at once from one client IP address (all local clients share 127.0.0.1); 0: no limit")
}

// config turns the flags into the xDS server's config.
func (f *xdsFlags) config(logger *slog.Logger) (pulsexds.Config, error) {
	cfg := pulsexds.Config{Coalesce: f.coalesce, Logger: logger, MaxStreams: f.maxStreams, MaxStreamsPerSource: f.perSource}
	// Config takes 0 as its default; the flag's default is explicit.
	if f.coalesce <= 0 || f.coalesce > 10*time.Second {
		return cfg, fmt.Errorf("-xds-coalesce must be positive and at most 10s, got %v", f.coalesce)
	}
	if f.maxStreams < 0 || f.perSource < 0 {
		return cfg, fmt.Errorf("-xds-max-streams and -xds-max-streams-per-source must not be negative (0: no limit), got %d and %d", f.maxStreams, f.perSource)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("xds: %w", err)
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
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pulse_xds_streams_refused_total", Help: "xDS (ADS) streams refused because a limit was reached (-xds-max-streams: limit=\"total\", -xds-max-streams-per-source: limit=\"per_source\").",
			ConstLabels: prometheus.Labels{"limit": "total"}}, func() float64 { return float64(s.Stats().RefusedTotal) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pulse_xds_streams_refused_total", Help: "xDS (ADS) streams refused because a limit was reached (-xds-max-streams: limit=\"total\", -xds-max-streams-per-source: limit=\"per_source\").",
			ConstLabels: prometheus.Labels{"limit": "per_source"}}, func() float64 { return float64(s.Stats().RefusedPerSource) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pulse_xds_memory_returns_total", Help: "Times the memory of many closed xDS streams (at least 1000, and half of the most open) was handed back to the operating system at once."},
			func() float64 { return float64(s.Stats().MemoryReturns) }),
	)
	for _, typ := range []string{resourcev3.EndpointType, resourcev3.ClusterType, resourcev3.RouteType, resourcev3.ListenerType} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pulse_xds_nacks_total", Help: "xDS responses clients rejected (NACK), by type; the last rejection's detail is logged, at most every 10s.",
			ConstLabels: prometheus.Labels{"type_url": typ}}, func() float64 { return float64(s.Stats().NACKs[typ]) }))
	}
	logger.Info("xds serving", "service", pulsexds.ServiceName, "coalesce", xcfg.Coalesce.String(), "max_streams", xcfg.MaxStreams, "max_streams_per_source", xcfg.MaxStreamsPerSource)
	return func() { s.Close() }, nil
}

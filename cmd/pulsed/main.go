// Command pulsed is the Pulse health-checking server: it serves
// pulse.v1.HealthChecker over gRPC, probes the registered targets and
// applies rise/fall thresholds to their results.
//
// Usage:
//
//	pulsed [flags]
//
// Run pulsed --help for the flags. SIGINT or SIGTERM stops it gracefully
// within --shutdown-timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"pulse/checker"
	"pulse/checker/boltstore"
	"pulse/server"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "pulsed:", err)
		os.Exit(2)
	}
}

type config struct {
	listen           string
	dataDir          string
	defaults         checker.Defaults
	maxProbes        int
	watchHistory     int
	watchProgress    time.Duration
	shutdownTimeout  time.Duration
	logLevel         slog.Level
	logJSON          bool
	httpListen       string
	metricsPerTarget bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	d := checker.StandardDefaults()
	cfg := config{defaults: d}
	fs := flag.NewFlagSet("pulsed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: pulsed [flags]\n\npulsed serves pulse.v1.HealthChecker over gRPC and probes the targets registered with it.\nTargets' unset fields take the defaults below.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:50051", "`address` to serve gRPC on (host:port; port 0 picks a free one)")
	fs.StringVar(&cfg.dataDir, "data-dir", "pulse-data", "`directory` of the embedded store that keeps targets and their states across restarts; \"\" keeps them in memory only")
	fs.DurationVar(&cfg.defaults.Interval, "interval", d.Interval, "default time between the starts of two probes of a target")
	fs.DurationVar(&cfg.defaults.Timeout, "timeout", d.Timeout, "default timeout of one probe (at most -interval)")
	fs.IntVar(&cfg.defaults.Rise, "rise", d.Rise, "default consecutive passes that make a target healthy")
	fs.IntVar(&cfg.defaults.Fall, "fall", d.Fall, "default consecutive failures that make a target unhealthy")
	fs.IntVar(&cfg.maxProbes, "max-concurrent-probes", 256, "most probes in flight at once; others wait for a slot")
	fs.IntVar(&cfg.watchHistory, "watch-history", 10000, "events kept for WatchTransitions streams to resume from; a stream further behind is ended with RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.watchProgress, "watch-progress", 30*time.Second, "how long a WatchTransitions stream may stay idle before it gets a progress event with the current revision")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long to let calls in progress finish before closing them")
	fs.StringVar(&cfg.httpListen, "http-listen", "127.0.0.1:9090", "`address` to serve /metrics, the status page at /, /healthz and /readyz on (host:port; port 0 picks a free one; empty disables)")
	fs.BoolVar(&cfg.metricsPerTarget, "metrics-per-target", true, "export pulse_target_up and pulse_target_last_latency_seconds, two series per target; false drops them for very large fleets")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	format := fs.String("log-format", "text", "log `format`: text or json")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q; see pulsed --help", fs.Arg(0))
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return cfg, fmt.Errorf("-log-level: %w", err)
	}
	switch *format {
	case "text":
	case "json":
		cfg.logJSON = true
	default:
		return cfg, fmt.Errorf("-log-format must be text or json, got %q", *format)
	}
	if err := cfg.defaults.Validate(); err != nil {
		return cfg, fmt.Errorf("-interval/-timeout/-rise/-fall: %w", err)
	}
	switch {
	case cfg.maxProbes < 1:
		return cfg, fmt.Errorf("-max-concurrent-probes must be at least 1, got %d", cfg.maxProbes)
	case cfg.watchHistory < 1:
		return cfg, fmt.Errorf("-watch-history must be at least 1, got %d", cfg.watchHistory)
	case cfg.watchProgress <= 0:
		return cfg, fmt.Errorf("-watch-progress must be positive, got %v", cfg.watchProgress)
	case cfg.shutdownTimeout <= 0:
		return cfg, fmt.Errorf("-shutdown-timeout must be positive, got %v", cfg.shutdownTimeout)
	}
	return cfg, nil
}

func run(args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	var logger *slog.Logger
	if cfg.logJSON {
		logger = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		logger = slog.New(slog.NewTextHandler(stderr, opts))
	}

	var store checker.Store
	if cfg.dataDir != "" {
		st, err := boltstore.Open(cfg.dataDir, time.Second)
		if err != nil {
			return fmt.Errorf("-data-dir: %w", err)
		}
		defer st.Close()
		store = st
		logger.Info("store opened", "path", st.Path())
	} else {
		logger.Warn("no -data-dir: targets live in memory only and are lost when pulsed stops")
	}

	obs := newObservability(cfg.metricsPerTarget, logger)
	c, err := checker.New(checker.Config{
		Defaults:            cfg.defaults,
		MaxConcurrentProbes: cfg.maxProbes,
		HistorySize:         cfg.watchHistory,
		// A store's revision goes on across restarts. Without one, revisions
		// start at the start time in microseconds, so a client resuming with
		// a revision from before a restart is told it is too old instead of
		// being handed the wrong events.
		StartRevision: uint64(time.Now().UnixMicro()),
		Store:         store,
		Logger:        logger.With("component", "checker"),
		Observer:      obs.observer,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	gs, hs := server.NewGRPCServer(server.New(c, server.WithProgressInterval(cfg.watchProgress)), server.Options{
		Logger:             logger.With("component", "grpc"),
		UnaryInterceptors:  obs.unaryInterceptors(),
		StreamInterceptors: obs.streamInterceptors(),
	})

	lis, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if err := obs.start(cfg.httpListen, c, gs); err != nil {
		return err
	}
	c.Start()
	logger.Info("pulsed listening", "addr", lis.Addr().String())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	obs.setReady(nil)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case err := <-obs.serveErr():
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("pulsed shutting down", "timeout", cfg.shutdownTimeout.String())
	hs.Shutdown() // grpc.health.v1 answers NOT_SERVING from now on
	obs.setReady(errors.New("shutting down"))
	// Closing the checker stops probing and ends watch streams, which would
	// otherwise keep GracefulStop waiting forever.
	c.Close()
	httpStopped := obs.shutdown(cfg.shutdownTimeout) // its event feeds ended with the checker
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(cfg.shutdownTimeout):
		logger.Warn("shutdown timeout reached; closing the remaining calls")
		gs.Stop()
		<-stopped
	}
	<-httpStopped
	logger.Info("pulsed stopped")
	return nil
}

// Command pulse-lb is a load balancer built on Pulse: an HTTP
// reverse proxy that round-robins requests over the backends that are
// healthy, with health from an embedded checker or, with --pulse, from a
// remote pulsed's WatchTransitions stream.
//
// Usage:
//
//	pulse-lb --listen 127.0.0.1:8000 --backends http://127.0.0.1:9001,http://127.0.0.1:9002 [flags]
//
// Run pulse-lb --help for the flags. SIGINT or SIGTERM stops it gracefully
// within --shutdown-timeout. It exits 2 on a bad command line and 1 when it
// cannot run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "pulse-lb:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "pulse-lb:", err)
		os.Exit(1)
	}
}

// healthCloser is a health source that must be stopped.
type healthCloser interface {
	healthSource
	Close() error
}

// run serves until ctx ends, then shuts down: stop accepting, let requests
// in progress finish within --shutdown-timeout, then stop the health source.
func run(ctx context.Context, args []string, stderr io.Writer) error {
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

	lis, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var health healthCloser
	if cfg.pulse == "" {
		health, err = newCheckerSource(cfg, logger.With("component", "checker"))
	} else {
		health, err = newRemoteSource(cfg, logger.With("component", "pulse"))
	}
	if err != nil {
		lis.Close()
		return err
	}
	lb := newBalancer(cfg, health, logger.With("component", "proxy"))
	stop := func() {
		lb.close()
		health.Close()
	}
	srv := &http.Server{
		Handler:           lb,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	mode := "embedded checker"
	if cfg.pulse != "" {
		mode = "pulsed at " + cfg.pulse
	}
	logger.Info("pulse-lb listening", "addr", lis.Addr().String(), "backends", len(cfg.backends), "health", mode)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()

	select {
	case err := <-serveErr:
		stop()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("pulse-lb shutting down", "timeout", cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("shutdown timeout reached; closing the remaining requests")
		srv.Close()
	}
	<-serveErr // http.ErrServerClosed
	stop()
	logger.Info("pulse-lb stopped")
	return nil
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/internal/version"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
)

// observability is what pulsed shows of itself on its HTTP listener: a
// Prometheus registry of its own (no globals) with the checker's observer,
// the gRPC server metrics and the Go and process collectors, and the
// handler of /metrics, the status page, /healthz and /readyz.
type observability struct {
	logger    *slog.Logger
	perTarget bool
	reg       *prometheus.Registry
	observer  *web.Observer // goes into checker.Config.Observer
	grpc      *grpcprom.ServerMetrics
	backup    func() (web.Snapshot, error)    // the store's hot backup; nil without a store
	tokens    *server.Tokens                  // nil: every path is open
	tls       *tls.Config                     // nil: plain HTTP
	limit     func(net.Listener) net.Listener // the connection limits; nil: none
	history   server.HistorySource            // badges; nil: none
	discovery server.DiscoveryStatus          // the page's failing discovery sources; nil: none
	directory server.Directory                // the other replicas' pages; nil: none

	notReady atomic.Pointer[string] // why /readyz says 503; nil when ready
	live     func() error           // what /healthz says (see startWatchdog); nil: live
	srv      *http.Server           // nil until start, and when disabled
	errc     chan error             // Serve's error; nil when disabled

	idleTimeout time.Duration // how long a kept-alive connection may wait for its next request
}

// httpIdleTimeout is how long the HTTP listener keeps a connection open
// between requests: longer than Prometheus's default scrape interval (1m),
// so scrapes keep their connection. Without it a client that sent one
// request and never closed its connection (a new http.Client per request
// leaks them) held one of -max-connections-per-source for good.
const httpIdleTimeout = 2 * time.Minute

// httpMaxHeaderBytes bounds a request's headers, which an /events feed
// holds for as long as it lives. net/http's default, 1 MB, let 200 feeds
// hold 250 MB of pulsed's memory. nginx accepts 32 KB by default; twice
// that leaves room for a browser's cookies of other services on the same
// host.
const httpMaxHeaderBytes = 64 << 10

func newObservability(perTarget bool, logger *slog.Logger) *observability {
	o := &observability{
		logger:    logger.With("component", "http"),
		perTarget: perTarget,
		reg:       prometheus.NewRegistry(),
		// Failed probes are logged at debug only: a failing fleet must not
		// flood the log. Transitions are the checker's, at info.
		observer: web.NewObserver(web.ObserverOptions{Logger: logger.With("component", "probe")}),
		grpc:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),

		idleTimeout: httpIdleTimeout,
	}
	o.setReady(errors.New("starting"))
	o.reg.MustRegister(o.observer, o.grpc, buildInfo(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return o
}

// backupFrom is /backup's copy of the store s: a Snapshot, so that a slow
// client reads a temporary copy and never holds the store against writers.
func backupFrom(s *boltstore.Store) func() (web.Snapshot, error) {
	return func() (web.Snapshot, error) {
		snap, err := s.Snapshot()
		if err != nil {
			return nil, err // not a nil *Snapshot in a non-nil interface
		}
		return snap, nil
	}
}

// buildInfo is pulse_build_info: 1, labelled with the build's version.
func buildInfo() prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pulse_build_info",
		Help:        "1, labelled with the build of pulsed: its module version, the VCS revision it was built from (empty when none was stamped) and its Go version.",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
}

// unaryInterceptors and streamInterceptors count every gRPC call, outside
// the server's own chain (server.Options).
func (o *observability) unaryInterceptors() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{o.grpc.UnaryServerInterceptor()}
}

func (o *observability) streamInterceptors() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{o.grpc.StreamServerInterceptor()}
}

// setReady sets what /readyz answers: nil is ready, an error the reason it
// is not.
func (o *observability) setReady(err error) {
	if err == nil {
		o.notReady.Store(nil)
		return
	}
	reason := err.Error()
	o.notReady.Store(&reason)
}

func (o *observability) ready() error {
	if r := o.notReady.Load(); r != nil {
		return errors.New(*r)
	}
	return nil
}

// secure sets the HTTP listener's guards from the security flags: the
// API's tokens (nil for none) and TLS. It refuses an exposed listener as
// securityFlags.httpOptions says, and warns of one -insecure lets through.
func (o *observability) secure(f *securityFlags, addr string, tokens *server.Tokens) error {
	cfg, err := f.httpOptions(addr, tokens != nil)
	if err != nil {
		return err
	}
	if addr != "" && !isLoopback(addr) && (cfg == nil || tokens == nil) {
		o.logger.Warn("-insecure: the HTTP listener is reachable from other machines without TLS or tokens", "addr", addr, "tls", cfg != nil, "tokens", tokens != nil)
	}
	o.tokens, o.tls = tokens, cfg
	return nil
}

// start registers the checker's metrics and the gRPC methods, then serves
// HTTP on lis in the background and logs its address. A nil lis: no HTTP
// listener.
func (o *observability) start(lis net.Listener, c *checker.Checker, gs *grpc.Server) {
	o.reg.MustRegister(web.NewCollector(c, o.perTarget, o.observer))
	var slos *web.SLOs
	if o.history != nil {
		slos = web.NewSLOs(c, o.history) // the groups' objectives: metrics and the page
		o.reg.MustRegister(slos)
	}
	o.grpc.InitializeMetrics(gs)
	if lis == nil {
		// Nothing serves the status page: keep no recent results (its
		// strip), only the metrics, which the process still counts.
		o.observer.KeepRecent(0)
		return
	}
	if o.limit != nil {
		lis = o.limit(lis)
	}
	o.srv = &http.Server{
		Handler: web.NewHandler(web.Config{
			Checker:   c,
			Gatherer:  o.reg,
			Observer:  o.observer,
			Ready:     o.ready,
			Live:      o.live,
			Logger:    o.logger,
			Backup:    o.backup,
			Tokens:    o.tokens,
			History:   o.history,
			SLOs:      slos,
			Discovery: o.discovery,
			Directory: o.directory,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.logger.Handler(), slog.LevelWarn),
	}
	o.errc = make(chan error, 1)
	serve := o.srv.Serve
	if o.tls != nil {
		o.srv.TLSConfig = o.tls.Clone()
		serve = func(l net.Listener) error { return o.srv.ServeTLS(l, "", "") }
	}
	go func() {
		if err := serve(lis); !errors.Is(err, http.ErrServerClosed) {
			o.errc <- err
		}
	}()
	o.logger.Info("http listening", "addr", lis.Addr().String(), "tls", o.tls != nil, "tokens", o.tokens != nil)
}

// serveErr delivers an error if the HTTP listener fails; it never delivers
// when the listener is disabled.
func (o *observability) serveErr() <-chan error { return o.errc }

// shutdown stops the HTTP listener within timeout, closing what is left
// then; the returned channel is closed when it has stopped. Event feeds end
// when the checker closes, so close it first.
func (o *observability) shutdown(timeout time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if o.srv == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := o.srv.Shutdown(ctx); err != nil {
			o.logger.Warn("http shutdown timeout reached; closing the remaining connections")
			o.srv.Close()
		}
	}()
	return done
}

// keptConns exports how many probe connections are kept between probes
// and the most that may be.
func (o *observability) keptConns(f *probe.Factory) {
	o.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pulse_probe_kept_connections", Help: "Connections http:// probes keep open between probes."},
			func() float64 { kept, _, _ := f.KeptConns(); return float64(kept) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pulse_probe_kept_connections_max", Help: "The most connections probes may keep open between probes (three quarters of the open-file limit); past it a probe dials and closes its connection."},
			func() float64 { _, most, _ := f.KeptConns(); return float64(most) }),
	)
}

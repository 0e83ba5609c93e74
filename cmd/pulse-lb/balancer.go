package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// healthSource says which backends may take traffic: the embedded checker
// (checkerSource) or the view of a remote pulsed (view).
type healthSource interface {
	// Healthy returns the names of the routable targets, sorted, read in
	// one step under the lock the source's writer holds when it changes a
	// state. The caller must not modify the slice.
	Healthy() []string
}

// balancer is the front door: it picks a healthy backend with the rotor and
// proxies the request to it. It answers 503 at once when no backend is
// healthy ("I have nobody left to give this to"), and 502 when the
// chosen backend fails the request ("my backend failed me"). It never
// queues a request, and it never retries one on another backend: a request
// may not be safe to send twice.
type balancer struct {
	backends    []*backend
	health      healthSource
	rotor       rotor
	creditState // slow-start weights; see weights.go
	transport   *http.Transport
	logger      *slog.Logger
}

// backend is one backend and its reverse proxy.
type backend struct {
	name  string
	proxy *httputil.ReverseProxy
}

func newBalancer(cfg config, health healthSource, logger *slog.Logger) *balancer {
	dialer := &net.Dialer{Timeout: min(5*time.Second, cfg.responseTimeout), KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:                 nil, // talk to the backends themselves, whatever HTTP_PROXY says
		DialContext:           dialer.DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: cfg.responseTimeout,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	b := &balancer{health: health, transport: transport, logger: logger}
	for _, bc := range cfg.backends {
		b.backends = append(b.backends, newBackend(bc, cfg.backendHeader, transport, logger))
	}
	return b
}

func newBackend(bc backendConfig, header string, transport http.RoundTripper, logger *slog.Logger) *backend {
	name, target := bc.name, bc.url
	return &backend{
		name: name,
		proxy: &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target) // also sets Host to the backend's, as most proxies do
				r.SetXForwarded()
			},
			Transport: transport,
			ModifyResponse: func(resp *http.Response) error {
				if header != "" {
					resp.Header.Set(header, name)
				}
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
					// The client went away; nobody reads the answer.
					logger.Debug("client gone", "backend", name, "path", r.URL.Path)
				} else {
					logger.Warn("backend failed the request", "backend", name, "method", r.Method, "path", r.URL.Path, "error", err)
				}
				if header != "" {
					w.Header().Set(header, name)
				}
				http.Error(w, fmt.Sprintf("502 Bad Gateway: backend %s failed: %v", name, probe.Describe(err)), http.StatusBadGateway)
			},
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
	}
}

// ServeHTTP proxies r to the next healthy backend.
func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i, ok := b.pick(b.health.Healthy())
	if !ok {
		http.Error(w, fmt.Sprintf("503 Service Unavailable: no healthy backend (0 of %d)", len(b.backends)), http.StatusServiceUnavailable)
		return
	}
	b.backends[i].proxy.ServeHTTP(w, r)
}

// close closes the idle connections to the backends.
func (b *balancer) close() { b.transport.CloseIdleConnections() }

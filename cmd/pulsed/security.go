package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server"
)

// securityFlags are pulsed's TLS, auth and resource-limit flags.
type securityFlags struct {
	tlsCert, tlsKey, clientCA string
	httpTLSCert, httpTLSKey   string
	tokenFile                 string
	insecure                  bool

	allowTargets, denyTargets cidrList
	allowMetadata             bool

	maxTargets, maxTargetsPerGroup, maxWatchers int
	maxWatchersPerSource                        int
	maxStreams                                  uint
	maxRequestBytes                             int
	rateLimit                                   float64
	rateBurst                                   int
}

func (f *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM `file` of the API's TLS certificate (with -tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM `file` of the API's TLS key")
	fs.StringVar(&f.clientCA, "client-ca", "", "PEM `file` of CAs: clients must present a certificate they signed (mutual TLS; needs -tls-cert)")
	fs.StringVar(&f.httpTLSCert, "http-tls-cert", "", "PEM `file` of the HTTP listener's TLS certificate (with -http-tls-key); default: -tls-cert's, if set")
	fs.StringVar(&f.httpTLSKey, "http-tls-key", "", "PEM `file` of the HTTP listener's TLS key; default: -tls-key's, if set")
	fs.StringVar(&f.tokenFile, "token-file", "", "`file` of bearer tokens with their roles (read or write); every pulse.v1 call, and every HTTP path but /healthz, /readyz and the status page's shell, then needs one (docs/operations/security.md)")
	fs.BoolVar(&f.insecure, "insecure", false, "allow -listen on a non-loopback address without TLS or tokens, and -http-listen without both")
	fs.Var(&f.allowTargets, "allow-targets", "comma-separated CIDRs or addresses probes may reach; empty: any address not denied")
	fs.Var(&f.denyTargets, "deny-targets", "comma-separated CIDRs or addresses probes must never reach, checked on the resolved address at every dial; always denied on top of these, unless -allow-metadata-targets: the cloud metadata and link-local ranges, IPv4 and IPv6, which pulsed logs at start as its probe egress policy (-deny-targets= denies only those)")
	fs.BoolVar(&f.allowMetadata, "allow-metadata-targets", false, "DANGEROUS: let probes reach the cloud metadata and link-local ranges that are otherwise always denied (see -deny-targets); anyone who can add targets may then read this machine's cloud credentials. Logs a warning at start")
	fs.IntVar(&f.maxTargets, "max-targets", 100000, "most targets registered at once; 0: no limit")
	fs.IntVar(&f.maxTargetsPerGroup, "max-targets-per-group", 10000, "most targets in one group; 0: no limit")
	fs.IntVar(&f.maxWatchers, "max-watchers", 10000, "most watchers at once: WatchTransitions and grpc.health Watch streams, and the status page's live feeds; 0: no limit")
	fs.IntVar(&f.maxWatchersPerSource, "max-watchers-per-source", 1000, "most watchers one client IP address holds at once (all local clients share 127.0.0.1), so that one client cannot take every -max-watchers slot; 0: no limit")
	fs.UintVar(&f.maxStreams, "max-streams-per-conn", 1100, "most concurrent calls on one client connection (HTTP/2 MaxConcurrentStreams)")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", 1<<20, "largest request message accepted, in bytes")
	fs.Float64Var(&f.rateLimit, "rate-limit", 200, "pulse.v1 calls per second allowed per client address; 0: no limit")
	fs.IntVar(&f.rateBurst, "rate-burst", 400, "calls a client may make in a burst above -rate-limit")
}

// maxHeaderBytes bounds a call's metadata (its HTTP/2 header list), which
// a stream holds for as long as it lives. gRPC's own default, 16 MiB, let
// 50 WatchTransitions streams with 4 MB of metadata each hold 220 MB of
// pulsed's memory. gRPC's protocol suggests 8 KiB, which its Java and C
// servers enforce; twice that leaves room for long tokens.
const maxHeaderBytes = 16 << 10

// serverOptions turns the flags into the gRPC server's credentials, limits
// and guards. It refuses a listener other machines can reach unless it has
// TLS or tokens, or -insecure says so.
func (f *securityFlags) serverOptions(listen string) (server.Options, error) {
	var opts server.Options
	switch {
	case f.clientCA != "" && f.tlsCert == "":
		return opts, errors.New("-client-ca needs -tls-cert and -tls-key")
	case f.maxRequestBytes < 1024:
		return opts, fmt.Errorf("-max-request-bytes must be at least 1024, got %d", f.maxRequestBytes)
	case f.rateLimit < 0 || f.rateBurst < 1:
		return opts, fmt.Errorf("-rate-limit must be >= 0 and -rate-burst >= 1, got %g and %d", f.rateLimit, f.rateBurst)
	case f.maxStreams < 1:
		return opts, errors.New("-max-streams-per-conn must be at least 1")
	}
	for _, l := range []struct {
		flag string
		n    int
	}{{"-max-targets", f.maxTargets}, {"-max-targets-per-group", f.maxTargetsPerGroup}, {"-max-watchers", f.maxWatchers}, {"-max-watchers-per-source", f.maxWatchersPerSource}} {
		if l.n < 0 {
			return opts, fmt.Errorf("%s must not be negative (0: no limit), got %d", l.flag, l.n)
		}
	}
	if f.tlsCert != "" || f.tlsKey != "" {
		cfg, err := server.TLSConfig(f.tlsCert, f.tlsKey, f.clientCA)
		if err != nil {
			return opts, err
		}
		opts.ServerOptions = append(opts.ServerOptions, grpc.Creds(credentials.NewTLS(cfg)))
	}
	if f.tokenFile != "" {
		t, err := server.LoadTokens(f.tokenFile)
		if err != nil {
			return opts, fmt.Errorf("-token-file: %w", err)
		}
		opts.Tokens = t
	}
	if !f.insecure && f.tlsCert == "" && opts.Tokens == nil && !isLoopback(listen) {
		return opts, fmt.Errorf("-listen %s is reachable from other machines, but the API has neither TLS (-tls-cert) nor tokens (-token-file): add them, or pass -insecure to accept that", listen)
	}
	if f.rateLimit > 0 {
		opts.RateLimit = server.NewRateLimit(f.rateLimit, f.rateBurst, nil)
	}
	opts.ServerOptions = append(opts.ServerOptions,
		grpc.MaxConcurrentStreams(uint32(f.maxStreams)),
		grpc.MaxRecvMsgSize(f.maxRequestBytes),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		// Clients may ping at most every 10s; a ping flood gets GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Find dead clients (and their streams) within a minute or so.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	)
	return opts, nil
}

// httpOptions returns the HTTP listener's TLS configuration, nil for plain
// HTTP: -http-tls-cert/-http-tls-key, or else -tls-cert/-tls-key. It asks
// for no client certificate (-client-ca is the gRPC API's): browsers and
// scrapers authenticate with tokens. It refuses a listen address other
// machines can reach unless the listener has both TLS and tokens, or
// -insecure says so: without tokens anyone there could read every target
// and download the store (/backup); without TLS the tokens cross the
// network in clear. An empty listen (no listener) needs nothing.
func (f *securityFlags) httpOptions(listen string, tokens bool) (*tls.Config, error) {
	if listen == "" {
		return nil, nil
	}
	var cfg *tls.Config
	switch {
	case f.httpTLSCert != "" || f.httpTLSKey != "":
		if f.httpTLSCert == "" || f.httpTLSKey == "" {
			return nil, errors.New("-http-tls-cert and -http-tls-key go together")
		}
		c, err := server.TLSConfig(f.httpTLSCert, f.httpTLSKey, "")
		if err != nil {
			return nil, fmt.Errorf("-http-tls-cert/-http-tls-key: %w", err)
		}
		cfg = c
	case f.tlsCert != "":
		c, err := server.TLSConfig(f.tlsCert, f.tlsKey, "")
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if f.insecure || isLoopback(listen) {
		return cfg, nil
	}
	const tlsFlags, tokenFlag = "TLS (-http-tls-cert/-http-tls-key, or -tls-cert/-tls-key)", "tokens (-token-file)"
	switch {
	case cfg == nil && !tokens:
		return nil, fmt.Errorf("-http-listen %s is reachable from other machines, but the HTTP listener has neither %s nor %s: add them, or pass -insecure to accept that", listen, tlsFlags, tokenFlag)
	case !tokens:
		return nil, fmt.Errorf("-http-listen %s is reachable from other machines, but the HTTP listener has no %s: anyone there could read every target and download /backup; add them, or pass -insecure to accept that", listen, tokenFlag)
	case cfg == nil:
		return nil, fmt.Errorf("-http-listen %s is reachable from other machines, but the HTTP listener has no %s: its tokens would cross the network in clear; add it, or pass -insecure to accept that", listen, tlsFlags)
	}
	return cfg, nil
}

// isLoopback reports whether a listen address is reachable only from this
// machine: a loopback IP or "localhost". An empty host listens everywhere.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// egress returns the probes' egress policy: -deny-targets plus the cloud
// metadata and link-local ranges (probe.DefaultDenyTargets), which no
// -deny-targets list can drop, only -allow-metadata-targets, of which
// egress warns on logger.
func (f *securityFlags) egress(logger *slog.Logger) (*probe.EgressPolicy, error) {
	deny := append([]string{}, f.denyTargets.list...) // never nil: no default list from ParseEgressPolicy
	p, err := probe.ParseEgressPolicy(f.allowTargets.list, deny)
	if err != nil {
		return nil, fmt.Errorf("-allow-targets/-deny-targets: %w", err)
	}
	if f.allowMetadata {
		logger.Warn("-allow-metadata-targets: probes may reach the cloud metadata and link-local ranges; anyone who can add targets may read this machine's cloud credentials", "not_denied", denyDefault())
		return p, nil
	}
	for _, pf := range probe.DefaultDenyTargets() {
		if !slices.Contains(p.Deny, pf) {
			p.Deny = append(p.Deny, pf)
		}
	}
	return p, nil
}

func denyDefault() string {
	var out []string
	for _, p := range probe.DefaultDenyTargets() {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

// cidrList is a comma-separated flag that remembers whether it was set, so
// an explicitly empty list differs from the default.
type cidrList struct {
	list []string
	set  bool
}

func (c *cidrList) String() string { return strings.Join(c.list, ",") }

func (c *cidrList) Set(v string) error {
	c.set = true
	c.list = nil
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.list = append(c.list, e)
		}
	}
	return nil
}

// Package client is the Go client of pulsed: typed calls for every RPC of
// pulse.v1.HealthChecker, a follower of its WatchTransitions stream that
// keeps the stream's contract (Watch), and a local cache of the followed
// targets built on it (View).
//
//	c, err := client.New(ctx, []string{"127.0.0.1:50051"})
//	...
//	v := c.View(ctx, client.Filter{Group: "edge"})
//	defer v.Close()
//	v.Routable("edge") // the targets to send traffic to, kept up to date
//
// The package speaks in its own plain Go types (Target, Status, State, ...)
// rather than the generated ones, so that callers need not import gen/ and
// a change in the wire format is not a change in their code. API returns
// the generated client for anything the typed calls do not cover.
package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TokenEnv is the environment variable New reads the bearer token from when
// no WithToken or WithTokenFile option gives one, white space around it
// trimmed (the trailing newline of a secret made from a file).
const TokenEnv = "PULSE_TOKEN"

// Reconnect bounds of a follower (Watch, View): the first retry comes after
// about DefaultMinBackoff, each failed attempt doubles the delay up to
// DefaultMaxBackoff, and each delay is jittered down by up to half so that
// many clients do not reconnect in step. MaxBackoff bounds WithBackoff.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	MaxBackoff        = 10 * time.Minute
)

// DefaultIdleTimeout is how long a follower waits on a silent stream before
// it treats it as dead and resumes on a new one: three of pulsed's default
// progress intervals (30s). MaxIdleTimeout bounds WithIdleTimeout.
const (
	DefaultIdleTimeout = 90 * time.Second
	MaxIdleTimeout     = time.Hour
)

// Client is a connection to pulsed, or to one of several pulsed replicas.
// It is safe for concurrent use. Create it with New; Close it when done.
type Client struct {
	conn  *grpc.ClientConn
	api   pb.HealthCheckerClient
	addrs []string
	opts  options
}

// options are what the Options set.
type options struct {
	tls         *tls.Config
	tlsFiles    *TLSFiles
	token       string
	tokenFile   string
	tokenSet    bool
	dial        []grpc.DialOption
	block       bool
	minBackoff  time.Duration
	maxBackoff  time.Duration
	idleTimeout time.Duration
}

// Option configures New.
type Option func(*options)

// WithTLS connects with TLS using cfg (nil: the system's roots). Without a
// TLS option the connection is plaintext, as pulsed serves by default.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
	}
}

// WithTLSFiles connects with TLS configured from PEM files: mutual TLS
// when f has a certificate and key. New reads them.
func WithTLSFiles(f TLSFiles) Option { return func(o *options) { o.tlsFiles = &f } }

// WithToken sends token as "authorization: Bearer <token>" with every call,
// instead of PULSE_TOKEN. An empty token sends none.
func WithToken(token string) Option {
	return func(o *options) { o.token, o.tokenFile, o.tokenSet = token, "", true }
}

// WithTokenFile sends the first line of the file at path as the bearer
// token, instead of PULSE_TOKEN. New reads it.
func WithTokenFile(path string) Option {
	return func(o *options) { o.token, o.tokenFile, o.tokenSet = "", path, true }
}

// WithDialOptions adds gRPC dial options after the client's own (a custom
// dialer, interceptors, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithBlock makes New wait until a connection is up, or ctx ends.
func WithBlock() Option { return func(o *options) { o.block = true } }

// WithBackoff sets the reconnect delays of the client's followers (and of
// its connection): from min, doubling on each failure, up to max; each is
// jittered. Defaults: DefaultMinBackoff, DefaultMaxBackoff. Both must be
// positive, min at most max, max at most MaxBackoff.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithIdleTimeout sets how long a follower waits on a stream that sends
// nothing, not even progress, before it resumes on a new one. Default
// DefaultIdleTimeout; at most MaxIdleTimeout; 0 waits forever.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// TLSFiles names the PEM files of a TLS connection to pulsed.
type TLSFiles struct {
	// CA signs pulsed's certificate; empty: the system's roots.
	CA string
	// Cert and Key are the client's certificate and key, for pulsed's
	// -client-ca (mutual TLS); both or neither.
	Cert, Key string
	// ServerName is the name pulsed's certificate must carry; empty: the
	// address's host.
	ServerName string
}

// Config reads the files and returns the TLS configuration, TLS 1.2 at
// least.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA: %s holds no PEM certificate", f.CA)
		}
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("TLS client certificate and key go together")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ReadTokenFile returns the first line of the file at path, trimmed: the
// form pulsed's clients keep a bearer token in.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(token), nil
}

// New returns a client of the pulsed at addrs (host:port each, with a port
// from 1 to 65535). With several addresses, which must be replicas sharing
// one registry on etcd, calls and streams go to the first that answers and
// move to another when it fails; a follower resumes there from the same
// revision. A single address may also be a gRPC target whose scheme gRPC
// resolves, read as gRPC reads it: unix:PATH, dns:///HOST:PORT,
// passthrough:///NAME with a dialer of WithDialOptions. New refuses an
// address it could not reach pulsed at, naming it: one without a port
// (gRPC would dial port 443), a URL such as http://host:port, white space.
//
// New does not wait for a connection unless WithBlock is given: pulsed may
// be down, and the first call connects. ctx bounds New's wait.
//
// The token is PULSE_TOKEN's unless WithToken or WithTokenFile gives one.
// Over plaintext it is sent too (pulsed on loopback); with TLS it is sent
// only over TLS. New refuses a token a header cannot carry (it must be
// printable ASCII), naming where it came from.
func New(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	o := options{minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff, idleTimeout: DefaultIdleTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(addrs); err != nil {
		return nil, err
	}
	dopts, err := o.dialOptions()
	if err != nil {
		return nil, err
	}
	target := addrs[0]
	if len(addrs) > 1 {
		// Replicas: one connection, to the first that answers, moving to
		// another when it fails (gRPC's pick_first over the list).
		r := manual.NewBuilderWithScheme("pulse-replicas")
		var state resolver.State
		for _, a := range addrs {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
		}
		r.InitialState(state)
		target = r.Scheme() + ":///replicas"
		dopts = append(dopts, grpc.WithResolvers(r), grpc.WithAuthority(addrs[0]))
	}
	conn, err := grpc.NewClient(target, append(dopts, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("pulse: %w", err)
	}
	c := &Client{conn: conn, api: pb.NewHealthCheckerClient(conn), addrs: append([]string(nil), addrs...), opts: o}
	if o.block {
		if err := c.waitReady(ctx); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return c, nil
}

func (o *options) validate(addrs []string) error {
	if len(addrs) == 0 {
		return errors.New("pulse: no address of pulsed")
	}
	for _, a := range addrs {
		if strings.TrimSpace(a) == "" {
			return errors.New("pulse: an empty address of pulsed")
		}
		if problem := addrProblem(a); problem != "" {
			return fmt.Errorf("pulse: address %q %s", a, problem)
		}
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff || o.maxBackoff > MaxBackoff {
		return fmt.Errorf("pulse: backoff must be 0 < min <= max <= %v, got %v and %v", MaxBackoff, o.minBackoff, o.maxBackoff)
	}
	if o.idleTimeout < 0 || o.idleTimeout > MaxIdleTimeout {
		return fmt.Errorf("pulse: idle timeout must be in [0, %v], got %v", MaxIdleTimeout, o.idleTimeout)
	}
	if o.tls != nil && o.tlsFiles != nil {
		return errors.New("pulse: WithTLS and WithTLSFiles exclude each other")
	}
	return nil
}

// addrProblem says what is wrong with a, one address of pulsed ("has no
// port: want host:port, ..."), or "" when nothing is. An address with a
// scheme gRPC resolves is gRPC's to read, but for the host:port of
// dns:///HOST:PORT, whose resolver would take port 443 when it has none.
func addrProblem(a string) string {
	hostPort, want := a, "host:port, e.g. 127.0.0.1:50051"
	if u, err := url.Parse(a); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		if u.Scheme != "dns" {
			return ""
		}
		hostPort, want = cmp.Or(u.Opaque, strings.TrimPrefix(u.Path, "/")), "dns:///host:port, e.g. dns:///127.0.0.1:50051"
	}
	if ip := net.ParseIP(strings.Trim(hostPort, "[]")); ip != nil && ip.To4() == nil {
		want = strings.Replace(want, "127.0.0.1", "[::1]", 1) // an IPv6 address goes in brackets
	}
	if strings.ContainsFunc(hostPort, unicode.IsSpace) {
		return "holds white space: want " + want
	}
	_, port, err := net.SplitHostPort(hostPort)
	switch {
	case err == nil && port == "", err != nil && strings.Contains(err.Error(), "missing port"), net.ParseIP(hostPort) != nil:
		return "has no port: want " + want
	case err != nil:
		return "is not host:port: want " + want
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Sprintf("has port %q: want a port from 1 to 65535", port)
	}
	return ""
}

// dialOptions returns the transport, token and backoff options.
func (o *options) dialOptions() ([]grpc.DialOption, error) {
	tlsCfg := o.tls
	if o.tlsFiles != nil {
		var err error
		if tlsCfg, err = o.tlsFiles.Config(); err != nil {
			return nil, fmt.Errorf("pulse: %w", err)
		}
	}
	var opts []grpc.DialOption
	if tlsCfg != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	token, from := o.token, "WithToken's token"
	switch {
	case o.tokenFile != "":
		var err error
		if token, err = ReadTokenFile(o.tokenFile); err != nil {
			return nil, fmt.Errorf("pulse: %w", err)
		}
		from = "token file " + o.tokenFile
	case !o.tokenSet:
		token, from = strings.TrimSpace(os.Getenv(TokenEnv)), TokenEnv
	}
	// gRPC would refuse the header on every call, as an INTERNAL error.
	if i := strings.IndexFunc(token, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		what := "a character past ASCII" // not quoted: a part of the secret
		if r := token[i]; r < 0x20 || r == 0x7f {
			what = fmt.Sprintf("%q", r)
		}
		return nil, fmt.Errorf("pulse: %s holds %s at byte %d, which a header cannot carry: a token is printable ASCII", from, what, i)
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(Bearer(token, tlsCfg != nil)))
	}
	// gRPC's own reconnect backoff defaults to 1s..120s; keep it within the
	// followers' so a restarted pulsed is found again promptly.
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: o.minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: o.maxBackoff},
		MinConnectTimeout: 5 * time.Second,
	}))
	return opts, nil
}

// Bearer returns per-RPC credentials that send "authorization: Bearer
// <token>" with every call. With requireTLS they are sent only over TLS;
// without, over plaintext too (pulsed on loopback).
func Bearer(token string, requireTLS bool) credentials.PerRPCCredentials {
	return bearer{token: token, requireTLS: requireTLS}
}

type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }

// waitReady connects and waits until the connection is READY or ctx ends.
func (c *Client) waitReady(ctx context.Context) error {
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return &Error{Code: codes.Unavailable, Message: fmt.Sprintf("no connection to pulsed at %s: %v", strings.Join(c.addrs, ","), ctx.Err()), Method: "connect"}
		}
	}
}

// Close closes the connection. Views and watches of the client end with
// it. It is safe to call more than once.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil && status.Code(err) != codes.Canceled { // Canceled: closed before
		return err
	}
	return nil
}

// Addrs returns the addresses the client was created with.
func (c *Client) Addrs() []string { return append([]string(nil), c.addrs...) }

// API returns the generated gRPC client on the client's connection, for
// what the typed calls do not cover (a field newer than this package). It
// shares the connection, token and failover.
func (c *Client) API() pb.HealthCheckerClient { return c.api }

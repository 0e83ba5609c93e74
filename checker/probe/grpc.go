package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// grpcProber asks a grpc.health.v1 server about one service. It holds one
// *grpc.ClientConn, made without dialling and reused between probes; Probe is
// safe for concurrent use, and Close closes the connection.
type grpcProber struct {
	conn     *grpc.ClientConn
	health   healthpb.HealthClient
	service  string
	md       metadata.MD                                  // sent with every call; nil when none
	expected []healthpb.HealthCheckResponse_ServingStatus // empty means SERVING
	expiry   expiryWatch

	closeOnce sync.Once
	watch     grpcWatch // see WatchConn

	rawMu   sync.Mutex  // protects raw
	raw     net.Conn    // the channel's newest connection; nil once dropped
	dropped atomic.Bool // dropConn closed raw; the next probe waits for the channel to see it
}

// newGRPCProber builds a prober for a validated spec. tlsConf is used when
// s.TLS is set without s.TLSOptions; TLSOptions are read with roots as the
// default roots. Every connection goes through d.
//
// The address goes to the channel behind "passthrough:///", so gRPC takes
// it as it is: it neither looks it up itself (d does, on every dial, under
// the egress policy) nor reads a scheme into it, as it would make "unix:80"
// a Unix socket.
func newGRPCProber(s *GRPCSpec, tlsConf *tls.Config, roots *x509.CertPool, d *guardedDialer) (*grpcProber, error) {
	p := &grpcProber{service: s.Service}
	creds := insecure.NewCredentials()
	switch {
	case s.TLSOptions != nil:
		src, err := newTLSSource("grpc.tls_options", s.TLSOptions, roots)
		if err != nil {
			return nil, err
		}
		p.expiry.src = src
		creds = &sourceCreds{src: src}
	case s.TLS:
		creds = credentials.NewTLS(tlsConf)
	}
	opts := []grpc.DialOption{}
	if s.Authority != "" {
		opts = append(opts, grpc.WithAuthority(s.Authority))
	}
	if len(s.Metadata) > 0 {
		p.md = metadata.New(s.Metadata)
	}
	for _, name := range s.ExpectedStatuses {
		p.expected = append(p.expected, healthpb.HealthCheckResponse_ServingStatus(healthpb.HealthCheckResponse_ServingStatus_value[name]))
	}
	conn, err := grpc.NewClient("passthrough:///"+s.Address, append(opts,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				p.rawMu.Lock()
				p.raw = c
				p.rawMu.Unlock()
			}
			return c, err
		}),
		grpc.WithNoProxy(),
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent(userAgent),
		grpc.WithDisableServiceConfig(),
		// gRPC's default backoff grows to two minutes, and while a channel
		// waits to redial every RPC fails at once with the old error, so a
		// target that came back would still look down. Five seconds keeps
		// that lag under a few probe intervals.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  250 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   5 * time.Second,
			},
			// Zero would end each connection attempt after one backoff
			// delay; keep gRPC's usual 20s. Each Check is still bounded
			// by its probe's deadline.
			MinConnectTimeout: 20 * time.Second,
		}),
	)...)
	if err != nil {
		return nil, &FieldError{Field: "grpc.address", Reason: fmt.Sprintf("cannot be used as a gRPC target (%v), got %q", err, s.Address)}
	}
	p.conn, p.health = conn, healthpb.NewHealthClient(conn)
	return p, nil
}

// Probe calls Health/Check under ctx. SERVING passes, or the expected
// statuses when the spec lists them. Any other serving status, and a
// NotFound error (how a health server says it does not know the service,
// taken as SERVICE_UNKNOWN), fail with an error whose text is the status
// name, e.g. "NOT_SERVING" or "SERVICE_UNKNOWN". Other RPC errors fail with
// "<code>: <message>"; when the server refused the connection the error
// satisfies errors.Is(err, syscall.ECONNREFUSED).
func (p *grpcProber) Probe(ctx context.Context) error {
	if p.dropped.Swap(false) {
		p.awaitDrop(ctx)
	}
	if p.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, p.md)
	}
	var pr peer.Peer
	resp, err := p.health.Check(ctx, &healthpb.HealthCheckRequest{Service: p.service}, grpc.Peer(&pr))
	st := resp.GetStatus()
	if err != nil {
		err = newRPCError(err)
		var se *servingError
		if !errors.As(err, &se) {
			if ctx.Err() != nil {
				p.dropConn()
			}
			return withContext(ctx, err)
		}
		st = se.status
	}
	// An answer came over a ready connection: its loss is news, even if
	// the channel's watcher did not see it ready (see grpcWatch).
	p.watch.up.Store(true)
	if !p.passes(st) {
		return &servingError{status: st}
	}
	if info, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
		return p.expiry.check(&info.State, time.Now())
	}
	return nil
}

// dropConn closes the channel's connection after a probe ran out of time
// on it, as Envoy's gRPC health checker does: a path that went quiet (no
// reset, no refusal) would otherwise hold the channel on the dead
// connection for as long as TCP retransmits, minutes, and every probe
// would say only "timeout". The next probe dials again and says what the
// path says now ("no route to host", "connection refused", a timeout
// while connecting), or passes. The loss is the probe's own doing, not
// news: the channel watcher does not report it (see WatchConn).
func (p *grpcProber) dropConn() {
	p.rawMu.Lock()
	c := p.raw
	p.raw = nil
	p.rawMu.Unlock()
	if c != nil {
		p.watch.up.Store(false)
		c.Close()
		p.dropped.Store(true)
	}
}

// awaitDrop waits, within ctx, until the channel has seen its dropped
// connection close: until then it may still send a call over it, which
// fails at once ("use of closed network connection") instead of dialling
// afresh. A channel that has dialled again since is not waited for.
func (p *grpcProber) awaitDrop(ctx context.Context) {
	for {
		p.rawMu.Lock()
		redialled := p.raw != nil
		p.rawMu.Unlock()
		s := p.conn.GetState()
		if redialled || s != connectivity.Ready || !p.conn.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// passes reports whether st is an expected status.
func (p *grpcProber) passes(st healthpb.HealthCheckResponse_ServingStatus) bool {
	if len(p.expected) == 0 {
		return st == healthpb.HealthCheckResponse_SERVING
	}
	return slices.Contains(p.expected, st)
}

// LastCertExpiry implements CertExpiryReporter.
func (p *grpcProber) LastCertExpiry() (time.Time, *ExpiryError) { return p.expiry.lastSeen() }

// NewCertWarning implements CertExpiryReporter.
func (p *grpcProber) NewCertWarning() *ExpiryError { return p.expiry.newWarning() }

// sourceCreds are gRPC transport credentials whose TLS configuration comes
// from a tlsSource at each handshake, so that rotated files are used.
type sourceCreds struct {
	src *tlsSource
}

// ClientHandshake makes the TLS handshake for authority on raw.
func (c *sourceCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	cfg, err := c.src.config(host)
	if err != nil {
		return nil, nil, err
	}
	// gRPC's TLS credentials verify the authority they are given, not
	// the configuration's ServerName: give them the name to verify.
	return credentials.NewTLS(cfg).ClientHandshake(ctx, cfg.ServerName, raw)
}

// ServerHandshake is not supported: these credentials are a client's.
func (c *sourceCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("probe credentials are for clients only")
}

// Info describes the credentials as TLS.
func (c *sourceCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

// Clone returns c: it holds nothing a channel changes.
func (c *sourceCreds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is not supported; TLSSpec.ServerName sets the name.
func (c *sourceCreds) OverrideServerName(string) error { //nolint:staticcheck // part of the interface
	return errors.New("set the server name in the TLS options")
}

// Close stops watching the channel, then closes it. It is idempotent:
// later calls return nil. Probes after Close fail.
func (p *grpcProber) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.watch.stop()
		err = p.conn.Close()
	})
	return err
}

// servingError is a health answer other than SERVING.
type servingError struct {
	status healthpb.HealthCheckResponse_ServingStatus
}

// Error returns the status name, e.g. "NOT_SERVING".
func (e *servingError) Error() string { return e.status.String() }

// rpcError is a failed Health/Check call.
type rpcError struct {
	st      *status.Status
	refused bool // the transport's dial was refused
	noFiles bool // the transport's dial found no free file descriptor
}

// newRPCError converts an error from Health/Check.
func newRPCError(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.NotFound {
		return &servingError{status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}
	}
	return &rpcError{st: st, refused: strings.Contains(st.Message(), "connection refused"),
		noFiles: strings.Contains(st.Message(), "too many open files")}
}

// Error returns "<code>: <message>", e.g. "Unimplemented: unknown service
// grpc.health.v1.Health".
func (e *rpcError) Error() string { return e.st.Code().String() + ": " + e.st.Message() }

// GRPCStatus lets status.FromError see the original status.
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// Is reports a refused connection as syscall.ECONNREFUSED, and a dial
// that found no free file descriptor as syscall.EMFILE.
func (e *rpcError) Is(target error) bool {
	return (e.refused && target == syscall.ECONNREFUSED) || (e.noFiles && target == syscall.EMFILE)
}

// grpcStatusNames are the serving statuses GRPCSpec.ExpectedStatuses
// takes.
var grpcStatusNames = []string{"SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "UNKNOWN"}

// validate checks a gRPC spec.
func (s *GRPCSpec) validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: "grpc." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := validateHostPort("grpc.address", s.Address); err != nil {
		return err
	}
	if n := len(s.Service); n > MaxServiceLen {
		return bad("service", "must be at most %d bytes, got %d", MaxServiceLen, n)
	}
	if n := len(s.Authority); n > MaxAddressLen {
		return bad("authority", "must be at most %d bytes, got %d", MaxAddressLen, n)
	}
	if s.Authority != "" && !validHostHeader(s.Authority) {
		return bad("authority", `must be a host and optional port, e.g. "api.internal" or "api.internal:443", got %.80q`, s.Authority)
	}
	if len(s.Metadata) > MaxHeaders {
		return bad("metadata", "must be at most %d entries, got %d", MaxHeaders, len(s.Metadata))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Metadata)) {
		v := s.Metadata[k]
		if n := len(k) + len(v); n > MaxHeaderLen {
			return bad("metadata", "entry %.40q must be at most %d bytes, key and value together, got %d", k, MaxHeaderLen, n)
		}
		if !validMetadataKey(k) {
			return bad("metadata", `key %.80q must be lower-case letters, digits, "-", "_" and ".", not starting with "grpc-", e.g. "x-api-key"`, k)
		}
		if i := badHeaderByte(v); i >= 0 && !strings.HasSuffix(k, "-bin") {
			return bad("metadata", "value of %q must not contain control characters, got %q at byte %d", k, v[i], i)
		}
	}
	if len(s.ExpectedStatuses) > len(grpcStatusNames) {
		return bad("expected_statuses", "must list at most %d statuses, got %d", len(grpcStatusNames), len(s.ExpectedStatuses))
	}
	for i, name := range s.ExpectedStatuses {
		if !slices.Contains(grpcStatusNames, name) {
			return bad("expected_statuses", "must each be one of %s, got %.40q at index %d", strings.Join(grpcStatusNames, ", "), name, i)
		}
	}
	if s.TLSOptions != nil {
		return s.TLSOptions.validate("grpc.tls_options")
	}
	return nil
}

// validMetadataKey reports whether k is a gRPC metadata key a probe may
// send: lower-case, of gRPC's charset, and not one gRPC reserves.
func validMetadataKey(k string) bool {
	if k == "" || strings.HasPrefix(k, "grpc-") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

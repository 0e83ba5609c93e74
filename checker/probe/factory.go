package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Prober runs one probe against one target. Probe returns nil when the
// target passes and an error saying why when it does not.
//
// Probe must return by ctx's deadline and as soon as ctx is cancelled, and
// must do all its I/O under ctx (never context.Background). When it fails
// because ctx ended, the error satisfies errors.Is(err, context.DeadlineExceeded)
// or errors.Is(err, context.Canceled), so the caller can say "timeout after
// 1s" itself.
type Prober interface {
	Probe(ctx context.Context) error
}

// StatusError is returned by an HTTP Prober when the response status is not
// one that passes. Code is the status code received.
type StatusError struct {
	Code int
}

// Error returns "status <code>", e.g. "status 503".
func (e *StatusError) Error() string {
	return "status " + strconv.Itoa(e.Code)
}

// userAgent is sent by HTTP probes (unless the spec overrides it) and gRPC
// probes.
const userAgent = "pulse-probe/1"

// Factory builds Probers from Specs. It owns one *http.Transport shared by
// all the HTTP Probers it builds, so keep-alive connections are reused from
// one probe to the next. The transport never uses a proxy (proxy environment
// variables are ignored), never asks for compressed bodies, and verifies TLS
// against the system roots.
//
// A Factory is safe for concurrent use. The zero Factory is ready to use and
// behaves like one from NewFactory; a Factory must not be copied after first
// use.
type Factory struct {
	// rootCAs verifies TLS servers; nil means the system roots. Only tests
	// set it, before first use.
	rootCAs *x509.CertPool

	once      sync.Once
	transport *http.Transport
	client    *http.Client
}

// NewFactory returns a Factory that verifies TLS servers against the system
// roots.
func NewFactory() *Factory {
	return &Factory{}
}

// init builds the shared transport and client on first use.
func (f *Factory) init() {
	f.once.Do(func() {
		f.transport = &http.Transport{
			Proxy:               nil, // probe the target itself, whatever HTTP_PROXY says
			TLSClientConfig:     f.tlsConfig(),
			ForceAttemptHTTP2:   true,
			DisableCompression:  true,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		}
		f.client = &http.Client{
			Transport: f.transport,
			// A redirect is an answer like any other: report its status.
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	})
}

// tlsConfig returns a new TLS client configuration for one connection pool.
func (f *Factory) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: f.rootCAs, MinVersion: tls.VersionTLS12}
}

// New validates s and returns a Prober for it. When s is invalid it returns
// the *FieldError from s.Validate.
//
// The Prober is safe for concurrent use and keeps no reference to s. A gRPC
// Prober holds its own *grpc.ClientConn, reused between probes, and
// implements io.Closer: the caller must Close it when the target is removed.
// HTTP and TCP Probers hold nothing that needs closing.
func (f *Factory) New(s Spec) (Prober, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f.init()
	switch {
	case s.HTTP != nil:
		return newHTTPProber(f.client, s.HTTP), nil
	case s.TCP != nil:
		return &tcpProber{address: s.TCP.Address}, nil
	default:
		return newGRPCProber(s.GRPC, f.tlsConfig())
	}
}

// Close closes the idle connections of the shared HTTP transport. It is
// idempotent. Probers built earlier keep working (they open new connections
// as needed); gRPC Probers are not affected and must be closed on their own.
func (f *Factory) Close() {
	f.init()
	f.transport.CloseIdleConnections()
}

// withContext returns err, made to satisfy errors.Is(err, ctx.Err()) when
// ctx has ended and err does not already say so. Its text stays err's.
func withContext(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return &contextError{ctxErr: cerr, err: err}
	}
	return err
}

// contextError is an error that happened because its context ended.
type contextError struct {
	ctxErr error
	err    error
}

// Error returns the underlying error's text.
func (e *contextError) Error() string { return e.err.Error() }

// Unwrap returns both the context's error and the underlying one.
func (e *contextError) Unwrap() []error { return []error{e.ctxErr, e.err} }

// Describe turns an error returned by a Prober into short text for a person:
// "timeout" when the deadline passed, "canceled", "connection refused",
// "status 503", a gRPC serving status such as "NOT_SERVING", and otherwise
// the error's own text without Go's "Get \"url\": dial tcp addr:" prefixes
// and gRPC's transport wrapping. Describe(nil) is "".
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var (
		statusErr  *StatusError
		servingErr *servingError
		netErr     net.Error
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &statusErr):
		return statusErr.Error()
	case errors.As(err, &servingErr):
		return servingErr.Error()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
		return describeStatus(st)
	}
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed by the server"
	}
	return strings.TrimSpace(goNoiseless(err))
}

// goNoiseless returns err's text without the request and socket addresses
// that net/http and net put in front of the cause.
func goNoiseless(err error) string {
	for {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.Name != "" {
			return "lookup " + dnsErr.Name + ": " + dnsErr.Err
		}
		switch e := err.(type) {
		case *contextError:
			err = e.err
		case *url.Error:
			err = e.Err
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return err.Error()
		}
	}
}

// describeStatus shortens a gRPC status: "Code: message", where the message
// loses the transport's "connection error: desc = ..." wrapping, and
// Unavailable shows only the cause.
func describeStatus(st *status.Status) string {
	if st.Code() == codes.DeadlineExceeded {
		return "timeout"
	}
	msg := st.Message()
	if strings.Contains(msg, "connection refused") {
		return "connection refused"
	}
	for _, prefix := range []string{
		"last connection error: ",
		"connection error: ",
		"desc = ",
		`"`,
		"transport: ",
		"Error while dialing: ",
		"authentication handshake failed: ",
	} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	if rest, ok := strings.CutPrefix(msg, "dial "); ok {
		// "dial tcp 10.0.0.5:50051: connect: no route to host"
		if _, cause, ok := strings.Cut(rest, ": "); ok {
			msg = strings.TrimPrefix(cause, "connect: ")
		}
	}
	msg = strings.TrimSpace(strings.TrimSuffix(msg, `"`))
	if st.Code() == codes.Unavailable && msg != "" {
		return msg
	}
	return st.Code().String() + ": " + msg
}

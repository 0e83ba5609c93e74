package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestFactoryNewValidates(t *testing.T) {
	f := newTestFactory(t)
	for _, tt := range []struct {
		spec      Spec
		wantField string
	}{
		{Spec{}, "probe"},
		{Spec{HTTP: &HTTPSpec{URL: "ftp://x"}}, "http.url"},
		{Spec{TCP: &TCPSpec{Address: "x"}}, "tcp.address"},
		{Spec{GRPC: &GRPCSpec{Address: "x:0"}}, "grpc.address"},
	} {
		p, err := f.New(tt.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.wantField {
			t.Errorf("New(%+v) error = %v, want *FieldError for %q", tt.spec, err, tt.wantField)
		}
		if p != nil {
			t.Errorf("New(%+v) returned a Prober with an error", tt.spec)
		}
	}
}

// TestFactoryTransport checks what no loopback test can observe: requests
// never go through a proxy (ProxyFromEnvironment skips loopback anyway).
func TestFactoryTransport(t *testing.T) {
	f := newTestFactory(t)
	f.init()
	tr := f.transport
	if tr.Proxy != nil {
		t.Error("transport has a Proxy func; probes must reach the target directly")
	}
	if !tr.DisableCompression {
		t.Error("transport asks for compressed bodies")
	}
	if tr.MaxIdleConnsPerHost < 2 {
		t.Errorf("MaxIdleConnsPerHost = %d, want at least 2", tr.MaxIdleConnsPerHost)
	}
	if f.client.Transport != tr || f.client.CheckRedirect == nil {
		t.Error("client does not use the shared transport with redirects disabled")
	}
}

// TestFactoryClose shows Close drops the idle keep-alive connection (the
// next probe dials again), is idempotent, and leaves probers usable.
func TestFactoryClose(t *testing.T) {
	srv, conns := newHTTPServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f := NewFactory()
	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f.Close()
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Probe after Close = %v, want nil", err)
	}
	f.Close()
	if n := conns.Load(); n != 2 {
		t.Errorf("opened %d connections, want 2 (one before and one after Close)", n)
	}
}

func TestFactoryZeroValue(t *testing.T) {
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var f Factory
	defer f.Close()
	p := newProber(t, &f, Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Errorf("Probe() = %v, want nil", err)
	}
}

// TestFactoryConcurrent builds and runs probers from many goroutines at once;
// with -race it checks the Factory and its Probers are safe for that.
func TestFactoryConcurrent(t *testing.T) {
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f := newTestFactory(t)
	shared := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL, Headers: map[string]string{"X-A": "1"}}})
	tcp := newProber(t, f, Spec{TCP: &TCPSpec{Address: srv.Listener.Addr().String()}})
	var wg sync.WaitGroup
	errs := make(chan error, 3*16)
	for range 16 {
		wg.Go(func() {
			p, err := f.New(Spec{HTTP: &HTTPSpec{URL: srv.URL}})
			if err != nil {
				errs <- err
				return
			}
			ctx := timeoutCtx(t, 10*time.Second)
			errs <- p.Probe(ctx)
			errs <- shared.Probe(ctx)
			errs <- tcp.Probe(ctx)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestDescribe(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &url.Error{Op: "Get", URL: "http://10.0.0.5:8080/healthz", Err: &net.OpError{
			Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080},
			Err: &os.SyscallError{Syscall: "connect", Err: errno},
		}}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"deadline in url error", &url.Error{Op: "Get", URL: "http://x", Err: context.DeadlineExceeded}, "timeout"},
		{"deadline added by withContext", withContext(timeoutCtx(t, -time.Second), errors.New("some i/o error")), "timeout"},
		{"canceled", withContext(ctx, errors.New("some i/o error")), "canceled"},
		{"net timeout", &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ETIMEDOUT}}, "timeout"},
		{"refused", dial(syscall.ECONNREFUSED), "connection refused"},
		{"wrapped refused", fmt.Errorf("probe web-1: %w", dialRefused()), "connection refused"},
		{"no route", dial(syscall.EHOSTUNREACH), "no route to host"},
		{"reset", &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}}, "connection reset by peer"},
		{"dns", &url.Error{Op: "Get", URL: "http://nosuch.invalid", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nosuch.invalid", Server: "10.0.0.53:53", IsNotFound: true}}}, "lookup nosuch.invalid: no such host"},
		{"eof", &url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, "connection closed by the server"},
		{"status", &StatusError{Code: 503}, "status 503"},
		{"wrapped status", fmt.Errorf("probe web-1: %w", &StatusError{Code: 500}), "status 500"},
		{"serving", &servingError{status: healthpb.HealthCheckResponse_NOT_SERVING}, "NOT_SERVING"},
		{"grpc not found", newRPCError(status.Error(codes.NotFound, "unknown service")), "SERVICE_UNKNOWN"},
		{"grpc refused", newRPCError(status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)), "connection refused"},
		{"raw grpc refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), "connection refused"},
		{"grpc no route", newRPCError(status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.5:50051: connect: no route to host"`)), "no route to host"},
		{"grpc tls", newRPCError(status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)), "tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"grpc deadline status", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "timeout"},
		{"grpc unimplemented", newRPCError(status.Error(codes.Unimplemented, "unknown service grpc.health.v1.Health")), "Unimplemented: unknown service grpc.health.v1.Health"},
		{"other", errors.New("  something odd "), "something odd"},

		{"egress", &url.Error{Op: "Get", URL: "http://metadata.test/", Err: &EgressError{Host: "metadata.test", Addr: netip.MustParseAddr("169.254.169.254"), Deny: netip.MustParsePrefix("169.254.0.0/16")}}, "metadata.test resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{"egress in grpc status", newRPCError(status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: 169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"`)), "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},

		// What a server sent is not repeated, and whatever is shown is short
		// and printable.
		{"not HTTP", &url.Error{Op: "Get", URL: "http://x", Err: errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "\x00\x00\x06\x04\x00"`)}, "malformed HTTP response (not HTTP?)"},
		{"bad status code", &url.Error{Op: "Get", URL: "http://x", Err: errors.New(`malformed HTTP status code "<script>alert(1)</script>"`)}, "malformed HTTP status code"},
		{"spoke first", &url.Error{Op: "Get", URL: "http://x", Err: errors.New("readLoopPeekFailLocked: %!w(<nil>)")}, "unsolicited response (not HTTP?)"},
		{"bad header line", errors.New("net/http: HTTP/1.x transport connection broken: malformed MIME header line: Set-Cookie secret"), "malformed MIME header line"},
		{"control characters", errors.New("bad\x00thing\r\nhere\x1b[31m\tend"), "bad?thing  here?[31m end"},
		{"invalid UTF-8", errors.New("a\xffb"), "a?b"},
		{"bidi override", errors.New("abc\u202edef"), "abc?def"},
		{"exactly the limit", errors.New(strings.Repeat("y", 200)), strings.Repeat("y", 200)},
		{"too long", errors.New(strings.Repeat("x", 500)), strings.Repeat("x", 197) + "..."},
		{"too long, cut between runes", status.Error(codes.Internal, strings.Repeat("é", 300)), "Internal: " + strings.Repeat("é", 93) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe(tt.err); got != tt.want {
				t.Errorf("Describe(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// TestWithContext checks the wrapper keeps the original text and both
// errors.Is chains.
func TestWithContext(t *testing.T) {
	cause := dialRefused()
	ctx := timeoutCtx(t, -time.Second)
	err := withContext(ctx, cause)
	if err.Error() != cause.Error() {
		t.Errorf("text = %q, want %q", err, cause)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is lost a cause: %v", err)
	}
	if got := withContext(t.Context(), cause); got != cause {
		t.Errorf("withContext with a live context = %v, want the error unchanged", got)
	}
}

func dialRefused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
}

package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// startGRPC serves srv on a loopback port until the test ends and returns
// its address and a count of accepted connections.
func startGRPC(t *testing.T, srv *grpc.Server) (string, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(cl)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return ln.Addr().String(), cl
}

// startHealth serves a standard grpc health server with the given statuses
// ("" is SERVING already).
func startHealth(t *testing.T, statuses map[string]healthpb.HealthCheckResponse_ServingStatus, opts ...grpc.ServerOption) (string, *health.Server, *countingListener) {
	t.Helper()
	hs := health.NewServer()
	for svc, st := range statuses {
		hs.SetServingStatus(svc, st)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, hs)
	addr, cl := startGRPC(t, srv)
	return addr, hs, cl
}

// newGRPCTestProber builds a gRPC Prober with f and closes it when the test
// ends.
func newGRPCTestProber(t *testing.T, f *Factory, s GRPCSpec) Prober {
	t.Helper()
	p := newProber(t, f, Spec{GRPC: &s})
	c, ok := p.(io.Closer)
	if !ok {
		t.Fatalf("gRPC Prober %T does not implement io.Closer", p)
	}
	t.Cleanup(func() { c.Close() })
	return p
}

func TestGRPCStatus(t *testing.T) {
	addr, _, _ := startHealth(t, map[string]healthpb.HealthCheckResponse_ServingStatus{
		"up":      healthpb.HealthCheckResponse_SERVING,
		"down":    healthpb.HealthCheckResponse_NOT_SERVING,
		"unknown": healthpb.HealthCheckResponse_SERVICE_UNKNOWN,
	})
	f := newTestFactory(t)
	tests := []struct {
		service string
		want    string // "" means pass
	}{
		{service: ""},
		{service: "up"},
		{service: "down", want: "NOT_SERVING"},
		{service: "unknown", want: "SERVICE_UNKNOWN"},
		// The health server answers NotFound for a service it never heard of.
		{service: "never-registered", want: "SERVICE_UNKNOWN"},
	}
	for _, tt := range tests {
		name := tt.service
		if name == "" {
			name = "whole server"
		}
		t.Run(name, func(t *testing.T) {
			p := newGRPCTestProber(t, f, GRPCSpec{Address: addr, Service: tt.service})
			err := p.Probe(timeoutCtx(t, 10*time.Second))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Probe() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want || Describe(err) != tt.want {
				t.Errorf("Probe() = %v (Describe %q), want %q", err, Describe(err), tt.want)
			}
		})
	}
}

// TestGRPCReusesConnection: one Prober dials once, and sees status changes
// on the connection it keeps.
func TestGRPCReusesConnection(t *testing.T) {
	addr, hs, cl := startHealth(t, map[string]healthpb.HealthCheckResponse_ServingStatus{"svc": healthpb.HealthCheckResponse_SERVING})
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr, Service: "svc"})
	for i := range 3 {
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err == nil || err.Error() != "NOT_SERVING" {
		t.Errorf("after status change, Probe() = %v, want NOT_SERVING", err)
	}
	if n := cl.accepted.Load(); n != 1 {
		t.Errorf("4 probes opened %d connections, want 1", n)
	}
}

func TestGRPCRefused(t *testing.T) {
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: refusedAddr(t)})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Probe() = %v, want it to match syscall.ECONNREFUSED", err)
	}
	if d := Describe(err); d != "connection refused" {
		t.Errorf("Describe = %q, want %q", d, "connection refused")
	}
	if err != nil && !strings.HasPrefix(err.Error(), "Unavailable: ") {
		t.Errorf("Error() = %q, want the gRPC code first", err)
	}
}

// TestGRPCHungServerTimesOut: the server accepts the TCP connection and never
// speaks HTTP/2; the Check must end at the probe's deadline.
func TestGRPCHungServerTimesOut(t *testing.T) {
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: silentAddr(t)})
	err := probeWithin(t, timeoutCtx(t, 300*time.Millisecond), p)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Probe() = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if d := Describe(err); d != "timeout" {
		t.Errorf("Describe = %q, want %q", d, "timeout")
	}
}

// blockingHealth answers SERVING once released.
type blockingHealth struct {
	healthpb.UnimplementedHealthServer
	entered chan struct{}
	release chan struct{}
}

func (b *blockingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	close(b.entered)
	select {
	case <-b.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestGRPCSlowButInTime(t *testing.T) {
	hs := &blockingHealth{entered: make(chan struct{}), release: make(chan struct{})}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	addr, _ := startGRPC(t, srv)
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr})
	done := make(chan error, 1)
	go func() { done <- p.Probe(timeoutCtx(t, 30*time.Second)) }()
	<-hs.entered
	select {
	case err := <-done:
		t.Fatalf("Probe returned %v before the server answered", err)
	default:
	}
	close(hs.release)
	if err := <-done; err != nil {
		t.Errorf("Probe() = %v, want nil", err)
	}
}

func TestGRPCCancel(t *testing.T) {
	hs := &blockingHealth{entered: make(chan struct{}), release: make(chan struct{})}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	addr, _ := startGRPC(t, srv)
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Probe(ctx) }()
	<-hs.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Probe() = %v, want it to wrap context.Canceled", err)
	}
}

// TestGRPCNoHealthService: a server without grpc.health.v1 gives a readable
// error naming the gRPC code.
func TestGRPCNoHealthService(t *testing.T) {
	addr, _ := startGRPC(t, grpc.NewServer())
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	want := "Unimplemented: unknown service grpc.health.v1.Health"
	if err == nil || err.Error() != want || Describe(err) != want {
		t.Errorf("Probe() = %v (Describe %q), want %q", err, Describe(err), want)
	}
}

func TestGRPCTLS(t *testing.T) {
	cert, roots := testCert(t)
	addr, _, _ := startHealth(t, nil, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))

	t.Run("trusted", func(t *testing.T) {
		f := &Factory{rootCAs: roots}
		t.Cleanup(f.Close)
		p := newGRPCTestProber(t, f, GRPCSpec{Address: addr, TLS: true})
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
			t.Errorf("Probe() = %v, want nil", err)
		}
	})
	t.Run("system roots reject a private CA", func(t *testing.T) {
		p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr, TLS: true})
		err := p.Probe(timeoutCtx(t, 10*time.Second))
		if err == nil || !strings.Contains(Describe(err), "certificate") {
			t.Errorf("Probe() = %v (Describe %q), want a certificate error", err, Describe(err))
		}
	})
	t.Run("plaintext to a TLS server", func(t *testing.T) {
		p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr})
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); err == nil {
			t.Error("Probe() = nil, want an error")
		}
	})
}

func TestGRPCClose(t *testing.T) {
	addr, _, _ := startHealth(t, nil)
	p := newProber(t, newTestFactory(t), Spec{GRPC: &GRPCSpec{Address: addr}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c := p.(io.Closer)
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err == nil {
		t.Error("Probe after Close = nil, want an error")
	}
}

// rudeHealth answers every Check with a long status message full of
// control characters.
type rudeHealth struct {
	healthpb.UnimplementedHealthServer
}

func (rudeHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Internal, "\x1b[2J\r\n"+strings.Repeat("secret=hunter2\n", 1000))
}

// TestGRPCHostileMessage: whatever a server puts in its status message,
// Describe shows at most 200 printable bytes of it.
func TestGRPCHostileMessage(t *testing.T) {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, rudeHealth{})
	addr, _ := startGRPC(t, srv)
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr})
	d := Describe(p.Probe(timeoutCtx(t, 10*time.Second)))
	if len(d) > 200 || !strings.HasPrefix(d, "Internal: ?[2J  secret=hunter2 secret") || !strings.HasSuffix(d, "...") {
		t.Errorf("Describe = %q (%d bytes), want the start of the message, printable, cut to 200 bytes", d, len(d))
	}
	for _, r := range d {
		if !unicode.IsPrint(r) {
			t.Errorf("Describe = %q, has non-printable %q", d, r)
			break
		}
	}
}

// quietProxy forwards TCP connections to a backend until Quiet, after
// which the connections it has then stop carrying bytes either way while
// staying open, as over a path that silently drops every packet; new
// connections are forwarded as before.
type quietProxy struct {
	ln       net.Listener
	backend  string
	accepted atomic.Int64
	quietTo  atomic.Int64 // connections numbered below it are quiet
	done     chan struct{}
	wg       sync.WaitGroup
}

func startQuietProxy(t *testing.T, backend string) *quietProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &quietProxy{ln: ln, backend: backend, done: make(chan struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *quietProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		id := p.accepted.Add(1) - 1
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					break
				}
				if id < p.quietTo.Load() {
					continue // the path went quiet: the bytes are lost
				}
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			dst.Close()
			src.Close()
		}
		p.wg.Go(func() { pipe(b, c) })
		p.wg.Go(func() { pipe(c, b) })
		p.wg.Go(func() { <-p.done; c.Close(); b.Close() })
	}
}

// Quiet makes every connection open now carry nothing more.
func (p *quietProxy) Quiet() { p.quietTo.Store(p.accepted.Load()) }

// TestGRPCQuietConnectionIsDropped: once a probe times out on a kept
// connection that went quiet (no reset, no refusal), the next probe does
// not wait on it again: it dials afresh and passes over the new path.
func TestGRPCQuietConnectionIsDropped(t *testing.T) {
	addr, _, _ := startHealth(t, nil)
	proxy := startQuietProxy(t, addr)
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: proxy.ln.Addr().String()})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	proxy.Quiet()
	if err := probeWithin(t, timeoutCtx(t, 300*time.Millisecond), p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe over the quiet connection: %v, want a timeout", err)
	}
	if err := p.Probe(timeoutCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("probe after the timeout: %v, want a pass over a new connection", err)
	}
	if n := proxy.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the quiet one and the new one", n)
	}
}

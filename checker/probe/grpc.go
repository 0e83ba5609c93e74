package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// grpcProber asks a grpc.health.v1 server about one service. It holds one
// *grpc.ClientConn, made without dialling and reused between probes; Probe is
// safe for concurrent use, and Close closes the connection.
type grpcProber struct {
	conn    *grpc.ClientConn
	health  healthpb.HealthClient
	service string

	closeOnce sync.Once
}

// newGRPCProber builds a prober for a validated spec. tlsConf is used when
// s.TLS is set. Every connection goes through d.
//
// The address goes to the channel behind "passthrough:///", so gRPC takes
// it as it is: it neither looks it up itself (d does, on every dial, under
// the egress policy) nor reads a scheme into it, as it would make "unix:80"
// a Unix socket.
func newGRPCProber(s *GRPCSpec, tlsConf *tls.Config, d *guardedDialer) (*grpcProber, error) {
	creds := insecure.NewCredentials()
	if s.TLS {
		creds = credentials.NewTLS(tlsConf)
	}
	conn, err := grpc.NewClient("passthrough:///"+s.Address,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
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
	)
	if err != nil {
		return nil, &FieldError{Field: "grpc.address", Reason: fmt.Sprintf("cannot be used as a gRPC target (%v), got %q", err, s.Address)}
	}
	return &grpcProber{conn: conn, health: healthpb.NewHealthClient(conn), service: s.Service}, nil
}

// Probe calls Health/Check under ctx. SERVING passes. Any other serving
// status, and a NotFound error (how a health server says it does not know
// the service), fail with an error whose text is the status name, e.g.
// "NOT_SERVING" or "SERVICE_UNKNOWN". Other RPC errors fail with
// "<code>: <message>"; when the server refused the connection the error
// satisfies errors.Is(err, syscall.ECONNREFUSED).
func (p *grpcProber) Probe(ctx context.Context) error {
	resp, err := p.health.Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
	if err != nil {
		return withContext(ctx, newRPCError(err))
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return &servingError{status: st}
	}
	return nil
}

// Close closes the connection. It is idempotent: later calls return nil.
// Probes after Close fail.
func (p *grpcProber) Close() error {
	var err error
	p.closeOnce.Do(func() { err = p.conn.Close() })
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
}

// newRPCError converts an error from Health/Check.
func newRPCError(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.NotFound {
		return &servingError{status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}
	}
	return &rpcError{st: st, refused: strings.Contains(st.Message(), "connection refused")}
}

// Error returns "<code>: <message>", e.g. "Unimplemented: unknown service
// grpc.health.v1.Health".
func (e *rpcError) Error() string { return e.st.Code().String() + ": " + e.st.Message() }

// GRPCStatus lets status.FromError see the original status.
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// Is reports a refused connection as syscall.ECONNREFUSED.
func (e *rpcError) Is(target error) bool {
	return e.refused && target == syscall.ECONNREFUSED
}

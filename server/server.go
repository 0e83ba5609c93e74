// Package server exposes a checker.Checker as the gRPC service
// pulse.v1.HealthChecker. It is the only package that knows the generated
// types: it converts requests into checker types and checker errors into gRPC
// status codes.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"pulse/checker"
	pb "pulse/gen/pulse/v1"
)

// Server implements pb.HealthCheckerServer over a checker.Checker. Its
// methods are safe for concurrent use. Create it with New.
type Server struct {
	pb.UnimplementedHealthCheckerServer
	c *checker.Checker
}

// New returns a Server backed by c. The caller keeps ownership of c.
func New(c *checker.Checker) *Server { return &Server{c: c} }

// AddTarget registers or updates a target.
func (s *Server) AddTarget(_ context.Context, req *pb.AddTargetRequest) (*pb.AddTargetResponse, error) {
	spec, err := specFromProto(req.GetTarget())
	if err != nil {
		return nil, toStatus(err, "target.")
	}
	st, created, err := s.c.Add(spec)
	if err != nil {
		return nil, toStatus(err, "target.")
	}
	return &pb.AddTargetResponse{Created: created, Status: statusToProto(st)}, nil
}

// RemoveTarget unregisters a target; removed is false for an unknown name.
func (s *Server) RemoveTarget(_ context.Context, req *pb.RemoveTargetRequest) (*pb.RemoveTargetResponse, error) {
	return &pb.RemoveTargetResponse{Removed: s.c.Remove(req.GetName())}, nil
}

// State returns one target's status.
func (s *Server) State(_ context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	st, err := s.c.Status(req.GetName())
	if err != nil {
		return nil, toStatus(err, "")
	}
	return &pb.StateResponse{Status: statusToProto(st)}, nil
}

// Healthy lists routable targets by name.
func (s *Server) Healthy(_ context.Context, req *pb.HealthyRequest) (*pb.HealthyResponse, error) {
	return &pb.HealthyResponse{Names: s.c.Healthy(req.GetGroup())}, nil
}

// ListTargets returns every target's status, sorted by name.
func (s *Server) ListTargets(_ context.Context, req *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	list := s.c.List(req.GetGroup())
	out := &pb.ListTargetsResponse{Targets: make([]*pb.TargetStatus, len(list))}
	for i, st := range list {
		out.Targets[i] = statusToProto(st)
	}
	return out, nil
}

// WatchTransitions streams transitions until the client goes away, the
// server shuts down, or the client falls too far behind.
//
// Only this goroutine sends on the stream; the checker offers transitions to
// the subscription without ever waiting for it.
func (s *Server) WatchTransitions(req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
	sub := s.c.Subscribe(checker.Filter{Group: req.GetGroup(), Names: req.GetNames()})
	defer sub.Close()
	// Headers tell the client the subscription is live: every transition
	// from now on will reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case tr, ok := <-sub.C():
			if !ok {
				return toStatus(sub.Err(), "")
			}
			if err := stream.Send(transitionToProto(tr)); err != nil {
				return err
			}
		}
	}
}

// toStatus maps checker errors to gRPC status errors; prefix is prepended
// to a field error's field ("target.").
func toStatus(err error, prefix string) error {
	var fe *checker.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, prefix+fe.Error())
	case errors.Is(err, checker.ErrUnknownTarget):
		return status.Errorf(codes.NotFound, "%v; list targets with ListTargets or add it with AddTarget", err)
	case errors.Is(err, checker.ErrSubscriberTooSlow):
		return status.Errorf(codes.ResourceExhausted, "%v: this stream stopped reading while its buffer filled; watch again", err)
	case errors.Is(err, checker.ErrClosed):
		return status.Error(codes.Unavailable, "pulsed is shutting down; retry against a running instance")
	default:
		return status.Errorf(codes.Internal, "internal error: %v", err)
	}
}

// Options configures NewGRPCServer.
type Options struct {
	// Logger receives request logs and recovered panics. If nil, nothing is
	// logged.
	Logger *slog.Logger
	// ServerOptions are passed to grpc.NewServer after the interceptors.
	ServerOptions []grpc.ServerOption
}

// NewGRPCServer returns a *grpc.Server serving s as pulse.v1.HealthChecker,
// plus grpc.health.v1 for the server itself (returned so the caller can
// report NOT_SERVING on shutdown) and server reflection for grpcurl.
//
// Every call goes through, outermost first: request logging, panic
// recovery (a handler panic becomes Internal and the server lives on), and
// request validation (InvalidArgument naming the field).
func NewGRPCServer(s *Server, opts Options) (*grpc.Server, *health.Server) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	unary, stream := Interceptors(logger, s.c.Defaults())
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, opts.ServerOptions...)...)
	pb.RegisterHealthCheckerServer(gs, s)
	hs := health.NewServer()
	hs.SetServingStatus(pb.HealthChecker_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// Interceptors returns the server's interceptor chains, outermost first:
// logging, recovery, validation. defaults complete AddTarget specs before
// they are validated.
func Interceptors(logger *slog.Logger, defaults checker.Defaults) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	logFn := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	onPanic := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error: the request crashed its handler; the server logged the details")
	})
	// Log each finished call of the API; health checks and reflection come
	// from load balancers and tools far too often to log.
	apiOnly := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service == pb.HealthChecker_ServiceDesc.ServiceName
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	v := validator{defaults: defaults}
	return []grpc.UnaryServerInterceptor{
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(logFn, logOpts...), apiOnly),
			recovery.UnaryServerInterceptor(onPanic),
			v.unary,
		}, []grpc.StreamServerInterceptor{
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(logFn, logOpts...), apiOnly),
			recovery.StreamServerInterceptor(onPanic),
			v.stream,
		}
}

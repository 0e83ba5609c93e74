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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Server implements pb.HealthCheckerServer over a checker.Checker. Its
// methods are safe for concurrent use. Create it with New.
type Server struct {
	pb.UnimplementedHealthCheckerServer
	c         *checker.Checker
	progress  time.Duration
	encoded   encodedCache  // events encoded once for every stream; see fanout.go
	history   HistorySource // nil: History answers UNIMPLEMENTED; see history.go
	reload    func() []ReloadResult
	discovery DiscoveryStatus // nil: ListDiscovery answers no group
	directory Directory       // nil: History names another replica without its address
}

// Option configures a Server.
type Option func(*Server)

// WithProgressInterval sets how long a WatchTransitions stream may stay idle
// before it gets a progress event. The default is 30s.
func WithProgressInterval(d time.Duration) Option {
	return func(s *Server) { s.progress = d }
}

// New returns a Server backed by c. The caller keeps ownership of c.
func New(c *checker.Checker, opts ...Option) *Server {
	s := &Server{c: c, progress: 30 * time.Second}
	for _, o := range opts {
		o(s)
	}
	return s
}

// watchBatch bounds the events a stream takes from its watcher at once.
const watchBatch = 256

// keptEvents bounds the buffer a stream keeps for its next batch: a burst's
// larger one goes.
const keptEvents = 8

// AddTarget registers or updates a target.
func (s *Server) AddTarget(_ context.Context, req *pb.AddTargetRequest) (*pb.AddTargetResponse, error) {
	spec, err := SpecFromProto(req.GetTarget())
	if err == nil {
		err = unredact(&spec, s.c.Status) // a header sent back as read keeps its value
	}
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
// With drain_for it drains the target and removes it later.
func (s *Server) RemoveTarget(_ context.Context, req *pb.RemoveTargetRequest) (*pb.RemoveTargetResponse, error) {
	if d := req.GetDrainFor(); d != nil {
		drainFor, err := positiveDuration("drain_for", d)
		if err != nil {
			return nil, toStatus(err, "")
		}
		st, err := s.c.Drain(req.GetName(), drainFor)
		if errors.Is(err, checker.ErrUnknownTarget) {
			return &pb.RemoveTargetResponse{}, nil // as without drain_for
		}
		if err != nil {
			return nil, toStatus(err, "")
		}
		return &pb.RemoveTargetResponse{Removed: true, RemoveTime: timestamp(st.Spec.Admin().RemoveAt)}, nil
	}
	removed, err := s.c.Remove(req.GetName())
	if err != nil {
		return nil, toStatus(err, "")
	}
	return &pb.RemoveTargetResponse{Removed: removed}, nil
}

// State returns one target's status. With replicas it sees every write
// acknowledged before it, on any replica (catchUp).
func (s *Server) State(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	st, err := s.c.Status(req.GetName())
	if err != nil {
		return nil, toStatus(err, "")
	}
	out := statusToProto(st)
	if readOnly(ctx) {
		readView(out)
	}
	resp := &pb.StateResponse{Status: out}
	resp.Replica, _ = s.c.Replica()
	if resp.Replica != "" && !st.ProbedBy(resp.Replica) {
		resp.OwnerAddress, _ = AddressesFor(s.directory, st.Owner, peerHost(ctx))
	}
	return resp, nil
}

// Healthy lists routable targets by name. With replicas it sees every
// write acknowledged before it, on any replica (catchUp).
func (s *Server) Healthy(ctx context.Context, req *pb.HealthyRequest) (*pb.HealthyResponse, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	return &pb.HealthyResponse{Names: s.c.Healthy(req.GetGroup())}, nil
}

// catchUp makes a read see every write acknowledged before it, on any
// replica (checker.CatchUp): State, Healthy and ListTargets call it first,
// and WatchTransitions before its snapshot or a resume from a revision
// this replica has not applied. grpc.health's Check and Watch, which load
// balancers call often, do not. It fails only when ctx ends or the checker
// closes: while etcd is unreachable the read answers from this replica's
// view.
func (s *Server) catchUp(ctx context.Context) error {
	if err := s.c.CatchUp(ctx); err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return toStatus(err, "")
	}
	return nil
}

// listStoreWait bounds how long ListTargets waits for its revision to be
// stored.
const listStoreWait = 5 * time.Second

// ListTargets returns every target's status, sorted by name, with the
// groups' pool states and the checker's own.
//
// Its revision is one a watch can resume from: it is stored; with replicas
// it is at least etcd's revision when the call arrived (catchUp). While the
// store cannot write, ListTargets waits for it at most listStoreWait, then
// answers UNAVAILABLE with the store's error rather than hang (the status
// page and /metrics show the targets meanwhile).
func (s *Server) ListTargets(ctx context.Context, req *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, listStoreWait)
	defer cancel()
	list, rev, err := s.c.ListContext(wctx, req.GetGroup())
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if errors.Is(err, checker.ErrClosed) {
			return nil, toStatus(err, "")
		}
		why := "the store has not stored it yet"
		if serr := s.c.StoreErr(); serr != nil {
			why = "the store cannot write: " + serr.Error()
		}
		return nil, status.Errorf(codes.Unavailable, "revision %d is not stored after %v (%s); retry once the store recovers (the status page and /metrics show the targets meanwhile)", rev, listStoreWait, why)
	}
	out := &pb.ListTargetsResponse{Targets: make([]*pb.TargetStatus, len(list)), Revision: rev}
	read := readOnly(ctx)
	for i, st := range list {
		out.Targets[i] = statusToProto(st)
		if read {
			readView(out.Targets[i])
		}
	}
	for _, g := range s.c.Groups(req.GetGroup()) {
		out.Groups = append(out.Groups, groupStatusToProto(g))
	}
	out.Checker = overloadToProto(s.c.Overload())
	if err := s.c.StoreErr(); err != nil {
		out.Checker.RegistryError = err.Error()
	}
	out.Checker.Replica, out.Checker.Replicas = s.c.Replica()
	for _, o := range s.c.DegradedReplicas() {
		out.Checker.DegradedReplicas = append(out.Checker.DegradedReplicas, o.Replica)
	}
	return out, nil
}

// SetMode sets the administrative mode of a target or of a group's
// targets.
func (s *Server) SetMode(_ context.Context, req *pb.SetModeRequest) (*pb.SetModeResponse, error) {
	mr, err := modeRequestFromProto(req)
	if err != nil {
		return nil, toStatus(err, "")
	}
	sts, err := s.c.SetMode(mr)
	if err != nil {
		return nil, toStatus(err, "")
	}
	out := &pb.SetModeResponse{Targets: make([]*pb.TargetStatus, len(sts))}
	for i, st := range sts {
		out.Targets[i] = statusToProto(st)
	}
	return out, nil
}

// SetGroupPolicy sets or clears a group's pool policy.
func (s *Server) SetGroupPolicy(_ context.Context, req *pb.SetGroupPolicyRequest) (*pb.SetGroupPolicyResponse, error) {
	gp, err := groupPolicyFromProto(req.GetPolicy())
	if err != nil {
		return nil, toStatus(err, "policy.")
	}
	g, err := s.c.SetGroupPolicy(req.GetGroup(), gp)
	if err != nil {
		var fe *checker.FieldError
		if errors.As(err, &fe) && fe.Field != "group" {
			return nil, toStatus(err, "policy.")
		}
		return nil, toStatus(err, "")
	}
	return &pb.SetGroupPolicyResponse{Group: groupStatusToProto(g)}, nil
}

// ReportOutcome feeds a passive outcome to a target that accepts them.
func (s *Server) ReportOutcome(_ context.Context, req *pb.ReportOutcomeRequest) (*pb.ReportOutcomeResponse, error) {
	o, err := outcomeFromProto(req)
	if err != nil {
		return nil, toStatus(err, "")
	}
	st, counted, err := s.c.ReportOutcome(req.GetTarget(), o)
	switch { // with replicas; unlike AddTarget, an outcome sent again counts again
	case errors.Is(err, checker.ErrUncertain):
		return nil, status.Errorf(codes.Unavailable, "%v; a retry may count the outcome twice", err)
	case errors.Is(err, checker.ErrLagging):
		return nil, status.Errorf(codes.Unavailable, "%v; the outcome is stored and counted: do not send it again", err)
	}
	if err != nil {
		return nil, toStatus(err, "")
	}
	return &pb.ReportOutcomeResponse{Counted: counted, Status: statusToProto(st)}, nil
}

// WatchTransitions streams the registry's events: a snapshot then live
// events, or a replay from a start revision then live events, until the
// client goes away, the server shuts down, or the stream falls further
// behind than the history holds. See the proto for the contract.
//
// Only this goroutine sends on the stream; the checker never waits for it.
func (s *Server) WatchTransitions(req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
	if rev := req.GetStartRevision(); rev == 0 || s.c.Revision() < rev {
		// A snapshot is a read: with replicas it holds every write
		// acknowledged before the call, on any replica ('pulsectl add'
		// on one, then 'pulsectl wait' on another). A client may also
		// resume here from a revision another replica gave it, which
		// this one may not have applied yet, even when nothing under
		// the fleet's prefix changed up to it (another replica reached
		// it through a progress notification): waiting would see it
		// only on etcd's next notification, minutes away, so ask for
		// one. A revision still ahead after that is not etcd's (another
		// fleet's): Watch refuses it.
		if err := s.catchUp(stream.Context()); err != nil {
			return err
		}
	}
	w, err := s.c.Watch(checker.Filter{Group: req.GetGroup(), Names: req.GetNames(), Source: peerHost(stream.Context())}, req.GetStartRevision())
	if err != nil {
		return toStatus(err, "")
	}
	defer w.Close()
	// Headers tell the client the watch is registered: every event from
	// here on will reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	growStack()
	read := readOnly(stream.Context())
	last := req.GetStartRevision() // the revision a client can resume from
	if last == 0 {
		snap, rev := w.Snapshot()
		for _, st := range snap {
			out := statusToProto(st)
			if read {
				readView(out)
			}
			if err := stream.Send(&pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: out}}); err != nil {
				return err
			}
		}
		if err := stream.Send(&pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_SnapshotComplete{SnapshotComplete: &pb.SnapshotComplete{}}}); err != nil {
			return err
		}
		last = rev
	}
	// The loop waits on the watcher alone: the stream's end closes it, and
	// the progress timer wakes it. A select that also waited on the
	// context and on a timer's channel cost each stream more per event
	// than the watcher's own read (BENCHMARKS.md, "Delivery without the
	// harness's own costs").
	ctx := stream.Context()
	stop := context.AfterFunc(ctx, w.Close)
	defer stop()
	var progressDue atomic.Bool
	progress := time.AfterFunc(s.progress, func() {
		progressDue.Store(true)
		w.Wake()
	})
	defer progress.Stop()
	lastSent := time.Now() // when the stream last carried an event or a progress mark
	sender := newEventSender(s, stream, read)
	var buf []checker.Event // reused: events are copied in, not allocated per call
	for {
		evs, err := w.NextAppend(buf[:0], watchBatch)
		if errors.Is(err, checker.ErrClosed) {
			if ctx.Err() != nil { // closed by the stream's end
				return status.FromContextError(ctx.Err()).Err()
			}
			// The watcher handed out every event published before the
			// checker closed, and the stream sent them: its position is the
			// last published revision (past the events a filter leaves
			// out), the one a pulsed restarted on its store resumes from.
			if rev, _ := w.Progress(); rev > last {
				last = rev
			}
			return status.Errorf(codes.Unavailable, shutdownMsg+"; reconnect and resume with start_revision %d", last)
		}
		if err != nil {
			return toStatus(err, "")
		}
		for _, e := range evs {
			if err := sender.send(e); err != nil {
				return err
			}
			last = e.Revision
		}
		clear(evs) // hold no event's strings while idle
		if cap(evs) <= keptEvents {
			buf = evs
		}
		if len(evs) > 0 {
			lastSent = time.Now()
			if len(evs) == watchBatch {
				continue // there may be more; if not, Next signalled Ready
			}
		}
		<-w.Ready()
		if progressDue.Load() && progressDue.Swap(false) {
			if idle := time.Since(lastSent); idle < s.progress {
				progress.Reset(s.progress - idle) // an event was sent meanwhile
				continue
			}
			if rev, ok := w.Progress(); ok {
				if err := stream.Send(&pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Progress{Progress: &pb.Progress{}}}); err != nil {
					return err
				}
				last = rev
			}
			lastSent = time.Now()
			progress.Reset(s.progress)
		}
	}
}

// growStack grows the calling goroutine's stack to what a stream's first
// Send needs, here, where few frames sit on it. Otherwise every stream
// resumed from a revision grows its stack deep in its first event's Send,
// where copying it means adjusting every frame, and 1,000 streams doing so
// at once made that event reach the last of them several times later than
// the ones after it (BENCHMARKS.md, "Delivery, event by event"). The size is the
// one the stream reaches anyway: the stacks in use after the first event
// are the same with and without.
//
//go:noinline
func growStack() {
	_ = stackFrame()
}

//go:noinline
func stackFrame() (b [8 << 10]byte) { return b }

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
	case errors.Is(err, checker.ErrPassiveDisabled):
		return status.Errorf(codes.FailedPrecondition, "%v; enable them with UpdateTarget setting target.passive_outcomes: true (and optionally target.passive_rate, 10 a second by default)", err)
	case errors.Is(err, checker.ErrQuarantined):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, checker.ErrSubscriberTooSlow):
		var be *checker.BehindError
		if errors.As(err, &be) {
			return status.Errorf(codes.ResourceExhausted, "%v; watch again with start_revision %d", err, be.LastDelivered)
		}
		return status.Errorf(codes.ResourceExhausted, "%v; watch again", err)
	case errors.Is(err, checker.ErrCompacted):
		return status.Errorf(codes.OutOfRange, "%v; watch again with start_revision 0 to re-snapshot", err)
	case errors.Is(err, checker.ErrFutureRevision):
		return status.Errorf(codes.FailedPrecondition, "%v (was it from another pulsed?); watch again with start_revision 0 to re-snapshot", err)
	case errors.Is(err, checker.ErrRateLimited):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, checker.ErrLimit):
		return status.Errorf(codes.ResourceExhausted, "%v; %s", err, limitAdvice(err))
	case errors.Is(err, checker.ErrStore):
		return status.Errorf(codes.Unavailable, "%v; nothing was changed: check pulsed's registry (its data dir: disk full or read-only? or etcd with -registry etcd) and retry", err)
	case errors.Is(err, checker.ErrUncertain):
		return status.Errorf(codes.Unavailable, "%v; retry: AddTarget and RemoveTarget are idempotent", err)
	case errors.Is(err, checker.ErrLagging):
		return status.Errorf(codes.Unavailable, "%v; it will show once this replica catches up with etcd (a retry is harmless)", err)
	case errors.Is(err, checker.ErrClosed):
		return status.Error(codes.Unavailable, shutdownMsg+"; retry against a running instance")
	default:
		return status.Errorf(codes.Internal, "internal error: %v", err)
	}
}

// LimitFlag returns the pulsed flag that sets the limit err ran into (a
// *checker.LimitError), or "" for another error.
func LimitFlag(err error) string {
	var le *checker.LimitError
	if !errors.As(err, &le) {
		return ""
	}
	switch le.Limit {
	case checker.LimitTargets:
		return "-max-targets"
	case checker.LimitTargetsPerGroup:
		return "-max-targets-per-group"
	case checker.LimitWatchers:
		return "-max-watchers"
	case checker.LimitWatchersPerSource:
		return "-max-watchers-per-source"
	}
	return ""
}

// limitAdvice says what frees room under the limit err ran into, and
// which of pulsed's flags raises it.
func limitAdvice(err error) string {
	const streams = "streams (WatchTransitions, grpc.health Watch, the status page's feeds)"
	switch flag := LimitFlag(err); flag {
	case "-max-targets":
		return "remove some, or raise pulsed's " + flag
	case "-max-targets-per-group":
		return "remove some from the group, or raise pulsed's " + flag
	case "-max-watchers":
		return "end some " + streams + ", or raise pulsed's " + flag
	case "-max-watchers-per-source":
		return "end some of this client's " + streams + ", or raise pulsed's " + flag
	}
	return "raise pulsed's -max-targets, -max-targets-per-group, -max-watchers or -max-watchers-per-source"
}

// Options configures NewGRPCServer.
type Options struct {
	// Logger receives request logs and recovered panics. If nil, nothing is
	// logged.
	Logger *slog.Logger
	// ServerOptions are passed to grpc.NewServer after the interceptors.
	ServerOptions []grpc.ServerOption
	// UnaryInterceptors and StreamInterceptors run outside the server's own
	// chain (e.g. metrics, which should count every call, even rejected ones).
	UnaryInterceptors  []grpc.UnaryServerInterceptor
	StreamInterceptors []grpc.StreamServerInterceptor
	// Tokens, when set, requires a bearer token with the right role on
	// every pulse.v1 call and on the xDS service (read role). If nil, calls
	// are not authenticated.
	Tokens *Tokens
	// RateLimit, when set, bounds each client's rate of pulse.v1 calls.
	RateLimit *RateLimit
	// AccessLog logs every finished pulse.v1 call at INFO. If false, calls
	// that ended OK or with the client's own mistake are logged at DEBUG
	// (see callLevel). Either way the logged errors are scrubbed of the
	// request's secrets and their quotes of its input are bounded.
	AccessLog bool
}

// NewGRPCServer returns a *grpc.Server serving s as pulse.v1.HealthChecker,
// plus grpc.health.v1 for the server itself and for each group (returned so
// the caller can report NOT_SERVING on shutdown) and server reflection for
// grpcurl.
//
// Every call goes through, outermost first: request logging, panic
// recovery (a handler panic becomes Internal and the server lives on), and
// request validation (InvalidArgument naming the field).
func NewGRPCServer(s *Server, opts Options) (*grpc.Server, *Health) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	unary, stream := chains(logger, s.c.Defaults(), opts.AccessLog)
	// After logging and scrubbing (so rejected calls are logged), before
	// recovery: the rate limit, then authentication.
	var guardU []grpc.UnaryServerInterceptor
	var guardS []grpc.StreamServerInterceptor
	if opts.RateLimit != nil {
		guardU = append(guardU, selector.UnaryServerInterceptor(ratelimit.UnaryServerInterceptor(opts.RateLimit), apiOnly))
		guardS = append(guardS, selector.StreamServerInterceptor(ratelimit.StreamServerInterceptor(opts.RateLimit), apiOnly))
	}
	if opts.Tokens != nil {
		guardU = append(guardU, opts.Tokens.unary)
		guardS = append(guardS, opts.Tokens.stream)
	}
	unary = slices.Concat(opts.UnaryInterceptors, unary[:2], guardU, unary[2:])
	stream = slices.Concat(opts.StreamInterceptors, stream[:2], guardS, stream[2:])
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, opts.ServerOptions...)...)
	pb.RegisterHealthCheckerServer(gs, s)
	hs := newHealth(s.c)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// apiOnly selects calls of pulse.v1.HealthChecker, leaving out
// grpc.health.v1 and reflection.
var apiOnly = selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
	return c.Service == pb.HealthChecker_ServiceDesc.ServiceName
})

// Interceptors returns the server's interceptor chains, outermost first:
// logging, scrubbing of errors (secrets masked, quoted input bounded),
// recovery, validation. defaults complete AddTarget specs before they are
// validated. Calls are logged as Options.AccessLog false says.
func Interceptors(logger *slog.Logger, defaults checker.Defaults) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	return chains(logger, defaults, false)
}

func chains(logger *slog.Logger, defaults checker.Defaults, accessLog bool) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	logFn := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		if lvl > logging.LevelInfo && endedByShutdown(fields) {
			lvl = logging.LevelInfo // a stream pulsed ended as it stopped, as it should
		}
		logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	onPanic := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error: the request crashed its handler; the server logged the details")
	})
	// Log each finished call of the API; health checks and reflection come
	// from load balancers and tools far too often to log.
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel(accessLog))}
	v := validator{defaults: defaults}
	return []grpc.UnaryServerInterceptor{
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(logFn, logOpts...), apiOnly),
			scrubUnary,
			recovery.UnaryServerInterceptor(onPanic),
			v.unary,
		}, []grpc.StreamServerInterceptor{
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(logFn, logOpts...), apiOnly),
			scrubStream,
			recovery.StreamServerInterceptor(onPanic),
			v.stream,
		}
}

// endedByShutdown reports whether a finished call's log fields say that
// pulsed ended it as it shut down (a watch stream: see
// WatchTransitions), which is no failure to warn of.
func endedByShutdown(fields []any) bool {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "grpc.error" {
			s, _ := fields[i+1].(string)
			return strings.Contains(s, shutdownMsg)
		}
	}
	return false
}

// shutdownMsg starts the error of a call pulsed ended as it shut down.
const shutdownMsg = "pulsed is shutting down"

// callLevel returns the level a finished call is logged at. With
// accessLog, every call is logged at INFO or above, as go-grpc-middleware
// does by default. Without it, a call that ended well or with the
// client's own mistake (OK, Canceled, NotFound, AlreadyExists,
// InvalidArgument, Unauthenticated: the client has the answer, and there
// is nothing for the operator to do) is logged at DEBUG, and only calls
// the server could not serve (PermissionDenied, ResourceExhausted,
// Unavailable, Internal, ...) at WARN or ERROR.
func callLevel(accessLog bool) logging.CodeToLevel {
	return func(code codes.Code) logging.Level {
		lvl := logging.DefaultServerCodeToLevel(code)
		if !accessLog && lvl == logging.LevelInfo {
			return logging.LevelDebug
		}
		return lvl
	}
}

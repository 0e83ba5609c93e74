package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Reconnect backoff bounds: the first retry comes after about
// reconnectMin, each failed attempt doubles it up to reconnectMax, and each
// delay is jittered down by up to half so that many pulse-lbs do not
// reconnect in step.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// registerTimeout bounds the ListTargets and AddTarget calls of one
// (re)connection.
const registerTimeout = 5 * time.Second

// remoteSource is remote mode's health: a view of the group kept up to date
// by a follower of pulsed's WatchTransitions stream.
type remoteSource struct {
	view   *view
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
}

// newRemoteSource connects to the pulsed at cfg.pulse (lazily: pulse-lb
// starts even while pulsed is down, and answers 503 until it has a view)
// and starts following it in the background.
func newRemoteSource(cfg config, logger *slog.Logger) (*remoteSource, error) {
	connOpts, err := cfg.pulseConn.Options()
	if err != nil {
		return nil, fmt.Errorf("--pulse: %w", err)
	}
	target := cfg.pulse
	if addrs := strings.Split(cfg.pulse, ","); len(addrs) > 1 {
		// Replicas: one connection, to the first that answers, moving to
		// another when it fails (gRPC's pick_first over the list). The
		// stream resumes there: replicas share revisions.
		r := manual.NewBuilderWithScheme("pulse-replicas")
		var state resolver.State
		for _, a := range addrs {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
		}
		r.InitialState(state)
		target = r.Scheme() + ":///replicas"
		connOpts = append(connOpts, grpc.WithResolvers(r), grpc.WithAuthority(addrs[0]))
	}
	conn, err := grpc.NewClient(target, append(connOpts,
		// gRPC's own reconnect backoff defaults to 1s..120s; keep it within
		// ours so a restarted pulsed is found again promptly.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: reconnectMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
			MinConnectTimeout: registerTimeout,
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("--pulse: %w", err)
	}
	f := &follower{
		client:      pb.NewHealthCheckerClient(conn),
		cfg:         cfg,
		view:        newView(cfg.group),
		logger:      logger,
		minBackoff:  reconnectMin,
		maxBackoff:  reconnectMax,
		idleTimeout: cfg.idleTimeout,
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &remoteSource{view: f.view, conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		f.run(ctx)
	}()
	return s, nil
}

// Healthy returns the names of the routable targets of the view, sorted.
func (s *remoteSource) Healthy() []string { return s.view.Healthy() }

// Close stops following pulsed and closes the connection. The backends stay
// registered with pulsed: a restarted pulse-lb (or another one sharing the
// group) picks up their states at once.
func (s *remoteSource) Close() error {
	s.cancel()
	<-s.done
	return s.conn.Close()
}

// follower registers the backends with pulsed and follows its
// WatchTransitions stream into a view, reconnecting until its context ends.
//
// Each (re)connection first registers every backend with AddTarget, which
// changes nothing when pulsed already has the same spec, and brings the
// backends back when pulsed restarted and lost them. A backend new to
// pulsed starts in the state the view last knew it in (unhealthy when
// never seen), so a pulsed restart does not take healthy backends out of
// rotation while they prove themselves again. Then it watches the group:
//
//   - from revision 0 (a snapshot) the first time, and whenever pulsed says
//     the view's revision cannot be resumed from (OUT_OF_RANGE: too old;
//     FAILED_PRECONDITION: from another server); such a re-snapshot is
//     retried at once, since pulsed is evidently up;
//   - from the view's last revision otherwise, after a backoff: a broken
//     stream, pulsed down or restarting (UNAVAILABLE), or a stream that
//     fell behind (RESOURCE_EXHAUSTED, resumed from the revision it names).
//
// The backoff resets once a stream has delivered a message.
type follower struct {
	client      pb.HealthCheckerClient
	cfg         config
	view        *view
	logger      *slog.Logger
	minBackoff  time.Duration
	maxBackoff  time.Duration
	idleTimeout time.Duration // 0: never
}

func (f *follower) run(ctx context.Context) {
	attempt := 0
	var behind uint64 // the revision a RESOURCE_EXHAUSTED stream named
	for {
		start := f.view.startRevision()
		if behind > 0 && start > 0 {
			// Resume from the revision pulsed named; events from there to
			// the last one applied are replayed and ignored as duplicates.
			start = min(start, behind)
		}
		behind = 0
		delivered, err := f.session(ctx, start)
		f.view.streamEnded()
		if ctx.Err() != nil {
			return
		}
		if delivered {
			attempt = 0
		}
		switch status.Code(err) {
		case codes.OutOfRange, codes.FailedPrecondition:
			f.view.resnapshot()
			if start > 0 {
				f.logger.Warn("pulse watch cannot resume; re-listing from a snapshot", "start_revision", start, "error", err)
				continue
			}
		case codes.ResourceExhausted:
			if rev, ok := deliveredRevision(err); ok {
				behind = rev
			}
		}
		delay := f.backoff(attempt)
		attempt++
		f.logger.Warn("pulse watch down; routing with the last known view", "pulse", f.cfg.pulse, "error", err, "retry_in", delay.Round(time.Millisecond).String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session registers the backends, then watches from start until the stream
// ends. delivered reports whether the stream sent anything.
func (f *follower) session(ctx context.Context, start uint64) (delivered bool, err error) {
	if err := f.register(ctx); err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var idle *time.Timer
	if f.idleTimeout > 0 {
		idle = time.AfterFunc(f.idleTimeout, cancel)
		defer idle.Stop()
	}
	stream, err := f.client.WatchTransitions(sctx, &pb.WatchTransitionsRequest{Group: f.cfg.group, StartRevision: start})
	if err != nil {
		return false, err
	}
	// Headers come once pulsed has registered the watch; an error comes as
	// nil headers and then from Recv.
	if md, _ := stream.Header(); md != nil {
		if start == 0 {
			f.logger.Info("pulse watch started from a snapshot", "pulse", f.cfg.pulse, "group", f.cfg.group)
		} else {
			f.logger.Info("pulse watch resumed", "pulse", f.cfg.pulse, "group", f.cfg.group, "start_revision", start)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && sctx.Err() != nil {
				err = fmt.Errorf("no message from pulsed for %v (--pulse-idle-timeout): %w", f.idleTimeout, err)
			}
			return delivered, err
		}
		delivered = true
		if idle != nil {
			idle.Reset(f.idleTimeout)
		}
		for _, ch := range f.view.apply(resp) {
			f.logChange(ch)
		}
		if resp.GetSnapshotComplete() != nil {
			f.logger.Info("pulse snapshot applied", "revision", resp.GetRevision(), "healthy", f.view.Healthy())
		}
	}
}

// register adds every backend to pulsed, in the group, with the health
// flags' interval, timeout and thresholds.
func (f *follower) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	// The initial state of a target pulsed already has is ignored, but a
	// different one still counts as a new spec and makes an `updated`
	// event: send the one pulsed has.
	list, err := f.client.ListTargets(ctx, &pb.ListTargetsRequest{Group: f.cfg.group})
	if err != nil {
		return fmt.Errorf("listing the group's targets: %w", err)
	}
	known := make(map[string]pb.State)
	for _, st := range list.GetTargets() {
		known[st.GetSpec().GetName()] = st.GetSpec().GetInitialState()
	}
	created := 0
	for _, b := range f.cfg.backends {
		initial := pb.State_STATE_UNHEALTHY
		if st, ok := f.view.lastState(b.name); ok && routableState(st) {
			initial = pb.State_STATE_HEALTHY
		}
		if st, ok := known[b.name]; ok {
			initial = st
		}
		resp, err := f.client.AddTarget(ctx, &pb.AddTargetRequest{Target: f.target(b, initial)})
		if err != nil {
			return fmt.Errorf("registering backend %s: %w", b.name, err)
		}
		if resp.GetCreated() {
			created++
		}
	}
	if created > 0 {
		f.logger.Info("registered backends with pulsed", "pulse", f.cfg.pulse, "group", f.cfg.group, "created", created)
	}
	// pulsed's default panic threshold keeps half of a failing group in
	// rotation; pulse-lb's own default takes out every failing backend.
	if _, err := f.client.SetGroupPolicy(ctx, &pb.SetGroupPolicyRequest{
		Group:  f.cfg.group,
		Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(f.cfg.panicFrac)},
	}); err != nil {
		return fmt.Errorf("setting the group's panic threshold: %w", err)
	}
	return nil
}

// target is backend b's spec on the wire.
func (f *follower) target(b backendConfig, initial pb.State) *pb.Target {
	return &pb.Target{
		Name:         b.name,
		Group:        f.cfg.group,
		Probe:        &pb.Target_Http{Http: &pb.HttpProbe{Url: b.healthURL}},
		Interval:     durationpb.New(f.cfg.healthInterval),
		Timeout:      durationpb.New(f.cfg.healthTimeout),
		Rise:         proto.Int32(int32(f.cfg.healthyAfter)),
		Fall:         proto.Int32(int32(f.cfg.unhealthyAfter)),
		InitialState: initial,
		SlowStart:    slowStartProto(f.cfg.slowStart),
	}
}

func (f *follower) logChange(ch change) {
	attrs := []any{"target", ch.Target, "group", f.cfg.group, "from", stateName(ch.From), "to", stateName(ch.To), "revision", ch.Revision}
	if ch.Err != "" {
		attrs = append(attrs, "error", ch.Err)
	}
	if ch.Reason != "" {
		attrs = append(attrs, "reason", ch.Reason)
	}
	f.logger.Info(ch.String(), attrs...)
}

// backoff returns the delay before reconnection attempt n (from 0):
// minBackoff doubled n times, capped at maxBackoff, less a random part of
// up to half, and never below minBackoff.
func (f *follower) backoff(n int) time.Duration {
	d := f.maxBackoff
	if n < 30 {
		d = min(f.maxBackoff, f.minBackoff<<n)
	}
	d = d/2 + rand.N(d/2+1)
	return max(f.minBackoff, d)
}

// deliveredRevision reads the revision a RESOURCE_EXHAUSTED status names
// ("...; watch again with start_revision N").
func deliveredRevision(err error) (uint64, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	m := revisionInMessage.FindStringSubmatch(st.Message())
	if m == nil {
		return 0, false
	}
	rev, perr := strconv.ParseUint(m[1], 10, 64)
	return rev, perr == nil
}

var revisionInMessage = regexp.MustCompile(`(?:start_revision|last revision delivered is) (\d+)`)

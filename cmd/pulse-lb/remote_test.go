package main

import (
	"context"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// fakePulse is a scripted pulse.v1.HealthChecker: each WatchTransitions
// call plays the next script, and the calls are recorded.
type fakePulse struct {
	pb.UnimplementedHealthCheckerServer

	mu       sync.Mutex
	failAdds int // AddTarget calls still to fail with UNAVAILABLE
	targets  map[string]*pb.Target
	adds     []*pb.Target
	starts   []uint64  // start_revision of each watch
	policies []float64 // max_unhealthy_fraction of each SetGroupPolicy
	scripts  []watchScript
}

// watchScript is what one watch sends: its events, then err, or nothing
// more until the client goes away when err is nil.
type watchScript struct {
	events []*pb.WatchTransitionsResponse
	forget bool // then drop every registered target, as a restarted pulsed would
	refuse bool // fail with err before the stream's headers: the watch is not accepted
	err    error
}

func (f *fakePulse) ListTargets(context.Context, *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &pb.ListTargetsResponse{}
	for _, t := range f.targets {
		out.Targets = append(out.Targets, &pb.TargetStatus{Spec: t})
	}
	return out, nil
}

func (f *fakePulse) AddTarget(_ context.Context, req *pb.AddTargetRequest) (*pb.AddTargetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAdds > 0 {
		f.failAdds--
		return nil, grpcstatus.Error(codes.Unavailable, "not yet")
	}
	f.adds = append(f.adds, req.GetTarget())
	_, had := f.targets[req.GetTarget().GetName()]
	f.targets[req.GetTarget().GetName()] = req.GetTarget()
	return &pb.AddTargetResponse{Created: !had}, nil
}

func (f *fakePulse) SetGroupPolicy(_ context.Context, req *pb.SetGroupPolicyRequest) (*pb.SetGroupPolicyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies = append(f.policies, req.GetPolicy().GetMaxUnhealthyFraction())
	return &pb.SetGroupPolicyResponse{Group: &pb.GroupStatus{Group: req.GetGroup(), Policy: req.GetPolicy()}}, nil
}

func (f *fakePulse) WatchTransitions(req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
	f.mu.Lock()
	f.starts = append(f.starts, req.GetStartRevision())
	var sc watchScript
	if len(f.scripts) > 0 {
		sc, f.scripts = f.scripts[0], f.scripts[1:]
	}
	f.mu.Unlock()
	if sc.refuse {
		return sc.err
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for _, ev := range sc.events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if sc.forget {
		f.forget()
	}
	if sc.err != nil {
		return sc.err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// forget drops every registered target, as a restarted pulsed would.
func (f *fakePulse) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.targets)
}

const (
	healthy   = pb.State_STATE_HEALTHY
	unhealthy = pb.State_STATE_UNHEALTHY
)

// Helpers that build the stream's events.

func targetStatus(name, group string, s pb.State) *pb.TargetStatus {
	return &pb.TargetStatus{Spec: &pb.Target{Name: name, Group: group}, State: s, Routable: s == healthy}
}

func evSnapshot(rev uint64, name, group string, s pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: targetStatus(name, group, s)}}
}

func evComplete(rev uint64) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_SnapshotComplete{SnapshotComplete: &pb.SnapshotComplete{}}}
}

func evTransition(rev uint64, name, group string, from, to pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{Target: name, Group: group, From: from, To: to}}}
}

func evProgress(rev uint64) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Progress{Progress: &pb.Progress{}}}
}

// startFake serves f on 127.0.0.1 and starts a remote source following it
// for backends a and b in group "lb", with a tiny backoff; the test's end
// stops it.
func startFake(t *testing.T, f *fakePulse, idle time.Duration) (*remoteSource, *logSink) {
	t.Helper()
	f.targets = make(map[string]*pb.Target)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterHealthCheckerServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	logs := newLogSink()
	cfg := config{group: "lb", healthInterval: time.Second, healthTimeout: time.Second, healthyAfter: 2, unhealthyAfter: 3, pulse: lis.Addr().String(), panicFrac: 1, idleTimeout: idle}
	for _, name := range []string{"a", "b"} {
		u := &url.URL{Scheme: "http", Host: name + ".test"}
		cfg.backends = append(cfg.backends, backendConfig{name: name, url: u, healthURL: u.String() + "/healthz"})
	}
	// The connection's and the follower's backoff are the client's:
	// shorten them through the flags' options.
	t.Setenv("PULSE_TOKEN", "")
	s, err := newRemoteSourceWith(cfg, newTestLogger(logs), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// waitUntil polls done within a bound.
func waitUntil(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the follower did not get there within %v", waitBound)
		}
		<-tick.C
	}
}

// startRevs returns the start revisions of the watches so far.
func (f *fakePulse) startRevs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts)
}

// added returns the targets of the AddTarget calls so far.
func (f *fakePulse) added() []*pb.Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.adds)
}

// The follower's reactions to the stream's errors, against a scripted
// pulsed: resume from the last revision (an event's or a progress event's)
// after a broken stream, re-snapshot at once on OUT_OF_RANGE and
// FAILED_PRECONDITION, resume from the named revision on
// RESOURCE_EXHAUSTED, and register the backends before every watch.
func TestFollowerReconnects(t *testing.T) {
	f := &fakePulse{failAdds: 1}
	f.scripts = []watchScript{
		{events: []*pb.WatchTransitionsResponse{
			evSnapshot(10, "a", "lb", unhealthy),
			evSnapshot(10, "b", "lb", healthy),
			evComplete(10),
			evTransition(11, "a", "lb", unhealthy, healthy),
		}, err: grpcstatus.Error(codes.Unavailable, "pulsed is shutting down")},
		{events: []*pb.WatchTransitionsResponse{
			evTransition(11, "a", "lb", unhealthy, healthy), // a duplicate
			evProgress(15),
		}, err: grpcstatus.Error(codes.OutOfRange, "start revision 15 is older than the history")},
		{events: []*pb.WatchTransitionsResponse{
			evSnapshot(20, "a", "lb", healthy),
			evComplete(20),
		}, err: grpcstatus.Error(codes.ResourceExhausted, "watcher fell behind: the last revision delivered is 18; watch again with start_revision 18")},
		{events: []*pb.WatchTransitionsResponse{
			evTransition(19, "b", "lb", healthy, unhealthy), // at or below 20: a duplicate
			evTransition(21, "a", "lb", healthy, unhealthy),
		}, err: grpcstatus.Error(codes.FailedPrecondition, "start revision 21 is ahead of the current revision 3")},
		{events: []*pb.WatchTransitionsResponse{
			evSnapshot(3, "a", "lb", healthy),
			evComplete(3),
		}},
	}
	s, logs := startFake(t, f, 0)
	waitUntil(t, func() bool { return len(f.startRevs()) == 5 && s.view.Revision() == 3 })
	// The view routes by a snapshot before its transitions are logged.
	logs.waitFor(t, 0, `msg="pulse snapshot applied" component=test revision=3`)

	// After the transition at 11 the follower resumes from 10: revision 11
	// may carry more events than it received (with replicas one revision
	// can), and the replayed one is dropped.
	if want := []uint64{0, 10, 0, 18, 0}; !slices.Equal(f.startRevs(), want) {
		t.Errorf("start revisions %v, want %v", f.startRevs(), want)
	}
	if got := s.Healthy(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Healthy() = %v, want [a]", got)
	}
	// Every watch came after registering both backends; the first AddTarget
	// failed and was retried. New targets start unhealthy, and existing
	// ones are sent with the initial state pulsed already has.
	adds := f.added()
	if got := len(adds); got != 10 {
		t.Errorf("%d AddTarget calls, want 10 (2 before each of 5 watches)", got)
	}
	f.mu.Lock()
	policies := slices.Clone(f.policies)
	f.mu.Unlock()
	if len(policies) != 5 || slices.ContainsFunc(policies, func(p float64) bool { return p != 1 }) {
		t.Errorf("SetGroupPolicy fractions %v, want 1 before each of 5 watches (all down is 503)", policies)
	}
	for _, a := range adds {
		if a.GetGroup() != "lb" || a.GetHttp().GetUrl() != "http://"+a.GetName()+".test/healthz" || a.GetRise() != 2 || a.GetFall() != 3 ||
			a.GetInitialState() != pb.State_STATE_UNHEALTHY || a.GetInterval().AsDuration() != time.Second {
			t.Errorf("AddTarget(%v)", a)
		}
	}
	for _, want := range []string{
		`msg="a: unhealthy -> healthy"`,
		`msg="pulse watch cannot resume; re-listing from a snapshot"`,
		`msg="b: healthy -> absent"`, // not in the snapshot at 20
		`msg="a: healthy -> unhealthy"`,
		`msg="a: unhealthy -> healthy" component=test target=a group=lb from=unhealthy to=healthy revision=3 reason=snapshot`,
		`ResourceExhausted`,
	} {
		if _, ok := logs.find(0, want); !ok {
			t.Errorf("no log line with %s; the log:\n%s", want, logs)
		}
	}
	if line, ok := logs.find(0, `msg="b: unhealthy`); ok {
		t.Errorf("a duplicate event was applied: %s", line.text)
	}
}

// A watch that breaks is one warning, however many retries fail after
// it; the next break, after the watch came back, is another.
func TestFollowerWarnsOnceABreak(t *testing.T) {
	down := grpcstatus.Error(codes.Unavailable, "pulsed is shutting down")
	f := &fakePulse{}
	f.scripts = []watchScript{
		{events: []*pb.WatchTransitionsResponse{evSnapshot(10, "a", "lb", healthy), evSnapshot(10, "b", "lb", healthy), evComplete(10)}, err: down},
		{refuse: true, err: down},
		{refuse: true, err: down},
		{events: []*pb.WatchTransitionsResponse{evTransition(11, "a", "lb", healthy, unhealthy)}, err: down}, // resumed, then broken again
		{refuse: true, err: down},
		{},
	}
	s, logs := startFake(t, f, 0)
	waitUntil(t, func() bool { return len(f.startRevs()) == 6 && s.view.Revision() == 11 })
	waitUntil(t, func() bool { return strings.Count(logs.String(), `msg="pulse watch resumed"`) == 2 })
	var levels []string
	for _, line := range strings.Split(logs.String(), "\n") {
		for _, msg := range []string{`msg="pulse watch down;`, `msg="pulse watch still down;`, `msg="pulse watch resumed"`} {
			if strings.Contains(line, msg) {
				levels = append(levels, strings.Fields(line)[1]+" "+msg)
			}
		}
	}
	want := []string{
		`level=WARN msg="pulse watch down;`, `level=INFO msg="pulse watch still down;`, `level=INFO msg="pulse watch still down;`,
		`level=INFO msg="pulse watch resumed"`, `level=WARN msg="pulse watch down;`, `level=INFO msg="pulse watch still down;`,
		`level=INFO msg="pulse watch resumed"`,
	}
	if !slices.Equal(levels, want) {
		t.Errorf("the stream's log lines:\n%s\nwant\n%s\nthe log:\n%s", strings.Join(levels, "\n"), strings.Join(want, "\n"), logs)
	}
}

// A pulsed that lost its targets gets them back in the states the view
// last knew, so healthy backends stay in rotation.
func TestFollowerCarriesStates(t *testing.T) {
	f := &fakePulse{}
	f.scripts = []watchScript{
		{events: []*pb.WatchTransitionsResponse{
			evSnapshot(10, "a", "lb", healthy),
			evSnapshot(10, "b", "lb", unhealthy),
			evComplete(10),
		}, forget: true, err: grpcstatus.Error(codes.Unavailable, "pulsed is shutting down")},
		// The restarted pulsed lost the targets and does not know revision 10.
		{err: grpcstatus.Error(codes.OutOfRange, "too old")},
	}
	s, _ := startFake(t, f, 0)
	waitUntil(t, func() bool { return len(f.startRevs()) == 3 })
	if want := []uint64{0, 10, 0}; !slices.Equal(f.startRevs(), want) {
		t.Errorf("start revisions %v, want %v", f.startRevs(), want)
	}
	got := map[string]pb.State{}
	for _, a := range f.added()[2:4] {
		got[a.GetName()] = a.GetInitialState()
	}
	if got["a"] != healthy || got["b"] != unhealthy {
		t.Errorf("re-registered with initial states %v; want a healthy, b unhealthy", got)
	}
	if h := s.Healthy(); !slices.Equal(h, []string{"a"}) {
		t.Errorf("Healthy() = %v while re-listing; want the last view, [a]", h)
	}
}

// A stream that stays silent longer than the idle timeout is dropped and
// resumed.
func TestFollowerIdleTimeout(t *testing.T) {
	f := &fakePulse{}
	f.scripts = []watchScript{{events: []*pb.WatchTransitionsResponse{evComplete(7)}}}
	_, logs := startFake(t, f, 20*time.Millisecond)
	waitUntil(t, func() bool { return len(f.startRevs()) >= 2 })
	if want := []uint64{0, 7}; !slices.Equal(f.startRevs()[:2], want) {
		t.Errorf("start revisions %v, want %v", f.startRevs(), want)
	}
	logs.waitFor(t, 0, "no message from pulsed for 20ms")
}

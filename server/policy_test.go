package server_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

// describePolicy renders an event as describe does, with policy events as
// "KIND text".
func describePolicy(ev *pb.WatchTransitionsResponse) string {
	if p := ev.GetPolicy(); p != nil {
		return p.GetKind().String() + " " + p.GetText()
	}
	return describe(ev)
}

// recvPolicy reads n events, described by describePolicy.
func recvPolicy(t *testing.T, w stream, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		out = append(out, describePolicy(ev))
	}
	return out
}

// watchFrom watches from the current revision, without a snapshot.
func watchFrom(t *testing.T, e *env, req *pb.WatchTransitionsRequest) stream {
	t.Helper()
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req.StartRevision = list.GetRevision()
	return watch(t, t.Context(), e, req)
}

func healthyTarget(name, group string) *pb.Target {
	tg := tcpTarget(name, group)
	tg.InitialState = pb.State_STATE_HEALTHY
	return tg
}

// The panic threshold through the API: SetGroupPolicy sets it, a group
// whose backends all fail keeps half of them routable, ListTargets shows
// who is held and why, and the stream carries PANIC_ENTERED and
// PANIC_EXITED.
func TestPanicThresholdThroughTheAPI(t *testing.T) {
	logs := &syncBuffer{}
	e := start(t, checker.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	resp, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(0.5)}})
	if err != nil {
		t.Fatal(err)
	}
	if g := resp.GetGroup(); g.GetMaxUnhealthyFraction() != 0.5 || g.GetTargets() != 0 || g.GetPolicy().GetMaxUnhealthyFraction() != 0.5 {
		t.Errorf("SetGroupPolicy: %v", g)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		e.add(t, healthyTarget(n, "edge"))
	}
	w := watchFrom(t, e, &pb.WatchTransitionsRequest{Group: "edge"})
	e.c.RunRound(t.Context()) // every backend fails

	if diff := cmp.Diff([]string{
		"a: healthy -> unhealthy", "b: healthy -> unhealthy",
		"KIND_PANIC_ENTERED edge: panic entered, holding c (2 of 4 down, at most 2)",
	}, recvPolicy(t, w, 3)); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	wantGroup := &pb.GroupStatus{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(0.5)}, MaxUnhealthyFraction: 0.5,
		Targets: 4, Unhealthy: 2, MaxUnhealthy: 2, Panic: true, Held: []string{"c", "d"}}
	if diff := cmp.Diff([]*pb.GroupStatus{wantGroup}, list.GetGroups(), protocmp.Transform()); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	for _, st := range list.GetTargets() {
		held := st.GetSpec().GetName() >= "c"
		if st.GetPanicHeld() != held || st.GetRoutable() != held || st.GetVerdict() != pb.State_STATE_UNHEALTHY {
			t.Errorf("%s: held %v routable %v verdict %v", st.GetSpec().GetName(), st.GetPanicHeld(), st.GetRoutable(), st.GetVerdict())
		}
	}
	healthy, _ := e.client.Healthy(t.Context(), &pb.HealthyRequest{Group: "edge"})
	if !cmp.Equal(healthy.GetNames(), []string{"c", "d"}) {
		t.Errorf("Healthy(edge) = %v", healthy.GetNames())
	}
	if !strings.Contains(logs.String(), `msg="edge: panic entered, holding c (2 of 4 down, at most 2)"`) {
		t.Errorf("log lacks the panic:\n%s", logs.String())
	}

	// Recovery releases held targets in name order, then the panic ends.
	e.set("a:80", true)
	e.c.RunRound(t.Context())
	e.set("b:80", true)
	e.c.RunRound(t.Context())
	if diff := cmp.Diff([]string{
		"a: unhealthy -> healthy", "c: healthy -> unhealthy",
		"b: unhealthy -> healthy", "d: healthy -> unhealthy",
		"KIND_PANIC_EXITED edge: panic exited (2 of 4 down, at most 2)",
	}, recvPolicy(t, w, 5)); diff != "" {
		t.Errorf("recovery (-want +got):\n%s", diff)
	}

	// Bad policies name the field.
	for _, tt := range []struct {
		req    *pb.SetGroupPolicyRequest
		prefix string
	}{
		{&pb.SetGroupPolicyRequest{}, "group: is required"},
		{&pb.SetGroupPolicyRequest{Group: "a/b"}, "group: may contain only"},
		{&pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(1.5)}}, "policy.max_unhealthy_fraction: must be in (0, 1]"},
		{&pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(0)}}, "policy.max_unhealthy_fraction: must be in (0, 1]"},
	} {
		_, err := e.client.SetGroupPolicy(t.Context(), tt.req)
		wantCode(t, err, codes.InvalidArgument, tt.prefix)
	}
	// An unset policy goes back to the server default (here none: 1).
	resp, err = e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge"})
	if err != nil || resp.GetGroup().GetMaxUnhealthyFraction() != 1 || resp.GetGroup().GetPolicy().MaxUnhealthyFraction != nil {
		t.Errorf("cleared policy: %v, %v", resp, err)
	}
}

// fast_interval and down_interval through the API: validated, echoed, and
// the interval in force is in the status.
func TestStateDependentIntervalsThroughTheAPI(t *testing.T) {
	e := start(t, checker.Config{})
	tg := healthyTarget("db", "")
	tg.Interval, tg.Timeout = durationpb.New(10*time.Second), durationpb.New(time.Second)
	tg.FastInterval = durationpb.New(500 * time.Millisecond)
	_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.fast_interval: must be at least the timeout (1s), got 500ms")
	tg.FastInterval, tg.DownInterval = durationpb.New(time.Second), durationpb.New(-time.Second)
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.down_interval: must be positive when set")
	tg.DownInterval = durationpb.New(30 * time.Second)
	tg.Fall = proto.Int32(3)
	st := e.add(t, tg).GetStatus()
	if st.GetProbeInterval().AsDuration() != 10*time.Second || st.GetSpec().GetFastInterval().AsDuration() != time.Second {
		t.Errorf("healthy: %v", st)
	}
	interval := func() time.Duration {
		resp, err := e.client.State(t.Context(), &pb.StateRequest{Name: "db"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus().GetProbeInterval().AsDuration()
	}
	var got []time.Duration
	for range 3 {
		e.c.RunRound(t.Context()) // the switch is down: failures
		got = append(got, interval())
	}
	if diff := cmp.Diff([]time.Duration{time.Second, time.Second, 30 * time.Second}, got); diff != "" {
		t.Errorf("probe intervals after each failure (-want +got):\n%s", diff)
	}
}

// Flap damping through the API.
func TestFlapDampingThroughTheAPI(t *testing.T) {
	e := start(t, checker.Config{})
	tg := healthyTarget("web-2", "edge")
	tg.FlapThreshold = 1
	_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.flap_threshold: must be 0 (no damping) or at least 2")
	tg.FlapThreshold, tg.FlapStableFor = 0, durationpb.New(time.Minute)
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.flap_stable_for: needs flap_threshold")
	tg.FlapThreshold, tg.FlapWindow = 3, durationpb.New(time.Hour)
	e.add(t, tg)
	w := watchFrom(t, e, &pb.WatchTransitionsRequest{Names: []string{"web-2"}})
	for _, up := range []bool{false, true, false, true} {
		e.set("web-2:80", up)
		e.c.RunRound(t.Context())
	}
	if diff := cmp.Diff([]string{
		"web-2: healthy -> unhealthy", "web-2: unhealthy -> healthy",
		"KIND_FLAPPING_STARTED web-2: flapping, 3 transitions in 1h0m0s; held unhealthy until stable for 1m0s",
		"web-2: healthy -> unhealthy",
	}, recvPolicy(t, w, 4)); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	resp, _ := e.client.State(t.Context(), &pb.StateRequest{Name: "web-2"})
	if st := resp.GetStatus(); !st.GetFlapping() || st.GetTransitionsInWindow() != 4 || st.GetState() != pb.State_STATE_UNHEALTHY || st.GetVerdict() != pb.State_STATE_HEALTHY {
		t.Errorf("status %v", st)
	}
}

// hangProbers build probers that hang until their context is done.
type hangProbers struct{ running atomic.Int32 }

func (h *hangProbers) New(probe.Spec) (checker.Prober, error) {
	return fakeprobe.Func(func(ctx context.Context) error {
		h.running.Add(1)
		defer h.running.Add(-1)
		<-ctx.Done()
		return ctx.Err()
	}), nil
}

// serve serves c over bufconn and returns a client.
func serve(t *testing.T, c *checker.Checker) pb.HealthCheckerClient {
	t.Helper()
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{})
	conn := serveBufconn(t, gs, c)
	return pb.NewHealthCheckerClient(conn)
}

// Stale is not down, through the API: a checker saturated past its waiting
// threshold (set here: by default waiting is no sign) reports itself
// degraded in ListTargets and on the stream, and its timeouts mark nobody
// down.
func TestOverloadThroughTheAPI(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	hp := &hangProbers{}
	c, err := checker.New(checker.Config{Clock: clock, NewProber: hp.New, MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{MaxWaiting: 1},
		Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, c)
	for _, n := range []string{"a", "b"} {
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: healthyTarget(n, "edge")}); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if ch := list.GetChecker(); ch.GetDegraded() || ch.GetMaxConcurrentProbes() != 1 {
		t.Errorf("checker before: %v", ch)
	}
	w, err := client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{StartRevision: list.GetRevision(), Group: "other"})
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan []checker.Transition)
	go func() { done <- c.RunRound(context.Background()) }()
	degraded := func() *pb.CheckerStatus {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return list.GetChecker()
	}
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for !degraded().GetDegraded() || hp.running.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("never degraded: %v", degraded())
		}
		time.Sleep(time.Millisecond)
	}
	if ch := degraded(); ch.GetWaitingProbes() != 1 || ch.GetInFlightProbes() != 1 || !strings.Contains(ch.GetReason(), "1 probe waiting for a slot (threshold 1)") {
		t.Errorf("degraded checker: %v", ch)
	}
	clock.Advance(time.Second) // the first times out; the second starts
	for hp.running.Load() != 1 || clock.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second probe never started")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Second)
	if trs := <-done; len(trs) != 0 {
		t.Errorf("transitions %v, want none: the timeouts are the checker's", trs)
	}
	list, _ = client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if ch := list.GetChecker(); !ch.GetDegraded() || ch.GetIgnoredTimeouts() != 2 {
		t.Errorf("checker after: %v", ch)
	}
	for _, st := range list.GetTargets() {
		if !st.GetRoutable() || !st.GetLastResult().GetIgnored() || st.GetIgnoredTimeouts() != 1 {
			t.Errorf("%s: %v", st.GetSpec().GetName(), st)
		}
	}
	// A watcher of another group still gets the checker's event.
	ev, err := w.Recv()
	if err != nil || ev.GetPolicy().GetKind() != pb.PolicyEvent_KIND_CHECKER_DEGRADED || !strings.HasPrefix(ev.GetPolicy().GetText(), "checker degraded: ") {
		t.Errorf("stream: %v, %v", ev, err)
	}
}

// ReportOutcome: its errors, and passive outcomes feeding the machine,
// rate-limited and counted.
func TestReportOutcomeThroughTheAPI(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := start(t, checker.Config{Clock: clock, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 2}})
	e.add(t, healthyTarget("probes-only", ""))
	tg := healthyTarget("web-1", "edge")
	tg.PassiveOutcomes, tg.PassiveRate = true, 2
	e.add(t, tg)
	tg.PassiveRate, tg.PassiveOutcomes = 2, false
	_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.passive_rate: needs passive_outcomes: true")

	for _, tt := range []struct {
		req    *pb.ReportOutcomeRequest
		code   codes.Code
		prefix string
	}{
		{&pb.ReportOutcomeRequest{Target: "bad name", Ok: true}, codes.InvalidArgument, "target: may contain only"},
		{&pb.ReportOutcomeRequest{Target: "web-1", Latency: durationpb.New(-time.Second)}, codes.InvalidArgument, "latency: must not be negative"},
		{&pb.ReportOutcomeRequest{Target: "web-1", Ok: true, Error: "x"}, codes.InvalidArgument, "error: must be empty when the outcome is ok"},
		{&pb.ReportOutcomeRequest{Target: "nope", Ok: true}, codes.NotFound, `unknown target "nope"`},
		{&pb.ReportOutcomeRequest{Target: "probes-only", Ok: true}, codes.FailedPrecondition, `target "probes-only": passive outcomes are off for this target; enable them with UpdateTarget setting target.passive_outcomes: true`},
	} {
		_, err := e.client.ReportOutcome(t.Context(), tt.req)
		wantCode(t, err, tt.code, tt.prefix)
	}

	w := watchFrom(t, e, &pb.WatchTransitionsRequest{Group: "edge"})
	report := func() *pb.ReportOutcomeResponse {
		t.Helper()
		resp, err := e.client.ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "web-1", Latency: durationpb.New(3 * time.Millisecond), Error: "502 from upstream"})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	report()
	resp := report()
	if st := resp.GetStatus(); !resp.GetCounted() || st.GetState() != pb.State_STATE_UNHEALTHY || st.GetPassiveResults() != 2 || st.GetActiveResults() != 0 {
		t.Errorf("after two failed outcomes: %v", resp)
	}
	ev, err := w.Recv()
	if err != nil || ev.GetTransition().GetText() != "web-1: healthy -> unhealthy" || !ev.GetTransition().GetResult().GetPassive() || ev.GetTransition().GetResult().GetError() != "502 from upstream" {
		t.Errorf("stream: %v, %v", ev, err)
	}
	if resp := report(); resp.GetCounted() || resp.GetStatus().GetPassiveRateLimited() != 1 {
		t.Errorf("a third outcome in the same instant, over passive_rate 2: %v", resp)
	}
	e.set("web-1:80", true)
	e.c.RunRound(t.Context())
	st, _ := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if s := st.GetStatus(); s.GetActiveResults() != 1 || s.GetPassiveResults() != 2 || s.GetState() != pb.State_STATE_HEALTHY || s.GetLastResult().GetPassive() {
		t.Errorf("after a passing probe: %v", s)
	}
}

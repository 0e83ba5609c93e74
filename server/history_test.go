package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func startWithHistory(t *testing.T) (*env, *history.Recorder) {
	t.Helper()
	rec := history.New(history.Options{})
	return start(t, checker.Config{Observer: rec}, server.WithHistory(rec)), rec
}

// recorded waits until the recorder holds n probes of the target: the
// checker tells it of a result just after applying it.
func recorded(t *testing.T, rec *history.Recorder, name string, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if s, err := rec.Query(name, time.Now(), time.Hour, time.Minute); err == nil && s.Probes == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d probes not recorded", name, n)
		}
	}
}

func TestHistoryOfATargetAndAGroup(t *testing.T) {
	e, rec := startWithHistory(t)
	e.add(t, tcpTarget("web-1", "web"))
	e.add(t, tcpTarget("web-2", "web"))
	e.set("web-1:80", true)
	e.set("web-2:80", true)
	e.c.RunRound(t.Context())
	e.set("web-2:80", false)
	e.c.RunRound(t.Context())
	e.c.RunRound(t.Context())
	recorded(t, rec, "web-1", 3)
	recorded(t, rec, "web-2", 3)
	got, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetProbes() != 3 || got.GetFailures() != 0 || got.GetAvailability() != 1 || got.GetGroup() != "web" {
		t.Errorf("web-1 = %d probes, %d failures, availability %v, group %q; want 3, 0, 1, web", got.GetProbes(), got.GetFailures(), got.GetAvailability(), got.GetGroup())
	}
	if len(got.GetPoints()) != 60 || got.GetResolution().AsDuration() != time.Minute {
		t.Errorf("points = %d at %v, want 60 at 1m", len(got.GetPoints()), got.GetResolution().AsDuration())
	}
	if got.GetLatencyP50() == nil {
		t.Error("no latency p50")
	}
	g, err := e.client.History(t.Context(), &pb.HistoryRequest{Group: "web", Window: durationpb.New(7 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if g.GetProbes() != 6 || g.GetFailures() != 2 || g.GetAvailability() != 4.0/6 || len(g.GetPoints()) != 7*24 || g.GetResolution().AsDuration() != time.Hour {
		t.Errorf("group = %d/%d availability %v, %d points; want 6/2 0.667, 168 points", g.GetProbes(), g.GetFailures(), g.GetAvailability(), len(g.GetPoints()))
	}
	var down bool
	for _, ev := range g.GetEvents() {
		if ev.GetTarget() == "web-2" && ev.GetTo() == pb.State_STATE_UNHEALTHY && ev.GetMode() == pb.Mode_MODE_ACTIVE {
			down = true
		}
	}
	if !down {
		t.Errorf("group events = %v, want web-2 going unhealthy", g.GetEvents())
	}
	if g.GetSlo() != nil {
		t.Errorf("a group without an objective has an SLO: %v", g.GetSlo())
	}
	if g.TimeAvailability == nil || got.TimeAvailability != nil {
		t.Errorf("time availability: group %v, target %v; want the group's only", g.TimeAvailability, got.TimeAvailability)
	}

	// With an objective of 90% over a day: 2 of 6 probes failed, a third
	// where a tenth was allowed, all of it in the last hour.
	obj := 0.9
	if _, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "web", Policy: &pb.GroupPolicy{
		AvailabilityObjective: &obj, ObjectiveWindow: durationpb.New(24 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	g, err = e.client.History(t.Context(), &pb.HistoryRequest{Group: "web", Window: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	slo := g.GetSlo()
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if slo.GetObjective() != 0.9 || slo.GetWindow().AsDuration() != 24*time.Hour || !near(slo.GetAvailability(), 4.0/6) ||
		!near(slo.GetErrorBudgetRemaining(), 1-(2.0/6)/0.1) || !near(slo.GetBurnRate(), (2.0/6)/0.1) {
		t.Errorf("slo = %v, want objective 0.9 over 24h, availability 0.667, budget left %v, burn rate %v", slo, 1-(2.0/6)/0.1, (2.0/6)/0.1)
	}
}

func TestHistoryRefusesBadRequests(t *testing.T) {
	e, rec := startWithHistory(t)
	e.add(t, tcpTarget("web-1", "web"))
	e.set("web-1:80", true)
	e.c.RunRound(t.Context())
	recorded(t, rec, "web-1", 1)
	h := durationpb.New(time.Hour)
	for _, c := range []struct {
		req    *pb.HistoryRequest
		code   codes.Code
		prefix string
	}{
		{&pb.HistoryRequest{Window: h}, codes.InvalidArgument, "target: set exactly one of target and group"},
		{&pb.HistoryRequest{Target: "web-1", Group: "web", Window: h}, codes.InvalidArgument, "target: set exactly one of target and group, not both"},
		{&pb.HistoryRequest{Target: "web 1", Window: h}, codes.InvalidArgument, "target: "},
		{&pb.HistoryRequest{Target: "web-1"}, codes.InvalidArgument, "window: must be set"},
		{&pb.HistoryRequest{Target: "web-1", Window: durationpb.New(-time.Hour)}, codes.InvalidArgument, "window must be a whole number of minutes in [1m, 24h] at a resolution of 1m, got -1h0m0s"},
		{&pb.HistoryRequest{Target: "web-1", Window: durationpb.New(31 * 24 * time.Hour)}, codes.InvalidArgument, "window must be a whole number of hours in [1h, 720h] at a resolution of 1h, got 744h0m0s"},
		{&pb.HistoryRequest{Target: "web-1", Window: durationpb.New(25 * time.Hour), Resolution: durationpb.New(time.Minute)}, codes.InvalidArgument, "window must be a whole number of minutes in [1m, 24h]"},
		{&pb.HistoryRequest{Target: "web-1", Window: h, Resolution: durationpb.New(time.Second)}, codes.InvalidArgument, "resolution must be 1m or 1h, got 1s"},
		{&pb.HistoryRequest{Target: "nobody", Window: h}, codes.NotFound, `no history of target "nobody" here: no such target`},
		{&pb.HistoryRequest{Group: "none", Window: h}, codes.NotFound, `no history of group "none" here`},
	} {
		_, err := e.client.History(t.Context(), c.req)
		wantCode(t, err, c.code, c.prefix)
	}
}

func TestHistoryOfATargetNotProbedYetIsEmpty(t *testing.T) {
	e, _ := startWithHistory(t)
	e.add(t, tcpTarget("web-1", "web"))
	got, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: durationpb.New(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetProbes() != 0 || got.Availability != nil || len(got.GetPoints()) != 120 || got.GetGroup() != "web" {
		t.Errorf("got %d probes, availability %v, %d points, group %q; want 0, unset, 120, web", got.GetProbes(), got.Availability, len(got.GetPoints()), got.GetGroup())
	}
}

func TestHistoryWithoutARecorderIsUnimplemented(t *testing.T) {
	e := start(t, checker.Config{})
	_, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "a", Window: durationpb.New(time.Hour)})
	wantCode(t, err, codes.Unimplemented, "this pulsed keeps no history")
}

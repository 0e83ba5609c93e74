package server_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// describeMode renders an event as describePolicy does, with mode changes
// as "mode <target>: <from> -> <to> (<reason>)" and transitions with their
// reason and mode.
func describeMode(ev *pb.WatchTransitionsResponse) string {
	if m := ev.GetMode(); m != nil {
		return "mode " + m.GetTarget() + ": " + m.GetFrom().String() + " -> " + m.GetMode().String() + " (" + m.GetReason() + ")"
	}
	if tr := ev.GetTransition(); tr != nil {
		return tr.GetText() + " (" + tr.GetMode().String() + ", " + tr.GetReason() + ")"
	}
	return describePolicy(ev)
}

// SetMode through the API: the status shows the mode, its reason and
// since; the stream carries the mode change and the transition with the
// drain's reason on one revision counter; Healthy and grpc.health.v1 of
// the group leave draining targets out; bad requests are INVALID_ARGUMENT
// naming the field; a drain by RemoveTarget answers with its removal time
// and removes the target when it ends.
func TestSetModeThroughTheAPI(t *testing.T) {
	epoch := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(epoch)
	// Overload detection is off: the fake clock's jump would make the
	// started scheduler late.
	e := start(t, checker.Config{Clock: clock, Overload: checker.OverloadPolicy{Disabled: true}})
	e.add(t, healthyTarget("web-1", "edge"))
	e.add(t, healthyTarget("web-2", "edge"))
	w := watchFrom(t, e, &pb.WatchTransitionsRequest{})
	ctx := t.Context()

	resp, err := e.client.SetMode(ctx, &pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_DRAINING, Reason: "deploy 4711"})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetTargets()[0]
	if st.GetMode() != pb.Mode_MODE_DRAINING || st.GetModeReason() != "deploy 4711" || !st.GetModeSince().AsTime().Equal(epoch) ||
		st.GetRoutable() || st.GetVerdict() != pb.State_STATE_HEALTHY || st.GetWeight() != 0 {
		t.Errorf("SetMode status: %v", st)
	}
	if got := recvMode(t, w, 2); !cmp.Equal(got, []string{
		"mode web-1: MODE_ACTIVE -> MODE_DRAINING (deploy 4711)",
		"web-1: healthy -> unhealthy (MODE_DRAINING, draining: deploy 4711)",
	}) {
		t.Errorf("events %q", got)
	}
	h, _ := e.client.Healthy(ctx, &pb.HealthyRequest{Group: "edge"})
	if !cmp.Equal(h.GetNames(), []string{"web-2"}) {
		t.Errorf("Healthy = %v", h.GetNames())
	}
	if _, err := e.client.SetMode(ctx, &pb.SetModeRequest{Group: "edge", Mode: pb.Mode_MODE_MAINTENANCE}); err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(e.conn)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "edge"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health of a group in maintenance: %v, %v", r, err)
	}
	recvMode(t, w, 3) // web-1's mode, web-2's mode and transition

	for _, tc := range []struct {
		req  *pb.SetModeRequest
		want string
	}{
		{&pb.SetModeRequest{Target: "web-1"}, "mode: must be MODE_ACTIVE"},
		{&pb.SetModeRequest{Target: "web-1", Group: "edge", Mode: pb.Mode_MODE_ACTIVE}, "target: exactly one of target and group"},
		{&pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_DRAINING, Until: timestamppb.New(epoch.Add(-time.Second))}, "until: must be in the future"},
		{&pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_DRAINING, Until: timestamppb.New(epoch.Add(31 * 24 * time.Hour))}, "until: must be at most 720h0m0s ahead"},
	} {
		_, err := e.client.SetMode(ctx, tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.want)
	}
	_, err = e.client.SetMode(ctx, &pb.SetModeRequest{Target: "nope", Mode: pb.Mode_MODE_DRAINING})
	wantCode(t, err, codes.NotFound, "unknown target")
	_, err = e.client.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: "web-2", DrainFor: durationpb.New(25 * time.Hour)})
	wantCode(t, err, codes.InvalidArgument, "drain_for: must be between 1s and 24h0m0s")

	e.c.Start()
	rm, err := e.client.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: "web-2", DrainFor: durationpb.New(30 * time.Second)})
	if err != nil || !rm.GetRemoved() || !rm.GetRemoveTime().AsTime().Equal(epoch.Add(30*time.Second)) {
		t.Fatalf("RemoveTarget with drain_for: %v, %v", rm, err)
	}
	if got := recvMode(t, w, 1); !cmp.Equal(got, []string{"mode web-2: MODE_MAINTENANCE -> MODE_DRAINING (removal in 30s)"}) {
		t.Errorf("events %q", got)
	}
	clock.Advance(30 * time.Second)
	if got := recvMode(t, w, 2); !cmp.Equal(got, []string{
		"KIND_TARGET_EXPIRED web-2: removed, drained for 30s (RemoveTarget drain_for)",
		"removed web-2",
	}) {
		t.Errorf("events %q", got)
	}
}

func recvMode(t *testing.T, w stream, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		out = append(out, describeMode(ev))
	}
	return out
}

package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// An until set to the zero time (0001-01-01T00:00:00Z, the Timestamp of
// seconds -62135596800) is a time in the past, refused as one second later
// is; only an absent until means "no end". A refused call changes nothing.
func TestSetModeRefusesZeroUntil(t *testing.T) {
	epoch := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := start(t, checker.Config{Clock: fakeclock.New(epoch)})
	e.add(t, healthyTarget("web-1", "edge"))
	ctx := t.Context()
	zero := &timestamppb.Timestamp{Seconds: -62135596800}
	if !zero.AsTime().IsZero() {
		t.Fatalf("%v is not the zero time", zero.AsTime())
	}
	for _, tc := range []struct {
		req  *pb.SetModeRequest
		want string
	}{
		{&pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_MAINTENANCE, Until: zero},
			"until: must be in the future, got 0001-01-01T00:00:00Z (now 2026-12-01T00:00:00Z)"},
		{&pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_MAINTENANCE, Until: &timestamppb.Timestamp{Seconds: -62135596800 + 1}},
			"until: must be in the future, got 0001-01-01T00:00:01Z (now 2026-12-01T00:00:00Z)"},
		{&pb.SetModeRequest{Group: "edge", Mode: pb.Mode_MODE_DRAINING, Until: zero},
			"until: must be in the future, got 0001-01-01T00:00:00Z (now 2026-12-01T00:00:00Z)"},
		{&pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_ACTIVE, Until: zero},
			"until: only with draining or maintenance"},
	} {
		_, err := e.client.SetMode(ctx, tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.want)
	}
	st, err := e.client.State(ctx, &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus().GetMode() != pb.Mode_MODE_ACTIVE || st.GetStatus().GetModeSince() != nil {
		t.Errorf("a refused SetMode changed the target: %v", st.GetStatus())
	}
	// An absent until is a mode with no end.
	resp, err := e.client.SetMode(ctx, &pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_MAINTENANCE})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetTargets()[0]; s.GetMode() != pb.Mode_MODE_MAINTENANCE || s.GetModeUntil() != nil {
		t.Errorf("SetMode without until: %v", s)
	}
}

package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// A target's outlier state and the OUTLIER events reach the wire whole.
func TestOutlierToProto(t *testing.T) {
	at := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	o := &outlier.State{Ejected: true, Reason: "p50 38ms vs group 4ms", Since: at, Until: at.Add(time.Minute), Ejections: 2}
	want := &pb.OutlierState{Ejected: true, Reason: "p50 38ms vs group 4ms", Since: timestamppb.New(at),
		Until: timestamppb.New(at.Add(time.Minute)), Ejections: 2}

	st := statusToProto(checker.Status{Spec: checker.Spec{Name: "web-1"}, Outlier: o})
	if diff := cmp.Diff(want, st.GetOutlier(), protocmp.Transform()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if st := statusToProto(checker.Status{}); st.Outlier != nil {
		t.Errorf("not an outlier: %v", st.Outlier)
	}
	// Degraded: no until.
	deg := outlierStateToProto(&outlier.State{Reason: "r", Since: at})
	if deg.Until != nil || deg.GetEjected() {
		t.Errorf("degraded: %v", deg)
	}

	for kind, wantKind := range map[checker.EventKind]pb.PolicyEvent_Kind{
		checker.EventOutlierStarted: pb.PolicyEvent_KIND_OUTLIER_STARTED,
		checker.EventOutlierEnded:   pb.PolicyEvent_KIND_OUTLIER_ENDED,
	} {
		e := checker.Event{Kind: kind, Revision: 9, Time: at, Policy: checker.PolicyChange{
			Target: "web-1", Group: "edge", Text: "web-1: outlier ejected: p50 38ms vs group 4ms", Outlier: o,
		}}
		wantEv := &pb.WatchTransitionsResponse{Revision: 9, Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: wantKind, Time: timestamppb.New(at), Target: "web-1", Group: "edge", Text: e.Policy.Text, Outlier: want,
		}}}
		if diff := cmp.Diff(wantEv, eventToProto(e), protocmp.Transform()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", kind, diff)
		}
	}
}

// Counts past int32 saturate rather than wrap.
func TestOutlierClampInt32(t *testing.T) {
	if got := clampInt32(1 << 40); got != 1<<31-1 {
		t.Errorf("clampInt32(1<<40) = %d", got)
	}
	if got := clampInt32(-1 << 40); got != -1<<31 {
		t.Errorf("clampInt32(-1<<40) = %d", got)
	}
}

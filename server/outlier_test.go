package server_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The outlier policy through the API: SetGroupPolicy echoes it, ListTargets
// shows it in the group's policy, and a bound past its range names the
// field under policy.outlier.
func TestOutlierPolicyThroughTheAPI(t *testing.T) {
	e := start(t, checker.Config{})
	op := &pb.OutlierPolicy{
		Interval: durationpb.New(5 * time.Second), Samples: 7, LatencyFactor: 3, LatencyMinDelta: durationpb.New(20 * time.Millisecond),
		Consecutive: 2, SuccessRateStdevFactor: 1.9, SuccessRateRequestVolume: 40, FailurePercentage: 50,
		FailurePercentageRequestVolume: 20, MinMembers: 4, Enforce: true, MaxEjectionPercent: 25,
		BaseEjectionTime: durationpb.New(time.Minute),
	}
	resp, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{Outlier: op}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(op, resp.GetGroup().GetPolicy().GetOutlier(), protocmp.Transform()); diff != "" {
		t.Errorf("SetGroupPolicy (-want +got):\n%s", diff)
	}
	e.add(t, healthyTarget("a", "edge"))
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "edge"})
	if err != nil || len(list.GetGroups()) != 1 {
		t.Fatalf("ListTargets: %v, %v", list, err)
	}
	if diff := cmp.Diff(op, list.GetGroups()[0].GetPolicy().GetOutlier(), protocmp.Transform()); diff != "" {
		t.Errorf("ListTargets (-want +got):\n%s", diff)
	}
	// Off: no outlier policy on the wire.
	resp, err = e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{Outlier: &pb.OutlierPolicy{}}})
	if err != nil || resp.GetGroup().GetPolicy().Outlier != nil {
		t.Errorf("off: %v, %v", resp, err)
	}

	for _, tt := range []struct {
		o    *pb.OutlierPolicy
		want string
	}{
		{&pb.OutlierPolicy{LatencyFactor: 0.5}, "policy.outlier.latency_factor: must be 0 (off) or between 1 and 1000"},
		{&pb.OutlierPolicy{LatencyFactor: math.NaN()}, "policy.outlier.latency_factor:"},
		{&pb.OutlierPolicy{LatencyFactor: 2, Samples: 2}, "policy.outlier.samples: must be between 3 and 100"},
		{&pb.OutlierPolicy{LatencyFactor: 2, Consecutive: 101}, "policy.outlier.consecutive:"},
		{&pb.OutlierPolicy{SuccessRateStdevFactor: -1}, "policy.outlier.success_rate_stdev_factor:"},
		{&pb.OutlierPolicy{SuccessRateStdevFactor: 1, SuccessRateRequestVolume: -1}, "policy.outlier.success_rate_request_volume:"},
		{&pb.OutlierPolicy{FailurePercentage: 101}, "policy.outlier.failure_percentage:"},
		{&pb.OutlierPolicy{FailurePercentage: 5, FailurePercentageRequestVolume: -3}, "policy.outlier.failure_percentage_request_volume:"},
		{&pb.OutlierPolicy{LatencyFactor: 2, MinMembers: 1}, "policy.outlier.min_members:"},
		{&pb.OutlierPolicy{LatencyFactor: 2, MaxEjectionPercent: 200}, "policy.outlier.max_ejection_percent:"},
		{&pb.OutlierPolicy{LatencyFactor: 2, Interval: durationpb.New(time.Millisecond)}, "policy.outlier.interval: must be between 1s and 1h"},
		{&pb.OutlierPolicy{LatencyFactor: 2, BaseEjectionTime: durationpb.New(2 * time.Hour)}, "policy.outlier.base_ejection_time:"},
		{&pb.OutlierPolicy{LatencyFactor: 2, LatencyMinDelta: durationpb.New(-time.Second)}, "policy.outlier.latency_min_delta: must be between 0 and 1h"},
		// Past time.Duration: refused before it is narrowed.
		{&pb.OutlierPolicy{LatencyFactor: 2, Interval: &durationpb.Duration{Seconds: math.MaxInt64 / 1000}}, "policy.outlier.interval: is not a valid duration"},
		{&pb.OutlierPolicy{LatencyFactor: 2, BaseEjectionTime: &durationpb.Duration{Seconds: 1 << 35}}, "policy.outlier.base_ejection_time: must be between 0 and 1h"},
		{&pb.OutlierPolicy{LatencyFactor: 2, Interval: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "policy.outlier.interval: is not a valid duration"},
	} {
		_, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{Outlier: tt.o}})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
}

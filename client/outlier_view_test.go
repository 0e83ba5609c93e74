package client_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func outlierEvent(rev uint64, kind pb.PolicyEvent_Kind, o *pb.OutlierState) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
		Kind: kind, Group: "edge", Target: "a", Text: "a: outlier", Outlier: o}}}
}

// A View applies OUTLIER events to the target's Outlier and weight, and
// tells its subscribers (a resolver then sends the lowered weight).
func TestViewOutlier(t *testing.T) {
	since := time.Unix(1_800_000_000, 0)
	o := &pb.OutlierState{Reason: "p50 38ms vs group 4ms", Since: timestamppb.New(since)}
	step := make(chan struct{})
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		snapshotAt(10, stream)
		stream.Send(transitionAt(11, pb.State_STATE_HEALTHY))
		stream.Send(outlierEvent(12, pb.PolicyEvent_KIND_OUTLIER_STARTED, o))
		<-step
		stream.Send(outlierEvent(13, pb.PolicyEvent_KIND_OUTLIER_ENDED, o))
		<-stream.Context().Done()
		return nil
	}}
	c := fakeClient(t, f)
	v := c.NewView(client.Filter{Group: "edge"})
	var log changeLog
	v.Subscribe(log.add)
	v.Start(t.Context())
	defer v.Close()

	waitFor(t, "the outlier", func() bool { return v.Revision() >= 12 })
	st, _ := v.Get("a")
	want := &client.OutlierState{Reason: "p50 38ms vs group 4ms", Since: since}
	if diff := cmp.Diff(want, st.Outlier); diff != "" || st.Weight(time.Now()) != client.OutlierWeight {
		t.Errorf("outlier (-want +got):\n%s\nweight %d", diff, st.Weight(time.Now()))
	}
	if r := v.Routable("edge"); len(r) != 1 || r[0].Outlier == nil {
		t.Errorf("Routable(edge) = %+v", r)
	}
	close(step)
	waitFor(t, "the outlier's end", func() bool { return v.Revision() >= 13 })
	if st, _ := v.Get("a"); st.Outlier != nil || st.Weight(time.Now()) != 100 {
		t.Errorf("ended: %+v, weight %d", st.Outlier, st.Weight(time.Now()))
	}
	if diff := cmp.Diff([]string{
		"a: absent -> unhealthy (snapshot)", "a: unhealthy -> healthy (transition)",
		"a: healthy -> healthy (outlier_started)", "a: healthy -> healthy (outlier_ended)",
	}, log.take()); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

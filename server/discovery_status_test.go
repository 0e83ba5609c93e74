package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

type fixedDiscovery []server.DiscoveryGroupStatus

func (f fixedDiscovery) DiscoveryGroups() []server.DiscoveryGroupStatus { return f }

// TestListDiscovery: ListDiscovery answers the groups the daemon's
// discovery reports, and no group without one.
func TestListDiscovery(t *testing.T) {
	ctx := context.Background()
	if resp, err := start(t, checker.Config{}).client.ListDiscovery(ctx, &pb.ListDiscoveryRequest{}); err != nil || len(resp.GetGroups()) != 0 {
		t.Fatalf("without discovery: %v, %v", resp, err)
	}
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d := fixedDiscovery{{
		Name: "api", Source: "discovery:api", Targets: 3, LastApply: t0,
		Sources: []server.DiscoverySourceStatus{
			{Name: "file_sd 0", Detail: "files a.json", LastRefresh: t0, Targets: 2},
			{Name: "http_sd 0", Detail: "url http://127.0.0.1:1/sd", LastRefresh: t0, Targets: 1, LastError: "server returned HTTP status 500", ErrorSince: t0.Add(time.Second)},
		},
	}}
	resp, err := start(t, checker.Config{}, server.WithDiscovery(d)).client.ListDiscovery(ctx, &pb.ListDiscoveryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ts := timestamppb.New
	want := &pb.ListDiscoveryResponse{Groups: []*pb.DiscoveryGroup{{
		Name: "api", Source: "discovery:api", Targets: 3, LastApply: ts(t0),
		Sources: []*pb.DiscoverySource{
			{Name: "file_sd 0", Detail: "files a.json", LastRefresh: ts(t0), Targets: 2},
			{Name: "http_sd 0", Detail: "url http://127.0.0.1:1/sd", LastRefresh: ts(t0), Targets: 1, LastError: "server returned HTTP status 500", ErrorSince: ts(t0.Add(time.Second))},
		},
	}}}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Errorf("ListDiscovery (-want +got):\n%s", diff)
	}
}

// TestDiscoveryEventOnStream: an announced discovery event reaches a
// WatchTransitions stream as a policy event with its source and error.
func TestDiscoveryEventOnStream(t *testing.T) {
	e := start(t, checker.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // snapshot_complete
		t.Fatal(err)
	}
	pc := checker.PolicyChange{Source: "discovery:api", SDConfig: "http_sd 0", Error: "server returned HTTP status 500", Text: "discovery: api (http_sd 0) failed"}
	if err := e.c.Announce(checker.EventDiscoveryFailed, pc); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.PolicyEvent{Kind: pb.PolicyEvent_KIND_DISCOVERY_FAILED, Source: "discovery:api", SdConfig: "http_sd 0", Error: "server returned HTTP status 500", Text: "discovery: api (http_sd 0) failed"}
	if diff := cmp.Diff(want, resp.GetPolicy(), protocmp.Transform(), protocmp.IgnoreFields(&pb.PolicyEvent{}, "time")); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
}

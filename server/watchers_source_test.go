package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// One client address cannot take every watcher slot: WatchTransitions and
// grpc.health Watch streams from it count together up to
// -max-watchers-per-source, past which it is told so, naming its address
// and the flag, while another address still gets a stream. A stream that
// ends frees its slot.
func TestWatchersPerSourceAddress(t *testing.T) {
	conns := serveTCP(t, checker.Config{MaxWatchers: 10, MaxWatchersPerSource: 2})
	a := conns("127.0.0.1")
	if _, err := pb.NewHealthCheckerClient(a).AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("web-1", "edge")}); err != nil {
		t.Fatal(err)
	}
	watch := func(ctx context.Context, c pb.HealthCheckerClient) error {
		s, err := c.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}
	first, cancel := context.WithCancel(t.Context())
	if err := watch(first, pb.NewHealthCheckerClient(a)); err != nil {
		t.Fatal(err)
	}
	hw, err := healthpb.NewHealthClient(a).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "edge"})
	if err == nil {
		_, err = hw.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Another connection from the same address is the same client.
	err = watch(t.Context(), pb.NewHealthCheckerClient(conns("127.0.0.1")))
	wantCode(t, err, codes.ResourceExhausted, "limit reached: at most 2 watchers from 127.0.0.1; end some of this client's streams (WatchTransitions, grpc.health Watch, the status page's feeds), or raise pulsed's -max-watchers-per-source")
	if hw, err = healthpb.NewHealthClient(a).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "edge"}); err == nil {
		_, err = hw.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, "limit reached: at most 2 watchers from 127.0.0.1")

	if err := watch(t.Context(), pb.NewHealthCheckerClient(conns("127.0.0.2"))); err != nil {
		t.Errorf("another address, while the first holds its two: %v", err)
	}
	cancel()
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for watch(t.Context(), pb.NewHealthCheckerClient(a)) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the ended stream's slot was not freed within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

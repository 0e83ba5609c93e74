package server_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// A call past a limit is told which pulsed flag raises that limit, and
// what else frees room, not every limit's flag: past -max-watchers,
// "remove some" targets does nothing.
func TestLimitErrorsNameTheirFlag(t *testing.T) {
	e := start(t, checker.Config{MaxTargets: 2, MaxTargetsPerGroup: 1, MaxWatchers: 1})
	e.add(t, tcpTarget("a", "g"))

	_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("b", "g")})
	wantCode(t, err, codes.ResourceExhausted, `limit reached: at most 1 targets in group "g"; remove some from the group, or raise pulsed's -max-targets-per-group`)

	e.add(t, tcpTarget("b", "h"))
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("c", "i")})
	wantCode(t, err, codes.ResourceExhausted, "limit reached: at most 2 targets; remove some, or raise pulsed's -max-targets")
	if got := err.Error(); strings.Contains(got, "-max-watchers") || strings.Contains(got, "-max-targets-per-group") {
		t.Errorf("past -max-targets the error names other limits' flags: %s", got)
	}

	first, err := e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	second, err := e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	wantCode(t, err, codes.ResourceExhausted, "limit reached: at most 1 watchers; end some streams (WatchTransitions, grpc.health Watch, the status page's feeds), or raise pulsed's -max-watchers")
}

package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// ownerPulse answers State as a replica does for a target another replica,
// owner, probes: no streak or last probe of its own. An empty owner is a
// single pulsed's answer.
type ownerPulse struct {
	pb.UnimplementedHealthCheckerServer
	owner string
}

func (p ownerPulse) State(context.Context, *pb.StateRequest) (*pb.StateResponse, error) {
	return &pb.StateResponse{Status: &pb.TargetStatus{
		Spec: &pb.Target{
			Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.1:80"}},
			Interval: durationpb.New(2 * time.Second), Timeout: durationpb.New(time.Second), Rise: ptr[int32](2), Fall: ptr[int32](3),
			Model: pb.Model_MODEL_RISE_FALL,
		},
		State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true, Mode: pb.Mode_MODE_ACTIVE,
		Owner: p.owner,
	}}, nil
}

// state names the replica that probes the target, before the streak it
// alone keeps, and -o json has it; a single pulsed's answer names none.
func TestStateShowsTheOwner(t *testing.T) {
	out := mustRun(t, "state", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2"}))
	if !regexp.MustCompile(`(?m)^owner:\s+r2\nstreak:\s+-\n`).MatchString(out) {
		t.Errorf("state printed\n%s\nwant a line \"owner: r2\" before the streak", out)
	}
	var got struct{ Status struct{ Owner string } }
	if err := json.Unmarshal([]byte(mustRun(t, "state", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2"}), "-o", "json")), &got); err != nil || got.Status.Owner != "r2" {
		t.Errorf("state -o json: owner %q (%v), want r2", got.Status.Owner, err)
	}
	if out := mustRun(t, "state", "web-1", "--addr", serveAPI(t, ownerPulse{})); strings.Contains(out, "owner") {
		t.Errorf("a single pulsed's state printed\n%s\nwant no owner line", out)
	}
}

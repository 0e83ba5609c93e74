package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// add --vantages and --quorum against a single pulsed: one vantage and a
// quorum of one are stored; more vantages are refused, naming the field
// and saying they need replicas; set checks the quorum alike.
func TestVantageFlags(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "db-1", "--tcp", closedAddr(t), "--interval", "24h", "--vantages", "1", "--quorum", "1")
	if spec := stateOf(t, p.Addr, "db-1").GetSpec(); spec.GetVantages() != 1 || spec.GetQuorum() != 1 {
		t.Errorf("after add: vantages %d, quorum %d; want 1, 1", spec.GetVantages(), spec.GetQuorum())
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"add", addr, "--name", "db-2", "--tcp", closedAddr(t), "--vantages", "3"}, "target.vantages: must be at most 1 here (a single pulsed is one vantage: probing from several needs replicas"},
		{[]string{"add", addr, "--name", "db-2", "--tcp", closedAddr(t), "--vantages", "10"}, "target.vantages: must be between 0 (one: the owner's) and 9, got 10"},
		{[]string{"set", "db-1", addr, "--quorum", "2"}, "target.quorum: must be between 0 (a majority of vantages) and vantages (1), got 2"},
		{[]string{"add", addr, "--name", "db-2", "--tcp", closedAddr(t), "--quorum", "-1"}, "target.quorum: must be between 0 (a majority of vantages) and vantages (1), got -1"},
	} {
		r := pulsectl(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("pulsectl %v: exit %d, stderr %q; want exit %d with %q", tc.args, r.code, r.stderr, exitUsage, tc.msg)
		}
	}
}

// policy set --vantages and --quorum: pulsed checks them as a target's,
// refusing more than one vantage on a single pulsed; get shows them.
func TestPolicyVantageFlags(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "db-1", "--group", "edge", "--tcp", closedAddr(t), "--interval", "24h")
	r := pulsectl(t, "policy", "set", "edge", addr, "--vantages", "3")
	if r.code != exitUsage || !strings.Contains(r.stderr, "policy.vantages: must be at most 1 here") {
		t.Errorf("policy set --vantages 3: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := pulsectl(t, "policy", "get", "edge", addr, "--quorum", "1"); r.code != exitUsage {
		t.Errorf("policy get --quorum: exit %d, want %d", r.code, exitUsage)
	}
	mustRun(t, "policy", "set", "edge", addr, "--vantages", "1", "--quorum", "1")
	out := mustRun(t, "policy", "get", "edge", addr, "-o", "json")
	var got struct {
		Policy struct{ Vantages, Quorum int }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Policy.Vantages != 1 || got.Policy.Quorum != 1 {
		t.Errorf("policy get -o json (%v):\n%s", err, out)
	}
}

// replicaPulse answers State as a pulsed replica does for a target
// probed from three vantages.
type replicaPulse struct {
	pb.UnimplementedHealthCheckerServer
}

func (replicaPulse) State(context.Context, *pb.StateRequest) (*pb.StateResponse, error) {
	at := timestamppb.New(time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC))
	return &pb.StateResponse{Status: &pb.TargetStatus{
		Spec: &pb.Target{
			Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.1:80"}},
			Interval: durationpb.New(2 * time.Second), Timeout: durationpb.New(time.Second), Rise: ptr[int32](2), Fall: ptr[int32](3),
			Model: pb.Model_MODEL_RISE_FALL, Vantages: 3,
		},
		State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true, Mode: pb.Mode_MODE_ACTIVE, LastTransitionTime: at,
		Vantages: []*pb.VantageVerdict{
			{Member: "r1", Label: "zone-a", State: pb.State_STATE_HEALTHY, Time: at},
			{Member: "r2", Label: "zone-b", State: pb.State_STATE_UNHEALTHY, Error: "connection refused", Time: at},
			{Member: "r3", Label: "zone-c", State: pb.State_STATE_HEALTHY, Time: at},
		},
	}}, nil
}

// state shows the vantages' verdicts, and the schedule their number and
// quorum.
func TestStateShowsVantages(t *testing.T) {
	addr := serveAPI(t, replicaPulse{})

	out := mustRun(t, "state", "web-1", "--addr", addr)
	for _, want := range []string{
		"schedule:    every 2s, timeout 1s, rise 2, fall 3, rise_fall, 3 vantages, quorum 2 (majority)\n",
		"vantages:    zone-a=healthy zone-b=unhealthy(connection refused) zone-c=healthy\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("state printed\n%s\nwant a line %q", out, want)
		}
	}
}

package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestModeCommands drives drain, maint, activate and rm --drain against a
// real pulsed: ls and state show the modes, a drained target leaves
// healthy, rm --drain answers with the removal time.
func TestModeCommands(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	for _, n := range []string{"web-1", "web-2"} {
		mustRun(t, "add", addr, "--name", n, "--group", "edge", "--http", web.URL+"/healthz", "--rise", "1")
		waitState(t, p.Addr, n, pb.State_STATE_HEALTHY)
	}

	out := mustRun(t, "drain", "web-1", addr, "--reason", "deploy 4711", "--until", "30m")
	if !regexp.MustCompile(`^web-1 draining \(deploy 4711\), until \S+\n$`).MatchString(out) {
		t.Errorf("drain printed %q", out)
	}
	if out := mustRun(t, "healthy", addr); out != "web-2\n" {
		t.Errorf("healthy after drain = %q", out)
	}
	out = mustRun(t, "ls", addr)
	if !regexp.MustCompile(`(?m)^web-1\s+edge\s+unhealthy\s+draining\s+pass`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^web-2\s+edge\s+healthy\s+active\s+pass`).MatchString(out) {
		t.Errorf("ls after drain:\n%s", out)
	}
	if out := mustRun(t, "state", "web-1", addr); !regexp.MustCompile(`(?m)^mode:\s+draining \(deploy 4711\), until \S+$`).MatchString(out) {
		t.Errorf("state after drain:\n%s", out)
	}

	out = mustRun(t, "maint", "--group", "edge", addr)
	if out != "web-1 maintenance\nweb-2 maintenance\n" {
		t.Errorf("maint --group printed %q", out)
	}
	mustRun(t, "activate", "--group", "edge", addr, "--reason", "done")
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)

	out = mustRun(t, "rm", "--drain", "30s", "web-2", addr)
	if !regexp.MustCompile(`^draining web-2, removed at \S+\n$`).MatchString(out) {
		t.Errorf("rm --drain printed %q", out)
	}
	if st := stateOf(t, p.Addr, "web-2"); st.GetMode() != pb.Mode_MODE_DRAINING || st.GetRemoveTime() == nil {
		t.Errorf("after rm --drain: %v", st)
	}

	for _, args := range [][]string{
		{"drain", addr},
		{"drain", "web-1", "--group", "edge", addr},
		{"drain", "web-1", "--until", "soon", addr},
		{"activate", "web-1", "--until", "1m", addr},
	} {
		if r := pulsectl(t, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage)", args, r.code, exitUsage)
		}
	}
	if r := pulsectl(t, "drain", "nope", addr); r.code != exitNotFound || !strings.Contains(r.stderr, "nope") {
		t.Errorf("drain of an unknown target: %+v", r)
	}
}

// watch prints a mode change with its reason.
func TestWatchPrintsModeChanges(t *testing.T) {
	at := time.Date(2026, 12, 1, 18, 2, 11, 0, time.UTC)
	p := &watchPrinter{now: func() time.Time { return at }}
	got := p.line(&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Mode{Mode: &pb.ModeChange{
		Target: "web-1", From: pb.Mode_MODE_ACTIVE, Mode: pb.Mode_MODE_DRAINING, Reason: "deploy 4711", Time: timestamppb.New(at),
	}}})
	if want := timeText(at) + " web-1: mode active -> draining (deploy 4711)"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}

// weightPulse answers like a pulsed from before weights (old-1: routable,
// weight unset) beside one in a slow start (ramp-1: weight 40).
type weightPulse struct {
	pb.UnimplementedHealthCheckerServer
}

var weightAt = time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)

func (weightPulse) status(name string) *pb.TargetStatus {
	st := &pb.TargetStatus{
		Spec:  &pb.Target{Name: name, Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:80"}}},
		State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true,
		LastTransitionTime: timestamppb.New(weightAt),
	}
	if name == "ramp-1" {
		st.Weight, st.SlowStartEnd = 40, timestamppb.New(weightAt.Add(time.Minute))
	}
	return st
}

func (p weightPulse) State(_ context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	return &pb.StateResponse{Status: p.status(req.GetName())}, nil
}

func (p weightPulse) ListTargets(context.Context, *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	return &pb.ListTargetsResponse{Targets: []*pb.TargetStatus{p.status("old-1"), p.status("ramp-1")}}, nil
}

// A routable target whose weight an older pulsed leaves unset is shown
// at its full share, not as a slow start at 0%; a slow start still shows.
func TestUnsetWeightIsNoSlowStart(t *testing.T) {
	t.Setenv("TZ", "UTC")
	addr := serveAPI(t, weightPulse{})

	out := mustRun(t, "state", "old-1", "--addr", addr)
	if strings.Contains(out, "weight:") {
		t.Errorf("state of a target with no weight printed a weight:\n%s", out)
	}
	out = mustRun(t, "state", "ramp-1", "--addr", addr)
	if want := "weight:      40% (slow start until " + timeText(weightAt.Add(time.Minute)) + ")\n"; !strings.Contains(out, want) {
		t.Errorf("state ramp-1 printed\n%s\nwant a line %q", out, want)
	}
	out = mustRun(t, "ls", "--addr", addr)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^old-1 +- +healthy +active +-`),
		regexp.MustCompile(`(?m)^ramp-1 +- +healthy +active 40% +-`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ls printed\n%s\nwant a line matching %v", out, want)
		}
	}
}

// add replaces a target's spec and keeps its mode: re-adding a target an
// rm --drain is removing says so, since it would otherwise vanish at the
// removal time though add answered it was updated; an active target's
// re-add says nothing of its mode.
func TestAddSaysTheModeItKeeps(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	add := []string{"add", addr, "--name", "web-1", "--group", "edge", "--http", web.URL + "/healthz"}
	mustRun(t, add...)
	if out := mustRun(t, add...); strings.Contains(out, "still") {
		t.Errorf("re-adding an active target:\n%s", out)
	}
	mustRun(t, "rm", "--drain", "30s", "web-1", addr)
	out := mustRun(t, add...)
	want := regexp.MustCompile(`(?m)^web-1 is still draining \(removal in 30s\), removed at \S+: add keeps a target's mode \(pulsectl activate web-1 makes it active\)$`)
	if !want.MatchString(out) {
		t.Errorf("re-adding a target rm --drain is removing:\n%s", out)
	}
}

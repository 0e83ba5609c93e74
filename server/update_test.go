package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func mask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// UpdateTarget changes the fields its mask names and nothing else: not the
// rest of the spec, not the state and streaks, not the stored secrets.
func TestUpdateTargetChangesOnlyTheMaskedFields(t *testing.T) {
	e := start(t, checker.Config{Defaults: checker.StandardDefaults()})
	tg := tcpTarget("web-1", "edge")
	tg.Interval, tg.Rise = durationpb.New(5*time.Second), proto.Int32(4)
	e.add(t, tg)
	e.set("web-1:80", true)
	e.c.RunRound(t.Context())
	before, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}

	resp, err := e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Interval: durationpb.New(7 * time.Second), Group: "ignored, not in the mask"},
		UpdateMask: mask("interval"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := before.GetStatus().GetSpec()
	if diff := cmp.Diff(want, resp.GetPrevious(), protocmp.Transform()); diff != "" {
		t.Errorf("previous (-want +got):\n%s", diff)
	}
	want.Interval = durationpb.New(7 * time.Second)
	st := resp.GetStatus()
	if diff := cmp.Diff(want, st.GetSpec(), protocmp.Transform()); diff != "" {
		t.Errorf("spec after the update (-want +got):\n%s", diff)
	}
	if st.GetPassStreak() != 1 || st.GetState() != pb.State_STATE_UNHEALTHY {
		t.Errorf("state %v, pass streak %d; want unhealthy with its pass streak 1 kept", st.GetState(), st.GetPassStreak())
	}

	// An empty mask names the fields set; a named field left unset goes
	// back to its default; a subfield of the probe changes alone.
	resp, err = e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1", Fall: proto.Int32(9)}})
	if err != nil || resp.GetStatus().GetSpec().GetFall() != 9 || resp.GetStatus().GetSpec().GetGroup() != "edge" {
		t.Errorf("empty mask: %v, %v; want fall 9, group kept", resp.GetStatus().GetSpec(), err)
	}
	resp, err = e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("group", "rise")})
	if err != nil || resp.GetStatus().GetSpec().GetGroup() != "" || resp.GetStatus().GetSpec().GetRise() != 2 {
		t.Errorf("unset named fields: %v, %v; want no group and the default rise 2", resp.GetStatus().GetSpec(), err)
	}
	resp, err = e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "web-1b:80"}}},
		UpdateMask: mask("tcp.address"),
	})
	if err != nil || resp.GetStatus().GetSpec().GetTcp().GetAddress() != "web-1b:80" || resp.GetStatus().GetSpec().GetFall() != 9 {
		t.Errorf("tcp.address: %v, %v", resp.GetStatus().GetSpec(), err)
	}
	// A field of another probe kind replaces the probe.
	resp, err = e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "web-1:50051", Service: "ignored"}}},
		UpdateMask: mask("grpc.address"),
	})
	if got := resp.GetStatus().GetSpec(); err != nil || got.GetTcp() != nil || got.GetGrpc().GetAddress() != "web-1:50051" || got.GetGrpc().GetService() != "" {
		t.Errorf("grpc.address on a tcp target: %v, %v; want a grpc probe of that address alone", got, err)
	}
}

func TestUpdateTargetKeepsStoredSecrets(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, httpTarget("web-1", map[string]string{"Authorization": "Bearer s3cret"}))
	resp, err := e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:10/healthz"}}},
		UpdateMask: mask("http.url"),
	})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "UpdateTarget's reply", resp)
	st, _ := e.c.Status("web-1")
	if got := st.Spec.Probe.HTTP; got.URL != "http://127.0.0.1:10/healthz" || got.Headers["Authorization"] != "Bearer s3cret" {
		t.Errorf("stored probe %+v, want the new URL and the header's value kept", got)
	}
}

func TestUpdateTargetRejectsNamingTheProblem(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-1", "edge"))
	for _, tc := range []struct {
		req    *pb.UpdateTargetRequest
		code   codes.Code
		prefix string
	}{
		{&pb.UpdateTargetRequest{}, codes.InvalidArgument, "target: is required"},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("intervl")}, codes.InvalidArgument,
			`update_mask.paths[0]: "intervl": Target has no field "intervl"; its fields are `},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("group", "http.nope")}, codes.InvalidArgument,
			`update_mask.paths[1]: "http.nope": HttpProbe has no field "nope"`},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("interval.seconds")}, codes.InvalidArgument,
			`update_mask.paths[0]: "interval.seconds": Target.interval has no fields to name`},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("name")}, codes.InvalidArgument,
			`update_mask.paths[0]: "name" cannot change`},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("*", "group")}, codes.InvalidArgument,
			`update_mask.paths[0]: "*" replaces the whole spec`},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1", Timeout: durationpb.New(time.Hour)}, UpdateMask: mask("timeout")}, codes.InvalidArgument,
			"target.timeout: must be at most the interval"},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "web-1"}, UpdateMask: mask("tcp")}, codes.InvalidArgument, "target.probe:"},
		{&pb.UpdateTargetRequest{Target: &pb.Target{Name: "nope", Group: "x"}, UpdateMask: mask("group")}, codes.NotFound, `unknown target "nope"`},
	} {
		_, err := e.client.UpdateTarget(t.Context(), tc.req)
		wantCode(t, err, tc.code, tc.prefix)
	}
	st, _ := e.c.Status("web-1")
	if st.Spec.Group != "edge" || st.Spec.Probe.TCP == nil {
		t.Errorf("rejected updates changed the target: %+v", st.Spec)
	}
	// "*" replaces the whole spec, as AddTarget does, keeping the name.
	resp, err := e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{Target: tcpTarget("web-1", "core"), UpdateMask: mask("*")})
	if err != nil || resp.GetStatus().GetSpec().GetGroup() != "core" {
		t.Errorf(`"*": %v, %v`, resp, err)
	}
}

// ProbeNow probes what it selects at once and returns the round: its
// transitions in name order and each target's result; rounds are
// rate-limited on the checker's clock.
func TestProbeNowThroughTheAPI(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	e := start(t, checker.Config{Clock: clock})
	for _, name := range []string{"web-2", "web-1", "db-1"} {
		group := "edge"
		if name == "db-1" {
			group = "data"
		}
		e.add(t, tcpTarget(name, group))
		e.set(name+":80", true)
	}
	e.set("web-2:80", false)
	resp, err := e.client.ProbeNow(t.Context(), &pb.ProbeNowRequest{Group: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range resp.GetTransitions() {
		got = append(got, tr.GetText()+" ("+tr.GetResult().GetError()+")")
	}
	for _, r := range resp.GetResults() {
		got = append(got, r.GetName()+" "+r.GetState().String()+" pass="+map[bool]string{true: "yes", false: "no"}[r.GetResult().GetPass()]+" "+r.GetResult().GetError())
	}
	want := []string{
		"web-1: unhealthy -> healthy ()",
		"web-1 STATE_HEALTHY pass=yes ",
		"web-2 STATE_UNHEALTHY pass=no connection refused",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round (-want +got):\n%s", diff)
	}
	if st, _ := e.c.Status("db-1"); st.ActiveResults != 0 {
		t.Errorf("db-1, outside the group, was probed")
	}
	for range checker.ProbeNowBurst - 1 {
		if _, err := e.client.ProbeNow(t.Context(), &pb.ProbeNowRequest{Names: []string{"db-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.client.ProbeNow(t.Context(), &pb.ProbeNowRequest{Names: []string{"db-1"}})
	wantCode(t, err, codes.ResourceExhausted, "rate limit exceeded: at most 1 probe-now rounds a second per client (burst 5); retry in 1s")
	clock.Advance(time.Second)
	if _, err := e.client.ProbeNow(t.Context(), &pb.ProbeNowRequest{}); err != nil {
		t.Errorf("after a second: %v", err)
	}
}

// UpdateTarget of a target a discovery group found is refused, naming the
// group, and changes nothing.
func TestUpdateTargetRefusesDiscoveredTargets(t *testing.T) {
	e := start(t, checker.Config{Defaults: checker.StandardDefaults()})
	spec, err := server.SpecFromProto(tcpTarget("api-1", "edge"))
	if err != nil {
		t.Fatal(err)
	}
	spec.Source = server.DiscoverySource("api")
	if _, _, err := e.c.Add(spec); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{Target: &pb.Target{Name: "api-1", Fall: proto.Int32(9)}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `discovery group "api"`) {
		t.Fatalf("got %v, want FailedPrecondition naming the discovery group", err)
	}
	st, err := e.client.State(t.Context(), &pb.StateRequest{Name: "api-1"})
	if err != nil || st.GetStatus().GetSpec().GetFall() == 9 {
		t.Errorf("the refused update changed the target: %v, %v", st.GetStatus().GetSpec(), err)
	}
}

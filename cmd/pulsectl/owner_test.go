package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulse "github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// ownerPulse answers State as a replica does for a target another replica,
// owner, probes: no streak or last probe of its own. An empty owner is a
// single pulsed's answer.
type ownerPulse struct {
	pb.UnimplementedHealthCheckerServer
	owner   string
	addr    string // where owner is reached, as its History NOT_FOUND says; "": not said
	replica string // the replica answering, as State says; "": not said
}

func (p ownerPulse) State(context.Context, *pb.StateRequest) (*pb.StateResponse, error) {
	return &pb.StateResponse{Replica: p.replica, OwnerAddress: p.addr, Status: &pb.TargetStatus{
		Spec: &pb.Target{
			Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.1:80"}},
			Interval: durationpb.New(2 * time.Second), Timeout: durationpb.New(time.Second), Rise: ptr[int32](2), Fall: ptr[int32](3),
			Model: pb.Model_MODEL_RISE_FALL,
		},
		State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true, Mode: pb.Mode_MODE_ACTIVE,
		Owner: p.owner,
	}}, nil
}

// History is a replica's answer for a target another replica probes.
func (p ownerPulse) History(context.Context, *pb.HistoryRequest) (*pb.HistoryResponse, error) {
	st := status.Newf(codes.NotFound, "no history of target %q here: replica %s probes it; ask it", "web-1", p.owner)
	if p.addr != "" {
		st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: pulse.ReasonProbedElsewhere, Domain: pulse.ErrorDomain,
			Metadata: map[string]string{"replica": p.owner, "address": p.addr}})
	}
	return nil, st.Err()
}

// keeperPulse answers History as the replica that probes web-1 does, and
// keeps the token each call came with.
type keeperPulse struct {
	pb.UnimplementedHealthCheckerServer
	tokens chan string
}

// State is the owner's answer: its streak and last probe.
func (p keeperPulse) State(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	p.tokens <- strings.Join(md.Get("authorization"), ",")
	resp, _ := ownerPulse{owner: "r2", replica: "r2"}.State(ctx, req)
	resp.Status.PassStreak = 5
	resp.Status.LastResult = &pb.ProbeResult{Pass: true, Time: timestamppb.Now(), Latency: durationpb.New(3 * time.Millisecond)}
	return resp, nil
}

func (p keeperPulse) History(ctx context.Context, req *pb.HistoryRequest) (*pb.HistoryResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	p.tokens <- strings.Join(md.Get("authorization"), ",")
	return &pb.HistoryResponse{Target: req.GetTarget(), Group: "edge", Resolution: durationpb.New(time.Hour), Probes: 10, Failures: 1, Availability: ptr(0.9)}, nil
}

// history asked of a replica that names where the replica probing the
// target is reached asks that one, with the same token, says so on
// stderr, and prints its answer; once only.
func TestHistoryFollowsTheOwner(t *testing.T) {
	keeper := keeperPulse{tokens: make(chan string, 2)}
	keeperAddr := serveAPI(t, keeper)
	r := pulsectl(t, "history", "web-1", "--token", "s3cret", "--addr", serveAPI(t, ownerPulse{owner: "r2", addr: keeperAddr}))
	if r.code != exitOK || !strings.Contains(r.stdout, "web-1 (group edge), last 24h") || !strings.Contains(r.stdout, "90.00% (9 of 10 probes passed)") {
		t.Fatalf("history: exit %d\n%s%s\nwant r2's history of web-1", r.code, r.stdout, r.stderr)
	}
	if want := "replica r2 probes web-1 and keeps its history: asking it at " + keeperAddr; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	checkAsked(t, keeper, "Bearer s3cret")

	// An owner that in turn names another is not followed further.
	r = pulsectl(t, "history", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2", addr: serveAPI(t, ownerPulse{owner: "r3", addr: keeperAddr})}))
	if want := `replica r3 probes it; ask it`; r.code != exitNotFound || !strings.Contains(r.stderr, want) {
		t.Errorf("history with the owner moved again: exit %d, %q; want exit %d and %q", r.code, r.stderr, exitNotFound, want)
	}
	// An owner that cannot be reached, or whose address is not one, leaves
	// the first answer standing, with why it was not asked.
	closed := closedAddr(t)
	for addr, why := range map[string]string{
		closed:                    "pulsectl: could not ask replica r2 at " + closed + ": ",
		"127.0.0.2:1,127.0.0.3:1": "pulsectl: not asking replica r2 at 127.0.0.2:1,127.0.0.3:1: not a host:port",
		"dns:///127.0.0.2:1":      "pulsectl: not asking replica r2 at dns:///127.0.0.2:1: not a host:port",
	} {
		r = pulsectl(t, "history", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2", addr: addr}))
		if want := `replica r2 probes it; ask it`; r.code != exitNotFound || !strings.Contains(r.stderr, why) || !strings.Contains(r.stderr, want) {
			t.Errorf("history with r2 at %s: exit %d, %q; want exit %d, %q and %q", addr, r.code, r.stderr, exitNotFound, why, want)
		}
	}
}

// pulsectl follows pulsed to a replica's host:port only, and with a token
// only over TLS or to this machine.
func TestFollowRefusal(t *testing.T) {
	t.Setenv(pulse.TokenEnv, "")
	for _, tt := range []struct {
		conn dial.Flags
		addr string
		want string
	}{
		{dial.Flags{}, "192.0.2.7:50051", ""},
		{dial.Flags{Token: "s3cret"}, "127.0.0.2:50051", ""},
		{dial.Flags{Token: "s3cret"}, "[::1]:50051", ""},
		{dial.Flags{Token: "s3cret"}, "localhost:50051", ""},
		{dial.Flags{Token: "s3cret", TLS: true}, "192.0.2.7:50051", ""},
		{dial.Flags{Token: "s3cret"}, "192.0.2.7:50051", "pulsectl sends its token to another machine only over TLS (--tls)"},
		{dial.Flags{TokenFile: "tokens"}, "pulse-2.example:50051", "pulsectl sends its token to another machine only over TLS (--tls)"},
		{dial.Flags{}, "192.0.2.7", "not a host:port"},
		{dial.Flags{}, ":50051", "not a host:port"},
		{dial.Flags{}, "unix:///run/pulse.sock", "not a host:port"},
	} {
		if got := followRefusal(tt.conn, tt.addr); got != tt.want {
			t.Errorf("%+v to %s: %q, want %q", tt.conn, tt.addr, got, tt.want)
		}
	}
}

// history on a replica that does not probe the target passes on which
// replica does, rather than saying there is no such target.
func TestHistoryNamesTheOwner(t *testing.T) {
	r := pulsectl(t, "history", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2"}))
	if want := `no history of target "web-1" here: replica r2 probes it; ask it`; r.code != exitNotFound || !strings.Contains(r.stderr, want) {
		t.Errorf("history: exit %d, %q; want exit %d and %q", r.code, r.stderr, exitNotFound, want)
	}
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

// fleetPulse answers ListTargets as replica r1 of a fleet does: web-1 is
// r2's, web-2 its own, and (with owners unset) as a single pulsed does.
type fleetPulse struct {
	pb.UnimplementedHealthCheckerServer
	alone bool
}

func (p fleetPulse) ListTargets(context.Context, *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	resp := &pb.ListTargetsResponse{Checker: &pb.CheckerStatus{Replica: "r1", Replicas: []string{"r1", "r2"}}}
	for _, t := range []struct{ name, owner string }{{"web-1", "r2"}, {"web-2", "r1"}} {
		st := &pb.TargetStatus{
			Spec:  &pb.Target{Name: t.name, Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.1:80"}}},
			State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true, Mode: pb.Mode_MODE_ACTIVE,
			ProbeInterval: durationpb.New(2 * time.Second), Source: "api",
			Owner: t.owner,
		}
		if p.alone {
			st.Owner = ""
		}
		resp.Targets = append(resp.Targets, st)
	}
	if p.alone {
		resp.Checker = &pb.CheckerStatus{}
	}
	return resp, nil
}

// ls -o wide names each target's owner, and marks the replica that
// answered; a single pulsed's listing has no OWNER column, and plain ls
// has none either.
func TestLsWideShowsTheOwner(t *testing.T) {
	addr := serveAPI(t, fleetPulse{})
	out := mustRun(t, "ls", "--addr", addr, "-o", "wide")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NAME .* SOURCE +OWNER$`),
		regexp.MustCompile(`(?m)^web-1 .* api +r2$`),
		regexp.MustCompile(`(?m)^web-2 .* api +r1 \(this one\)$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ls -o wide on a replica printed\n%s\nwant a line matching %s", out, want)
		}
	}
	if out := mustRun(t, "ls", "--addr", addr); strings.Contains(out, "OWNER") || strings.Contains(out, "r2") {
		t.Errorf("ls without -o wide printed\n%s\nwant no owner", out)
	}
	if out := mustRun(t, "ls", "--addr", serveAPI(t, fleetPulse{alone: true}), "-o", "wide"); strings.Contains(out, "OWNER") {
		t.Errorf("ls -o wide on a single pulsed printed\n%s\nwant no OWNER column", out)
	}
}

// state asked of a replica that does not probe the target asks the one that
// does for its streak and last probe, when told where it is reached, with
// the same token; else it says which replica keeps them.
func TestStateAsksTheOwner(t *testing.T) {
	keeper := keeperPulse{tokens: make(chan string, 2)}
	keeperAddr := serveAPI(t, keeper)
	r := pulsectl(t, "state", "web-1", "--token", "s3cret", "--addr", serveAPI(t, ownerPulse{owner: "r2", replica: "r3", addr: keeperAddr}))
	if r.code != exitOK || !regexp.MustCompile(`(?m)^owner:\s+r2\nstreak:\s+pass 5\n`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^last probe:\s+pass in 3ms`).MatchString(r.stdout) {
		t.Errorf("state on r3: exit %d\n%s%s\nwant r2's streak and last probe", r.code, r.stdout, r.stderr)
	}
	if want := "replica r2 probes web-1 and keeps its streak and last probe: asking it at " + keeperAddr; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	checkAsked(t, keeper, "Bearer s3cret")

	for _, addr := range []string{"", closedAddr(t)} {
		r = pulsectl(t, "state", "web-1", "--addr", serveAPI(t, ownerPulse{owner: "r2", replica: "r3", addr: addr}))
		if r.code != exitOK || !regexp.MustCompile(`(?m)^streak:\s+- \(replica r2 probes it\)\n`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^last probe:\s+none here \(replica r2 probes it\)\n`).MatchString(r.stdout) {
			t.Errorf("state on r3, r2 at %q: exit %d\n%s%s\nwant the streak and last probe said to be r2's", addr, r.code, r.stdout, r.stderr)
		}
	}
}

// checkAsked checks that keeper was asked, with authorization want. The
// call is over once pulsectl returns.
func checkAsked(t *testing.T, keeper keeperPulse, want string) {
	t.Helper()
	select {
	case tok := <-keeper.tokens:
		if tok != want {
			t.Errorf("r2 was asked with authorization %q, want %q", tok, want)
		}
	default:
		t.Error("r2 was not asked")
	}
}

// splitPulse answers a group's History as a replica that probes half of
// its targets does.
type splitPulse struct {
	pb.UnimplementedHealthCheckerServer
}

func (splitPulse) History(_ context.Context, req *pb.HistoryRequest) (*pb.HistoryResponse, error) {
	return &pb.HistoryResponse{Group: req.GetGroup(), Resolution: durationpb.New(time.Hour), Probes: 10, Availability: ptr(1.0),
		TargetsElsewhere: 2, GroupTargets: 4, ReplicasElsewhere: []string{"r2", "r3"}}, nil
}

// history --group on a replica that probes some of the group's targets
// says the history is of those only, and who keeps the others'.
func TestGroupHistorySaysWhatThisReplicaHolds(t *testing.T) {
	out := mustRun(t, "history", "--group", "edge", "--addr", serveAPI(t, splitPulse{}))
	if want := "group edge, last 24h, by the hour\nthis replica's targets only: 2 of the group's 4; r2, r3 probe the other 2 and keep their history\n"; !strings.HasPrefix(out, want) {
		t.Errorf("history --group printed\n%s\nwant it to begin\n%s", out, want)
	}
}

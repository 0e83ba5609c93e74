package server_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/checker/history"
	"github.com/pulsehealth/pulse/checker/probe"
	pulse "github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// mirrorOnly is a shared registry in which this replica owns nothing: its
// checker shows only what the test applies, as another replica's writes.
type mirrorOnly struct{ fakeshared.Mirror }

func (mirrorOnly) Load() ([]checker.SharedTarget, uint64, error) {
	return []checker.SharedTarget{{
		Spec:     checker.Spec{Name: "web-1", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "web-1:80"}}},
		State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
		StateRev: 5,
	}}, 10, nil
}

// With replicas one revision can carry two events: the transition another
// replica stored and the FLAPPING_STARTED its flap log says. Every stream
// gets both, each as itself (streams share encoded events); another
// replica's overload comes with its ID, and ListTargets lists it.
func TestReplicatedPolicyEvents(t *testing.T) {
	e := start(t, checker.Config{Shared: mirrorOnly{}})
	w1 := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: 10})
	w2 := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: 10})
	now := time.Now()
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 11, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Time: now, Reason: "flapping: 3 transitions in 1m0s", Writer: "r2",
		Flap: &checker.FlapRecord{Verdict: checker.StateUnhealthy, Changes: []time.Time{now, now, now}, Flapping: true},
	}}}, 11)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedOverloadPut, Rev: 12, Overload: checker.ReplicaOverload{
		Replica: "r3", Degraded: true, Since: now, Reason: "checker degraded: 9 probes waiting for a slot (threshold 8)",
	}}}, 12)
	// The record's flapping comes before the transition it makes, as on a
	// single pulsed.
	want := []string{
		"11 KIND_FLAPPING_STARTED web-1: flapping, 3 transitions in 1m0s; held unhealthy until stable for 1m0s",
		"11 web-1: healthy -> unhealthy",
		"12 KIND_CHECKER_DEGRADED r3 replica r3: checker degraded: 9 probes waiting for a slot (threshold 8)",
	}
	for i, w := range []stream{w1, w2} {
		var got []string
		for range want {
			ev, err := w.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if p := ev.GetPolicy(); p != nil {
				s := fmt.Sprintf("%d %v ", ev.GetRevision(), p.GetKind())
				if p.GetReplica() != "" {
					s += p.GetReplica() + " "
				}
				got = append(got, s+p.GetText())
				continue
			}
			got = append(got, fmt.Sprintf("%d %s", ev.GetRevision(), describe(ev)))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stream %d (-want +got):\n%s", i+1, diff)
		}
	}
	resp, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetChecker().GetDegradedReplicas(); !cmp.Equal(got, []string{"r3"}) {
		t.Errorf("degraded_replicas %v, want [r3]", got)
	}
	if st := resp.GetTargets()[0]; !st.GetFlapping() || st.GetTransitionsInWindow() != 3 {
		t.Errorf("web-1 %v: want flapping, 3 transitions, as the owner stored", st)
	}
}

// ownedByR2 is mirrorOnly as replica r9 sees it: r2 owns web-1.
type ownedByR2 struct{ mirrorOnly }

func (ownedByR2) ID() string          { return "r9" }
func (ownedByR2) Owner(string) string { return "r2" }

// With replicas, State and ListTargets name the replica that probes a
// target, and ListTargets the one that answered; a single pulsed names no
// owner.
func TestStatusNamesTheOwner(t *testing.T) {
	e := start(t, checker.Config{Shared: ownedByR2{}})
	st, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetOwner(); got != "r2" {
		t.Errorf("State: owner %q, want r2", got)
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if owner, replica := list.GetTargets()[0].GetOwner(), list.GetChecker().GetReplica(); owner != "r2" || replica != "r9" {
		t.Errorf("ListTargets: owner %q, answered by %q; want r2, r9", owner, replica)
	}

	alone := start(t, checker.Config{})
	if got := alone.add(t, tcpTarget("web-1", "")).GetStatus().GetOwner(); got != "" {
		t.Errorf("a single pulsed names owner %q, want none", got)
	}
}

// ownedByR9 is mirrorOnly as its owner, replica r9, sees it.
type ownedByR9 struct{ mirrorOnly }

func (ownedByR9) ID() string          { return "r9" }
func (ownedByR9) Owner(string) string { return "r9" }

// With replicas, History of a target another replica probes names that
// replica, whose history it is: also when this one keeps the target's
// transitions, which every replica sees, but no probe of it. The part it
// probed before the target moved is answered; so is the empty history of
// a target it owns and has not probed yet. An unknown target is no such
// target.
func TestHistoryNamesTheReplicaThatProbes(t *testing.T) {
	rec := history.New(history.Options{})
	e := start(t, checker.Config{Shared: ownedByR2{}, Observer: rec}, server.WithHistory(rec))
	h := durationpb.New(time.Hour)
	_, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: h})
	wantCode(t, err, codes.NotFound, `no history of target "web-1" here: replica r2 probes it; ask it`)

	now := time.Now()
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 11, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Time: now, Writer: "r2"}}}, 11)
	if _, err := rec.Query("web-1", now, time.Hour, time.Minute); err != nil {
		t.Fatalf("the transition r2 stored is not in this replica's history: %v", err)
	}
	_, err = e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: h})
	wantCode(t, err, codes.NotFound, `no history of target "web-1" here: replica r2 probes it; ask it`)

	_, err = e.client.History(t.Context(), &pb.HistoryRequest{Target: "nobody", Window: h})
	wantCode(t, err, codes.NotFound, `no history of target "nobody" here: no such target`)

	// Probed here before it moved to r2.
	rec.ObserveProbe(checker.Spec{Name: "web-1"}, checker.Result{Pass: true, Time: now, Latency: time.Millisecond})
	if got, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: h}); err != nil || got.GetProbes() != 1 {
		t.Errorf("history of web-1 probed here once: %d probes, %v; want 1", got.GetProbes(), err)
	}

	rec = history.New(history.Options{})
	own := start(t, checker.Config{Shared: ownedByR9{}, Observer: rec}, server.WithHistory(rec))
	if got, err := own.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: h}); err != nil || got.GetProbes() != 0 {
		t.Errorf("history of web-1 on its owner before a probe: %d probes, %v; want an empty history", got.GetProbes(), err)
	}
}

// directory is a server.Directory of fixed addresses.
type directory map[string][2]string

func (d directory) Addresses(id string) (string, string) { return d[id][0], d[id][1] }

// With a directory, History's NOT_FOUND for another replica's target names
// where that replica is reached, in its message and in an ErrorInfo a
// client can follow; without the replica's address, the replica alone.
func TestHistoryGivesTheAddressOfTheReplicaThatProbes(t *testing.T) {
	rec := history.New(history.Options{})
	for _, tc := range []struct {
		dir      directory
		msg      string
		metadata map[string]string
	}{
		{directory{"r2": {"192.0.2.2:50051", "https://192.0.2.2:9090/"}},
			`no history of target "web-1" here: replica r2 probes it; ask it at 192.0.2.2:50051`,
			map[string]string{"replica": "r2", "address": "192.0.2.2:50051", "page": "https://192.0.2.2:9090/"}},
		{directory{"r3": {"192.0.2.3:50051", ""}},
			`no history of target "web-1" here: replica r2 probes it; ask it`,
			map[string]string{"replica": "r2"}},
		// The test's client is not on loopback (bufconn): r2's loopback
		// address would name the client's own machine.
		{directory{"r2": {"127.0.0.2:50051", "http://[::1]:9090/"}},
			`no history of target "web-1" here: replica r2 probes it; ask it`,
			map[string]string{"replica": "r2"}},
	} {
		e := start(t, checker.Config{Shared: ownedByR2{}, Observer: rec}, server.WithHistory(rec), server.WithDirectory(tc.dir))
		_, err := e.client.History(t.Context(), &pb.HistoryRequest{Target: "web-1", Window: durationpb.New(time.Hour)})
		wantCode(t, err, codes.NotFound, tc.msg)
		var info *errdetails.ErrorInfo
		for _, d := range status.Convert(err).Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if info == nil || info.GetReason() != pulse.ReasonProbedElsewhere || info.GetDomain() != pulse.ErrorDomain || !maps.Equal(info.GetMetadata(), tc.metadata) {
			t.Errorf("%v: ErrorInfo %v, want %s with %v", tc.dir, info, pulse.ReasonProbedElsewhere, tc.metadata)
		}
	}
}

// A loopback address of a replica is given to a client on loopback only.
func TestReachableFrom(t *testing.T) {
	for _, tt := range []struct {
		addr, peer string
		want       bool
	}{
		{"127.0.0.2:50051", "127.0.0.1", true},
		{"127.0.0.2:50051", "192.0.2.9", false},
		{"127.0.0.2:50051", "", false},
		{"[::1]:50051", "::1", true},
		{"[::1]:50051", "2001:db8::9", false},
		{"localhost:50051", "192.0.2.9", false},
		{"http://127.0.0.1:9090/", "127.0.0.1", true},
		{"http://127.0.0.1:9090/", "192.0.2.9", false},
		{"https://[::1]:9090/", "192.0.2.9", false},
		{"192.0.2.2:50051", "192.0.2.9", true},
		{"192.0.2.2:50051", "127.0.0.1", true},
		{"pulse-2.example:50051", "192.0.2.9", true},
		{"https://pulse-2.example:9090/", "127.0.0.1", true},
		{"", "127.0.0.1", false},
	} {
		if got := server.ReachableFrom(tt.addr, tt.peer); got != tt.want {
			t.Errorf("ReachableFrom(%q, %q) = %v, want %v", tt.addr, tt.peer, got, tt.want)
		}
	}
}

// With replicas, State says which replica answered and, for a target
// another replica probes, where that one is reached (not a loopback address
// to a client elsewhere); on the owner, no address.
func TestStateGivesTheOwnersAddress(t *testing.T) {
	dir := directory{"r2": {"192.0.2.2:50051", ""}, "r9": {"192.0.2.9:50051", ""}}
	for _, tc := range []struct {
		shared  checker.Shared
		dir     directory
		replica string
		addr    string
	}{
		{ownedByR2{}, dir, "r9", "192.0.2.2:50051"},
		{ownedByR2{}, directory{"r2": {"127.0.0.2:50051", ""}}, "r9", ""}, // the client is not on loopback (bufconn)
		{ownedByR2{}, nil, "r9", ""},
		{ownedByR9{}, dir, "r9", ""},
	} {
		opts := []server.Option{}
		if tc.dir != nil {
			opts = append(opts, server.WithDirectory(tc.dir))
		}
		e := start(t, checker.Config{Shared: tc.shared}, opts...)
		resp, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
		if err != nil || resp.GetReplica() != tc.replica || resp.GetOwnerAddress() != tc.addr {
			t.Errorf("%T with %v: replica %q, owner address %q, %v; want %q and %q", tc.shared, tc.dir, resp.GetReplica(), resp.GetOwnerAddress(), err, tc.replica, tc.addr)
		}
	}
	alone := start(t, checker.Config{})
	alone.add(t, tcpTarget("web-1", ""))
	if resp, err := alone.client.State(t.Context(), &pb.StateRequest{Name: "web-1"}); err != nil || resp.GetReplica() != "" || resp.GetOwnerAddress() != "" {
		t.Errorf("a single pulsed: replica %q, owner address %q, %v; want neither", resp.GetReplica(), resp.GetOwnerAddress(), err)
	}
}

// splitEdge is a shared registry as replica r9 sees it: of group edge's
// four targets it probes a-1 and a-2, r2 a-3 and r3 a-4; r2 probes group
// solo's one target.
type splitEdge struct{ fakeshared.Mirror }

func (splitEdge) ID() string { return "r9" }
func (splitEdge) Owner(name string) string {
	switch name {
	case "a-3", "solo-1":
		return "r2"
	case "a-4":
		return "r3"
	}
	return "r9"
}

func (splitEdge) Load() ([]checker.SharedTarget, uint64, error) {
	var out []checker.SharedTarget
	for _, n := range []string{"a-1", "a-2", "a-3", "a-4", "solo-1"} {
		group := "edge"
		if n == "solo-1" {
			group = "solo"
		}
		out = append(out, checker.SharedTarget{
			Spec:  checker.Spec{Name: n, Group: group, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: n + ":80"}}},
			State: &checker.SharedState{State: checker.StateHealthy, Writer: "r2"}, StateRev: 5,
		})
	}
	return out, 10, nil
}

// With replicas, a group's history on one replica says it holds the
// targets this replica probes only, and which replicas keep the others';
// a group this replica probes none of names the replicas to ask.
func TestGroupHistoryOnAReplicaSaysWhatItHolds(t *testing.T) {
	rec := history.New(history.Options{})
	e := start(t, checker.Config{Shared: splitEdge{}, Observer: rec}, server.WithHistory(rec))
	rec.ObserveProbe(checker.Spec{Name: "a-1", Group: "edge"}, checker.Result{Pass: true, Time: time.Now(), Latency: time.Millisecond})
	h := durationpb.New(time.Hour)
	got, err := e.client.History(t.Context(), &pb.HistoryRequest{Group: "edge", Window: h})
	if err != nil || got.GetProbes() != 1 || got.GetTargetsElsewhere() != 2 || got.GetGroupTargets() != 4 || !slices.Equal(got.GetReplicasElsewhere(), []string{"r2", "r3"}) {
		t.Errorf("edge's history on r9: %d probes, %d of %d targets elsewhere, on %v, %v; want 1 probe, 2 of 4 on [r2 r3]",
			got.GetProbes(), got.GetTargetsElsewhere(), got.GetGroupTargets(), got.GetReplicasElsewhere(), err)
	}
	_, err = e.client.History(t.Context(), &pb.HistoryRequest{Group: "solo", Window: h})
	wantCode(t, err, codes.NotFound, `no history of group "solo" here: replica r2 probes its targets and keeps their history; ask it`)

	rec = history.New(history.Options{})
	alone := start(t, checker.Config{Observer: rec}, server.WithHistory(rec))
	alone.add(t, tcpTarget("web-1", "edge"))
	rec.ObserveProbe(checker.Spec{Name: "web-1", Group: "edge"}, checker.Result{Pass: true, Time: time.Now(), Latency: time.Millisecond})
	if got, err := alone.client.History(t.Context(), &pb.HistoryRequest{Group: "edge", Window: h}); err != nil || got.GetTargetsElsewhere() != 0 || got.GetGroupTargets() != 0 || len(got.GetReplicasElsewhere()) != 0 {
		t.Errorf("a single pulsed's group history: %v, %v; want no targets elsewhere", got, err)
	}
}

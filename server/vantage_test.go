package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// vantages and quorum through the API: each refused past its bound with
// the field and the bound named, before it is narrowed (256 is not 0);
// a single pulsed refuses more than one vantage, saying it needs
// replicas, and takes one.
func TestAddTargetVantageBounds(t *testing.T) {
	e := start(t, checker.Config{})
	for _, tt := range []struct {
		vantages, quorum int32
		want             string
	}{
		{-1, 0, "target.vantages: must be between 0 (one: the owner's) and 9, got -1"},
		{10, 0, "target.vantages: must be between 0 (one: the owner's) and 9, got 10"},
		{256, 0, "target.vantages: must be between 0 (one: the owner's) and 9, got 256"},
		{3, -1, "target.quorum: must be between 0 (a majority of vantages) and vantages (3), got -1"},
		{3, 4, "target.quorum: must be between 0 (a majority of vantages) and vantages (3), got 4"},
		{3, 259, "target.quorum: must be between 0 (a majority of vantages) and vantages (3), got 259"},
		{0, 2, "target.quorum: must be between 0 (a majority of vantages) and vantages (1), got 2"},
		{3, 2, "target.vantages: must be at most 1 here (a single pulsed is one vantage: probing from several needs replicas sharing a registry on etcd"},
	} {
		tg := tcpTarget("web-1", "")
		tg.Vantages, tg.Quorum = tt.vantages, tt.quorum
		_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
	tg := tcpTarget("web-1", "")
	tg.Vantages, tg.Quorum = 1, 1
	resp := e.add(t, tg)
	if s := resp.GetStatus().GetSpec(); s.GetVantages() != 1 || s.GetQuorum() != 1 {
		t.Errorf("spec %v, want vantages 1, quorum 1", s)
	}
	if v := resp.GetStatus().GetVantages(); v != nil {
		t.Errorf("vantages %v on a target probed from one", v)
	}

	// UpdateTarget checks them alike, and AddTargets names the target.
	_, err := e.client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Quorum: 2},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"quorum"}},
	})
	wantCode(t, err, codes.InvalidArgument, "target.quorum: must be between 0 (a majority of vantages) and vantages (1), got 2")
	bad := tcpTarget("web-2", "")
	bad.Vantages = 12
	many, err := e.client.AddTargets(t.Context(), &pb.AddTargetsRequest{Targets: []*pb.Target{bad}})
	if err != nil {
		t.Fatal(err)
	}
	if r := many.GetResults()[0]; r.GetCode() != "INVALID_ARGUMENT" || r.GetError() != "targets[0].vantages: must be between 0 (one: the owner's) and 9, got 12" {
		t.Errorf("AddTargets: %v", r)
	}
}

// vantageMirror is a shared registry that assigns vantages, in which this
// replica (r9) neither owns nor probes web-1: r2 owns it, r3 and r4 probe
// it too. Its checker shows what the test applies as their writes.
type vantageMirror struct{ mirrorOnly }

var vantageMembers = []checker.Vantage{{Member: "r2", Label: "zone-a"}, {Member: "r3", Label: "zone-b"}, {Member: "r4", Label: "zone-c"}}

func (vantageMirror) Load() ([]checker.SharedTarget, uint64, error) {
	at := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	st := checker.SharedTarget{
		Spec:     checker.Spec{Name: "web-1", Vantages: 3, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "web-1:80"}}},
		State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
		StateRev: 5,
	}
	for i, v := range vantageMembers {
		st.Verdicts = append(st.Verdicts, checker.VantageVerdict{Member: v.Member, Label: v.Label, State: checker.StateHealthy, Time: at, Rev: uint64(6 + i)})
	}
	return []checker.SharedTarget{st}, 10, nil
}
func (vantageMirror) Vantages(string, int) []checker.Vantage { return vantageMembers }
func (vantageMirror) Self() checker.Vantage                  { return checker.Vantage{Member: "r9", Label: "zone-d"} }
func (vantageMirror) ProposeVerdict(context.Context, checker.VerdictProposal) error {
	return checker.ErrFenced
}
func (vantageMirror) Judges(string) bool { return false }
func (vantageMirror) PutVantage(context.Context, checker.VantageRecord) error {
	return checker.ErrFenced
}
func (vantageMirror) LoadedVantages() []checker.VantageRecord { return nil }

// A target probed from several vantages: its status lists their
// verdicts, owner first, and a transition they decide carries them with
// its reason.
func TestVantageVerdictsOnTheWire(t *testing.T) {
	e := start(t, checker.Config{Shared: vantageMirror{}})
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: 10})
	at := time.Date(2026, 12, 5, 7, 1, 0, 0, time.UTC)
	down := func(rev uint64, v checker.Vantage, why string) checker.SharedChange {
		return checker.SharedChange{Kind: checker.SharedVerdictPut, Rev: rev, Name: "web-1", Verdict: checker.VantageVerdict{
			Member: v.Member, Label: v.Label, State: checker.StateUnhealthy, Error: why, Time: at, Rev: rev,
		}}
	}
	e.c.ApplyShared([]checker.SharedChange{down(11, vantageMembers[1], "connection refused")}, 11)
	e.c.ApplyShared([]checker.SharedChange{down(12, vantageMembers[2], "no route to host")}, 12)
	reason := "vantages: zone-a=healthy zone-b=unhealthy(connection refused) zone-c=unhealthy(no route to host)"
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 13, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Time: at, Reason: reason, Writer: "r2",
	}}}, 13)

	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ts := timestamppb.New(at)
	verdicts := []*pb.VantageVerdict{
		{Member: "r2", Label: "zone-a", State: pb.State_STATE_HEALTHY, Time: timestamppb.New(time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC))},
		{Member: "r3", Label: "zone-b", State: pb.State_STATE_UNHEALTHY, Error: "connection refused", Time: ts},
		{Member: "r4", Label: "zone-c", State: pb.State_STATE_UNHEALTHY, Error: "no route to host", Time: ts},
	}
	want := &pb.WatchTransitionsResponse{Revision: 13, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
		Target: "web-1", From: pb.State_STATE_HEALTHY, To: pb.State_STATE_UNHEALTHY, Time: ts,
		Text: "web-1: healthy -> unhealthy", Reason: reason, Mode: pb.Mode_MODE_ACTIVE, Vantages: verdicts,
	}}}
	if diff := cmp.Diff(want, ev, protocmp.Transform()); diff != "" {
		t.Errorf("transition (-want +got):\n%s", diff)
	}

	resp, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatus()
	if diff := cmp.Diff(verdicts, st.GetVantages(), protocmp.Transform()); diff != "" {
		t.Errorf("status vantages (-want +got):\n%s", diff)
	}
	if st.GetSpec().GetVantages() != 3 || st.GetSpec().GetQuorum() != 0 {
		t.Errorf("spec vantages %d, quorum %d; want 3, 0", st.GetSpec().GetVantages(), st.GetSpec().GetQuorum())
	}
	if st.GetVerdict() != pb.State_STATE_UNHEALTHY || st.GetState() != pb.State_STATE_UNHEALTHY {
		t.Errorf("verdict %v, state %v; want both unhealthy", st.GetVerdict(), st.GetState())
	}
	if st.GetOwner() != "r2" {
		t.Errorf("owner %q, want r2, the first vantage", st.GetOwner())
	}
}

// A vantage that has stored no verdict yet is listed with no state.
func TestVantageWithoutVerdict(t *testing.T) {
	e := start(t, checker.Config{Shared: vantageMirror{}})
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedVerdictDeleted, Rev: 11, Name: "web-1", Verdict: checker.VantageVerdict{Member: "r4", Rev: 11}}}, 11)
	resp, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range resp.GetTargets()[0].GetVantages() {
		got = append(got, fmt.Sprintf("%s %s %v %v", v.GetMember(), v.GetLabel(), v.GetState(), v.GetTime() != nil))
	}
	want := []string{"r2 zone-a STATE_HEALTHY true", "r3 zone-b STATE_HEALTHY true", "r4 zone-c STATE_UNSPECIFIED false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("vantages (-want +got):\n%s", diff)
	}
}

// A group's vantages and quorum, for its targets that set none: checked
// as a target's, refused above 1 on a single pulsed, and shown back.
func TestGroupPolicyVantages(t *testing.T) {
	e := start(t, checker.Config{})
	for _, tt := range []struct {
		vantages, quorum int32
		want             string
	}{
		{10, 0, "policy.vantages: must be between 0 (one: the owner's) and 9"},
		{-1, 0, "policy.vantages: must be between 0 (one: the owner's) and 9"},
		{1, 2, "policy.quorum: must be between 0 (a majority) and vantages (1), got 2"},
		{3, 0, "policy.vantages: must be at most 1 here (a single pulsed is one vantage"},
	} {
		_, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{Vantages: tt.vantages, Quorum: tt.quorum}})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
	resp, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{Vantages: 1, Quorum: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.GetGroup().GetPolicy(); p.GetVantages() != 1 || p.GetQuorum() != 1 {
		t.Errorf("policy %v, want vantages 1, quorum 1", p)
	}
}

// threeTargets is vantageMirror with web-1 to web-3 in group edge, every
// vantage healthy at first.
type threeTargets struct{ vantageMirror }

func (threeTargets) Load() ([]checker.SharedTarget, uint64, error) {
	var out []checker.SharedTarget
	for i := range 3 {
		name := fmt.Sprintf("web-%d", i+1)
		st := checker.SharedTarget{
			Spec:     checker.Spec{Name: name, Group: "edge", Vantages: 3, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: name + ":80"}}},
			State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
			StateRev: uint64(1 + i),
		}
		for j, v := range vantageMembers {
			st.Verdicts = append(st.Verdicts, checker.VantageVerdict{Member: v.Member, Label: v.Label, State: checker.StateHealthy, Rev: uint64(4 + 3*i + j)})
		}
		out = append(out, st)
	}
	return out, 20, nil
}

// zone-c (r4) says unhealthy of the targets the others see healthy, and
// its judge stores it as suspect: VANTAGE_SUSPECT reaches a stream without
// a filter with its replica, label and numbers, at the record's revision,
// but not a stream filtered by group.
func TestVantageSuspectOnTheStream(t *testing.T) {
	e := start(t, checker.Config{Shared: threeTargets{}})
	all := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: 20})
	edge := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{Group: "edge", StartRevision: 20})
	for i := range 3 {
		rev := uint64(21 + i)
		e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedVerdictPut, Rev: rev, Name: fmt.Sprintf("web-%d", i+1), Verdict: checker.VantageVerdict{
			Member: "r4", Label: "zone-c", State: checker.StateUnhealthy, Error: "no route to host", Rev: rev,
		}}}, rev)
	}
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedVantagePut, Rev: 24, Vantage: checker.VantageRecord{
		Member: "r4", Label: "zone-c", Suspect: true, Disagree: 3, Judged: 3, Time: time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC),
	}}}, 24)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 25, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Reason: "test", Writer: "r2",
	}}}, 25)

	ev, err := all.Recv()
	if err != nil {
		t.Fatal(err)
	}
	p := ev.GetPolicy()
	if p.GetKind() != pb.PolicyEvent_KIND_VANTAGE_SUSPECT || ev.GetRevision() != 24 || p.GetReplica() != "r4" || p.GetVantage() != "zone-c" || p.GetDisagree() != 3 || p.GetJudged() != 3 || p.GetText() == "" {
		t.Errorf("first event %v, want zone-c (r4) suspect at 24, 3 of 3", ev)
	}
	// The filtered stream's first event is web-1's transition: no vantage
	// event before it.
	ev, err = edge.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetTransition().GetTarget() != "web-1" {
		t.Errorf("the stream of group edge got %v first, want web-1's transition", ev)
	}
}

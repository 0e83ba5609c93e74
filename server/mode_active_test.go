package server_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// An active target says MODE_ACTIVE in every answer that carries a mode:
// AddTarget, UpdateTarget, State, ListTargets, SetMode, ProbeNow's
// transitions, and the stream's snapshot, added, updated and transition
// events. MODE_UNSPECIFIED is what a client sends when it sets nothing.
func TestActiveTargetSaysModeActiveEverywhere(t *testing.T) {
	e := start(t, checker.Config{})
	ctx := t.Context()
	want := pb.Mode_MODE_ACTIVE
	check := func(what string, got pb.Mode) {
		t.Helper()
		if got != want {
			t.Errorf("%s: mode %v, want %v", what, got, want)
		}
	}

	e.add(t, tcpTarget("web-0", "edge"))
	snap := watch(t, ctx, e, &pb.WatchTransitionsRequest{})
	for {
		ev, err := snap.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetSnapshotComplete() != nil {
			break
		}
		if s := ev.GetSnapshot(); s != nil {
			check("snapshot "+s.GetSpec().GetName(), s.GetMode())
		}
	}
	w := watchFrom(t, e, &pb.WatchTransitionsRequest{})

	add := e.add(t, tcpTarget("web-1", "edge"))
	check("AddTarget", add.GetStatus().GetMode())
	if ev, err := w.Recv(); err != nil {
		t.Fatal(err)
	} else {
		check("added event", ev.GetAdded().GetMode())
	}

	up, err := e.client.UpdateTarget(ctx, &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1", Group: "api"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"group"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	check("UpdateTarget", up.GetStatus().GetMode())
	if ev, err := w.Recv(); err != nil {
		t.Fatal(err)
	} else {
		check("updated event", ev.GetUpdated().GetMode())
	}

	st, err := e.client.State(ctx, &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	check("State", st.GetStatus().GetMode())
	list, err := e.client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.GetTargets() {
		check("ListTargets "+s.GetSpec().GetName(), s.GetMode())
	}
	sm, err := e.client.SetMode(ctx, &pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_ACTIVE})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sm.GetTargets() {
		check("SetMode "+s.GetSpec().GetName(), s.GetMode())
	}

	e.set("web-1:80", true) // unhealthy -> healthy
	pn, err := e.client.ProbeNow(ctx, &pb.ProbeNowRequest{Names: []string{"web-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pn.GetTransitions()) != 1 {
		t.Fatalf("ProbeNow transitions %v, want one", pn.GetTransitions())
	}
	check("ProbeNow transition", pn.GetTransitions()[0].GetMode())
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if tr := ev.GetTransition(); tr != nil {
			check("transition event", tr.GetMode())
			break
		}
	}
}

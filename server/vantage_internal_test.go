package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The vantage events reach the wire with their kind, replica, label and
// numbers.
func TestVantageEventsToProto(t *testing.T) {
	at := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	for kind, want := range map[checker.EventKind]pb.PolicyEvent_Kind{
		checker.EventVantageSuspect:   pb.PolicyEvent_KIND_VANTAGE_SUSPECT,
		checker.EventVantageRecovered: pb.PolicyEvent_KIND_VANTAGE_RECOVERED,
	} {
		e := checker.Event{Kind: kind, Revision: 7, Time: at, Policy: checker.PolicyChange{
			Replica: "r3", Vantage: "zone-b", Disagree: 4, Judged: 6, Text: "vantage zone-b (r3): says unhealthy of 4 of 6 targets the others see healthy",
		}}
		got := eventToProto(e)
		wantEv := &pb.WatchTransitionsResponse{Revision: 7, Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: want, Time: timestamppb.New(at), Replica: "r3", Vantage: "zone-b", Disagree: 4, Judged: 6, Text: e.Policy.Text,
		}}}
		if diff := cmp.Diff(wantEv, got, protocmp.Transform()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", kind, diff)
		}
	}
}

// vantages and quorum go to the wire and back unchanged.
func TestVantageSpecRoundTrip(t *testing.T) {
	in := &pb.Target{Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "web-1:80"}}, Vantages: 5, Quorum: 3}
	s, err := SpecFromProto(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.Vantages != 5 || s.Quorum != 3 {
		t.Fatalf("spec vantages %d, quorum %d; want 5, 3", s.Vantages, s.Quorum)
	}
	out := specToProto(s)
	if out.GetVantages() != 5 || out.GetQuorum() != 3 {
		t.Errorf("back on the wire: vantages %d, quorum %d", out.GetVantages(), out.GetQuorum())
	}
	if _, err := SpecFromProto(&pb.Target{Name: "web-1", Vantages: checker.MaxVantages + 247}); err == nil {
		t.Error("vantages 256 accepted: it narrows to 0")
	}
}

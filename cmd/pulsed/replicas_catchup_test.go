package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Two pulsed replicas on one etcd: a target AddTarget acknowledged on r1
// is found at once by State on r2, every time, as pulsectl with both
// addresses finds it whichever replica each call reaches.
func TestReplicasReadWritesOfOthers(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	bin := buildPulsed(t)
	var clients [2]pb.HealthCheckerClient
	var addrs [2]string
	for i := range clients {
		p := startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", e2ePrefix, "-replica-id", fmt.Sprintf("r%d", i+1), "-dns-listen", "127.0.0.1:0")
		clients[i], addrs[i] = dial(t, p.Addr), p.Addr
	}
	for i := range 200 {
		name := fmt.Sprintf("web-%03d", i)
		if _, err := clients[0].AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: name, Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}},
		}}); err != nil {
			t.Fatalf("AddTarget %s on r1: %v", name, err)
		}
		if _, err := clients[1].State(t.Context(), &pb.StateRequest{Name: name}); err != nil {
			t.Fatalf("State %s on r2 right after r1 acknowledged it: %v", name, err)
		}
	}

	// History asked of r2 for a target r1 probes names r1 where it is
	// reached, and r1's page has the history.
	ls, err := clients[1].ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, st := range ls.GetTargets() {
		if st.GetOwner() == "r1" {
			name = st.GetSpec().GetName()
			break
		}
	}
	if name == "" {
		t.Fatal("r1 owns none of 200 targets")
	}
	// State on r2 names r2 as the replica that answered and r1's address.
	if st, err := clients[1].State(t.Context(), &pb.StateRequest{Name: name}); err != nil || st.GetReplica() != "r2" || st.GetOwnerAddress() != addrs[0] {
		t.Errorf("State of %s on r2: replica %q, owner address %q, %v; want r2 and %s", name, st.GetReplica(), st.GetOwnerAddress(), err, addrs[0])
	}
	_, err = clients[1].History(t.Context(), &pb.HistoryRequest{Target: name, Window: durationpb.New(time.Hour)})
	var info *errdetails.ErrorInfo
	for _, d := range status.Convert(err).Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	md := info.GetMetadata()
	if status.Code(err) != codes.NotFound || md["replica"] != "r1" || md["address"] != addrs[0] || !strings.HasPrefix(md["page"], "http://127.0.0.1:") {
		t.Fatalf("History of %s on r2: %v with %v; want NOT_FOUND naming r1 at %s and its page", name, err, md, addrs[0])
	}
	resp, err := http.Get(md["page"] + "api/history?target=" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ KeptBy string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK || h.KeptBy != "" {
		t.Errorf("%sapi/history?target=%s: %d, keptBy %q, %v; want r1's own history", md["page"], name, resp.StatusCode, h.KeptBy, err)
	}
}

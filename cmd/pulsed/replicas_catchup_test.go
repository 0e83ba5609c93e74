package main

import (
	"fmt"
	"testing"

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
	for i := range clients {
		p := startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", e2ePrefix, "-replica-id", fmt.Sprintf("r%d", i+1), "-dns-listen", "127.0.0.1:0")
		clients[i] = dial(t, p.Addr)
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
}

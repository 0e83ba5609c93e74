package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// killableHTTP is an HTTP backend on 127.0.0.1 that can die as a crashed
// process does: its listener closes and every open connection is reset.
type killableHTTP struct {
	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newKillableHTTP(t *testing.T) *killableHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &killableHTTP{ln: ln, conns: map[net.Conn]bool{}}
	k.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ConnState: func(c net.Conn, s http.ConnState) {
			k.mu.Lock()
			defer k.mu.Unlock()
			if s == http.StateNew {
				k.conns[c] = true
			} else if s == http.StateClosed || s == http.StateHijacked {
				delete(k.conns, c)
			}
		},
	}
	served := make(chan struct{})
	go func() { defer close(served); k.srv.Serve(ln) }()
	t.Cleanup(func() { k.srv.Close(); <-served })
	return k
}

func (k *killableHTTP) url() string { return "http://" + k.ln.Addr().String() + "/healthz" }

// kill closes the listener and resets every open connection.
func (k *killableHTTP) kill() {
	k.ln.Close()
	k.mu.Lock()
	defer k.mu.Unlock()
	for c := range k.conns {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

// A backend killed between two probes resets the connection pulsed keeps
// to it, and pulsed probes it at once: the target is unhealthy before its
// next scheduled probe (minutes away: interval 10m, fall 3), and
// pulse_reprobes_total says why. The same for a gRPC target whose server
// stops. (The names' first probes are due minutes after they are added;
// ProbeNow makes them healthy and their connections kept.)
func TestKilledBackendIsDownBeforeItsNextProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	bin := buildPulsed(t)
	web := newKillableHTTP(t)
	gsrv := grpc.NewServer()
	healthpb.RegisterHealthServer(gsrv, health.NewServer())
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); gsrv.Serve(gln) }()
	t.Cleanup(func() { gsrv.Stop(); <-served })

	p, base := startPulsedJSON(t, bin, "-interval", "10m", "-timeout", "1s", "-rise", "1", "-fall", "3")
	client := dial(t, p.Addr)
	for _, tg := range []*pb.Target{
		{Name: "killed", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: web.url()}}},
		{Name: "backend", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: gln.Addr().String()}}},
	} {
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatalf("AddTarget(%s): %v", tg.Name, err)
		}
	}
	if _, err := client.ProbeNow(t.Context(), &pb.ProbeNowRequest{}); err != nil {
		t.Fatal(err)
	}
	status := func(name string) *pb.TargetStatus {
		resp, err := client.State(t.Context(), &pb.StateRequest{Name: name})
		if err != nil {
			t.Fatalf("State(%s): %v", name, err)
		}
		return resp.GetStatus()
	}
	for _, tt := range []struct {
		name, reason string
		kill         func()
	}{
		{"killed", "reset", web.kill},
		{"backend", "channel", gsrv.Stop},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := status(tt.name)
			if before.GetState() != pb.State_STATE_HEALTHY {
				t.Fatalf("before the kill: %v (%s)", before.GetState(), before.GetLastResult().GetError())
			}
			next := before.GetNextProbeTime().AsTime()
			tt.kill()
			eventually(t, tt.name+" unhealthy", func() bool { return status(tt.name).GetState() == pb.State_STATE_UNHEALTHY })
			after := status(tt.name)
			if down := after.GetLastTransitionTime().AsTime(); !down.Before(next) {
				t.Errorf("unhealthy at %v, not before its next scheduled probe at %v", down, next)
			}
			if n := after.GetActiveResults() - before.GetActiveResults(); n != 3 {
				t.Errorf("%d probes from the kill to unhealthy, want fall (3): only probes count", n)
			}
			eventually(t, "the reprobe counted in /metrics", func() bool {
				_, body := httpGet(t, base+"/metrics")
				return strings.Contains(body, `pulse_reprobes_total{reason="`+tt.reason+`"} 1`+"\n")
			})
		})
	}
}

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/netlab"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// pulsed in one network namespace probes HTTP, TCP and gRPC backends in
// another over a real link. When the path between them silently drops
// every packet (a broken switch port: no reset, no refusal, the kept
// connections simply go quiet), each probe still ends at its own timeout,
// every backend goes unhealthy after fall probes with a timeout as the
// reason, and pulsed keeps answering. When the path refuses at once
// (ICMP unreachable) the reason says so. Healed, every backend comes back
// after rise probes.
func TestProbesAcrossABrokenPath(t *testing.T) {
	lab := netlab.New(t)
	checkerHost, backendHost := lab.AddHost("checker"), lab.AddHost("backends")
	bin := buildPulsed(t)

	// The backends, in their own namespace.
	httpL, err := backendHost.Listen(backendHost.Addr + ":8080")
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go web.Serve(httpL)
	t.Cleanup(func() { web.Close() })
	tcpL, err := backendHost.Listen(backendHost.Addr + ":6379")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := tcpL.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() { tcpL.Close() })
	grpcL, err := backendHost.Listen(backendHost.Addr + ":50061")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(grpcL)
	t.Cleanup(gs.Stop)

	// pulsed, in the checker's namespace, on its loopback there.
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(time.Minute))
	defer cancel()
	args := []string{"netns", "exec", checkerHost.NS, bin, "-data-dir", "", "-listen", "127.0.0.1:0", "-http-listen", "",
		"-interval", "300ms", "-timeout", "200ms", "-rise", "1", "-fall", "2"}
	proc, err := pulsedproc.Start(ctx, "ip", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	conn, err := grpc.NewClient("passthrough:///"+proc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return checkerHost.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewHealthCheckerClient(conn)

	targets := []*pb.Target{
		{Name: "web", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://" + backendHost.Addr + ":8080/healthz"}}},
		{Name: "cache", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: backendHost.Addr + ":6379"}}},
		{Name: "api", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: backendHost.Addr + ":50061"}}},
	}
	for _, tg := range targets {
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatalf("AddTarget %s: %v", tg.GetName(), err)
		}
	}
	stream := openStream(t, client, 0)
	waitAll := func(suffix string, after map[string]int) map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, tg := range targets {
			got[tg.GetName()] = stream.waitFor(t, tg.GetName(), suffix, after[tg.GetName()])
		}
		return got
	}
	seen := func() map[string]int {
		n := map[string]int{}
		for _, tg := range targets {
			n[tg.GetName()] = len(stream.transitions(tg.GetName()))
		}
		return n
	}
	waitAll("-> healthy", nil)

	// reasons returns each target's last result's error.
	reasons := func() map[string]string {
		out := map[string]string{}
		for _, tg := range targets {
			st, err := client.State(t.Context(), &pb.StateRequest{Name: tg.GetName()})
			if err != nil {
				t.Fatalf("State %s while the path is broken: %v", tg.GetName(), err)
			}
			out[tg.GetName()] = st.GetStatus().GetLastResult().GetError()
		}
		return out
	}

	for _, tc := range []struct {
		how  netlab.How
		want []string // each reason names one of these
	}{
		{netlab.Drop, []string{"timeout", "deadline"}},
		{netlab.Reject, []string{"unreachable", "no route"}},
	} {
		before := seen()
		checkerHost.Cut(backendHost, tc.how)
		waitAll("healthy -> unhealthy", before)
		for name, reason := range reasons() {
			if !containsAny(strings.ToLower(reason), tc.want) {
				t.Errorf("path cut (%s): %s's last error %q names none of %q", howName[tc.how], name, reason, tc.want)
			}
		}
		// pulsed answers while every probe of it fails.
		if _, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{}); err != nil {
			t.Fatalf("ListTargets while the path is cut: %v", err)
		}
		before = seen()
		checkerHost.Heal(backendHost, tc.how)
		waitAll("unhealthy -> healthy", before)
	}
}

var howName = map[netlab.How]string{netlab.Drop: "drop", netlab.Reject: "reject"}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

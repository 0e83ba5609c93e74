package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// exhaustProbeNow spends a client's ProbeNow burst and wants the next call
// refused with RESOURCE_EXHAUSTED naming the per-client limit.
func exhaustProbeNow(t *testing.T, ctx context.Context, c pb.HealthCheckerClient) {
	t.Helper()
	for i := range checker.ProbeNowBurst {
		if _, err := c.ProbeNow(ctx, &pb.ProbeNowRequest{}); err != nil {
			t.Fatalf("round %d of the burst: %v", i+1, err)
		}
	}
	_, err := c.ProbeNow(ctx, &pb.ProbeNowRequest{})
	wantCode(t, err, codes.ResourceExhausted, "rate limit exceeded: at most 1 probe-now rounds a second per client (burst 5); retry in 1s")
}

// ProbeNow's rate limit is per client address: a client that spends its
// budget leaves another address on the same machine its own.
func TestProbeNowRateIsPerClientAddress(t *testing.T) {
	conns := serveTCP(t, checker.Config{Clock: fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))})
	from := func(ip string) pb.HealthCheckerClient { return pb.NewHealthCheckerClient(conns(ip)) }
	a, b := from("127.0.0.1"), from("127.0.0.2")
	if _, err := a.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("web-1", "edge")}); err != nil {
		t.Fatal(err)
	}
	exhaustProbeNow(t, t.Context(), a)
	if _, err := b.ProbeNow(t.Context(), &pb.ProbeNowRequest{}); err != nil {
		t.Errorf("another address, after the first spent its budget: %v", err)
	}
	// A second connection from the first address shares its budget.
	_, err := from("127.0.0.1").ProbeNow(t.Context(), &pb.ProbeNowRequest{})
	wantCode(t, err, codes.ResourceExhausted, "rate limit exceeded: at most 1 probe-now rounds a second per client")
}

// With tokens, ProbeNow's rate limit is per token: two tokens from the
// same address have a budget each.
func TestProbeNowRateIsPerToken(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader("write ci-token-0123456789 ci\nwrite ops-token-0123456789 ops\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	e := startWith(t, checker.Config{Clock: clock}, server.Options{Tokens: tokens})
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
	}
	ci, ops := as("ci-token-0123456789"), as("ops-token-0123456789")
	if _, err := e.client.AddTarget(ops, &pb.AddTargetRequest{Target: tcpTarget("web-1", "edge")}); err != nil {
		t.Fatal(err)
	}
	exhaustProbeNow(t, ci, e.client)
	if _, err := e.client.ProbeNow(ops, &pb.ProbeNowRequest{}); err != nil {
		t.Errorf("another token, after the first spent its budget: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := e.client.ProbeNow(ci, &pb.ProbeNowRequest{}); err != nil {
		t.Errorf("the first token a second later: %v", err)
	}
}

// serveTCP serves a checker made of cfg (with fake probes and short
// defaults) on a loopback TCP listener, and returns a function that opens
// a client connection from a loopback address of the caller's choice, as
// a distinct client IP.
func serveTCP(t *testing.T, cfg checker.Config) func(ip string) *grpc.ClientConn {
	t.Helper()
	cfg.NewProber = fakeprobe.NewSwitches().New
	cfg.Defaults = checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(func() {
		c.Close()
		gs.Stop()
	})
	return func(ip string) *grpc.ClientConn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
}

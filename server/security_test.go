package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

const tokenFile = `# who may do what
read  reader-token-0123456789 dashboards
write sha256:8b6f2c41b7d2bdfa2c9e0bbbd6b5dd7a64e7e3d2c69e2b5ed5c3c1bcd9aa6a53 deployer
write writer-token-0123456789
`

func TestParseTokens(t *testing.T) {
	if _, err := server.ParseTokens(strings.NewReader(tokenFile)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ body, want string }{
		{"admin some-long-token-123456\n", "1: role must be read or write"},
		{"read\n", "1: want \"<role> <token> [name]\""},
		{"# c\nread short\n", "2: a token must be at least 16 characters"},
		{"write sha256:abc\n", "1: sha256: must be followed by 64 hex digits"},
		{"# nothing\n", "no tokens"},
	} {
		if _, err := server.ParseTokens(strings.NewReader(tt.body)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.body, err, tt.want)
		}
	}
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func TestTokenRoles(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	e := startWith(t, checker.Config{}, server.Options{Tokens: tokens})
	ctx := t.Context()
	add := &pb.AddTargetRequest{Target: tcpTarget("web-1", "")}

	_, err = e.client.ListTargets(ctx, &pb.ListTargetsRequest{})
	wantCode(t, err, codes.Unauthenticated, "missing token")
	_, err = e.client.ListTargets(withToken(ctx, "not-a-known-token-at-all"), &pb.ListTargetsRequest{})
	wantCode(t, err, codes.Unauthenticated, "invalid token")
	_, err = e.client.AddTarget(withToken(ctx, "reader-token-0123456789"), add)
	wantCode(t, err, codes.PermissionDenied, `token "dashboards" has the read role; AddTarget needs write`)
	if _, err := e.client.AddTarget(withToken(ctx, "writer-token-0123456789"), add); err != nil {
		t.Errorf("AddTarget with a write token: %v", err)
	}
	if _, err := e.client.State(withToken(ctx, "reader-token-0123456789"), &pb.StateRequest{Name: "web-1"}); err != nil {
		t.Errorf("State with a read token: %v", err)
	}
	w, err := e.client.WatchTransitions(withToken(ctx, "reader-token-0123456789"), &pb.WatchTransitionsRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if err != nil {
		t.Errorf("WatchTransitions with a read token: %v", err)
	}
	w, err = e.client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, err, codes.Unauthenticated, "missing token")
	// grpc.health.v1 stays open, by design.
	if _, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a token: %v", err)
	}
}

func TestRateLimitPerClient(t *testing.T) {
	now := time.Unix(0, 0)
	rl := server.NewRateLimit(2, 3, func() time.Time { return now })
	e := startWith(t, checker.Config{}, server.Options{RateLimit: rl})
	call := func() error {
		_, err := e.client.Healthy(t.Context(), &pb.HealthyRequest{})
		return err
	}
	for i := range 3 {
		if err := call(); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	wantCode(t, call(), codes.ResourceExhausted, "/pulse.v1.HealthChecker/Healthy is rejected by grpc_ratelimit middleware, please retry later. rate limit of 2 calls/s per client (burst 3) exceeded")
	if _, err := healthpb.NewHealthClient(e.conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health checks are not rate limited: %v", err)
	}
	now = now.Add(500 * time.Millisecond) // one token back
	if err := call(); err != nil {
		t.Errorf("after the refill: %v", err)
	}
	wantCode(t, call(), codes.ResourceExhausted, "")
}

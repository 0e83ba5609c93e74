package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"pulse/checker"
	pb "pulse/gen/pulse/v1"
	"pulse/internal/testscale"
	"pulse/server"
)

// readOnly is what the read role may call, written out here rather than
// taken from the server so that widening the server's list fails this test.
var readOnly = map[string]bool{
	"State":            true,
	"Healthy":          true,
	"ListTargets":      true,
	"WatchTransitions": true,
}

// TestEveryMethodNeedsItsRole calls every method and stream of
// pulse.v1.HealthChecker, read from the service descriptor so that a method
// added later is covered, with no token, an unknown token, a read token and
// a write token. Only the read role's methods accept a read token; every
// method accepts a write token (the call may still fail, but not on auth).
func TestEveryMethodNeedsItsRole(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	e := startWith(t, checker.Config{}, server.Options{Tokens: tokens})
	desc := pb.HealthChecker_ServiceDesc

	type method struct {
		name   string
		stream *grpc.StreamDesc
	}
	var methods []method
	for _, m := range desc.Methods {
		methods = append(methods, method{name: m.MethodName})
	}
	for i := range desc.Streams {
		methods = append(methods, method{name: desc.Streams[i].StreamName, stream: &desc.Streams[i]})
	}
	if len(methods) < 8 {
		t.Fatalf("the descriptor lists %d methods, want at least 8", len(methods))
	}
	for name := range readOnly {
		if !slices.ContainsFunc(methods, func(m method) bool { return m.name == name }) {
			t.Errorf("read method %s is not in the descriptor", name)
		}
	}

	// call sends an empty request: any call decodes it, and an allowed call
	// then fails, if at all, on validation, never on auth.
	call := func(ctx context.Context, m method) error {
		full := "/" + desc.ServiceName + "/" + m.name
		ctx, cancel := context.WithTimeout(ctx, testscale.D(5*time.Second))
		defer cancel()
		if m.stream == nil {
			return e.conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{})
		}
		s, err := e.conn.NewStream(ctx, m.stream, full)
		if err != nil {
			return err
		}
		if err := s.SendMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(&emptypb.Empty{})
	}

	for _, m := range methods {
		for _, tc := range []struct {
			who   string
			ctx   context.Context
			want  codes.Code // codes.OK: any outcome but an auth error
			allow bool
		}{
			{who: "no token", ctx: t.Context(), want: codes.Unauthenticated},
			{who: "unknown token", ctx: withToken(t.Context(), "not-a-known-token-at-all"), want: codes.Unauthenticated},
			{who: "read token", ctx: withToken(t.Context(), "reader-token-0123456789"), want: codes.PermissionDenied, allow: readOnly[m.name]},
			{who: "write token", ctx: withToken(t.Context(), "writer-token-0123456789"), allow: true},
		} {
			err := call(tc.ctx, m)
			got := status.Code(err)
			if tc.allow {
				if got == codes.Unauthenticated || got == codes.PermissionDenied {
					t.Errorf("%s with %s: %v, want no auth error", m.name, tc.who, err)
				}
				continue
			}
			if got != tc.want {
				t.Errorf("%s with %s: %v, want %v", m.name, tc.who, err, tc.want)
			}
		}
	}
}

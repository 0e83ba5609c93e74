package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

// readOnly is what the read role may call, written out here rather than
// taken from the server so that widening the server's list fails this test.
var readOnly = map[string]bool{
	"State":            true,
	"Healthy":          true,
	"ListTargets":      true,
	"WatchTransitions": true,
	"History":          true,
	"ListDiscovery":    true,
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

// A token of exactly 16 characters is long enough; 15 is not.
func TestTokenMinimumLength(t *testing.T) {
	if _, err := server.ParseTokens(strings.NewReader("read 0123456789abcdef\n")); err != nil {
		t.Errorf("a 16-character token: %v", err)
	}
	if _, err := server.ParseTokens(strings.NewReader("read 0123456789abcde\n")); err == nil || !strings.Contains(err.Error(), "at least 16 characters") {
		t.Errorf("a 15-character token: %v, want refused", err)
	}
}

// A token listed more than once has its highest role; among lines of that
// role, the first one names it.
func TestTokenListedTwice(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader(`read  same-token-0123456789 first
read  same-token-0123456789 second
write other-token-0123456789 w1
read  other-token-0123456789 r1
`))
	if err != nil {
		t.Fatal(err)
	}
	e := startWith(t, checker.Config{}, server.Options{Tokens: tokens})
	_, err = e.client.RemoveTarget(withToken(t.Context(), "same-token-0123456789"), &pb.RemoveTargetRequest{Name: "x"})
	wantCode(t, err, codes.PermissionDenied, `token "first" has the read role; RemoveTarget needs write`)
	_, err = e.client.RemoveTarget(withToken(t.Context(), "other-token-0123456789"), &pb.RemoveTargetRequest{Name: "x"})
	if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
		t.Errorf("a token listed as write and read: %v, want the write role", err)
	}
}

// LoadTokens reads the file ParseTokens parses; its errors name the file,
// and a missing file is an error, never an open server.
func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte(tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadTokens(good); err != nil {
		t.Errorf("LoadTokens(%s): %v", good, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("# c\nadmin some-long-token-123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadTokens(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: role must be read or write") {
		t.Errorf("LoadTokens of a bad file: %v, want it to name the file and line", err)
	}
	if tok, err := server.LoadTokens(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) || tok != nil {
		t.Errorf("LoadTokens of a missing file: %v, %v; want ErrNotExist", tok, err)
	}
}

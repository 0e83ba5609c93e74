package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Role is what a token may do.
type Role int

// The roles. Write includes read, and is the highest: there is no admin
// role.
const (
	RoleRead Role = iota + 1
	RoleWrite
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	default:
		return fmt.Sprintf("role(%d)", int(r))
	}
}

// readMethods are the calls the read role may make; every other call of
// pulse.v1.HealthChecker, including ones added later, needs write.
var readMethods = map[string]bool{
	"State":            true,
	"Healthy":          true,
	"ListTargets":      true,
	"WatchTransitions": true,
	"History":          true,
	"ListDiscovery":    true,
}

// adsService is the xDS Aggregated Discovery Service (package server/xds),
// named here so that this package needs no xDS types to guard it.
const adsService = "envoy.service.discovery.v3.AggregatedDiscoveryService"

// Tokens authenticates API calls by bearer token. It keeps only the
// tokens' SHA-256 digests and compares them in constant time. It is safe for
// concurrent use once loaded. Create it with LoadTokens or ParseTokens.
//
// Only pulse.v1.HealthChecker and the xDS Aggregated Discovery Service
// (read role) are guarded. grpc.health.v1 stays open so load
// balancers and Kubernetes probes can read health without a token, and so
// does server reflection: it reveals the API's schema, which is public,
// never data.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	role   Role
	name   string
}

// LoadTokens reads a token file; see ParseTokens for its format.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	return t, nil
}

// ParseTokens reads a token file: one token a line, as
//
//	<role> <token> [name]
//
// where role is read or write, and token is either the token itself or
// sha256:<hex> of its SHA-256 digest (so the file need not hold secrets).
// Blank lines and lines starting with # are ignored. Errors name the line.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%d: want \"<role> <token> [name]\", got %d fields", line, len(f))
		}
		e := tokenEntry{}
		switch f[0] {
		case "read":
			e.role = RoleRead
		case "write":
			e.role = RoleWrite
		default:
			return nil, fmt.Errorf("%d: role must be read or write, got %s", line, Quote(f[0]))
		}
		if hexDigest, ok := strings.CutPrefix(f[1], "sha256:"); ok {
			d, err := hex.DecodeString(hexDigest)
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("%d: sha256: must be followed by 64 hex digits", line)
			}
			copy(e.digest[:], d)
		} else {
			if len(f[1]) < 16 {
				return nil, fmt.Errorf("%d: a token must be at least 16 characters", line)
			}
			e.digest = sha256.Sum256([]byte(f[1]))
		}
		e.name = fmt.Sprintf("line %d", line)
		if len(f) == 3 {
			e.name = f[2]
		}
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("1: no tokens: an empty token file would lock every client out")
	}
	return t, nil
}

// Authenticate returns the role and name of a presented token, and false
// for a token the file does not hold. It compares the token's digest
// against every entry in constant time. It is what the HTTP listener checks
// a request's "Authorization: Bearer <token>" with.
func (t *Tokens) Authenticate(token string) (role Role, name string, ok bool) {
	return t.lookup(token)
}

// lookup returns the role of a presented token, comparing against every
// entry in constant time.
func (t *Tokens) lookup(token string) (Role, string, bool) {
	d := sha256.Sum256([]byte(token))
	var role Role
	var name string
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 && e.role > role {
			role, name = e.role, e.name
		}
	}
	return role, name, role != 0
}

// authorize checks the call's bearer token against the role fullMethod
// needs, and returns the token's role and name (0 and "" for a call that
// needs none).
func (t *Tokens) authorize(ctx context.Context, fullMethod string) (Role, string, error) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return 0, "", nil
	}
	var need Role
	switch svc {
	case pb.HealthChecker_ServiceDesc.ServiceName:
		need = RoleWrite
		if readMethods[method] {
			need = RoleRead
		}
	case adsService:
		need = RoleRead // xDS only reads: the targets' addresses and health
	default:
		return 0, "", nil // grpc.health.v1 and reflection stay open
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return 0, "", status.Error(codes.Unauthenticated, "missing token: send the metadata \"authorization: Bearer <token>\"")
	}
	token, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return 0, "", status.Error(codes.Unauthenticated, "the authorization metadata must be \"Bearer <token>\"")
	}
	role, name, ok := t.lookup(strings.TrimSpace(token))
	if !ok {
		return 0, "", status.Error(codes.Unauthenticated, "invalid token")
	}
	if role < need {
		return 0, "", status.Errorf(codes.PermissionDenied, "token %q has the %v role; %s needs %v", name, role, method, need)
	}
	return role, name, nil
}

// unary authorizes a call and gives its handler the token's role and name
// (see tokenName).
func (t *Tokens) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	role, name, err := t.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, roleKey{}, role)
	if name != "" {
		ctx = context.WithValue(ctx, tokenNameKey{}, name)
	}
	return handler(ctx, req)
}

func (t *Tokens) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	role, _, err := t.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &roleStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), roleKey{}, role)})
}

// roleStream is a stream whose context holds the caller's Role.
type roleStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *roleStream) Context() context.Context { return s.ctx }

// tokenNameKey is the context key of the name of the token a unary call
// was authorized with.
type tokenNameKey struct{}

// tokenName returns the name of the token a unary call was authorized
// with; "" without tokens.
func tokenName(ctx context.Context) string {
	name, _ := ctx.Value(tokenNameKey{}).(string)
	return name
}

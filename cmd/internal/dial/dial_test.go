package dial_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testpki"
	"github.com/pulsehealth/pulse/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMutualTLSAndToken(t *testing.T) {
	p := testpki.Write(t, t.TempDir())
	tlsCfg, err := server.TLSConfig(p.ServerCert, p.ServerKey, p.CA)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := server.ParseTokens(strings.NewReader("write a-write-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Tokens: tokens, ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer func() { c.Close(); gs.Stop() }()

	call := func(f dial.Flags) error {
		opts, err := f.Options()
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = pb.NewHealthCheckerClient(conn).ListTargets(t.Context(), &pb.ListTargetsRequest{})
		return err
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("a-write-token-0123456789\n"), 0o600)

	if err := call(dial.Flags{CA: p.CA, Cert: p.ClientCert, Key: p.ClientKey, TokenFile: tokenFile}); err != nil {
		t.Errorf("mTLS with a token: %v", err)
	}
	if err := call(dial.Flags{CA: p.CA, Cert: p.ClientCert, Key: p.ClientKey}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("mTLS without a token: %v, want Unauthenticated", err)
	}
	if err := call(dial.Flags{CA: p.CA, TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("TLS without a client certificate: %v, want the handshake to fail", err)
	}
	if err := call(dial.Flags{TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to a TLS server: %v, want Unavailable", err)
	}
	if err := call(dial.Flags{TLS: true, Cert: p.ClientCert, Key: p.ClientKey, TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("a server certificate from an unknown CA was accepted: %v", err)
	}
	if _, err := (&dial.Flags{Cert: p.ClientCert}).Options(); err == nil {
		t.Error("-tls-cert without -tls-key accepted")
	}
}

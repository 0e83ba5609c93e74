package client_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/internal/testpki"
	"github.com/pulsehealth/pulse/server"
)

// TestMutualTLS connects to a server that requires a client certificate
// and a token, with the files New reads.
func TestMutualTLS(t *testing.T) {
	p := testpki.Write(t, t.TempDir())
	tlsCfg, err := server.TLSConfig(p.ServerCert, p.ServerKey, p.CA)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := server.ParseTokens(strings.NewReader("read a-read-token-0123456789\n"))
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

	list := func(opts ...client.Option) error {
		cl, err := client.New(t.Context(), []string{lis.Addr().String()}, opts...)
		if err != nil {
			return err
		}
		defer cl.Close()
		_, err = cl.List(within(t), "")
		return err
	}
	files := client.TLSFiles{CA: p.CA, Cert: p.ClientCert, Key: p.ClientKey}
	if err := list(client.WithTLSFiles(files), client.WithToken("a-read-token-0123456789")); err != nil {
		t.Errorf("mutual TLS with a token: %v", err)
	}
	if err := list(client.WithTLSFiles(files), client.WithToken("")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("mutual TLS without a token: %v; want ErrUnauthenticated", err)
	}
	if err := list(client.WithTLSFiles(client.TLSFiles{CA: p.CA}), client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("TLS without a client certificate: %v; want the handshake to fail", err)
	}
	if err := list(client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("plaintext to a TLS server: %v; want ErrUnavailable", err)
	}
	if err := list(client.WithTLS(nil), client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("a server certificate from an unknown CA was accepted: %v", err)
	}
}

package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

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

// TestWatchRetriesRefusedToken: a watch whose token pulsed refuses keeps
// retrying, each EventDisconnected carrying ErrUnauthenticated, and follows
// once a pulsed on the same address accepts the token (pulsed reads its
// token file as it starts).
func TestWatchRetriesRefusedToken(t *testing.T) {
	serve := func(tokenFile, addr string) (stop func(), bound string) {
		tokens, err := server.ParseTokens(strings.NewReader(tokenFile))
		if err != nil {
			t.Fatal(err)
		}
		c, err := checker.New(checker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		gs, _ := server.NewGRPCServer(server.New(c), server.Options{Tokens: tokens})
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { gs.Serve(lis); close(done) }()
		return func() { gs.Stop(); c.Close(); <-done }, lis.Addr().String()
	}
	stop, addr := serve("read another-token-0123456789\n", "127.0.0.1:0")
	cl, err := client.New(t.Context(), []string{addr}, client.WithToken("the-watch-token-0123456789"),
		client.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	evs := cl.Watch(ctx, client.Filter{})
	for i := 0; i < 2; i++ {
		ev := <-evs
		if ev.Kind != client.EventDisconnected || !errors.Is(ev.Err, client.ErrUnauthenticated) {
			t.Fatalf("event %d with a refused token: %v (%v); want EventDisconnected with ErrUnauthenticated", i, ev.Kind, ev.Err)
		}
	}
	stop()
	stop, _ = serve("read the-watch-token-0123456789\n", addr)
	defer stop()
	for ev := range evs {
		if ev.Kind == client.EventSnapshot {
			cancel()
			for range evs { // until the watch ends, so that no goroutine is left
			}
			return
		}
		if ev.Kind != client.EventDisconnected {
			t.Fatalf("before the snapshot: %v (%v)", ev.Kind, ev.Err)
		}
	}
	t.Fatal("the watch ended before a pulsed that accepts its token sent a snapshot")
}

package client_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/server"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, made at run time, and returns their files.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pulse test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", keyDER)
	}
	p := pki{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, "pulsed", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = leaf(3, "pulsectl", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// TestMutualTLS connects to a server that requires a client certificate
// and a token, with the files New reads.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	tlsCfg, err := server.TLSConfig(p.serverCert, p.serverKey, p.ca)
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
	files := client.TLSFiles{CA: p.ca, Cert: p.clientCert, Key: p.clientKey}
	if err := list(client.WithTLSFiles(files), client.WithToken("a-read-token-0123456789")); err != nil {
		t.Errorf("mutual TLS with a token: %v", err)
	}
	if err := list(client.WithTLSFiles(files), client.WithToken("")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("mutual TLS without a token: %v; want ErrUnauthenticated", err)
	}
	if err := list(client.WithTLSFiles(client.TLSFiles{CA: p.ca}), client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("TLS without a client certificate: %v; want the handshake to fail", err)
	}
	if err := list(client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("plaintext to a TLS server: %v; want ErrUnavailable", err)
	}
	if err := list(client.WithTLS(nil), client.WithToken("a-read-token-0123456789")); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("a server certificate from an unknown CA was accepted: %v", err)
	}
}

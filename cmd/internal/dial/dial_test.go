package dial_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

func TestMutualTLSAndToken(t *testing.T) {
	p := newPKI(t)
	tlsCfg, err := server.TLSConfig(p.serverCert, p.serverKey, p.ca)
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

	if err := call(dial.Flags{CA: p.ca, Cert: p.clientCert, Key: p.clientKey, TokenFile: tokenFile}); err != nil {
		t.Errorf("mTLS with a token: %v", err)
	}
	if err := call(dial.Flags{CA: p.ca, Cert: p.clientCert, Key: p.clientKey}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("mTLS without a token: %v, want Unauthenticated", err)
	}
	if err := call(dial.Flags{CA: p.ca, TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("TLS without a client certificate: %v, want the handshake to fail", err)
	}
	if err := call(dial.Flags{TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to a TLS server: %v, want Unavailable", err)
	}
	if err := call(dial.Flags{TLS: true, Cert: p.clientCert, Key: p.clientKey, TokenFile: tokenFile}); status.Code(err) != codes.Unavailable {
		t.Errorf("a server certificate from an unknown CA was accepted: %v", err)
	}
	if _, err := (&dial.Flags{Cert: p.clientCert}).Options(); err == nil {
		t.Error("-tls-cert without -tls-key accepted")
	}
}

package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// TestMain fails the run if any test leaves a goroutine behind (an HTTP
// connection, a gRPC channel, a server).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Shared helpers for the tests of every probe kind.

// hungBound is how long a probe against a silent target may take past its
// deadline before a test calls it hung. Generous, so a loaded CI machine
// does not flake (and scaled by testscale); a probe that ignores its
// deadline blocks far longer.
var hungBound = testscale.D(5 * time.Second)

// probeWithin runs p.Probe(ctx) and fails the test if it has not returned
// within hungBound, so a probe that ignores its deadline fails the test
// instead of hanging the run.
func probeWithin(t *testing.T, ctx context.Context, p Prober) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Probe(ctx) }()
	timer := time.NewTimer(hungBound)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("Probe did not return within %v", hungBound)
		return nil
	}
}

// timeoutCtx returns a context that ends after d and is cancelled when the
// test ends.
func timeoutCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// silentAddr returns the address of a listener that never calls Accept and
// never writes: the kernel completes TCP handshakes into the backlog, so a
// client connects and then waits forever for an answer.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// refusedAddr returns a loopback address nothing listens on: it listens on a
// free port and closes it again, so connecting is refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// testCert returns a self-signed certificate for 127.0.0.1 and localhost,
// and a pool that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pulse probe test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// newProber builds a Prober from s with f, failing the test on error.
func newProber(t *testing.T, f *Factory, s Spec) Prober {
	t.Helper()
	p, err := f.New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return p
}

package probe

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial atomic.Int64
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(1)
	return ca
}

// issued is a certificate a testCA issued, with its PEM forms.
type issued struct {
	pair    tls.Certificate
	certPEM []byte
	keyPEM  []byte
}

// issue makes a leaf certificate valid until notAfter for names (IP
// addresses or DNS names), for servers or clients.
func (ca *testCA) issue(t *testing.T, notAfter time.Time, client bool, names ...string) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return issued{pair: pair, certPEM: certPEM, keyPEM: keyPEM}
}

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	// Through a rename, as certificate managers do, so that a reader
	// never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsServer is an HTTPS server whose certificate and client CA can be
// swapped while it runs.
type tlsServer struct {
	srv      *httptest.Server
	cert     atomic.Pointer[tls.Certificate]
	clientCA atomic.Pointer[x509.CertPool] // nil: no client certificate asked for
	maxVer   uint16
}

func newTLSServer(t *testing.T, cert tls.Certificate, clientCA *testCA) *tlsServer {
	t.Helper()
	s := &tlsServer{}
	s.cert.Store(&cert)
	if clientCA != nil {
		s.setClientCA(clientCA)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ready"))
	}))
	s.srv.Config.ErrorLog = discardLog()
	s.srv.TLS = &tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{Certificates: []tls.Certificate{*s.cert.Load()}, MaxVersion: s.maxVer}
			if pool := s.clientCA.Load(); pool != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = pool
			}
			return c, nil
		},
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *tlsServer) setClientCA(ca *testCA) {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	s.clientCA.Store(pool)
}

func (s *tlsServer) url() string { return s.srv.URL + "/healthz" }

// probeErr builds a prober for s with a fresh Factory and runs one probe.
func probeErr(t *testing.T, f *Factory, s Spec) error {
	t.Helper()
	p := newProber(t, f, s)
	t.Cleanup(func() { closeProber(p) })
	return probeWithin(t, timeoutCtx(t, 5*time.Second), p)
}

func wantFail(t *testing.T, err error, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("probe passed, want a failure containing %q", text)
	}
	if got := Describe(err); !strings.Contains(got, text) {
		t.Fatalf("probe failed with %q (%v), want it to contain %q", got, err, text)
	}
}

func wantPass(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("probe failed: %s (%v)", Describe(err), err)
	}
}

func TestTLSCAAndServerName(t *testing.T) {
	ca := newTestCA(t, "pulse test CA")
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	srv := newTLSServer(t, ca.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1", "api.internal").pair, nil)
	f := NewFactory()
	defer f.Close()

	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url()}}), "certificate signed by unknown authority")
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAFile: caFile}}}))
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(ca.pem)}}}))
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAFile: caFile, ServerName: "api.internal"}}}))
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAFile: caFile, ServerName: "web.internal"}}}),
		"certificate is valid for api.internal, not web.internal")

	other := newTestCA(t, "another CA")
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(other.pem)}}}), "certificate signed by unknown authority")
	insecure := Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(other.pem), InsecureSkipVerify: true}}}
	wantPass(t, probeErr(t, f, insecure))
	if w := insecure.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "http.tls.insecure_skip_verify: ") {
		t.Errorf("Warnings() = %q, want one naming http.tls.insecure_skip_verify", w)
	}
	if w := (Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAFile: caFile}}}).Warnings(); len(w) != 0 {
		t.Errorf("Warnings() of a verifying probe = %q, want none", w)
	}
}

func TestTLSMinVersion(t *testing.T) {
	ca := newTestCA(t, "pulse test CA")
	srv := newTLSServer(t, ca.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair, nil)
	srv.maxVer = tls.VersionTLS12
	f := NewFactory()
	defer f.Close()
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(ca.pem), MinVersion: "1.2"}}}))
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(ca.pem), MinVersion: "1.3"}}}), "protocol version")
}

// TestTLSMutualOnly probes a server that accepts only clients with a
// certificate its client CA signed.
func TestTLSMutualOnly(t *testing.T) {
	ca := newTestCA(t, "server CA")
	clientCA := newTestCA(t, "client CA")
	srv := newTLSServer(t, ca.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair, clientCA)
	client := clientCA.issue(t, time.Now().Add(time.Hour), true, "prober")
	stranger := newTestCA(t, "stranger").issue(t, time.Now().Add(time.Hour), true, "prober")
	dir := t.TempDir()
	f := NewFactory()
	defer f.Close()
	caPEM := string(ca.pem)

	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: caPEM}}}), "certificate required")
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: caPEM, CertPEM: string(stranger.certPEM), KeyPEM: string(stranger.keyPEM)}}}), "remote error: tls: unknown certificate authority")
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: caPEM, CertPEM: string(client.certPEM), KeyPEM: string(client.keyPEM)}}}))
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{
		CAPEM:    caPEM,
		CertFile: writeFile(t, dir, "client.pem", client.certPEM),
		KeyFile:  writeFile(t, dir, "client.key", client.keyPEM),
	}}}))
}

// TestTLSRotation swaps the files a registered prober reads: the server's
// new CA and the client's new certificate are used without building the
// prober again.
func TestTLSRotation(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newTestCA(t, "CA 1"), newTestCA(t, "CA 2")
	clientCA1, clientCA2 := newTestCA(t, "client CA 1"), newTestCA(t, "client CA 2")
	srv := newTLSServer(t, ca1.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair, clientCA1)
	c1 := clientCA1.issue(t, time.Now().Add(time.Hour), true, "prober")
	spec := Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{
		CAFile:   writeFile(t, dir, "ca.pem", ca1.pem),
		CertFile: writeFile(t, dir, "client.pem", c1.certPEM),
		KeyFile:  writeFile(t, dir, "client.key", c1.keyPEM),
	}}}
	f := NewFactory()
	defer f.Close()
	p := newProber(t, f, spec)
	defer closeProber(p)
	probe := func() error { return probeWithin(t, timeoutCtx(t, 5*time.Second), p) }
	wantPass(t, probe())

	// The server moves to certificates of new CAs: the kept connection
	// still works, a new one fails until the files follow.
	srv.cert.Store(ptrTo(ca2.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair))
	srv.setClientCA(clientCA2)
	srv.srv.CloseClientConnections()
	wantFail(t, probe(), "certificate signed by unknown authority")

	writeFile(t, dir, "ca.pem", ca2.pem)
	wantFail(t, probe(), "remote error: tls: unknown certificate authority") // the old client certificate

	c2 := clientCA2.issue(t, time.Now().Add(time.Hour), true, "prober")
	writeFile(t, dir, "client.pem", c2.certPEM)
	writeFile(t, dir, "client.key", c2.keyPEM)
	wantPass(t, probe())

	// A file that goes away fails the next new connection, naming it.
	if err := os.Remove(filepath.Join(dir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	srv.srv.CloseClientConnections()
	wantFail(t, probe(), `http.tls.ca_file: cannot read "`+filepath.Join(dir, "ca.pem")+`": no such file or directory`)
}

func ptrTo[T any](v T) *T { return &v }

func TestTLSFilesCheckedAtNew(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "CA")
	c := ca.issue(t, time.Now().Add(time.Hour), true, "prober")
	certFile := writeFile(t, dir, "c.pem", c.certPEM)
	keyFile := writeFile(t, dir, "c.key", c.keyPEM)
	garbage := writeFile(t, dir, "garbage.pem", []byte("not a certificate"))
	missing := filepath.Join(dir, "missing.pem")
	f := NewFactory()
	defer f.Close()
	for _, tt := range []struct {
		name, field, reason string
		tls                 TLSSpec
	}{
		{"missing CA file", "http.tls.ca_file", "no such file or directory", TLSSpec{CAFile: missing}},
		{"CA file not PEM", "http.tls.ca_file", "is not PEM", TLSSpec{CAFile: garbage}},
		{"CA file of a key", "http.tls.ca_file", "holds no PEM certificate", TLSSpec{CAFile: keyFile}},
		{"missing key file", "http.tls.key_file", "no such file or directory", TLSSpec{CertFile: certFile, KeyFile: missing}},
		{"swapped cert and key", "http.tls.cert_file", "is not a certificate and its key", TLSSpec{CertFile: keyFile, KeyFile: certFile}},
	} {
		_, err := f.New(Spec{HTTP: &HTTPSpec{URL: "https://127.0.0.1/", TLS: &tt.tls}})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Reason, tt.reason) {
			t.Errorf("%s: New() = %v, want a FieldError for %s containing %q", tt.name, err, tt.field, tt.reason)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: the error quotes the key: %v", tt.name, err)
		}
	}
}

// TestTLSCertExpiry probes a server whose certificate expires in three and
// a half days.
func TestTLSCertExpiry(t *testing.T) {
	ca := newTestCA(t, "CA")
	notAfter := time.Now().Add(84 * time.Hour)
	srv := newTLSServer(t, ca.issue(t, notAfter, false, "127.0.0.1").pair, nil)
	f := NewFactory()
	defer f.Close()
	spec := func(warn, fail time.Duration) Spec {
		return Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(ca.pem), CertExpiryWarn: warn, CertExpiryFail: fail}}}
	}
	day := notAfter.UTC().Format(time.DateOnly)
	err := probeErr(t, f, spec(0, 7*24*time.Hour))
	wantFail(t, err, "certificate expires in 3d11h ("+day+")") // 3d12h less the moments the test took
	var ee *ExpiryError
	if !errors.As(err, &ee) || ee.Warning {
		t.Errorf("error %v is not an ExpiryError failure", err)
	}

	p := newProber(t, f, spec(7*24*time.Hour, 24*time.Hour))
	defer closeProber(p)
	wantPass(t, probeWithin(t, timeoutCtx(t, 5*time.Second), p))
	seen, w := p.(CertExpiryReporter).LastCertExpiry()
	if w == nil || !w.Warning || !strings.HasPrefix(w.Error(), "certificate expires in 3d11h") || !seen.Equal(notAfter.Truncate(time.Second)) {
		t.Errorf("LastCertExpiry() = %v, %v; want %v and a warning of 3d11h", seen, w, notAfter)
	}

	p = newProber(t, f, spec(24*time.Hour, 0))
	defer closeProber(p)
	wantPass(t, probeWithin(t, timeoutCtx(t, 5*time.Second), p))
	if seen, w := p.(CertExpiryReporter).LastCertExpiry(); w != nil || seen.IsZero() {
		t.Errorf("LastCertExpiry() = %v, %v outside the window, want the time and no warning", seen, w)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		84 * time.Hour:                  "3d12h",
		72 * time.Hour:                  "3d",
		5*time.Hour + 30*time.Minute:    "5h30m",
		2 * time.Hour:                   "2h",
		45*time.Minute + 10*time.Second: "45m",
		30 * time.Second:                "30s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
	e := &ExpiryError{NotAfter: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC), Left: 84 * time.Hour}
	if got, want := e.Error(), "certificate expires in 3d12h (2026-12-05)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// discardLog is a server error log that drops what it is given: the
// handshake failures these tests cause on purpose.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// Each warning is handed out once, and again only after a probe passed
// outside the warning window.
func TestNewCertWarningOnce(t *testing.T) {
	ca := newTestCA(t, "CA")
	soon := ca.issue(t, time.Now().Add(84*time.Hour), false, "127.0.0.1").pair
	later := ca.issue(t, time.Now().Add(90*24*time.Hour), false, "127.0.0.1").pair
	srv := newTLSServer(t, soon, nil)
	f := NewFactory()
	defer f.Close()
	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), TLS: &TLSSpec{CAPEM: string(ca.pem), CertExpiryWarn: 30 * 24 * time.Hour}}})
	defer closeProber(p)
	r := p.(CertExpiryReporter)
	run := func() { t.Helper(); wantPass(t, probeWithin(t, timeoutCtx(t, 5*time.Second), p)) }
	run()
	if w := r.NewCertWarning(); w == nil {
		t.Fatal("no new warning after the first warning probe")
	}
	run()
	if w := r.NewCertWarning(); w != nil {
		t.Errorf("a second new warning %v for the same certificate", w)
	}
	srv.cert.Store(&later) // renewed
	srv.srv.CloseClientConnections()
	run()
	if _, w := r.LastCertExpiry(); w != nil || r.NewCertWarning() != nil {
		t.Errorf("a warning after renewal: %v", w)
	}
	srv.cert.Store(&soon) // near expiry again
	srv.srv.CloseClientConnections()
	run()
	if w := r.NewCertWarning(); w == nil {
		t.Error("no new warning when the certificate is near expiry again")
	}
}

// TestTLSSameSizeRewriteInOneTick rewrites a CA file with another CA of
// the same size and the same modification time, as a rotation inside the
// file system's timestamp granularity leaves it: the new CA is used.
func TestTLSSameSizeRewriteInOneTick(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newTestCA(t, "CA 1"), newTestCA(t, "CA 2")
	pem1, pem2 := ca1.pem, ca2.pem
	// Trailing newlines pad the shorter PEM; they are not part of it.
	for len(pem1) < len(pem2) {
		pem1 = append(slices.Clip(pem1), '\n')
	}
	for len(pem2) < len(pem1) {
		pem2 = append(slices.Clip(pem2), '\n')
	}
	path := writeFile(t, dir, "ca.pem", pem1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newTLSSource("http.tls", &TLSSpec{CAFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "ca.pem", pem2)
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := src.refresh(); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	roots := src.roots
	src.mu.Unlock()
	if _, err := ca2.cert.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		t.Fatalf("after a same-size rewrite with the same modification time, the new CA is not trusted: %v", err)
	}
}

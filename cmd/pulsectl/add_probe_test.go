package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// testCAFile writes a self-signed CA certificate in PEM and returns its
// path.
func testCAFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAddProbeOptionFlags: each probe option flag lands in the request's
// field, and pulsed keeps it.
func TestAddProbeOptionFlags(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	ca := testCAFile(t)
	mustRun(t, "add", addr, "--name", "web", "--http", "https://127.0.0.1:9/ready", "--method", "POST", "--body", `{"deep":true}`,
		"--expect-status", "200-399,404", "--body-contains", "ready", "--body-not-contains", "error", "--body-regex", `"ok":\s*true`,
		"--body-limit", "4096", "--header-match", "X-Status=^ok$", "--follow-redirects",
		"--probe-tls-ca-file", ca, "--probe-tls-server-name", "web.internal", "--probe-tls-min-version", "1.3", "--probe-cert-expiry-warn", "720h", "--probe-cert-expiry-fail", "168h")
	mustRun(t, "add", addr, "--name", "cache", "--tcp", "127.0.0.1:6379", "--send", `PING\r\n`, "--expect", `+PONG\r\n`,
		"--send-hex", "2a31", "--expect-hex", "0a0b", "--expect-contains", "ok", "--expect-regex", `^\d`, "--read-limit", "64", "--probe-tls-insecure-skip-verify")
	mustRun(t, "add", addr, "--name", "api", "--grpc", "127.0.0.1:50051", "--grpc-authority", "api.internal",
		"--grpc-metadata", "x-api-key=k", "--grpc-expect-status", "serving,NOT_SERVING", "--probe-tls-ca-file", ca)
	out := mustRun(t, "add", addr, "--name", "resolver", "--dns", "api.internal", "--dns-server", "127.0.0.1:53", "--dns-type", "srv",
		"--dns-rcode", "nxdomain", "--dns-answer-contains", "5432", "--dns-answer-regex", `db-\d`)
	if !strings.Contains(out, "dns SRV api.internal at 127.0.0.1:53") {
		t.Errorf("add's summary: %q", out)
	}

	opts := []cmp.Option{protocmp.Transform()}
	want := map[string]*pb.Target{
		"web": {Probe: &pb.Target_Http{Http: &pb.HttpProbe{
			Url: "https://127.0.0.1:9/ready", Method: "POST", Body: `{"deep":true}`,
			ExpectedStatus: []int32{404}, ExpectedStatusRanges: []string{"200-399"},
			BodyContains: "ready", BodyNotContains: "error", BodyRegex: `"ok":\s*true`, BodyLimit: 4096,
			HeaderMatches: []*pb.HeaderMatch{{Name: "X-Status", Regex: "^ok$"}}, FollowRedirects: true,
			Tls: &pb.TlsOptions{CaFile: ca, ServerName: "web.internal", MinVersion: "1.3",
				CertExpiryWarn: durationpb.New(720 * time.Hour), CertExpiryFail: durationpb.New(168 * time.Hour)},
		}}},
		"cache": {Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{
			Address: "127.0.0.1:6379",
			Steps: []*pb.TcpStep{
				{Send: "PING\r\n"}, {Expect: "+PONG\r\n", ReadLimit: 64}, {SendHex: "2a31"}, {ExpectHex: "0a0b", ReadLimit: 64},
				{ExpectContains: "ok", ReadLimit: 64}, {ExpectRegex: `^\d`, ReadLimit: 64},
			},
			Tls: &pb.TlsOptions{InsecureSkipVerify: true},
		}}},
		"api": {Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{
			Address: "127.0.0.1:50051", Authority: "api.internal", Metadata: map[string]string{"x-api-key": "<redacted>"},
			ExpectedStatuses: []string{"SERVING", "NOT_SERVING"}, TlsOptions: &pb.TlsOptions{CaFile: ca},
		}}},
		"resolver": {Probe: &pb.Target_Dns{Dns: &pb.DnsProbe{
			Name: "api.internal", Server: "127.0.0.1:53", Type: "SRV", Rcode: "NXDOMAIN", AnswerContains: "5432", AnswerRegex: `db-\d`,
		}}},
	}
	for name, w := range want {
		st := stateOf(t, p.Addr, name)
		got := &pb.Target{Probe: st.GetSpec().GetProbe()}
		if diff := cmp.Diff(w, got, opts...); diff != "" {
			t.Errorf("%s probe (-want +got):\n%s", name, diff)
		}
		if name == "cache" && (len(st.GetWarnings()) != 1 || !strings.Contains(st.GetWarnings()[0], "insecure_skip_verify")) {
			t.Errorf("cache warnings = %q, want insecure_skip_verify named", st.GetWarnings())
		}
	}
	if out := mustRun(t, "state", "cache", addr); !regexp.MustCompile(`(?m)^warning:\s+tcp\.tls\.insecure_skip_verify: `).MatchString(out) {
		t.Errorf("pulsectl state cache does not show the warning:\n%s", out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tcp", "127.0.0.1:1", "--body-contains", "x"}, "--body-contains applies to --http targets only"},
		{[]string{"--dns", "a.internal", "--probe-tls-ca-file", ca}, "--probe-tls-ca-file applies to --http, --grpc, --tcp targets only"},
		{[]string{"--http", "http://127.0.0.1:1/", "--send", "x"}, "--send applies to --tcp targets only"},
		{[]string{"--http", "http://127.0.0.1:1/", "--expect-status", "2xx"}, `"2xx" is not a status code`},
		{[]string{"--http", "http://127.0.0.1:1/", "--body-regex", "(x"}, "target.http.body_regex: is not a valid RE2 regular expression"},
		{[]string{"--http", "https://127.0.0.1:1/", "--probe-tls-ca-file", "/nonexistent/ca.pem"}, `target.http.tls.ca_file: cannot read "/nonexistent/ca.pem"`},
		{[]string{"--dns", "api.internal"}, "target.dns.server: is required"},
	} {
		r := pulsectl(t, append([]string{"add", addr, "--name", "bad"}, tt.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("add %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// pki is a CA made in the test, issuing leaf certificates.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf issues a certificate for 127.0.0.1 (server) or a client, in PEM.
func (p *pki) leaf(t *testing.T, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// A real pulsed probes a server that accepts only clients with a
// certificate, from files named with pulsectl add's --probe-tls-* flags,
// and checks its body; the same target without the client certificate
// stays unhealthy.
func TestAddMutualTLSTarget(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	serverCA, clientCA := newPKI(t), newPKI(t)
	srvCert, srvKey := serverCA.leaf(t, false)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status": "ready"}`)) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	clientCert, clientKey := clientCA.leaf(t, true)
	caFile := write("ca.pem", serverCA.pem)
	common := []string{"add", addr, "--http", srv.URL + "/ready", "--body-contains", "ready", "--interval", "500ms", "--timeout", "500ms", "--probe-tls-ca-file", caFile}
	mustRun(t, append(common, "--name", "mtls", "--probe-tls-cert-file", write("client.pem", clientCert), "--probe-tls-key-file", write("client.key", clientKey))...)
	mustRun(t, append(common, "--name", "no-client-cert")...)

	deadline := time.Now().Add(testscale.D(20 * time.Second))
	for {
		mtls, bare := stateOf(t, p.Addr, "mtls"), stateOf(t, p.Addr, "no-client-cert")
		if mtls.GetState() == pb.State_STATE_HEALTHY && bare.GetLastResult().GetError() != "" {
			if bare.GetState() != pb.State_STATE_UNHEALTHY {
				t.Errorf("no-client-cert is %v, want unhealthy", bare.GetState())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mtls %v (%q), no-client-cert %v (%q): want healthy, and a failure", mtls.GetState(), mtls.GetLastResult().GetError(), bare.GetState(), bare.GetLastResult().GetError())
		}
		time.Sleep(100 * time.Millisecond) // polling another process's state: no event to wait on here
	}
}

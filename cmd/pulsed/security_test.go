package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "127.1.2.3:1": true, "[::1]:50051": true, "localhost:50051": true,
		"[::ffff:127.0.0.1]:1": true, ":50051": false, "0.0.0.0:50051": false, "10.0.0.1:50051": false,
		"[::]:50051": false, "example.com:50051": false, "nonsense": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestSecurityFlags(t *testing.T) {
	parse := func(args ...string) *securityFlags {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("write a-long-enough-token-here\n"), 0o600)

	for _, tt := range []struct {
		listen string
		args   []string
		want   string // "" means accepted
	}{
		{"127.0.0.1:50051", nil, ""},
		{"0.0.0.0:50051", nil, "-listen 0.0.0.0:50051 is reachable from other machines"},
		{"0.0.0.0:50051", []string{"-insecure"}, ""},
		{"0.0.0.0:50051", []string{"-token-file", tokens}, ""},
		{"127.0.0.1:1", []string{"-client-ca", "x.pem"}, "-client-ca needs -tls-cert"},
		{"127.0.0.1:1", []string{"-tls-cert", "missing.pem", "-tls-key", "missing.key"}, "load -tls-cert/-tls-key"},
		{"127.0.0.1:1", []string{"-tls-cert", "a.pem"}, "-tls-cert and -tls-key go together"},
		{"127.0.0.1:1", []string{"-token-file", "/nonexistent"}, "-token-file:"},
		{"127.0.0.1:1", []string{"-max-request-bytes", "10"}, "-max-request-bytes must be at least 1024"},
		{"127.0.0.1:1", []string{"-rate-burst", "0"}, "-rate-burst >= 1"},
		{"127.0.0.1:1", []string{"-max-targets", "-1"}, "-max-targets must not be negative (0: no limit), got -1"},
		{"127.0.0.1:1", []string{"-max-targets-per-group", "-5"}, "-max-targets-per-group must not be negative (0: no limit), got -5"},
		{"127.0.0.1:1", []string{"-max-watchers", "-1"}, "-max-watchers must not be negative (0: no limit), got -1"},
		{"127.0.0.1:1", []string{"-max-watchers-per-source", "-1"}, "-max-watchers-per-source must not be negative (0: no limit), got -1"},
		{"127.0.0.1:1", []string{"-max-targets", "0", "-max-targets-per-group", "0", "-max-watchers", "0", "-max-watchers-per-source", "0"}, ""},
	} {
		opts, err := parse(tt.args...).serverOptions(tt.listen)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %v: %v", tt.listen, tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %v: %v, want %q", tt.listen, tt.args, err, tt.want)
		case tt.want == "" && len(opts.ServerOptions) < 4:
			t.Errorf("%s %v: the limits are missing from %d server options", tt.listen, tt.args, len(opts.ServerOptions))
		}
	}
}

func TestEgressFlags(t *testing.T) {
	parse := func(args ...string) (*securityFlags, error) {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return f, nil
	}
	quiet := slog.New(slog.DiscardHandler)
	f, _ := parse()
	p, err := f.egress(quiet)
	if err != nil || !strings.Contains(p.String(), "169.254.0.0/16") {
		t.Errorf("default policy %v %v, want the metadata ranges denied", p, err)
	}
	f, _ = parse("-deny-targets=")
	if p, err := f.egress(quiet); err != nil || len(p.Deny) != len(probe.DefaultDenyTargets()) {
		t.Errorf("-deny-targets= gives %v %v, want only the metadata ranges denied", p, err)
	}
	f, _ = parse("-allow-targets", "127.0.0.0/8, 10.0.0.0/8", "-deny-targets", "10.1.0.0/16")
	if p, err := f.egress(quiet); err != nil || len(p.Allow) != 2 || len(p.Deny) != 1+len(probe.DefaultDenyTargets()) {
		t.Errorf("explicit lists give %v %v", p, err)
	}
	f, _ = parse("-allow-targets", "10.0.0.0/33")
	if _, err := f.egress(quiet); err == nil || !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Errorf("a bad CIDR: %v", err)
	}
}

// The cloud metadata addresses stay denied whatever -deny-targets says;
// only -allow-metadata-targets lets probes reach them, and it warns.
func TestEgressMetadataAlwaysDenied(t *testing.T) {
	metadata := []string{"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "fe80::a9fe:a9fe", "::ffff:169.254.169.254"}
	for _, tc := range []struct {
		args       []string
		denied     []string // besides the metadata addresses, when they are denied
		allowed    []string
		allowsMeta bool
	}{
		{args: nil, allowed: []string{"10.1.2.3", "127.0.0.1"}},
		{args: []string{"-deny-targets", "10.0.0.0/8"}, denied: []string{"10.1.2.3"}, allowed: []string{"127.0.0.1"}},
		{args: []string{"-deny-targets="}, allowed: []string{"10.1.2.3"}},
		{args: []string{"-deny-targets", "169.254.169.254"}, allowed: []string{"10.1.2.3"}},
		{args: []string{"-allow-targets", "169.254.0.0/16,100.64.0.0/10,fd00::/8,fe80::/10", "-deny-targets="}},
		{args: []string{"-allow-metadata-targets"}, allowed: []string{"10.1.2.3"}, allowsMeta: true},
		{args: []string{"-allow-metadata-targets", "-deny-targets", "10.0.0.0/8"}, denied: []string{"10.1.2.3"}, allowsMeta: true},
	} {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var logs strings.Builder
		p, err := f.egress(slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		want := map[string]bool{}
		for _, a := range metadata {
			want[a] = tc.allowsMeta
		}
		for _, a := range tc.denied {
			want[a] = false
		}
		for _, a := range tc.allowed {
			want[a] = true
		}
		for a, ok := range want {
			if err := p.Check(netip.MustParseAddr(a)); (err == nil) != ok {
				t.Errorf("%v (%v): %s permitted = %v, want %v", tc.args, p, a, err == nil, ok)
			}
		}
		if warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "-allow-metadata-targets"); warned != tc.allowsMeta {
			t.Errorf("%v: warned = %v, want %v; logs:\n%s", tc.args, warned, tc.allowsMeta, logs.String())
		}
	}
}

// A denied literal address is refused at AddTarget, naming the field.
func TestEgressPolicyRefusesDeniedTargets(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-deny-targets", "127.0.0.2/32")
	out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "denied", "tcp": {"address": "127.0.0.2:80"}}}`, p.Addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "target.tcp.address: 127.0.0.2 is denied by egress policy (deny 127.0.0.2/32)") {
		t.Errorf("AddTarget of a denied address: %v\n%s", err, out)
	}
	p.stop(t)

	p = startPulsed(t, bin)
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "meta", "http": {"url": "http://[::ffff:169.254.169.254]/"}}}`, p.Addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "is denied by egress policy (deny 169.254.0.0/16)") {
		t.Errorf("AddTarget of the metadata address, mapped, by default: %v\n%s", err, out)
	}
	p.stop(t)

	// A deny list of one's own keeps the metadata addresses denied.
	p = startPulsed(t, bin, "-deny-targets", "10.0.0.0/8")
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "meta", "http": {"url": "http://169.254.169.254/latest/meta-data/"}}}`, p.Addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "target.http.url: 169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)") {
		t.Errorf("AddTarget of the metadata address with -deny-targets 10.0.0.0/8: %v\n%s", err, out)
	}
	p.stop(t)
}

// The transport limits of the real pulsed: an oversized request is refused
// with RESOURCE_EXHAUSTED, calls past -max-streams-per-conn wait for a free
// stream (HTTP/2 queues them; they are never served concurrently), and a
// ping flood is answered with GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings").
func TestTransportLimits(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-max-request-bytes", "2048", "-max-streams-per-conn", "2", "-rate-limit", "0")
	client := dial(t, p.Addr)

	big := tcpTarget("big")
	big.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/", Headers: map[string]string{"X-Pad": strings.Repeat("x", 4096)}}}
	_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: big})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("an oversized AddTarget: %v", err)
	}
	// Metadata is bounded too: the client learns the bound from the
	// server's settings and sends nothing past it.
	md := metadata.AppendToOutgoingContext(t.Context(), "x-pad", strings.Repeat("x", 32<<10))
	if _, err := client.Healthy(md, &pb.HealthyRequest{}); !strings.Contains(status.Convert(err).Message(), "violates the maximum size (16384 bytes) set by server") {
		t.Errorf("a call with 32 KiB of metadata: %v, want it refused naming the bound", err)
	}
	if _, err := client.Healthy(t.Context(), &pb.HealthyRequest{}); err != nil {
		t.Errorf("a call after the refused one: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 2 { // two streams use up the connection's limit
		w, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := client.Healthy(short, &pb.HealthyRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a third call on a connection with 2 streams open: %v, want it to wait (DeadlineExceeded)", err)
	}
	cancel() // frees the streams

	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range 50 { // far faster than one ping every 10s
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY after a ping flood: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(ga.DebugData()), "too_many_pings") {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
			}
			break
		}
	}
	p.stop(t)
}

const (
	readToken  = "reader-token-0123456789"
	writeToken = "writer-token-0123456789"
)

// writeTokenFile writes a token file with a read and a write token.
func writeTokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("read "+readToken+" dashboards\nwrite "+writeToken+" deployer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// made at run time, and returns their files and a pool that trusts it.
func selfSigned(t *testing.T, name string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// The HTTP listener's TLS and exposure rule: its own certificate, or the
// API's; a non-loopback address needs both TLS and tokens unless -insecure.
func TestHTTPSecurityFlags(t *testing.T) {
	parse := func(args ...string) *securityFlags {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	apiCert, apiKey, _ := selfSigned(t, "api")
	webCert, webKey, _ := selfSigned(t, "web")
	for _, tt := range []struct {
		listen string
		tokens bool
		args   []string
		want   string // "" means accepted; "api" or "web" names the certificate served
	}{
		{"127.0.0.1:9090", false, nil, ""},
		{"localhost:9090", false, nil, ""},
		{"", false, nil, ""},
		{"0.0.0.0:9090", false, nil, "-http-listen 0.0.0.0:9090 is reachable from other machines, but the HTTP listener has neither TLS (-http-tls-cert/-http-tls-key, or -tls-cert/-tls-key) nor tokens (-token-file): add them, or pass -insecure to accept that"},
		{":9090", false, nil, "-http-listen :9090 is reachable from other machines"},
		{"0.0.0.0:9090", true, nil, "the HTTP listener has no TLS (-http-tls-cert/-http-tls-key, or -tls-cert/-tls-key): its tokens would cross the network in clear"},
		{"0.0.0.0:9090", false, []string{"-http-tls-cert", webCert, "-http-tls-key", webKey}, "the HTTP listener has no tokens (-token-file): anyone there could read every target and download /backup"},
		{"0.0.0.0:9090", false, []string{"-insecure"}, ""},
		{"0.0.0.0:9090", true, []string{"-http-tls-cert", webCert, "-http-tls-key", webKey}, "web"},
		{"0.0.0.0:9090", true, []string{"-tls-cert", apiCert, "-tls-key", apiKey}, "api"},
		{"127.0.0.1:9090", false, []string{"-tls-cert", apiCert, "-tls-key", apiKey, "-http-tls-cert", webCert, "-http-tls-key", webKey}, "web"},
		{"127.0.0.1:9090", false, []string{"-http-tls-cert", webCert}, "-http-tls-cert and -http-tls-key go together"},
		{"127.0.0.1:9090", false, []string{"-http-tls-cert", "missing.pem", "-http-tls-key", "missing.key"}, "-http-tls-cert/-http-tls-key: load"},
	} {
		cfg, err := parse(tt.args...).httpOptions(tt.listen, tt.tokens)
		switch tt.want {
		case "":
			if err != nil || cfg != nil {
				t.Errorf("%s tokens %v %v: %v, %v; want plain HTTP", tt.listen, tt.tokens, tt.args, cfg, err)
			}
		case "api", "web":
			if err != nil || cfg == nil {
				t.Errorf("%s tokens %v %v: %v, %v; want TLS", tt.listen, tt.tokens, tt.args, cfg, err)
				continue
			}
			leaf, _ := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
			if leaf.Subject.CommonName != tt.want || cfg.ClientAuth != tls.NoClientCert {
				t.Errorf("%s %v: serves %q with client auth %v, want %q and none", tt.listen, tt.args, leaf.Subject.CommonName, cfg.ClientAuth, tt.want)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s tokens %v %v: %v, want %q", tt.listen, tt.tokens, tt.args, err, tt.want)
			}
		}
	}
}

// pulsed itself refuses an exposed HTTP listener at start, before it
// listens, and warns of one that -insecure lets through.
func TestExposedHTTPListenerRefused(t *testing.T) {
	bin := buildPulsed(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0", "-http-listen", "0.0.0.0:0", "-data-dir", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pulsed: -http-listen 0.0.0.0:0 is reachable from other machines, but the HTTP listener has neither TLS") {
		t.Errorf("pulsed -http-listen 0.0.0.0:0: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0", "-http-listen", "0.0.0.0:0", "-data-dir", "", "-token-file", writeTokenFile(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the HTTP listener has no TLS") {
		t.Errorf("pulsed -http-listen 0.0.0.0:0 with tokens only: %v\n%s", err, out)
	}
}

// The HTTP listener over TLS (the API's certificate, reused) with tokens:
// https only, and the token rules on a real pulsed.
func TestHTTPListenerTLSAndTokens(t *testing.T) {
	bin := buildPulsed(t)
	cert, key, pool := selfSigned(t, "pulsed")
	p, base := startPulsedJSON(t, bin, "-tls-cert", cert, "-tls-key", key, "-token-file", writeTokenFile(t), "-data-dir", t.TempDir())
	if !strings.Contains(p.Logs(), `"tls":true,"tokens":true`) {
		t.Errorf("the http listening line does not say TLS and tokens:\n%s", p.Logs())
	}
	base = strings.Replace(base, "http://", "https://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path, token string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for _, tt := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/", "", 200},
		{"/api/targets", "", 401},
		{"/api/targets", readToken, 200},
		{"/metrics", "", 401},
		{"/metrics", readToken, 200},
		{"/backup", readToken, 403},
		{"/backup", writeToken, 200},
	} {
		code, hd := get(tt.path, tt.token)
		if code != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.token, code, tt.want)
		}
		if code == 401 && !strings.HasPrefix(hd.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s: 401 without WWW-Authenticate: Bearer", tt.path)
		}
	}
	// Plain HTTP is not served.
	plain := strings.Replace(base, "https://", "http://", 1)
	if code, _ := httpGet(t, plain+"/healthz"); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS listener: %d, want 400", code)
	}
	p.stop(t)
}

// -insecure lets an exposed HTTP listener through, with a warning.
func TestInsecureHTTPListenerWarns(t *testing.T) {
	var logs strings.Builder
	o := newObservability(false, slog.New(slog.NewTextHandler(&logs, nil)))
	f := &securityFlags{insecure: true}
	if err := o.secure(f, "0.0.0.0:9090", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="-insecure: the HTTP listener is reachable from other machines without TLS or tokens" component=http addr=0.0.0.0:9090 tls=false tokens=false`) {
		t.Errorf("no warning for an exposed listener:\n%s", logs.String())
	}
	logs.Reset()
	if err := o.secure(f, "127.0.0.1:9090", nil); err != nil || logs.Len() > 0 {
		t.Errorf("a loopback listener: %v, logged %q", err, logs.String())
	}
}

// A start refused over a file pulsed reads at start creates no store: the
// error comes before the data directory is touched.
func TestRefusedStartCreatesNoStore(t *testing.T) {
	bin := buildPulsed(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	files := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(files, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tokens := write("tokens", "write short\n")
	targets := write("targets.yaml", "targets:\n  - name: web-1\n    tpc: {address: 127.0.0.1:1}\n")
	disc := write("discovery.yaml", "groups:\n  - name: a\n    file_sd_configs: [{files: [x.json]}]\n    on_disappear: sometimes\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-token-file", tokens}, "-token-file: " + tokens + ":1:"},
		{[]string{"-targets", targets}, "-targets: "},
		{[]string{"-discovery-config", disc}, "-discovery-config: "},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", dir}, tc.args...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("pulsed %v: %v, want a refusal with %q\n%s", tc.args, err, tc.want, out)
			continue
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("pulsed %v: the refused start left the data directory behind (stat: %v)\n%s", tc.args, err, out)
		}
	}
}

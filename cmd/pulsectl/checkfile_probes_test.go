package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker/oneshot"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/internal/testpki"
)

// outcome matches a report line: the outcome, the target and, after it,
// the reason.
func outcome(t *testing.T, stdout, want, name, reason string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + want + `\s+` + regexp.QuoteMeta(name) + `(?: \(non-critical\))?\s.*` + regexp.QuoteMeta(reason))
	if !re.MatchString(stdout) {
		t.Errorf("want %s %s ... %q in the report:\n%s", want, name, reason, stdout)
	}
}

// TestLoadTargetsProbeOptions: every probe option a check file takes lands
// in the probe spec under its meaning.
func TestLoadTargetsProbeOptions(t *testing.T) {
	path := writeFile(t, "t.yaml", `
- name: web
  url: https://10.0.0.6/ready
  method: post
  body: ping
  expected_status: 201
  expected_status_ranges: ["200-204"]
  body_contains: ready
  body_not_contains: error
  body_regex: 'v\d+'
  body_limit: 4096
  header_matches: [{name: X-Status, regex: ^ok$}]
  follow_redirects: true
  tls_options:
    ca_file: ca.pem
    cert_file: client.pem
    key_file: client-key.pem
    server_name: web.internal
    min_version: "1.3"
    cert_expiry_warn: 720h
    cert_expiry_fail: 24h
- name: ranges
  url: http://10.0.0.6/
  expected_status_ranges: ["200-399"]
- name: codes
  url: http://10.0.0.6/
  expected_status: [200, 204]
- name: cache
  kind: tcp
  address: 10.0.0.8:6379
  tls: true
  steps:
    - send: "PING\r\n"
    - {expect: "+PONG\r\n", read_limit: 16}
    - {send_hex: "2a31", expect_hex: "", expect_contains: "", expect_regex: ""}
    - expect_hex: "2b"
    - expect_contains: OK
    - expect_regex: ^\d
- name: api
  kind: grpc
  address: 10.0.0.7:50051
  authority: api.internal
  metadata: {x-api-key: k}
  expected_statuses: [serving, NOT_SERVING]
  tls_options: {ca_pem: "", insecure_skip_verify: true}
- name: resolver
  dns: {name: api.internal, type: srv, server: 10.0.0.2:53, rcode: noerror, answer_contains: "10.0.0.7", answer_regex: '^10\.'}
`)
	got, err := loadTargets(path)
	if err != nil {
		t.Fatal(err)
	}
	target := func(name string, spec probe.Spec) oneshot.Target {
		return oneshot.Target{Name: name, Probe: spec, Timeout: oneshot.DefaultTimeout, Critical: true}
	}
	want := []oneshot.Target{
		target("web", probe.Spec{HTTP: &probe.HTTPSpec{
			URL: "https://10.0.0.6/ready", Method: "POST", Body: "ping",
			ExpectedStatus: []int{201}, ExpectedStatusRanges: []string{"200-204"},
			BodyContains: "ready", BodyNotContains: "error", BodyRegex: `v\d+`, BodyLimit: 4096,
			HeaderMatches: []probe.HeaderMatch{{Name: "X-Status", Regex: "^ok$"}}, FollowRedirects: true,
			TLS: &probe.TLSSpec{
				CAFile: "ca.pem", CertFile: "client.pem", KeyFile: "client-key.pem", ServerName: "web.internal",
				MinVersion: "1.3", CertExpiryWarn: 720 * time.Hour, CertExpiryFail: 24 * time.Hour,
			},
		}}),
		target("ranges", probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://10.0.0.6/", ExpectedStatusRanges: []string{"200-399"}}}),
		target("codes", probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://10.0.0.6/", ExpectedStatus: []int{200, 204}}}),
		target("cache", probe.Spec{TCP: &probe.TCPSpec{Address: "10.0.0.8:6379", TLS: &probe.TLSSpec{}, Steps: []probe.TCPStep{
			{Send: "PING\r\n"}, {Expect: "+PONG\r\n", ReadLimit: 16}, {SendHex: "2a31"}, {ExpectHex: "2b"},
			{ExpectContains: "OK"}, {ExpectRegex: `^\d`},
		}}}),
		target("api", probe.Spec{GRPC: &probe.GRPCSpec{
			Address: "10.0.0.7:50051", Authority: "api.internal", Metadata: map[string]string{"x-api-key": "k"},
			ExpectedStatuses: []string{"SERVING", "NOT_SERVING"}, TLSOptions: &probe.TLSSpec{InsecureSkipVerify: true},
		}}),
		target("resolver", probe.Spec{DNS: &probe.DNSSpec{
			Name: "api.internal", Type: "SRV", Server: "10.0.0.2:53", Rcode: "NOERROR", AnswerContains: "10.0.0.7", AnswerRegex: `^10\.`,
		}}),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}

// TestLoadTargetsProbeOptionErrors: a probe option on a kind it does not
// apply to, past its bound, or misspelled is refused naming the target, the
// field and, for a bound, the bound.
func TestLoadTargetsProbeOptionErrors(t *testing.T) {
	tests := []struct {
		name, file, content, want string
	}{
		// Misplaced.
		{"body_contains on tcp", "t.yaml", "- {name: a, kind: tcp, address: 'x:1', body_contains: ok}\n",
			"target 1 (a): body_contains applies to kind http only, and this target is kind tcp"},
		{"steps on http", "t.yaml", "- {name: a, url: 'http://x/', steps: [{send: hi}]}\n", "target 1 (a): steps applies to kind tcp only, and this target is kind http"},
		{"tls_options on dns", "t.yaml", "- {name: a, dns: {name: x, server: 'x:53'}, tls_options: {ca_file: c}}\n",
			"target 1 (a): tls_options applies to kind http or tcp or grpc only, and this target is kind dns"},
		{"dns on tcp", "t.json", `[{"name": "a", "kind": "tcp", "address": "x:1", "dns": {"name": "x"}}]`, "target 1 (a): dns applies to kind dns only, and this target is kind tcp"},
		{"address on dns", "t.yaml", "- {name: a, kind: dns, address: 'x:53', dns: {name: x, server: 'x:53'}}\n", "address applies to kind tcp or grpc only"},
		{"authority on http", "t.yaml", "- {name: a, url: 'http://x/', authority: x}\n", "authority applies to kind grpc only"},
		{"follow_redirects on grpc", "t.yaml", "- {name: a, kind: grpc, address: 'x:1', follow_redirects: false}\n", "follow_redirects applies to kind http only"},
		{"kind dns without dns", "t.yaml", "- {name: a, kind: dns}\n", "target 1 (a): dns is required for kind dns"},
		{"tls_options on http://", "t.yaml", "- {name: a, url: 'http://x/', tls_options: {ca_file: c}}\n", "target 1 (a): tls_options: applies to https:// URLs only"},
		// Past a bound: the field as the file spells it, and the bound.
		{"body_limit", "t.yaml", "- {name: a, url: 'http://x/', body_limit: 2000000}\n",
			"target 1 (a): body_limit: must be between 0 (65536 bytes) and 1048576 bytes, got 2000000"},
		{"body_contains too long", "t.yaml", "- {name: a, url: 'http://x/', body_contains: " + strings.Repeat("x", 1025) + "}\n",
			"target 1 (a): body_contains: must be at most 1024 bytes, got 1025"},
		{"read_limit", "t.yaml", "- {name: a, kind: tcp, address: 'x:1', steps: [{send: hi}, {expect: ho, read_limit: 70000}]}\n",
			"target 1 (a): steps[1].read_limit: must be between 0 (4096 bytes) and 65536 bytes, got 70000"},
		{"too many steps", "t.yaml", "- {name: a, kind: tcp, address: 'x:1', steps: [" + strings.Repeat("{send: hi}, ", 17) + "]}\n",
			"target 1 (a): steps: must be at most 16 steps, got 17"},
		{"cert_expiry_fail", "t.yaml", "- {name: a, url: 'https://x/', tls_options: {cert_expiry_fail: 50000h}}\n",
			"target 1 (a): tls_options.cert_expiry_fail: must be between 0 (no check) and 43800h0m0s, got 50000h0m0s"},
		{"cert_expiry_warn not a duration", "t.yaml", "- {name: a, url: 'https://x/', tls_options: {cert_expiry_warn: 30d}}\n",
			`target 1 (a): tls_options.cert_expiry_warn: want a duration such as 720h, at most 43800h0m0s, got "30d"`},
		{"cert without key", "t.yaml", "- {name: a, kind: grpc, address: 'x:1', tls_options: {cert_file: c.pem}}\n",
			"target 1 (a): tls_options.key_file: is required with a client certificate"},
		{"method", "t.yaml", "- {name: a, url: 'http://x/', method: PUT}\n", `target 1 (a): method: must be "GET", "HEAD" or "POST"`},
		{"status range", "t.yaml", "- {name: a, url: 'http://x/', expected_status_ranges: [200-700]}\n", "target 1 (a): expected_status_ranges: each must be"},
		{"dns name", "t.yaml", "- {name: a, dns: {name: " + strings.Repeat("a", 254) + ", server: 'x:53'}}\n", "target 1 (a): dns.name: must be at most 253 bytes, got 254"},
		{"grpc status", "t.yaml", "- {name: a, kind: grpc, address: 'x:1', expected_statuses: [up]}\n", "target 1 (a): expected_statuses: must each be one of"},
		// Misspelled inside an object, and of the wrong type.
		{"status list json", "t.json", `[{"name": "a", "url": "http://x/", "expected_status": [200, "x"]}]`, "target 1 (a): expected_status: want a whole number, got a string"},
		{"status list yaml", "t.yaml", "- name: a\n  url: http://x/\n  expected_status: [200, x]\n", "target 1 (a), line 3: expected_status: want a whole number, got a string (x)"},
		{"status in list", "t.yaml", "- {name: a, url: 'http://x/', expected_status: [200, 700]}\n", "target 1 (a): expected_status: each code must be between 100 and 599, got 700 at index 1"},
		{"unknown nested json", "t.json", `[{"name": "a", "url": "https://x/", "tls_options": {"ca": "c"}}]`,
			`target 1 (a): tls_options: unknown field "ca"; its fields are ca_file, ca_pem,`},
		{"unknown step field json", "t.json", `[{"name": "a", "kind": "tcp", "address": "x:1", "steps": [{"send": "a"}, {"expects": "b"}]}]`,
			`target 1 (a): steps[1]: unknown field "expects"; its fields are send,`},
		{"unknown nested yaml", "t.yaml", "- name: a\n  url: https://x/\n  tls_options:\n    ca: c\n",
			`target 1 (a), line 4: unknown field "ca" in tls_options; its fields are ca_file, ca_pem,`},
		{"steps type yaml", "t.yaml", "- name: a\n  kind: tcp\n  address: x:1\n  steps: PING\n", "target 1 (a), line 4: steps: want a list of map of send,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file, tt.content)
			_, err := loadTargets(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("loadTargets = %v, want an error starting with the path and containing %q", err, tt.want)
			}
		})
	}
}

// TestCheckBodyChecks runs check against an HTTP server: each expectation
// passes on the answer that meets it and fails, naming what it missed, on
// one that does not.
func TestCheckBodyChecks(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Status", "ok")
		io.WriteString(w, "status: ready, v2")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); r.Method != http.MethodPost || string(b) != "ping" {
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ready", http.StatusFound) })
	mux.HandleFunc("/gone", http.NotFound)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	file := writeFile(t, "targets.yaml", `
- name: ready
  url: `+srv.URL+`/ready
  body_contains: ready
  body_not_contains: error
  body_regex: 'v\d'
  header_matches: [{name: X-Status, regex: ^ok$}]
- name: missing
  url: `+srv.URL+`/ready
  body_contains: all good
  critical: false
- name: unwanted
  url: `+srv.URL+`/ready
  body_not_contains: status
  critical: false
- name: no-match
  url: `+srv.URL+`/ready
  body_regex: '^v\d'
  critical: false
- name: header
  url: `+srv.URL+`/ready
  header_matches: [{name: X-Status, regex: ^down$}]
  critical: false
- name: post
  url: `+srv.URL+`/echo
  method: POST
  body: ping
- name: gone-is-fine
  url: `+srv.URL+`/gone
  expected_status_ranges: ["400-404"]
- name: redirect-judged
  url: `+srv.URL+`/moved
  follow_redirects: false
  critical: false
`)
	r := pulsectl(t, "check", "--retries", "1", file)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0: %+v", r.code, r)
	}
	outcome(t, r.stdout, "healthy", "ready", "ok")
	outcome(t, r.stdout, "down", "missing", `body: "all good" not found in first 64 KiB, not retried`)
	outcome(t, r.stdout, "down", "unwanted", `"status"`)
	outcome(t, r.stdout, "down", "no-match", `^v\d`)
	outcome(t, r.stdout, "down", "header", "X-Status")
	outcome(t, r.stdout, "healthy", "post", "ok")
	outcome(t, r.stdout, "healthy", "gone-is-fine", "ok")
	outcome(t, r.stdout, "down", "redirect-judged", "status 302")
}

// TestCheckMutualTLS: an HTTPS server with a private CA that requires a
// client certificate passes with the file's tls_options and fails without
// the client certificate; a CA file that cannot be read is named as the
// file spells it.
func TestCheckMutualTLS(t *testing.T) {
	pki := testpki.Write(t, t.TempDir())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	file := writeFile(t, "targets.yaml", `
- name: mtls
  url: `+srv.URL+`/
  tls_options:
    ca_file: `+pki.CA+`
    cert_file: `+pki.ClientCert+`
    key_file: `+pki.ClientKey+`
- name: no-client-cert
  url: `+srv.URL+`/
  tls_options: {ca_file: `+pki.CA+`}
  critical: false
- name: system-roots
  url: `+srv.URL+`/
  critical: false
- name: missing-ca
  url: `+srv.URL+`/
  tls_options: {ca_file: `+filepath.Join(t.TempDir(), "none.pem")+`}
  critical: false
`)
	r := pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0: %+v", r.code, r)
	}
	outcome(t, r.stdout, "healthy", "mtls", "ok")
	outcome(t, r.stdout, "down", "no-client-cert", "tls: certificate required")
	outcome(t, r.stdout, "down", "system-roots", "certificate signed by unknown authority")
	outcome(t, r.stdout, "down", "missing-ca", "invalid probe: tls_options.ca_file: cannot read")
}

// TestCheckTCPSteps: a conversation of send and expect steps passes when
// the server answers as expected and fails at the step it does not.
func TestCheckTCPSteps(t *testing.T) {
	addr := startPingServer(t)
	file := writeFile(t, "targets.yaml", `
- name: pong
  kind: tcp
  address: `+addr+`
  steps:
    - send: "PING\r\n"
    - expect: "+PONG\r\n"
- name: pang
  kind: tcp
  address: `+addr+`
  steps: [{send: "PING\r\n"}, {expect_contains: PANG, read_limit: 7}]
  critical: false
`)
	r := pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0: %+v", r.code, r)
	}
	outcome(t, r.stdout, "healthy", "pong", "ok")
	outcome(t, r.stdout, "down", "pang", `step 2: "PANG" not found`)
}

// startPingServer answers each line "PING\r\n" with "+PONG\r\n" on a
// loopback port until the test ends.
func startPingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "PING\r\n" {
						io.WriteString(c, "+PONG\r\n")
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// TestCheckDNS: a dns target asks a loopback DNS server and passes on the
// answer it expects.
func TestCheckDNS(t *testing.T) {
	server := startDNSServer(t)
	file := writeFile(t, "targets.yaml", `
- name: api
  dns: {name: api.internal, server: "`+server+`", answer_contains: 10.0.0.7}
- name: gone
  kind: dns
  dns: {name: gone.internal, server: "`+server+`", rcode: NXDOMAIN}
- name: wrong-address
  dns: {name: api.internal, server: "`+server+`", answer_contains: 10.9.9.9}
  critical: false
- name: missing
  dns: {name: nope.internal, server: "`+server+`"}
  critical: false
`)
	r := pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0: %+v", r.code, r)
	}
	outcome(t, r.stdout, "healthy", "api", "ok")
	outcome(t, r.stdout, "healthy", "gone", "ok")
	outcome(t, r.stdout, "down", "wrong-address", `"10.9.9.9"`)
	outcome(t, r.stdout, "down", "missing", "NXDOMAIN for nope.internal.")
}

// startDNSServer serves api.internal. A 10.0.0.7 over UDP on loopback, and
// NXDOMAIN for any other name, until the test ends.
func startDNSServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Name != "api.internal." {
			m.Rcode = dns.RcodeNameError
		} else if q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR("api.internal. 60 IN A 10.0.0.7")
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("dns server: %v", err)
	}
	t.Cleanup(func() {
		_ = srv.Shutdown()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("dns server: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

// TestProbesExampleFile runs the README's probes.yaml against a server
// that answers as pulse-target does: exit 0 with web-ready down, then
// exit 2 once /healthz fails.
func TestProbesExampleFile(t *testing.T) {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || failing.Load() {
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	example, err := os.ReadFile(filepath.Join("testdata", "probes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "probes.yaml", strings.ReplaceAll(string(example), "127.0.0.1:8080", srv.Listener.Addr().String()))
	r := pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0: %+v", r.code, r)
	}
	outcome(t, r.stdout, "healthy", "web", "ok")
	outcome(t, r.stdout, "healthy", "web-raw", "ok")
	outcome(t, r.stdout, "down", "web-ready", "body: no match for /^ready/")
	failing.Store(true)
	r = pulsectl(t, "check", "--retries", "0", file)
	if r.code != exitCriticalDown || !strings.Contains(r.stdout, "critical down: web, web-raw") {
		t.Errorf("with /healthz failing: exit %d, want %d and web, web-raw critical down: %+v", r.code, exitCriticalDown, r)
	}
}

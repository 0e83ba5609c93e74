package probe

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateOptions covers the fields of expectations, TLS options, TCP
// steps, gRPC options and DNS probes: each bad value names its field.
func TestValidateOptions(t *testing.T) {
	h := func(edit func(*HTTPSpec)) Spec {
		s := &HTTPSpec{URL: "https://10.0.0.5/healthz"}
		edit(s)
		return Spec{HTTP: s}
	}
	tcp := func(steps ...TCPStep) Spec { return Spec{TCP: &TCPSpec{Address: "10.0.0.5:6379", Steps: steps}} }
	g := func(edit func(*GRPCSpec)) Spec {
		s := &GRPCSpec{Address: "10.0.0.5:50051"}
		edit(s)
		return Spec{GRPC: s}
	}
	d := func(edit func(*DNSSpec)) Spec {
		s := &DNSSpec{Name: "api.internal", Server: "10.0.0.2:53"}
		edit(s)
		return Spec{DNS: s}
	}
	long := strings.Repeat("a", MaxPatternLen+1)
	tests := []struct {
		name      string
		spec      Spec
		wantField string // "" means valid
		wantIn    string
	}{
		{"http everything", h(func(s *HTTPSpec) {
			s.Method, s.Body = "POST", `{"deep": true}`
			s.ExpectedStatusRanges = []string{"200-399", "404"}
			s.BodyContains, s.BodyNotContains, s.BodyRegex, s.BodyLimit = "ready", "error", `"ok":\s*true`, 4096
			s.HeaderMatches = []HeaderMatch{{"X-Status", "^ok$"}}
			s.FollowRedirects = true
			s.TLS = &TLSSpec{ServerName: "api.internal", MinVersion: "1.3", CertExpiryWarn: 30 * 24 * time.Hour, CertExpiryFail: 7 * 24 * time.Hour}
		}), "", ""},
		{"bad body regex", h(func(s *HTTPSpec) { s.BodyRegex = "(ready" }), "http.body_regex", "is not a valid RE2 regular expression: error parsing regexp: missing closing ): `(ready`"},
		{"body regex too long", h(func(s *HTTPSpec) { s.BodyRegex = long }), "http.body_regex", "at most 1024 bytes"},
		{"body contains too long", h(func(s *HTTPSpec) { s.BodyContains = long }), "http.body_contains", "at most 1024 bytes"},
		{"backwards range", h(func(s *HTTPSpec) { s.ExpectedStatusRanges = []string{"399-200"} }), "http.expected_status_ranges", `got "399-200" at index 0`},
		{"range past 599", h(func(s *HTTPSpec) { s.ExpectedStatusRanges = []string{"200-600"} }), "http.expected_status_ranges", "LOW-HIGH"},
		{"body limit too big", h(func(s *HTTPSpec) { s.BodyContains, s.BodyLimit = "x", MaxBodyLimit+1 }), "http.body_limit", "and 1048576 bytes, got 1048577"},
		{"HEAD with a body check", h(func(s *HTTPSpec) { s.Method, s.BodyContains = "HEAD", "ready" }), "http.method", "HEAD answers have no body"},
		{"body with GET", h(func(s *HTTPSpec) { s.Body = "x" }), "http.body", "POST only"},
		{"header match bad name", h(func(s *HTTPSpec) { s.HeaderMatches = []HeaderMatch{{"X Status", "ok"}} }), "http.header_matches", "not a valid HTTP token"},
		{"header match bad regex", h(func(s *HTTPSpec) { s.HeaderMatches = []HeaderMatch{{"X-Status", "[ok"}} }), "http.header_matches", `regex of "X-Status" is not a valid RE2`},
		{"header match empty regex", h(func(s *HTTPSpec) { s.HeaderMatches = []HeaderMatch{{"X-Status", ""}} }), "http.header_matches", "is empty"},
		{"tls on http", Spec{HTTP: &HTTPSpec{URL: "http://10.0.0.5/", TLS: &TLSSpec{}}}, "http.tls", "applies to https:// URLs only"},
		{"unknown TLS version", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{MinVersion: "1.4"} }), "http.tls.min_version", `unknown TLS version "1.4"`},
		{"ca file and pem", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CAFile: "/ca.pem", CAPEM: "x"} }), "http.tls.ca_file", "not both"},
		{"ca pem not PEM", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CAPEM: "hello"} }), "http.tls.ca_pem", "is not PEM"},
		{"cert without key", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CertFile: "/c.pem"} }), "http.tls.key_file", "is required with a client certificate"},
		{"key without cert", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{KeyPEM: "k"} }), "http.tls.cert_file", "is required with a client key"},
		{"bad key pair", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CertPEM: "c", KeyPEM: "secret-key-text"} }), "http.tls.cert_pem", "is not a certificate and its key"},
		{"bad server name", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{ServerName: "a b"} }), "http.tls.server_name", "must be a host name"},
		{"warn not above fail", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CertExpiryWarn: time.Hour, CertExpiryFail: 2 * time.Hour} }), "http.tls.cert_expiry_warn", "must be longer than cert_expiry_fail"},
		{"expiry too far", h(func(s *HTTPSpec) { s.TLS = &TLSSpec{CertExpiryFail: MaxCertExpiry + time.Hour} }), "http.tls.cert_expiry_fail", "must be between 0"},

		{"tcp steps", tcp(TCPStep{Send: "PING\r\n"}, TCPStep{Expect: "+PONG\r\n"}, TCPStep{SendHex: "2a 31"}, TCPStep{ExpectContains: "x", ReadLimit: 10}, TCPStep{ExpectRegex: "^2"}), "", ""},
		{"empty step", tcp(TCPStep{Send: "PING\r\n"}, TCPStep{}), "tcp.steps[1]", "set one of send, send_hex, expect, expect_hex, expect_contains or expect_regex"},
		{"step with two actions", tcp(TCPStep{Send: "a", Expect: "b"}), "tcp.steps[0]", "got send and expect"},
		{"bad hex", tcp(TCPStep{SendHex: "2g"}), "tcp.steps[0].send_hex", "is not hex digits"},
		{"bad expect hex", tcp(TCPStep{ExpectHex: "0"}), "tcp.steps[0].expect_hex", "is not hex digits"},
		{"bad expect regex", tcp(TCPStep{ExpectRegex: "+PONG"}), "tcp.steps[0].expect_regex", "missing argument to repetition operator"},
		{"read limit too big", tcp(TCPStep{ExpectContains: "x", ReadLimit: MaxTCPReadLimit + 1}), "tcp.steps[0].read_limit", "and 65536 bytes, got 65537"},
		{"expect over read limit", tcp(TCPStep{Expect: "abcdef", ReadLimit: 3}), "tcp.steps[0].read_limit", "at least the length of expect (6 bytes)"},
		{"send too long", tcp(TCPStep{Send: strings.Repeat("x", MaxTCPSendLen+1)}), "tcp.steps[0].send", "at most 4096 bytes"},
		{"too many steps", tcp(make([]TCPStep, MaxTCPSteps+1)...), "tcp.steps", "at most 16 steps"},
		{"tcp tls", Spec{TCP: &TCPSpec{Address: "10.0.0.5:6380", TLS: &TLSSpec{MinVersion: "tls1.2"}}}, "tcp.tls.min_version", "unknown TLS version"},

		{"grpc everything", g(func(s *GRPCSpec) {
			s.Authority, s.Metadata, s.ExpectedStatuses = "api.internal:443", map[string]string{"x-api-key": "k"}, []string{"SERVING", "NOT_SERVING"}
			s.TLSOptions = &TLSSpec{InsecureSkipVerify: true}
		}), "", ""},
		{"grpc bad status", g(func(s *GRPCSpec) { s.ExpectedStatuses = []string{"OK"} }), "grpc.expected_statuses", `got "OK" at index 0`},
		{"grpc upper-case metadata", g(func(s *GRPCSpec) { s.Metadata = map[string]string{"X-Api-Key": "k"} }), "grpc.metadata", "lower-case"},
		{"grpc reserved metadata", g(func(s *GRPCSpec) { s.Metadata = map[string]string{"grpc-timeout": "1s"} }), "grpc.metadata", `not starting with "grpc-"`},
		{"grpc bad authority", g(func(s *GRPCSpec) { s.Authority = "a/b" }), "grpc.authority", "must be a host and optional port"},
		{"grpc bad tls", g(func(s *GRPCSpec) { s.TLSOptions = &TLSSpec{CAFile: "/a", CAPEM: "b"} }), "grpc.tls_options.ca_file", "not both"},

		{"dns everything", d(func(s *DNSSpec) { s.Type, s.Rcode, s.AnswerContains, s.AnswerRegex = "SRV", "NOERROR", "5432", `db-\d` }), "", ""},
		{"dns no name", d(func(s *DNSSpec) { s.Name = "" }), "dns.name", "is required"},
		{"dns bad name", d(func(s *DNSSpec) { s.Name = "a b" }), "dns.name", "is not a domain name"},
		{"dns bad type", d(func(s *DNSSpec) { s.Type = "AXFR" }), "dns.type", `got "AXFR"`},
		{"dns bad rcode", d(func(s *DNSSpec) { s.Rcode = "GONE" }), "dns.rcode", `got "GONE"`},
		{"dns no server", d(func(s *DNSSpec) { s.Server = "" }), "dns.server", "is required"},
		{"dns server without port", d(func(s *DNSSpec) { s.Server = "10.0.0.2" }), "dns.server", "missing port"},
		{"dns bad regex", d(func(s *DNSSpec) { s.AnswerRegex = "(" }), "dns.answer_regex", "is not a valid RE2"},
		{"dns and tcp", Spec{DNS: &DNSSpec{}, TCP: &TCPSpec{}}, "probe", "got tcp and dns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.Contains(fe.Reason, tt.wantIn) {
				t.Fatalf("Validate() = %v, want a FieldError for %s containing %q", err, tt.wantField, tt.wantIn)
			}
			if strings.Contains(err.Error(), "secret-key-text") {
				t.Errorf("the error quotes a key: %v", err)
			}
		})
	}
}

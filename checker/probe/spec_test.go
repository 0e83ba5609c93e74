package probe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	httpSpec := func(h HTTPSpec) Spec { return Spec{HTTP: &h} }
	tests := []struct {
		name      string
		spec      Spec
		wantField string // "" means valid
		wantIn    string // substring of Reason
	}{
		{name: "http ok", spec: httpSpec(HTTPSpec{URL: "http://10.0.0.5:8080/healthz"})},
		{name: "https ok with everything", spec: httpSpec(HTTPSpec{
			URL: "https://example.com/healthz?deep=1", Method: "HEAD",
			ExpectedStatus: []int{200, 204, 301}, Headers: map[string]string{"Host": "svc.internal", "X-Token": "a b\tc"},
		})},
		{name: "tcp ok", spec: Spec{TCP: &TCPSpec{Address: "db.internal:5432"}}},
		{name: "tcp ipv6 ok", spec: Spec{TCP: &TCPSpec{Address: "[::1]:65535"}}},
		{name: "grpc ok", spec: Spec{GRPC: &GRPCSpec{Address: "10.0.0.5:50051", Service: "pulse.v1.Pulse", TLS: true}}},

		{name: "none set", spec: Spec{}, wantField: "probe", wantIn: "none is set"},
		{name: "two set", spec: Spec{HTTP: &HTTPSpec{URL: "http://x"}, TCP: &TCPSpec{Address: "x:1"}}, wantField: "probe", wantIn: "got http and tcp"},
		{name: "three set", spec: Spec{HTTP: &HTTPSpec{}, TCP: &TCPSpec{}, GRPC: &GRPCSpec{}}, wantField: "probe", wantIn: "got http and tcp and grpc"},

		{name: "url empty", spec: httpSpec(HTTPSpec{}), wantField: "http.url", wantIn: "is required"},
		{name: "url relative", spec: httpSpec(HTTPSpec{URL: "/healthz"}), wantField: "http.url", wantIn: `must be an absolute http:// or https:// URL, got "/healthz"`},
		{name: "url no scheme", spec: httpSpec(HTTPSpec{URL: "example.com/healthz"}), wantField: "http.url", wantIn: "must be an absolute"},
		{name: "url unknown scheme", spec: httpSpec(HTTPSpec{URL: "ftp://x"}), wantField: "http.url", wantIn: `unknown scheme "ftp": must be an absolute http:// or https:// URL, got "ftp://x"`},
		{name: "url unparsable", spec: httpSpec(HTTPSpec{URL: "http://x:abc/"}), wantField: "http.url", wantIn: `invalid port`},
		{name: "url space in query", spec: httpSpec(HTTPSpec{URL: "http://x/ready?a=b c"}), wantField: "http.url", wantIn: `query must not contain a space or tab (write %20), got "http://x/ready?a=b c"`},
		{name: "url bare space query", spec: httpSpec(HTTPSpec{URL: "http://0? "}), wantField: "http.url", wantIn: "query must not contain a space"},
		{name: "url missing host", spec: httpSpec(HTTPSpec{URL: "http:///healthz"}), wantField: "http.url", wantIn: "must include a host"},
		{name: "url port only", spec: httpSpec(HTTPSpec{URL: "http://:8080/"}), wantField: "http.url", wantIn: "must include a host"},
		{name: "url port 0", spec: httpSpec(HTTPSpec{URL: "http://x:0/"}), wantField: "http.url", wantIn: "between 1 and 65535"},
		{name: "url host too long", spec: httpSpec(HTTPSpec{URL: "http://" + strings.Repeat("n", 600) + "/"}), wantField: "http.url", wantIn: "host and port must be at most 512 bytes together, got 603"},
		{name: "url port too big", spec: httpSpec(HTTPSpec{URL: "http://x:65536/"}), wantField: "http.url", wantIn: "between 1 and 65535"},
		{name: "method put", spec: httpSpec(HTTPSpec{URL: "http://x", Method: "PUT"}), wantField: "http.method", wantIn: `must be "GET", "HEAD" or "POST" (empty means GET), got "PUT"`},
		{name: "method lower case", spec: httpSpec(HTTPSpec{URL: "http://x", Method: "get"}), wantField: "http.method", wantIn: `got "get"`},
		{name: "status too low", spec: httpSpec(HTTPSpec{URL: "http://x", ExpectedStatus: []int{200, 99}}), wantField: "http.expected_status", wantIn: "between 100 and 599, got 99 at index 1"},
		{name: "status too high", spec: httpSpec(HTTPSpec{URL: "http://x", ExpectedStatus: []int{600}}), wantField: "http.expected_status", wantIn: "got 600"},
		{name: "header name with space", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X Token": "1"}}), wantField: "http.headers", wantIn: `header name "X Token" is not a valid HTTP token`},
		{name: "header name with colon", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-Token:": "1"}}), wantField: "http.headers", wantIn: "not a valid HTTP token"},
		{name: "header name empty", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"": "1"}}), wantField: "http.headers", wantIn: "not a valid HTTP token"},
		{name: "header value newline", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A": "1\r\nX-B: 2"}}), wantField: "http.headers", wantIn: "control characters"},
		// Header injection: no CR or LF anywhere, in names or values,
		// including the Host entry that becomes the request's Host.
		{name: "header value bare LF", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A": "1\nX-B: 2"}}), wantField: "http.headers", wantIn: `value of header "X-A" must not contain control characters such as CR or LF, got '\n' at byte 1`},
		{name: "header value bare CR", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A": "1\r"}}), wantField: "http.headers", wantIn: "control characters"},
		{name: "header value NUL", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A": "a\x00b"}}), wantField: "http.headers", wantIn: "control characters"},
		{name: "header value DEL", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A": "a\x7fb"}}), wantField: "http.headers", wantIn: "control characters"},
		{name: "host header CRLF", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"Host": "a.example\r\nX-Evil: 1"}}), wantField: "http.headers", wantIn: "control characters"},
		{name: "host header with a space", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"host": "a b"}}), wantField: "http.headers", wantIn: `value of header "host" must be a host and optional port, e.g. "svc.internal" or "svc.internal:8080", got "a b"`},
		{name: "host header with a path", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"Host": "a/b"}}), wantField: "http.headers", wantIn: "must be a host and optional port"},
		{name: "host header ipv6 ok", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"Host": "[fd00::1]:8080"}})},
		{name: "header name CRLF", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A\r\nX-B": "1"}}), wantField: "http.headers", wantIn: `header name "X-A\r\nX-B" is not a valid HTTP token`},
		{name: "header name LF", spec: httpSpec(HTTPSpec{URL: "http://x", Headers: map[string]string{"X-A\n": "1"}}), wantField: "http.headers", wantIn: "not a valid HTTP token"},
		{name: "url with CRLF", spec: httpSpec(HTTPSpec{URL: "http://x/\r\nX-Evil: 1"}), wantField: "http.url", wantIn: "invalid control character"},
		{name: "url host with LF", spec: httpSpec(HTTPSpec{URL: "http://x\n.example/"}), wantField: "http.url", wantIn: "invalid control character"},

		{name: "url host bracket", spec: httpSpec(HTTPSpec{URL: "http://]/"}), wantField: "http.url", wantIn: `host "]" is neither a host name nor an IP address, in "http://]/"`},
		{name: "url host angle brackets", spec: httpSpec(HTTPSpec{URL: "http://a<b>/"}), wantField: "http.url", wantIn: "neither a host name nor an IP address"},
		{name: "url host not UTF-8", spec: httpSpec(HTTPSpec{URL: "http://%ff/"}), wantField: "http.url", wantIn: "neither a host name nor an IP address"},
		{name: "url international host ok", spec: httpSpec(HTTPSpec{URL: "http://bücher.example/"})},
		{name: "url inet_aton host ok", spec: httpSpec(HTTPSpec{URL: "http://0x7f.1:8080/"})},
		{name: "url zone ok", spec: httpSpec(HTTPSpec{URL: "http://[fe80::1%25eth0]:8080/"})},

		{name: "tcp host with a space", spec: Spec{TCP: &TCPSpec{Address: "db internal:5432"}}, wantField: "tcp.address", wantIn: `host "db internal" is neither a host name nor an IP address, in "db internal:5432"`},
		{name: "tcp host with a slash", spec: Spec{TCP: &TCPSpec{Address: "unix/x:80"}}, wantField: "tcp.address", wantIn: "neither a host name nor an IP address"},
		{name: "tcp host with a control character", spec: Spec{TCP: &TCPSpec{Address: "db\n:80"}}, wantField: "tcp.address", wantIn: `host "db\n"`},
		{name: "tcp underscore ok", spec: Spec{TCP: &TCPSpec{Address: "my_service:80"}}},
		{name: "grpc zone ok", spec: Spec{GRPC: &GRPCSpec{Address: "[fe80::1%eth0]:50051"}}},
		{name: "tcp empty", spec: Spec{TCP: &TCPSpec{}}, wantField: "tcp.address", wantIn: "is required"},
		{name: "tcp missing port", spec: Spec{TCP: &TCPSpec{Address: "db.internal"}}, wantField: "tcp.address", wantIn: `must be host:port, e.g. "10.0.0.5:5432" or "[::1]:5432", got "db.internal" (missing port in address)`},
		{name: "tcp empty host", spec: Spec{TCP: &TCPSpec{Address: ":5432"}}, wantField: "tcp.address", wantIn: `host is empty in ":5432"`},
		{name: "tcp port 0", spec: Spec{TCP: &TCPSpec{Address: "x:0"}}, wantField: "tcp.address", wantIn: `port must be a number between 1 and 65535, got "0" in "x:0"`},
		{name: "tcp port too big", spec: Spec{TCP: &TCPSpec{Address: "x:65536"}}, wantField: "tcp.address", wantIn: `got "65536"`},
		{name: "tcp port named", spec: Spec{TCP: &TCPSpec{Address: "x:postgres"}}, wantField: "tcp.address", wantIn: `got "postgres"`},
		{name: "tcp empty port", spec: Spec{TCP: &TCPSpec{Address: "x:"}}, wantField: "tcp.address", wantIn: `got ""`},
		{name: "grpc missing port", spec: Spec{GRPC: &GRPCSpec{Address: "10.0.0.5"}}, wantField: "grpc.address", wantIn: "missing port"},
		{name: "grpc port too big", spec: Spec{GRPC: &GRPCSpec{Address: "10.0.0.5:70000"}}, wantField: "grpc.address", wantIn: "between 1 and 65535"},
		{name: "grpc empty host", spec: Spec{GRPC: &GRPCSpec{Address: ":50051"}}, wantField: "grpc.address", wantIn: "host is empty"},
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
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v (%T), want *FieldError", err, err)
			}
			if fe.Field != tt.wantField {
				t.Errorf("Field = %q, want %q (error %q)", fe.Field, tt.wantField, err)
			}
			if !strings.Contains(fe.Reason, tt.wantIn) {
				t.Errorf("Reason = %q, want it to contain %q", fe.Reason, tt.wantIn)
			}
		})
	}
}

func TestFieldErrorText(t *testing.T) {
	err := Spec{HTTP: &HTTPSpec{URL: "ftp://x"}}.Validate()
	want := `http.url: unknown scheme "ftp": must be an absolute http:// or https:// URL, got "ftp://x"`
	if err == nil || err.Error() != want {
		t.Errorf("Validate().Error() = %v, want %q", err, want)
	}
}

func TestKind(t *testing.T) {
	tests := []struct {
		spec Spec
		want string
	}{
		{Spec{HTTP: &HTTPSpec{}}, "http"},
		{Spec{TCP: &TCPSpec{}}, "tcp"},
		{Spec{GRPC: &GRPCSpec{}}, "grpc"},
		{Spec{}, ""},
		{Spec{HTTP: &HTTPSpec{}, GRPC: &GRPCSpec{}}, ""},
	}
	for _, tt := range tests {
		if got := tt.spec.Kind(); got != tt.want {
			t.Errorf("%+v.Kind() = %q, want %q", tt.spec, got, tt.want)
		}
	}
}

// Each bounded field is accepted at its bound and rejected one past it,
// with the bound in the reason.
func TestValidateBounds(t *testing.T) {
	url := func(n int) string { // an http URL of exactly n bytes
		const head = "http://x/"
		return head + strings.Repeat("a", n-len(head))
	}
	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = "1"
		}
		return h
	}
	statuses := func(n int) []int { return slices.Repeat([]int{200}, n) }
	addr := func(n int) string { // host:port of exactly n bytes
		return strings.Repeat("h", n-len(":80")) + ":80"
	}
	tests := []struct {
		name      string
		ok, bad   Spec
		wantField string
		wantIn    string
	}{
		{"url length",
			Spec{HTTP: &HTTPSpec{URL: url(MaxURLLen)}}, Spec{HTTP: &HTTPSpec{URL: url(MaxURLLen + 1)}},
			"http.url", fmt.Sprintf("must be at most %d bytes, got %d", MaxURLLen, MaxURLLen+1)},
		{"header count",
			Spec{HTTP: &HTTPSpec{URL: "http://x/", Headers: headers(MaxHeaders)}}, Spec{HTTP: &HTTPSpec{URL: "http://x/", Headers: headers(MaxHeaders + 1)}},
			"http.headers", fmt.Sprintf("must be at most %d headers, got %d", MaxHeaders, MaxHeaders+1)},
		{"header size",
			Spec{HTTP: &HTTPSpec{URL: "http://x/", Headers: map[string]string{"X-A": strings.Repeat("v", MaxHeaderLen-3)}}},
			Spec{HTTP: &HTTPSpec{URL: "http://x/", Headers: map[string]string{"X-A": strings.Repeat("v", MaxHeaderLen-2)}}},
			"http.headers", fmt.Sprintf(`header "X-A" must be at most %d bytes, name and value together, got %d`, MaxHeaderLen, MaxHeaderLen+1)},
		{"expected status count",
			Spec{HTTP: &HTTPSpec{URL: "http://x/", ExpectedStatus: statuses(MaxExpectedStatus)}}, Spec{HTTP: &HTTPSpec{URL: "http://x/", ExpectedStatus: statuses(MaxExpectedStatus + 1)}},
			"http.expected_status", fmt.Sprintf("must list at most %d codes, got %d", MaxExpectedStatus, MaxExpectedStatus+1)},
		{"tcp address length",
			Spec{TCP: &TCPSpec{Address: addr(MaxAddressLen)}}, Spec{TCP: &TCPSpec{Address: addr(MaxAddressLen + 1)}},
			"tcp.address", fmt.Sprintf("must be at most %d bytes, got %d", MaxAddressLen, MaxAddressLen+1)},
		{"grpc address length",
			Spec{GRPC: &GRPCSpec{Address: addr(MaxAddressLen)}}, Spec{GRPC: &GRPCSpec{Address: addr(MaxAddressLen + 1)}},
			"grpc.address", fmt.Sprintf("must be at most %d bytes, got %d", MaxAddressLen, MaxAddressLen+1)},
		{"grpc service length",
			Spec{GRPC: &GRPCSpec{Address: "x:80", Service: strings.Repeat("s", MaxServiceLen)}}, Spec{GRPC: &GRPCSpec{Address: "x:80", Service: strings.Repeat("s", MaxServiceLen+1)}},
			"grpc.service", fmt.Sprintf("must be at most %d bytes, got %d", MaxServiceLen, MaxServiceLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.ok.Validate(); err != nil {
				t.Errorf("at the bound: Validate() = %v, want nil", err)
			}
			var fe *FieldError
			if err := tt.bad.Validate(); !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.Contains(fe.Reason, tt.wantIn) {
				t.Errorf("past the bound: Validate() = %v, want a FieldError on %s containing %q", err, tt.wantField, tt.wantIn)
			}
		})
	}
}

func TestHostPort(t *testing.T) {
	for _, tt := range []struct {
		spec Spec
		host string
		port uint16
		ok   bool
	}{
		{Spec{TCP: &TCPSpec{Address: "10.0.0.5:5432"}}, "10.0.0.5", 5432, true},
		{Spec{GRPC: &GRPCSpec{Address: "[::1]:50051"}}, "::1", 50051, true},
		{Spec{HTTP: &HTTPSpec{URL: "http://web.internal/healthz"}}, "web.internal", 80, true},
		{Spec{HTTP: &HTTPSpec{URL: "HTTPS://10.0.0.6/"}}, "10.0.0.6", 443, true},
		{Spec{HTTP: &HTTPSpec{URL: "http://u:p@10.0.0.7:8080/x"}}, "10.0.0.7", 8080, true},
		{Spec{TCP: &TCPSpec{Address: ":80"}}, "", 0, false},
		{Spec{TCP: &TCPSpec{Address: "h:0"}}, "", 0, false},
		{Spec{TCP: &TCPSpec{Address: "h:65536"}}, "", 0, false},
		{Spec{HTTP: &HTTPSpec{URL: "ftp://h/"}}, "", 0, false},
		{Spec{}, "", 0, false},
	} {
		host, port, ok := tt.spec.HostPort()
		if host != tt.host || port != tt.port || ok != tt.ok {
			t.Errorf("%+v: HostPort() = %q, %d, %v; want %q, %d, %v", tt.spec, host, port, ok, tt.host, tt.port, tt.ok)
		}
	}
}

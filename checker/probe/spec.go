// Package probe runs one health probe against one target: an HTTP(S)
// request with expectations on its answer, a TCP connect with optional TLS
// and send/expect steps, a grpc.health.v1 Check, or a DNS query.
//
// A Spec says what to probe, Spec.Validate says what is wrong with it, and a
// Factory turns a valid Spec into a Prober. Probers know nothing of
// schedules, thresholds or state: they answer one question, once, within the
// deadline of the context they are given. Describe turns whatever a Prober
// returned into the short text a person reads ("connection refused",
// "status 503", "NOT_SERVING", "timeout", `body: "ready" not found in first
// 64 KiB`, "dns: NXDOMAIN for api.internal.").
//
// Whoever registers targets decides where probes connect, so a Factory
// holds an EgressPolicy: every connection its Probers open is checked on
// the address actually dialled, after any DNS lookup, and link-local and
// cloud metadata addresses are denied unless configured otherwise.
package probe

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on a Spec's fields, checked by Validate. They bound what one
// target may make pulsed hold and send, far above anything a health check
// needs.
const (
	// MaxURLLen bounds HTTPSpec.URL, in bytes.
	MaxURLLen = 2048
	// MaxHeaders bounds how many HTTPSpec.Headers a probe sends.
	MaxHeaders = 32
	// MaxHeaderLen bounds one header's name and value together, in bytes.
	MaxHeaderLen = 4096
	// MaxExpectedStatus bounds the codes HTTPSpec.ExpectedStatus lists:
	// as many as there are valid codes, 100 to 599.
	MaxExpectedStatus = 500
	// MaxAddressLen bounds TCPSpec.Address and GRPCSpec.Address, in bytes:
	// a host name of at most 253 characters and a port leave room for an
	// IPv6 address with a zone.
	MaxAddressLen = 512
	// MaxServiceLen bounds GRPCSpec.Service, in bytes.
	MaxServiceLen = 1024
)

// Spec describes how to probe one target: exactly one of HTTP, TCP, GRPC
// and DNS must be non-nil. The zero Spec sets none of them and is invalid.
//
// A Spec is a plain value; it is safe to copy and to read from several
// goroutines, but the pointed-to specs must not be modified while a Factory
// is building a Prober from them.
type Spec struct {
	HTTP *HTTPSpec `json:",omitzero"`
	TCP  *TCPSpec  `json:",omitzero"`
	GRPC *GRPCSpec `json:",omitzero"`
	DNS  *DNSSpec  `json:",omitzero"`
}

// HTTPSpec describes an HTTP or HTTPS probe. The probe passes when the
// response status is one of ExpectedStatus or in one of
// ExpectedStatusRanges (any 2xx when both are empty), and the answer meets
// every expectation set: HeaderMatches, BodyContains, BodyNotContains and
// BodyRegex, checked in that order. Redirects are followed only with
// FollowRedirects.
type HTTPSpec struct {
	// URL is the absolute http:// or https:// URL to request; its host is a
	// host name or an IP address. Required; at most MaxURLLen bytes.
	URL string `json:",omitzero"`
	// Method is the request method: "GET", "HEAD" or "POST". Empty means
	// "GET".
	Method string `json:",omitzero"`
	// ExpectedStatus lists the status codes that pass, each in 100..599,
	// at most MaxExpectedStatus of them. Empty (or nil) means any 2xx
	// passes.
	ExpectedStatus []int `json:",omitzero"`
	// Headers are extra request headers. Names are HTTP tokens and values
	// hold no control characters (so no CR or LF). A "Host" entry sets the
	// request's Host (the virtual host asked for) instead of a header line,
	// and must be a host with an optional port; a "User-Agent" entry
	// replaces the default "pulse-probe/1". At most MaxHeaders, each at
	// most MaxHeaderLen bytes (name and value). Nil means none.
	Headers map[string]string `json:",omitzero"`
	// ExpectedStatusRanges lists ranges of status codes that pass,
	// "LOW-HIGH" such as "200-399", at most MaxStatusRanges.
	ExpectedStatusRanges []string `json:",omitzero"`
	// BodyContains must occur in the first BodyLimit bytes of the body,
	// BodyNotContains must not, and BodyRegex (RE2, compiled once) must
	// match them. Empty means no check; each at most MaxPatternLen bytes.
	// A HEAD probe, whose answer has no body, sets none.
	BodyContains    string `json:",omitzero"`
	BodyNotContains string `json:",omitzero"`
	BodyRegex       string `json:",omitzero"`
	// BodyLimit is how many bytes of the body the body checks read, at
	// most MaxBodyLimit. Zero means DefaultBodyLimit (64 KiB).
	BodyLimit int `json:",omitzero"`
	// HeaderMatches are response headers the answer must have, at most
	// MaxHeaderMatches.
	HeaderMatches []HeaderMatch `json:",omitzero"`
	// Body is sent as the request body; only with Method "POST", at most
	// MaxRequestBodyLen bytes.
	Body string `json:",omitzero"`
	// FollowRedirects follows up to MaxRedirects redirects and judges the
	// last answer; every address reached is checked by the egress policy.
	// False (the default) judges the redirect itself.
	FollowRedirects bool `json:",omitzero"`
	// TLS configures https:// probes; nil means the system roots and the
	// URL's host. Only for https:// URLs.
	TLS *TLSSpec `json:",omitzero"`
}

// TCPSpec describes a TCP probe: it passes when a connection to Address can
// be opened (and, with TLS, a TLS handshake made) and every one of Steps
// succeeds in order. Without steps the connection is closed at once.
type TCPSpec struct {
	// Address is host:port: a host name or IP address (an IPv6 one in
	// brackets) and a port in 1..65535; at most MaxAddressLen bytes.
	Address string `json:",omitzero"`
	// Steps are sent and awaited in order, at most MaxTCPSteps.
	Steps []TCPStep `json:",omitzero"`
	// TLS, when not nil, speaks TLS on the connection.
	TLS *TLSSpec `json:",omitzero"`
}

// GRPCSpec describes a grpc.health.v1 Health/Check probe: it passes when the
// server answers SERVING for Service.
type GRPCSpec struct {
	// Address is host:port: a host name or IP address (an IPv6 one in
	// brackets) and a port in 1..65535; at most MaxAddressLen bytes. It is
	// never read as a gRPC target URI: "unix:80" is host "unix", port 80.
	Address string `json:",omitzero"`
	// Service is the service name sent in the HealthCheckRequest, at most
	// MaxServiceLen bytes. Empty asks about the server as a whole.
	Service string `json:",omitzero"`
	// TLS, when true, connects with TLS and verifies the server against the
	// system roots. False (the default) connects in plaintext, unless
	// TLSOptions is set.
	TLS bool `json:",omitzero"`
	// TLSOptions, when not nil, connects with TLS configured by it.
	TLSOptions *TLSSpec `json:",omitzero"`
	// Authority is the :authority the calls carry (and, with TLS, the
	// name verified when TLSOptions.ServerName is empty). Empty means
	// Address. At most MaxAddressLen bytes.
	Authority string `json:",omitzero"`
	// Metadata are sent with every call, at most MaxHeaders, each at most
	// MaxHeaderLen bytes; keys are lower-case gRPC header names.
	Metadata map[string]string `json:",omitzero"`
	// ExpectedStatuses are the serving statuses that pass: "SERVING",
	// "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN". Empty means
	// "SERVING".
	ExpectedStatuses []string `json:",omitzero"`
}

// Kind reports which probe s describes: "http", "tcp", "grpc" or "dns". It returns
// "" when none or more than one is set, that is, whenever Validate would
// report a "probe" error.
func (s Spec) Kind() string {
	kinds, n := s.kinds()
	if n != 1 {
		return ""
	}
	return kinds[0]
}

// HostPort returns the host and port the probe connects to: the TCP or
// gRPC address, or the host of the HTTP URL with its port or the scheme's
// (80, 443). ok is false when the spec names no host and port, as an
// invalid one may not, and for a DNS probe, whose server is not the
// service probed.
func (s Spec) HostPort() (host string, port uint16, ok bool) {
	var hostPort string
	switch {
	case s.TCP != nil:
		hostPort = s.TCP.Address
	case s.GRPC != nil:
		hostPort = s.GRPC.Address
	case s.HTTP != nil:
		u, err := url.Parse(s.HTTP.URL)
		if err != nil || u.Hostname() == "" {
			return "", 0, false
		}
		ps := u.Port()
		if ps == "" {
			ps = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		hostPort = net.JoinHostPort(u.Hostname(), ps)
	default:
		return "", 0, false
	}
	h, ps, err := net.SplitHostPort(hostPort)
	if err != nil || h == "" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return h, uint16(n), true
}

// kinds lists the kinds that are set, in a fixed order, in kinds[:n]. It
// makes no slice: Kind is asked for every probe result (the metrics'
// label).
func (s Spec) kinds() (kinds [4]string, n int) {
	for _, k := range [...]struct {
		set  bool
		name string
	}{{s.HTTP != nil, "http"}, {s.TCP != nil, "tcp"}, {s.GRPC != nil, "grpc"}, {s.DNS != nil, "dns"}} {
		if k.set {
			kinds[n] = k.name
			n++
		}
	}
	return kinds, n
}

// Validate reports the first problem with s as a *FieldError, or nil when it
// is well formed. It does no I/O (no DNS lookups) and knows no policy: a
// Factory also refuses a Spec whose host is an address its EgressPolicy
// denies (see EgressPolicy.CheckSpec).
func (s Spec) Validate() error {
	switch kinds, n := s.kinds(); n {
	case 0:
		return &FieldError{Field: "probe", Reason: "set exactly one of http, tcp, grpc or dns; none is set"}
	case 1:
	default:
		return &FieldError{Field: "probe", Reason: "set exactly one of http, tcp, grpc or dns; got " + strings.Join(kinds[:n], " and ")}
	}
	switch {
	case s.HTTP != nil:
		return s.HTTP.validate()
	case s.TCP != nil:
		return s.TCP.validate()
	case s.DNS != nil:
		return s.DNS.validate()
	default:
		return s.GRPC.validate()
	}
}

// FieldError says which field of a Spec is wrong and how to fix it. Field is
// a dotted, lower-case path such as "http.url", "http.method",
// "http.body_regex", "http.tls.ca_file", "tcp.address", "tcp.steps[1]",
// "grpc.address", "dns.server", or "probe" when none or several kinds are
// set. Reason is a sentence for the person who wrote the Spec.
type FieldError struct {
	Field  string
	Reason string
}

// Error returns "<field>: <reason>".
func (e *FieldError) Error() string {
	return e.Field + ": " + e.Reason
}

const urlHint = "must be an absolute http:// or https:// URL"

// validate checks an HTTP spec field by field.
func (h *HTTPSpec) validate() error {
	if _, err := parseProbeURL(h.URL); err != nil {
		return err
	}
	if len(h.ExpectedStatus) > MaxExpectedStatus {
		return &FieldError{Field: "http.expected_status", Reason: fmt.Sprintf("must list at most %d codes, got %d", MaxExpectedStatus, len(h.ExpectedStatus))}
	}
	if len(h.Headers) > MaxHeaders {
		return &FieldError{Field: "http.headers", Reason: fmt.Sprintf("must be at most %d headers, got %d", MaxHeaders, len(h.Headers))}
	}
	switch h.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return &FieldError{Field: "http.method", Reason: fmt.Sprintf(`must be "GET", "HEAD" or "POST" (empty means GET), got %.40q`, h.Method)}
	}
	for i, code := range h.ExpectedStatus {
		if code < 100 || code > 599 {
			return &FieldError{Field: "http.expected_status", Reason: fmt.Sprintf("each code must be between 100 and 599, got %d at index %d", code, i)}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
		value := h.Headers[name]
		if n := len(name) + len(value); n > MaxHeaderLen {
			return &FieldError{Field: "http.headers", Reason: fmt.Sprintf("header %.40q must be at most %d bytes, name and value together, got %d", name, MaxHeaderLen, n)}
		}
		if !isToken(name) {
			return &FieldError{Field: "http.headers", Reason: fmt.Sprintf("header name %q is not a valid HTTP token: use letters, digits and !#$%%&'*+-.^_`|~ only, e.g. \"X-Health-Token\"", name)}
		}
		if i := badHeaderByte(value); i >= 0 {
			// The value is not echoed: it may be a credential, and the
			// error is logged.
			return &FieldError{Field: "http.headers", Reason: fmt.Sprintf("value of header %q must not contain control characters such as CR or LF, got %q at byte %d", name, value[i], i)}
		}
		if http.CanonicalHeaderKey(name) == "Host" && !validHostHeader(value) {
			return &FieldError{Field: "http.headers", Reason: fmt.Sprintf(`value of header %q must be a host and optional port, e.g. "svc.internal" or "svc.internal:8080", got %q`, name, value)}
		}
	}
	if err := h.validateExpect(); err != nil {
		return err
	}
	if h.TLS != nil {
		if u, _ := url.Parse(h.URL); u.Scheme != "https" {
			return &FieldError{Field: "http.tls", Reason: "applies to https:// URLs only, got " + u.Scheme + "://"}
		}
		return h.TLS.validate("http.tls")
	}
	return nil
}

// parseProbeURL parses and checks an HTTP probe URL, returning a
// *FieldError for field "http.url" when it cannot be probed.
func parseProbeURL(raw string) (*url.URL, error) {
	bad := func(format string, args ...any) (*url.URL, error) {
		return nil, &FieldError{Field: "http.url", Reason: fmt.Sprintf(format, args...)}
	}
	if raw == "" {
		return bad("is required: it %s, e.g. \"http://10.0.0.5:8080/healthz\"", urlHint)
	}
	if len(raw) > MaxURLLen {
		return bad("must be at most %d bytes, got %d", MaxURLLen, len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return bad("%s, got %q (%v)", urlHint, raw, err)
	}
	if !u.IsAbs() {
		return bad("%s, got %q", urlHint, raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("unknown scheme %q: %s, got %q", u.Scheme, urlHint, raw)
	}
	if u.Hostname() == "" {
		return bad("must include a host, e.g. \"%s://10.0.0.5:8080/healthz\", got %q", u.Scheme, raw)
	}
	if !validHost(u.Hostname()) {
		return bad("host %q is neither a host name nor an IP address, in %q", u.Hostname(), raw)
	}
	// The query is sent as written, and a space would end the request
	// line's target early (the path is escaped, the fragment not sent;
	// url.Parse already refuses a tab, as every control character).
	if strings.Contains(u.RawQuery, " ") {
		return bad("query must not contain a space or tab (write %%20), got %q", raw)
	}
	port := u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("port must be between 1 and 65535, got %q in %q", port, raw)
		}
	} else if port = "80"; u.Scheme == "https" {
		port = "443"
	}
	// The address dialed is bounded as a TCP probe's address is.
	if n := len(net.JoinHostPort(u.Hostname(), port)); n > MaxAddressLen {
		return bad("host and port must be at most %d bytes together, got %d", MaxAddressLen, n)
	}
	return u, nil
}

// validateHostPort checks a host:port address for the named field.
func validateHostPort(field, addr string) error {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	const example = `e.g. "10.0.0.5:5432" or "[::1]:5432"`
	if addr == "" {
		return bad("is required: host:port, %s", example)
	}
	if len(addr) > MaxAddressLen {
		return bad("must be at most %d bytes, got %d", MaxAddressLen, len(addr))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			err = errors.New(aerr.Err)
		}
		return bad("must be host:port, %s, got %q (%v)", example, addr, err)
	}
	if host == "" {
		return bad("host is empty in %q: write host:port, %s", addr, example)
	}
	if !validHost(host) {
		return bad("host %q is neither a host name nor an IP address, in %q", host, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("port must be a number between 1 and 65535, got %q in %q", port, addr)
	}
	return nil
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of a
// header field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHost reports whether h, a host without a port, can be probed: an IP
// address (an IPv6 one with or without a zone, the zone free of '[', ']'
// and '%'; or an IPv4 one in any form hostAddr reads), or a host name made
// of ASCII letters, digits, '-', '.' and '_' and of letters, digits and
// marks beyond ASCII (an international name, which net/http sends in
// punycode).
func validHost(h string) bool {
	if a, ok := hostAddr(h); ok {
		// A zone with a bracket or a percent sign cannot be written back
		// as [host]:port, which is how it is dialled.
		return !strings.ContainsAny(a.Zone(), "[]%")
	}
	for _, r := range h {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '.', r == '_':
		case r >= utf8.RuneSelf && r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)):
		default:
			return false
		}
	}
	return true
}

// validHostHeader reports whether h can be sent as a request's Host: only
// the bytes of a host name, an IP literal and a port. net/http would send
// any other value as an empty Host.
func validHostHeader(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// badHeaderByte returns the index of the first byte of v that cannot be
// sent in a header value (a control character other than horizontal tab),
// or -1 when there is none.
func badHeaderByte(v string) int {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return i
		}
	}
	return -1
}

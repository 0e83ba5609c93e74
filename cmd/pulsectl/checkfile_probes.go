package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/checker/probe"
)

// A check file's probe options beyond url, address and expected_status:
// the fields of pulse.v1's HttpProbe, TcpProbe, GrpcProbe, DnsProbe and
// TlsOptions, under the same snake_case names, flat in the target but for
// tls_options, steps, header_matches and dns, which are objects as in the
// API. Every value is checked by probe.Spec.Validate.

// statusCodes is expected_status: one code (200), as check files first
// took it, or a list ([200, 204]) as pulsed's targets take it. Nil means
// unset.
type statusCodes []int

// UnmarshalJSON reads a number or a list of numbers; a value of another
// type is a *json.UnmarshalTypeError, which the decoder names the field of.
func (c *statusCodes) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var codes []int
		if err := json.Unmarshal(data, &codes); err != nil {
			return err
		}
		*c = append(statusCodes{}, codes...)
		return nil
	}
	var code int
	if err := json.Unmarshal(data, &code); err != nil {
		return err
	}
	*c = statusCodes{code}
	return nil
}

// UnmarshalYAML reads a number or a list of numbers.
func (c *statusCodes) UnmarshalYAML(node *yaml.Node) error {
	var codes []int
	if node.Kind == yaml.SequenceNode {
		if err := node.Decode(&codes); err != nil {
			return err
		}
	} else {
		var code int
		if err := node.Decode(&code); err != nil {
			return err
		}
		codes = []int{code}
	}
	*c = append(statusCodes{}, codes...)
	return nil
}

// fileTLS is tls_options: pulse.v1.TlsOptions.
type fileTLS struct {
	CAFile             string `json:"ca_file" yaml:"ca_file"`
	CAPEM              string `json:"ca_pem" yaml:"ca_pem"`
	CertFile           string `json:"cert_file" yaml:"cert_file"`
	KeyFile            string `json:"key_file" yaml:"key_file"`
	CertPEM            string `json:"cert_pem" yaml:"cert_pem"`
	KeyPEM             string `json:"key_pem" yaml:"key_pem"`
	ServerName         string `json:"server_name" yaml:"server_name"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify" yaml:"insecure_skip_verify"`
	MinVersion         string `json:"min_version" yaml:"min_version"`
	CertExpiryWarn     string `json:"cert_expiry_warn" yaml:"cert_expiry_warn"`
	CertExpiryFail     string `json:"cert_expiry_fail" yaml:"cert_expiry_fail"`
}

// fileStep is one of steps: pulse.v1.TcpStep.
type fileStep struct {
	Send           string `json:"send" yaml:"send"`
	SendHex        string `json:"send_hex" yaml:"send_hex"`
	Expect         string `json:"expect" yaml:"expect"`
	ExpectHex      string `json:"expect_hex" yaml:"expect_hex"`
	ExpectContains string `json:"expect_contains" yaml:"expect_contains"`
	ExpectRegex    string `json:"expect_regex" yaml:"expect_regex"`
	ReadLimit      int    `json:"read_limit" yaml:"read_limit"`
}

// fileHeaderMatch is one of header_matches: pulse.v1.HeaderMatch.
type fileHeaderMatch struct {
	Name  string `json:"name" yaml:"name"`
	Regex string `json:"regex" yaml:"regex"`
}

// fileDNS is dns: pulse.v1.DnsProbe. It is an object because its name is
// the name asked about, not the target's.
type fileDNS struct {
	Name           string `json:"name" yaml:"name"`
	Type           string `json:"type" yaml:"type"`
	Server         string `json:"server" yaml:"server"`
	Rcode          string `json:"rcode" yaml:"rcode"`
	AnswerContains string `json:"answer_contains" yaml:"answer_contains"`
	AnswerRegex    string `json:"answer_regex" yaml:"answer_regex"`
}

// kindOnly lists, for each field that applies to some kinds only, the
// kinds it applies to, in the order a misplaced one is reported.
func (f fileTarget) kindOnly() []kindRule {
	return []kindRule{
		{"url", f.URL != "", []string{"http"}},
		{"method", f.Method != "", []string{"http"}},
		{"body", f.Body != "", []string{"http"}},
		{"expected_status", f.ExpectedStatus != nil, []string{"http"}},
		{"expected_status_ranges", f.ExpectedStatusRanges != nil, []string{"http"}},
		{"headers", f.Headers != nil, []string{"http"}},
		{"body_contains", f.BodyContains != "", []string{"http"}},
		{"body_not_contains", f.BodyNotContains != "", []string{"http"}},
		{"body_regex", f.BodyRegex != "", []string{"http"}},
		{"body_limit", f.BodyLimit != nil, []string{"http"}},
		{"header_matches", f.HeaderMatches != nil, []string{"http"}},
		{"follow_redirects", f.FollowRedirects != nil, []string{"http"}},
		{"address", f.Address != "", []string{"tcp", "grpc"}},
		{"tls", f.TLS, []string{"tcp", "grpc"}},
		{"tls_options", f.TLSOptions != nil, []string{"http", "tcp", "grpc"}},
		{"steps", f.Steps != nil, []string{"tcp"}},
		{"service", f.Service != "", []string{"grpc"}},
		{"authority", f.Authority != "", []string{"grpc"}},
		{"metadata", f.Metadata != nil, []string{"grpc"}},
		{"expected_statuses", f.ExpectedStatuses != nil, []string{"grpc"}},
		{"dns", f.DNS != nil, []string{"dns"}},
	}
}

// kindRule says that field, when set, needs one of kinds.
type kindRule struct {
	field string
	set   bool
	kinds []string
}

// check returns an error naming the field when it is set on a target of
// another kind.
func (r kindRule) check(kind string) error {
	if !r.set {
		return nil
	}
	for _, k := range r.kinds {
		if k == kind {
			return nil
		}
	}
	return fmt.Errorf("%s applies to kind %s only, and this target is kind %s", r.field, strings.Join(r.kinds, " or "), orDash(kind))
}

// httpSpec is the HTTP probe of a target of kind http.
func (f fileTarget) httpSpec() (*probe.HTTPSpec, error) {
	h := &probe.HTTPSpec{
		URL: f.URL, Method: strings.ToUpper(f.Method), Headers: f.Headers, Body: f.Body,
		ExpectedStatusRanges: f.ExpectedStatusRanges,
		BodyContains:         f.BodyContains, BodyNotContains: f.BodyNotContains, BodyRegex: f.BodyRegex,
	}
	switch {
	case f.ExpectedStatus != nil:
		h.ExpectedStatus = f.ExpectedStatus
	case f.ExpectedStatusRanges == nil:
		h.ExpectedStatus = []int{200}
	}
	if f.BodyLimit != nil {
		h.BodyLimit = *f.BodyLimit
	}
	for _, m := range f.HeaderMatches {
		h.HeaderMatches = append(h.HeaderMatches, probe.HeaderMatch{Name: m.Name, Regex: m.Regex})
	}
	if f.FollowRedirects != nil {
		h.FollowRedirects = *f.FollowRedirects
	}
	var err error
	h.TLS, err = f.TLSOptions.spec()
	return h, err
}

// tcpSpec is the TCP probe of a target of kind tcp.
func (f fileTarget) tcpSpec() (*probe.TCPSpec, error) {
	t := &probe.TCPSpec{Address: f.Address}
	for _, s := range f.Steps {
		t.Steps = append(t.Steps, probe.TCPStep{
			Send: s.Send, SendHex: s.SendHex, Expect: s.Expect, ExpectHex: s.ExpectHex,
			ExpectContains: s.ExpectContains, ExpectRegex: s.ExpectRegex, ReadLimit: s.ReadLimit,
		})
	}
	var err error
	if t.TLS, err = f.TLSOptions.spec(); t.TLS == nil && f.TLS {
		t.TLS = &probe.TLSSpec{}
	}
	return t, err
}

// grpcSpec is the gRPC probe of a target of kind grpc.
func (f fileTarget) grpcSpec() (*probe.GRPCSpec, error) {
	g := &probe.GRPCSpec{
		Address: f.Address, Service: f.Service, TLS: f.TLS,
		Authority: f.Authority, Metadata: f.Metadata, ExpectedStatuses: upper(f.ExpectedStatuses),
	}
	var err error
	g.TLSOptions, err = f.TLSOptions.spec()
	return g, err
}

// dnsSpec is the DNS probe of a target of kind dns.
func (f fileTarget) dnsSpec() (*probe.DNSSpec, error) {
	if f.DNS == nil {
		return nil, fmt.Errorf("dns is required for kind dns: e.g. dns: {name: api.internal, server: 192.0.2.2:53}")
	}
	d := f.DNS
	return &probe.DNSSpec{
		Name: d.Name, Type: strings.ToUpper(d.Type), Server: d.Server, Rcode: strings.ToUpper(d.Rcode),
		AnswerContains: d.AnswerContains, AnswerRegex: d.AnswerRegex,
	}, nil
}

// spec returns the TLS options, or nil when tls_options is not set.
func (t *fileTLS) spec() (*probe.TLSSpec, error) {
	if t == nil {
		return nil, nil
	}
	s := &probe.TLSSpec{
		CAFile: t.CAFile, CAPEM: t.CAPEM, CertFile: t.CertFile, KeyFile: t.KeyFile, CertPEM: t.CertPEM, KeyPEM: t.KeyPEM,
		ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: t.MinVersion,
	}
	for _, d := range []struct {
		name, v string
		dst     *time.Duration
	}{{"cert_expiry_warn", t.CertExpiryWarn, &s.CertExpiryWarn}, {"cert_expiry_fail", t.CertExpiryFail, &s.CertExpiryFail}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil {
			return nil, fmt.Errorf("tls_options.%s: want a duration such as 720h, at most %v, got %q", d.name, probe.MaxCertExpiry, d.v)
		}
		*d.dst = v
	}
	return s, nil
}

// upper returns names in upper case, as the probe's enumerations are
// spelled; nil stays nil.
func upper(names []string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToUpper(n)
	}
	return out
}

// fileField names a probe.FieldError's field as the check file spells it:
// the probe's kind dropped ("http.body_limit" is body_limit), its TLS
// options under tls_options, and dns's fields under dns.
func fileField(field string) string {
	if strings.HasPrefix(field, "dns.") {
		return field
	}
	for _, kind := range []string{"http.", "tcp.", "grpc."} {
		if rest, ok := strings.CutPrefix(field, kind); ok {
			field = rest
			break
		}
	}
	if rest, ok := strings.CutPrefix(field, "tls"); ok && (rest == "" || rest[0] == '.') && !strings.HasPrefix(field, "tls_options") {
		return "tls_options" + rest
	}
	return field
}

// fileFieldFactory builds probers as its Factory does, and names the field
// of a spec it refuses (a TLS file that cannot be read, an address the
// egress policy denies) as the check file spells it.
type fileFieldFactory struct{ *probe.Factory }

// New builds a prober for s.
func (f fileFieldFactory) New(s probe.Spec) (probe.Prober, error) {
	p, err := f.Factory.New(s)
	var fe *probe.FieldError
	if errors.As(err, &fe) {
		return p, &probe.FieldError{Field: fileField(fe.Field), Reason: fe.Reason}
	}
	return p, err
}

package client

import "time"

// The probes of a Target, one type per kind, each field the wire's field
// of the same name (pulse.proto's HttpProbe, TcpProbe, GrpcProbe,
// DnsProbe, TlsOptions). A zero field is unset: pulsed's default applies.
//
// Secrets read back from pulsed are shown as "<redacted>": a URL's
// password, header values, gRPC metadata values and TLSOptions.KeyPEM.
// Sending such a value back (Add, or Update of the probe) keeps the stored
// secret, so a Target read with State or List can be changed and written
// back without knowing them.

// HTTPProbe passes when GET (or HEAD, or POST with Body) on URL answers an
// expected status (ExpectedStatus or ExpectedStatusRanges; any 2xx when
// both are empty) and meets every expectation set: HeaderMatches, then
// BodyContains, BodyNotContains and BodyRegex over the first BodyLimit
// bytes of the body.
type HTTPProbe struct {
	URL    string
	Method string
	// ExpectedStatus lists codes that pass; ExpectedStatusRanges ranges of
	// them ("200-399"). A code in either passes.
	ExpectedStatus       []int
	ExpectedStatusRanges []string
	// Headers are sent with every probe; "Host" sets the request's host.
	Headers map[string]string

	BodyContains    string
	BodyNotContains string
	// BodyRegex is RE2, unanchored.
	BodyRegex string
	// BodyLimit is how many bytes the body checks read; 0 is 64 KiB.
	BodyLimit     int
	HeaderMatches []HeaderMatch
	// Body is the request body, with Method POST only.
	Body string
	// FollowRedirects follows up to 10 redirects and judges the last
	// answer; off, a redirect is judged as it is.
	FollowRedirects bool
	// TLS configures https:// probes; nil verifies against the system
	// roots.
	TLS *TLSOptions
}

// HeaderMatch expects a response header whose value matches Regex (RE2,
// unanchored).
type HeaderMatch struct {
	Name  string
	Regex string
}

// TCPProbe passes when a TCP connection to Address (host:port) opens (with
// TLS, a handshake is made) and every step succeeds in order.
type TCPProbe struct {
	Address string
	Steps   []TCPStep
	TLS     *TLSOptions
}

// TCPStep is one step of a TCP conversation: exactly one of Send, SendHex,
// Expect, ExpectHex, ExpectContains and ExpectRegex is set.
type TCPStep struct {
	Send           string
	SendHex        string
	Expect         string
	ExpectHex      string
	ExpectContains string
	ExpectRegex    string
	// ReadLimit bounds the bytes an expect step reads; 0 is 4096.
	ReadLimit int
}

// GRPCProbe passes when grpc.health.v1 Check on Address answers SERVING
// (or one of ExpectedStatuses) for Service ("" is the whole server).
type GRPCProbe struct {
	Address string
	Service string
	// TLS connects with TLS against the system roots; TLSOptions with TLS
	// configured by them (TLS need not be set).
	TLS        bool
	TLSOptions *TLSOptions
	// Authority is the calls' :authority; "" is Address.
	Authority string
	// Metadata is sent with every call (lower-case keys).
	Metadata map[string]string
	// ExpectedStatuses are the serving statuses that pass: "SERVING",
	// "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN"; empty is SERVING.
	ExpectedStatuses []string
}

// DNSProbe asks Server (host:port) for Name's records of Type (A when
// empty) and passes on the expected Rcode (NOERROR when empty) and, when
// set, a record whose data contains AnswerContains and matches
// AnswerRegex.
type DNSProbe struct {
	Name           string
	Type           string
	Server         string
	Rcode          string
	AnswerContains string
	AnswerRegex    string
}

// TLSOptions configure TLS for https, TCP and gRPC probes. Files are read
// by pulsed, on its host.
type TLSOptions struct {
	// CAFile or CAPEM (at most one) hold the CAs that sign trusted
	// servers, in place of the system roots.
	CAFile, CAPEM string
	// CertFile and KeyFile, or CertPEM and KeyPEM, are a client
	// certificate and its key (mutual TLS). KeyPEM reads back as
	// "<redacted>"; writing that back keeps the stored key.
	CertFile, KeyFile string
	CertPEM, KeyPEM   string
	// ServerName is sent in SNI and verified; "" is the host probed.
	ServerName string
	// InsecureSkipVerify accepts any certificate; the status warns.
	InsecureSkipVerify bool
	// MinVersion is "1.0", "1.1", "1.2" (when empty) or "1.3".
	MinVersion string
	// CertExpiryWarn: a server certificate expiring within it still
	// passes, and the status says so (Status.CertExpiryWarning, a
	// PolicyCertExpiring event). CertExpiryFail: one expiring within it
	// fails the probe.
	CertExpiryWarn, CertExpiryFail time.Duration
}

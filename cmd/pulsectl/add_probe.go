package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// probeFlags are add's flags for the probes' options beyond address and
// status: HTTP expectations, TLS options, TCP steps, gRPC options and DNS
// probes.
type probeFlags struct {
	bodyContains, bodyNotContains, bodyRegex, body string
	bodyLimit                                      int
	headerMatches                                  headerMatchList
	followRedirects                                bool

	tlsCAFile, tlsCertFile, tlsKeyFile, tlsServerName, tlsMinVersion string
	tlsInsecure                                                      bool
	certExpiryWarn, certExpiryFail                                   secondsFlag

	steps     stepList
	readLimit int

	grpcAuthority string
	grpcMetadata  headerMap
	grpcExpect    stringList

	dns, dnsServer, dnsType, dnsRcode, dnsContains, dnsRegex string
}

// httpOnly, tlsFlags, tcpOnly, grpcOnly and dnsOnly name the flags that
// apply to one probe kind, or to those that speak TLS.
var (
	httpOnly = []string{"body-contains", "body-not-contains", "body-regex", "body-limit", "header-match", "body", "follow-redirects"}
	tlsFlags = []string{"probe-tls-ca-file", "probe-tls-cert-file", "probe-tls-key-file", "probe-tls-server-name", "probe-tls-min-version", "probe-tls-insecure-skip-verify", "probe-cert-expiry-warn", "probe-cert-expiry-fail"}
	tcpOnly  = []string{"send", "send-hex", "expect", "expect-hex", "expect-contains", "expect-regex", "read-limit"}
	grpcOnly = []string{"grpc-authority", "grpc-metadata", "grpc-expect-status"}
	dnsOnly  = []string{"dns-server", "dns-type", "dns-rcode", "dns-answer-contains", "dns-answer-regex"}
)

func addProbeFlags(fs *flag.FlagSet) *probeFlags {
	p := &probeFlags{grpcMetadata: headerMap{}}
	fs.StringVar(&p.bodyContains, "body-contains", "", "HTTP: the first --body-limit bytes of the body must contain `text`")
	fs.StringVar(&p.bodyNotContains, "body-not-contains", "", "HTTP: the body must not contain `text`")
	fs.StringVar(&p.bodyRegex, "body-regex", "", "HTTP: the body must match this RE2 `regex`")
	fs.Var(int32Flag(&p.bodyLimit).within(0, 1<<20), "body-limit", "HTTP: `bytes` of the body the body checks read (pulsed's default: 65536, at most 1 MiB)")
	fs.Var(&p.headerMatches, "header-match", "HTTP: a response header `NAME=REGEX` must match, repeatable")
	fs.StringVar(&p.body, "body", "", "HTTP: request `body`, sent with --method POST")
	fs.BoolVar(&p.followRedirects, "follow-redirects", false, "HTTP: follow up to 10 redirects and judge the last answer")
	fs.StringVar(&p.tlsCAFile, "probe-tls-ca-file", "", "https, gRPC, TCP: PEM `file` of the CAs trusted instead of the system roots")
	fs.StringVar(&p.tlsCertFile, "probe-tls-cert-file", "", "https, gRPC, TCP: PEM `file` of a client certificate (mutual TLS)")
	fs.StringVar(&p.tlsKeyFile, "probe-tls-key-file", "", "https, gRPC, TCP: PEM `file` of the client certificate's key")
	fs.StringVar(&p.tlsServerName, "probe-tls-server-name", "", "https, gRPC, TCP: `name` sent in SNI and verified (default: the host probed)")
	fs.StringVar(&p.tlsMinVersion, "probe-tls-min-version", "", "https, gRPC, TCP: oldest TLS `version`: 1.0, 1.1, 1.2 or 1.3 (pulsed's default: 1.2)")
	fs.BoolVar(&p.tlsInsecure, "probe-tls-insecure-skip-verify", false, "https, gRPC, TCP: accept any server certificate (the status warns)")
	fs.Var(atMost(&p.certExpiryWarn, probe.MaxCertExpiry), "probe-cert-expiry-warn", "https, gRPC, TCP: warn when a server certificate expires within this `duration` (or seconds), at most 5 years")
	fs.Var(atMost(&p.certExpiryFail, probe.MaxCertExpiry), "probe-cert-expiry-fail", "https, gRPC, TCP: fail when a server certificate expires within this `duration` (or seconds), at most 5 years")
	fs.Var(stepFlag{&p.steps, "send"}, "send", "TCP: send `text` (Go escapes such as \\r\\n are read), a step; steps run in flag order")
	fs.Var(stepFlag{&p.steps, "send-hex"}, "send-hex", "TCP: send the bytes these `hex` digits spell, a step")
	fs.Var(stepFlag{&p.steps, "expect"}, "expect", "TCP: await exactly `text` next, a step")
	fs.Var(stepFlag{&p.steps, "expect-hex"}, "expect-hex", "TCP: await exactly the bytes these `hex` digits spell next, a step")
	fs.Var(stepFlag{&p.steps, "expect-contains"}, "expect-contains", "TCP: await bytes containing `text`, a step")
	fs.Var(stepFlag{&p.steps, "expect-regex"}, "expect-regex", "TCP: await bytes matching this RE2 `regex`, a step")
	fs.Var(int32Flag(&p.readLimit), "read-limit", "TCP: `bytes` each expect step reads at most (pulsed's default: 4096)")
	fs.StringVar(&p.grpcAuthority, "grpc-authority", "", "gRPC: the calls' :authority `host[:port]`")
	fs.Var(&p.grpcMetadata, "grpc-metadata", "gRPC: metadata `key=value` sent with each call, repeatable")
	fs.Var(&p.grpcExpect, "grpc-expect-status", "gRPC: serving `statuses` that pass, comma-separated (pulsed's default: SERVING)")
	fs.StringVar(&p.dns, "dns", "", "probe by asking a DNS server about `name`")
	fs.StringVar(&p.dnsServer, "dns-server", "", "DNS: the server's `host:port`")
	fs.StringVar(&p.dnsType, "dns-type", "", "DNS: record `type`: A, AAAA, SRV, TXT... (pulsed's default: A)")
	fs.StringVar(&p.dnsRcode, "dns-rcode", "", "DNS: response `code` that passes (pulsed's default: NOERROR)")
	fs.StringVar(&p.dnsContains, "dns-answer-contains", "", "DNS: a record's data must contain `text`")
	fs.StringVar(&p.dnsRegex, "dns-answer-regex", "", "DNS: a record's data must match this RE2 `regex`")
	return p
}

// check refuses flags set for a probe kind they do not apply to.
func (p *probeFlags) check(set map[string]bool) error {
	only := func(flags []string, kinds ...string) error {
		for _, f := range flags {
			if !set[f] {
				continue
			}
			ok := false
			for _, k := range kinds {
				ok = ok || set[k]
			}
			if !ok {
				return fmt.Errorf("--%s applies to --%s targets only", f, strings.Join(kinds, ", --"))
			}
		}
		return nil
	}
	for _, err := range []error{
		only(httpOnly, "http"), only(tlsFlags, "http", "grpc", "tcp"), only(tcpOnly, "tcp"),
		only(grpcOnly, "grpc"), only(dnsOnly, "dns"),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// tls returns the TLS options the flags set, or nil when none is.
func (p *probeFlags) tls(set map[string]bool) *pb.TlsOptions {
	used := false
	for _, f := range tlsFlags {
		used = used || set[f]
	}
	if !used {
		return nil
	}
	t := &pb.TlsOptions{
		CaFile: p.tlsCAFile, CertFile: p.tlsCertFile, KeyFile: p.tlsKeyFile,
		ServerName: p.tlsServerName, MinVersion: p.tlsMinVersion, InsecureSkipVerify: p.tlsInsecure,
	}
	if set["probe-cert-expiry-warn"] {
		t.CertExpiryWarn = durationpb.New(time.Duration(p.certExpiryWarn))
	}
	if set["probe-cert-expiry-fail"] {
		t.CertExpiryFail = durationpb.New(time.Duration(p.certExpiryFail))
	}
	return t
}

// applyHTTP sets the HTTP options on h.
func (p *probeFlags) applyHTTP(h *pb.HttpProbe, set map[string]bool) {
	h.BodyContains, h.BodyNotContains, h.BodyRegex, h.Body = p.bodyContains, p.bodyNotContains, p.bodyRegex, p.body
	h.BodyLimit = int32(p.bodyLimit)
	h.HeaderMatches = p.headerMatches
	h.FollowRedirects = p.followRedirects
	h.Tls = p.tls(set)
}

// tcp returns the TCP probe for address.
func (p *probeFlags) tcp(address string, set map[string]bool) *pb.TcpProbe {
	t := &pb.TcpProbe{Address: address, Tls: p.tls(set)}
	for _, st := range p.steps {
		st := &pb.TcpStep{Send: st.send, SendHex: st.sendHex, Expect: st.expect, ExpectHex: st.expectHex, ExpectContains: st.contains, ExpectRegex: st.regex}
		if st.Send == "" && st.SendHex == "" {
			st.ReadLimit = int32(p.readLimit)
		}
		t.Steps = append(t.Steps, st)
	}
	return t
}

// applyGRPC sets the gRPC options on g.
func (p *probeFlags) applyGRPC(g *pb.GrpcProbe, set map[string]bool) {
	g.Authority = p.grpcAuthority
	if len(p.grpcMetadata) > 0 {
		g.Metadata = p.grpcMetadata
	}
	g.ExpectedStatuses = p.grpcExpect
	g.TlsOptions = p.tls(set)
}

// dnsProbe returns the DNS probe the flags describe.
func (p *probeFlags) dnsProbe() *pb.DnsProbe {
	return &pb.DnsProbe{
		Name: p.dns, Server: p.dnsServer, Type: strings.ToUpper(p.dnsType), Rcode: strings.ToUpper(p.dnsRcode),
		AnswerContains: p.dnsContains, AnswerRegex: p.dnsRegex,
	}
}

// headerMatchList is a repeatable NAME=REGEX flag.
type headerMatchList []*pb.HeaderMatch

func (l *headerMatchList) String() string { return "" }

func (l *headerMatchList) Set(v string) error {
	k, re, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want NAME=REGEX, got %q", v)
	}
	*l = append(*l, &pb.HeaderMatch{Name: strings.TrimSpace(k), Regex: re})
	return nil
}

// step is one TCP step as the flags give it.
type step struct{ send, sendHex, expect, expectHex, contains, regex string }

// stepList is the TCP steps in flag order.
type stepList []step

// stepFlag appends a step of one kind to a stepList.
type stepFlag struct {
	steps *stepList
	kind  string
}

func (f stepFlag) String() string { return "" }

func (f stepFlag) Set(v string) error {
	var st step
	switch f.kind {
	case "send-hex":
		st.sendHex = v
	case "expect-hex":
		st.expectHex = v
	case "expect-regex":
		st.regex = v // a regex keeps its own escapes
	default:
		text, err := strconv.Unquote(`"` + strings.ReplaceAll(v, `"`, `\"`) + `"`)
		if err != nil {
			return fmt.Errorf("cannot read the escapes in %q: %v", v, err)
		}
		switch f.kind {
		case "send":
			st.send = text
		case "expect":
			st.expect = text
		default:
			st.contains = text
		}
	}
	*f.steps = append(*f.steps, st)
	return nil
}

// stringList is a repeatable, comma-separated flag of names.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.ToUpper(strings.TrimSpace(part)); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

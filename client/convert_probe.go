package client

import (
	"strings"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The probes' conversions, both ways. Every field of the wire's probe
// messages has its place in the client's types, so that a target read
// from pulsed and written back loses nothing (TestTargetRoundTrip walks
// the messages' descriptors to keep it so).

// checkProbes refuses, for method, a target with more than one probe: the
// wire's oneof carries one, and the others would be dropped without a
// word. path is the target's field path in the request ("target",
// "targets[3]"); the message is the checker's for a spec with several.
// A target with none is pulsed's to judge: Add's answer names the field,
// and Update sends none when it changes no probe.
func checkProbes(method, path string, t Target) error {
	var set []string
	for _, k := range [...]struct {
		set  bool
		name string
	}{{t.HTTP != nil, "http"}, {t.TCP != nil, "tcp"}, {t.GRPC != nil, "grpc"}, {t.DNS != nil, "dns"}} {
		if k.set {
			set = append(set, k.name)
		}
	}
	if len(set) < 2 {
		return nil
	}
	return errInvalid(method, "%s.probe: set exactly one of http, tcp, grpc or dns; got %s", path, strings.Join(set, " and "))
}

// probeToProto sends the first probe of t, in the wire's order (pulse.proto's
// oneof probe), which Target.Address reads too.
func probeToProto(t Target, out *pb.Target) {
	switch {
	case t.HTTP != nil:
		out.Probe = &pb.Target_Http{Http: httpToProto(t.HTTP)}
	case t.TCP != nil:
		out.Probe = &pb.Target_Tcp{Tcp: tcpToProto(t.TCP)}
	case t.GRPC != nil:
		out.Probe = &pb.Target_Grpc{Grpc: grpcToProto(t.GRPC)}
	case t.DNS != nil:
		d := t.DNS
		out.Probe = &pb.Target_Dns{Dns: &pb.DnsProbe{
			Name: d.Name, Type: d.Type, Server: d.Server, Rcode: d.Rcode,
			AnswerContains: d.AnswerContains, AnswerRegex: d.AnswerRegex,
		}}
	}
}

func probeFromProto(t *pb.Target, out *Target) {
	switch p := t.GetProbe().(type) {
	case *pb.Target_Http:
		out.HTTP = httpFromProto(p.Http)
	case *pb.Target_Tcp:
		out.TCP = tcpFromProto(p.Tcp)
	case *pb.Target_Grpc:
		out.GRPC = grpcFromProto(p.Grpc)
	case *pb.Target_Dns:
		d := p.Dns
		out.DNS = &DNSProbe{
			Name: d.GetName(), Type: d.GetType(), Server: d.GetServer(), Rcode: d.GetRcode(),
			AnswerContains: d.GetAnswerContains(), AnswerRegex: d.GetAnswerRegex(),
		}
	}
}

func httpToProto(h *HTTPProbe) *pb.HttpProbe {
	out := &pb.HttpProbe{
		Url: h.URL, Method: h.Method, Headers: h.Headers,
		ExpectedStatusRanges: h.ExpectedStatusRanges,
		BodyContains:         h.BodyContains, BodyNotContains: h.BodyNotContains, BodyRegex: h.BodyRegex,
		BodyLimit: sat32(h.BodyLimit), Body: h.Body, FollowRedirects: h.FollowRedirects,
		Tls: tlsToProto(h.TLS),
	}
	for _, c := range h.ExpectedStatus {
		out.ExpectedStatus = append(out.ExpectedStatus, sat32(c))
	}
	for _, m := range h.HeaderMatches {
		out.HeaderMatches = append(out.HeaderMatches, &pb.HeaderMatch{Name: m.Name, Regex: m.Regex})
	}
	return out
}

func httpFromProto(h *pb.HttpProbe) *HTTPProbe {
	out := &HTTPProbe{
		URL: h.GetUrl(), Method: h.GetMethod(), Headers: h.GetHeaders(),
		ExpectedStatusRanges: h.GetExpectedStatusRanges(),
		BodyContains:         h.GetBodyContains(), BodyNotContains: h.GetBodyNotContains(), BodyRegex: h.GetBodyRegex(),
		BodyLimit: int(h.GetBodyLimit()), Body: h.GetBody(), FollowRedirects: h.GetFollowRedirects(),
		TLS: tlsFromProto(h.GetTls()),
	}
	for _, c := range h.GetExpectedStatus() {
		out.ExpectedStatus = append(out.ExpectedStatus, int(c))
	}
	for _, m := range h.GetHeaderMatches() {
		out.HeaderMatches = append(out.HeaderMatches, HeaderMatch{Name: m.GetName(), Regex: m.GetRegex()})
	}
	return out
}

func tcpToProto(p *TCPProbe) *pb.TcpProbe {
	out := &pb.TcpProbe{Address: p.Address, Tls: tlsToProto(p.TLS)}
	for _, s := range p.Steps {
		out.Steps = append(out.Steps, &pb.TcpStep{
			Send: s.Send, SendHex: s.SendHex, Expect: s.Expect, ExpectHex: s.ExpectHex,
			ExpectContains: s.ExpectContains, ExpectRegex: s.ExpectRegex, ReadLimit: sat32(s.ReadLimit),
		})
	}
	return out
}

func tcpFromProto(p *pb.TcpProbe) *TCPProbe {
	out := &TCPProbe{Address: p.GetAddress(), TLS: tlsFromProto(p.GetTls())}
	for _, s := range p.GetSteps() {
		out.Steps = append(out.Steps, TCPStep{
			Send: s.GetSend(), SendHex: s.GetSendHex(), Expect: s.GetExpect(), ExpectHex: s.GetExpectHex(),
			ExpectContains: s.GetExpectContains(), ExpectRegex: s.GetExpectRegex(), ReadLimit: int(s.GetReadLimit()),
		})
	}
	return out
}

func grpcToProto(p *GRPCProbe) *pb.GrpcProbe {
	return &pb.GrpcProbe{
		Address: p.Address, Service: p.Service, Tls: p.TLS, TlsOptions: tlsToProto(p.TLSOptions),
		Authority: p.Authority, Metadata: p.Metadata, ExpectedStatuses: p.ExpectedStatuses,
	}
}

func grpcFromProto(p *pb.GrpcProbe) *GRPCProbe {
	return &GRPCProbe{
		Address: p.GetAddress(), Service: p.GetService(), TLS: p.GetTls(), TLSOptions: tlsFromProto(p.GetTlsOptions()),
		Authority: p.GetAuthority(), Metadata: p.GetMetadata(), ExpectedStatuses: p.GetExpectedStatuses(),
	}
}

func tlsToProto(o *TLSOptions) *pb.TlsOptions {
	if o == nil {
		return nil
	}
	return &pb.TlsOptions{
		CaFile: o.CAFile, CaPem: o.CAPEM,
		CertFile: o.CertFile, KeyFile: o.KeyFile, CertPem: o.CertPEM, KeyPem: o.KeyPEM,
		ServerName: o.ServerName, InsecureSkipVerify: o.InsecureSkipVerify, MinVersion: o.MinVersion,
		CertExpiryWarn: optDuration(o.CertExpiryWarn), CertExpiryFail: optDuration(o.CertExpiryFail),
	}
}

func tlsFromProto(o *pb.TlsOptions) *TLSOptions {
	if o == nil {
		return nil
	}
	return &TLSOptions{
		CAFile: o.GetCaFile(), CAPEM: o.GetCaPem(),
		CertFile: o.GetCertFile(), KeyFile: o.GetKeyFile(), CertPEM: o.GetCertPem(), KeyPEM: o.GetKeyPem(),
		ServerName: o.GetServerName(), InsecureSkipVerify: o.GetInsecureSkipVerify(), MinVersion: o.GetMinVersion(),
		CertExpiryWarn: o.GetCertExpiryWarn().AsDuration(), CertExpiryFail: o.GetCertExpiryFail().AsDuration(),
	}
}

package server

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Conversion of the probe messages, and the redaction of their secrets:
// header values, a URL's password, gRPC metadata values and TLS private
// keys are Redacted in every answer.

// probeFromProto converts a Target's probe into s.Probe.
func probeFromProto(t *pb.Target, s *checker.Spec) error {
	var err error
	switch p := t.GetProbe().(type) {
	case *pb.Target_Http:
		s.Probe.HTTP, err = httpFromProto(p.Http)
	case *pb.Target_Tcp:
		s.Probe.TCP, err = tcpFromProto(p.Tcp)
	case *pb.Target_Grpc:
		s.Probe.GRPC, err = grpcFromProto(p.Grpc)
	case *pb.Target_Dns:
		d := p.Dns
		s.Probe.DNS = &probe.DNSSpec{
			Name: d.GetName(), Type: d.GetType(), Server: d.GetServer(), Rcode: d.GetRcode(),
			AnswerContains: d.GetAnswerContains(), AnswerRegex: d.GetAnswerRegex(),
		}
	}
	return err
}

func httpFromProto(p *pb.HttpProbe) (*probe.HTTPSpec, error) {
	h := &probe.HTTPSpec{
		URL: p.GetUrl(), Method: p.GetMethod(), Headers: p.GetHeaders(),
		ExpectedStatusRanges: p.GetExpectedStatusRanges(),
		BodyContains:         p.GetBodyContains(),
		BodyNotContains:      p.GetBodyNotContains(),
		BodyRegex:            p.GetBodyRegex(),
		BodyLimit:            int(p.GetBodyLimit()),
		Body:                 p.GetBody(),
		FollowRedirects:      p.GetFollowRedirects(),
	}
	for _, code := range p.GetExpectedStatus() {
		h.ExpectedStatus = append(h.ExpectedStatus, int(code))
	}
	for _, m := range p.GetHeaderMatches() {
		h.HeaderMatches = append(h.HeaderMatches, probe.HeaderMatch{Name: m.GetName(), Regex: m.GetRegex()})
	}
	var err error
	h.TLS, err = tlsFromProto("http.tls", p.GetTls())
	return h, err
}

func tcpFromProto(p *pb.TcpProbe) (*probe.TCPSpec, error) {
	s := &probe.TCPSpec{Address: p.GetAddress()}
	for _, st := range p.GetSteps() {
		s.Steps = append(s.Steps, probe.TCPStep{
			Send: st.GetSend(), SendHex: st.GetSendHex(), Expect: st.GetExpect(), ExpectHex: st.GetExpectHex(),
			ExpectContains: st.GetExpectContains(), ExpectRegex: st.GetExpectRegex(), ReadLimit: int(st.GetReadLimit()),
		})
	}
	var err error
	s.TLS, err = tlsFromProto("tcp.tls", p.GetTls())
	return s, err
}

func grpcFromProto(p *pb.GrpcProbe) (*probe.GRPCSpec, error) {
	s := &probe.GRPCSpec{
		Address: p.GetAddress(), Service: p.GetService(), TLS: p.GetTls(),
		Authority: p.GetAuthority(), Metadata: p.GetMetadata(), ExpectedStatuses: p.GetExpectedStatuses(),
	}
	var err error
	s.TLSOptions, err = tlsFromProto("grpc.tls_options", p.GetTlsOptions())
	return s, err
}

// tlsFromProto converts TLS options; nil stays nil.
func tlsFromProto(field string, t *pb.TlsOptions) (*probe.TLSSpec, error) {
	if t == nil {
		return nil, nil
	}
	s := &probe.TLSSpec{
		CAFile: t.GetCaFile(), CAPEM: t.GetCaPem(),
		CertFile: t.GetCertFile(), KeyFile: t.GetKeyFile(), CertPEM: t.GetCertPem(), KeyPEM: t.GetKeyPem(),
		ServerName: t.GetServerName(), InsecureSkipVerify: t.GetInsecureSkipVerify(), MinVersion: t.GetMinVersion(),
	}
	var err error
	if s.CertExpiryWarn, err = positiveDuration(field+".cert_expiry_warn", t.GetCertExpiryWarn()); err != nil {
		return nil, err
	}
	if s.CertExpiryFail, err = positiveDuration(field+".cert_expiry_fail", t.GetCertExpiryFail()); err != nil {
		return nil, err
	}
	return s, nil
}

// probeToProto converts a probe spec for an answer of the API, its secrets
// Redacted.
func probeToProto(s probe.Spec, t *pb.Target) {
	switch {
	case s.HTTP != nil:
		h := s.HTTP
		out := &pb.HttpProbe{
			Url: redactURL(h.URL), Method: h.Method, Headers: redactHeaders(h.Headers),
			ExpectedStatusRanges: h.ExpectedStatusRanges,
			BodyContains:         h.BodyContains,
			BodyNotContains:      h.BodyNotContains,
			BodyRegex:            h.BodyRegex,
			BodyLimit:            int32(h.BodyLimit),
			Body:                 h.Body,
			FollowRedirects:      h.FollowRedirects,
			Tls:                  tlsToProto(h.TLS),
		}
		for _, code := range h.ExpectedStatus {
			out.ExpectedStatus = append(out.ExpectedStatus, int32(code))
		}
		for _, m := range h.HeaderMatches {
			out.HeaderMatches = append(out.HeaderMatches, &pb.HeaderMatch{Name: m.Name, Regex: m.Regex})
		}
		t.Probe = &pb.Target_Http{Http: out}
	case s.TCP != nil:
		out := &pb.TcpProbe{Address: s.TCP.Address, Tls: tlsToProto(s.TCP.TLS)}
		for _, st := range s.TCP.Steps {
			out.Steps = append(out.Steps, &pb.TcpStep{
				Send: st.Send, SendHex: st.SendHex, Expect: st.Expect, ExpectHex: st.ExpectHex,
				ExpectContains: st.ExpectContains, ExpectRegex: st.ExpectRegex, ReadLimit: int32(st.ReadLimit),
			})
		}
		t.Probe = &pb.Target_Tcp{Tcp: out}
	case s.GRPC != nil:
		g := s.GRPC
		t.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{
			Address: g.Address, Service: g.Service, Tls: g.TLS, TlsOptions: tlsToProto(g.TLSOptions),
			Authority: g.Authority, Metadata: redactHeaders(g.Metadata), ExpectedStatuses: g.ExpectedStatuses,
		}}
	case s.DNS != nil:
		d := s.DNS
		t.Probe = &pb.Target_Dns{Dns: &pb.DnsProbe{
			Name: d.Name, Type: d.Type, Server: d.Server, Rcode: d.Rcode,
			AnswerContains: d.AnswerContains, AnswerRegex: d.AnswerRegex,
		}}
	}
}

// tlsToProto converts TLS options for an answer, the private key Redacted.
func tlsToProto(s *probe.TLSSpec) *pb.TlsOptions {
	if s == nil {
		return nil
	}
	out := &pb.TlsOptions{
		CaFile: s.CAFile, CaPem: s.CAPEM, CertFile: s.CertFile, KeyFile: s.KeyFile, CertPem: s.CertPEM,
		ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify, MinVersion: s.MinVersion,
	}
	if s.KeyPEM != "" {
		out.KeyPem = Redacted
	}
	if s.CertExpiryWarn > 0 {
		out.CertExpiryWarn = durationpb.New(s.CertExpiryWarn)
	}
	if s.CertExpiryFail > 0 {
		out.CertExpiryFail = durationpb.New(s.CertExpiryFail)
	}
	return out
}

// tlsOf returns the TLS options of a probe spec and their field, or nil.
func tlsOf(s probe.Spec) (string, *probe.TLSSpec) {
	switch {
	case s.HTTP != nil:
		return "http.tls", s.HTTP.TLS
	case s.TCP != nil:
		return "tcp.tls", s.TCP.TLS
	case s.GRPC != nil:
		return "grpc.tls_options", s.GRPC.TLSOptions
	}
	return "", nil
}

// setTLS replaces the TLS options of a probe spec, copying the probe's
// spec first: it may be the request's, or the stored one.
func setTLS(s *probe.Spec, t *probe.TLSSpec) {
	switch {
	case s.HTTP != nil:
		h := *s.HTTP
		h.TLS = t
		s.HTTP = &h
	case s.TCP != nil:
		c := *s.TCP
		c.TLS = t
		s.TCP = &c
	case s.GRPC != nil:
		g := *s.GRPC
		g.TLSOptions = t
		s.GRPC = &g
	}
}

// hasRedactedSecrets reports whether a TLS key or a gRPC metadata value
// of s is Redacted.
func hasRedactedSecrets(s probe.Spec) bool {
	if _, t := tlsOf(s); t != nil && t.KeyPEM == Redacted {
		return true
	}
	return s.GRPC != nil && hasRedacted(s.GRPC.Metadata)
}

// unredactSecrets puts back, where spec has Redacted, the stored TLS key
// and gRPC metadata values of old (the stored probe; the zero Spec when
// none). A Redacted value with nothing stored to stand for is a
// *checker.FieldError.
func unredactSecrets(spec *checker.Spec, old probe.Spec) error {
	if field, t := tlsOf(spec.Probe); t != nil && t.KeyPEM == Redacted {
		_, ot := tlsOf(old)
		if ot == nil || ot.KeyPEM == "" || spec.Probe.Kind() != old.Kind() {
			return &checker.FieldError{
				Field:  field + ".key_pem",
				Reason: fmt.Sprintf("is %q, which keeps the stored key, but target %q has no stored key_pem: send the key itself", Redacted, spec.Name),
			}
		}
		tc := *t
		tc.KeyPEM = ot.KeyPEM
		setTLS(&spec.Probe, &tc)
	}
	if g := spec.Probe.GRPC; g != nil && hasRedacted(g.Metadata) {
		var stored map[string]string
		if old.GRPC != nil {
			stored = old.GRPC.Metadata
		}
		md := maps.Clone(g.Metadata)
		for _, k := range slices.Sorted(maps.Keys(md)) {
			if md[k] != Redacted {
				continue
			}
			v, ok := stored[k]
			if !ok {
				return &checker.FieldError{
					Field:  fmt.Sprintf("grpc.metadata[%q]", k),
					Reason: fmt.Sprintf("is %q, which keeps the stored value, but target %q has no stored metadata %s: send the value itself", Redacted, spec.Name, k),
				}
			}
			md[k] = v
		}
		gc := *g
		gc.Metadata = md
		spec.Probe.GRPC = &gc
	}
	return nil
}

// withoutRedactedSecrets returns s without the secrets that are Redacted
// (and a client certificate without its key), for checks made before the
// stored values are known.
func withoutRedactedSecrets(s probe.Spec) probe.Spec {
	if _, t := tlsOf(s); t != nil && t.KeyPEM == Redacted {
		tc := *t
		tc.KeyPEM, tc.CertPEM = "", ""
		setTLS(&s, &tc)
	}
	if g := s.GRPC; g != nil && hasRedacted(g.Metadata) {
		gc := *g
		gc.Metadata = maps.Clone(g.Metadata)
		maps.DeleteFunc(gc.Metadata, func(_, v string) bool { return v == Redacted })
		s.GRPC = &gc
	}
	return s
}

package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// dnsTypes are the query types a DNSSpec takes.
var dnsTypes = []string{"A", "AAAA", "CAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT"}

// DNSSpec describes a DNS probe: it asks Server for Name's records of Type
// and passes when the answer's response code is Rcode and, when set, one
// of its records' data contains AnswerContains and matches AnswerRegex.
type DNSSpec struct {
	// Name is the name asked about, e.g. "api.internal"; at most 253
	// bytes. A final dot is added when missing.
	Name string `json:",omitzero"`
	// Type is the record type: "A", "AAAA", "CAA", "CNAME", "MX", "NS",
	// "PTR", "SOA", "SRV" or "TXT". Empty means "A".
	Type string `json:",omitzero"`
	// Server is the DNS server's host:port, e.g. "10.0.0.2:53"; at most
	// MaxAddressLen bytes. Its address is checked by the egress policy.
	Server string `json:",omitzero"`
	// Rcode is the response code that passes, e.g. "NOERROR" (the
	// default when empty) or "NXDOMAIN".
	Rcode string `json:",omitzero"`
	// AnswerContains, when set, must occur in the data of one of the
	// answer's records of Type (as the zone file writes it: "10.0.0.7",
	// "10 20 5432 db-1.internal.", "\"v=spf1 ...\""). AnswerRegex, when
	// set, must match the data of one of them (RE2). Each at most
	// MaxPatternLen bytes.
	AnswerContains string `json:",omitzero"`
	AnswerRegex    string `json:",omitzero"`
}

// validate checks a DNS spec.
func (s *DNSSpec) validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: "dns." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if s.Name == "" {
		return bad("name", `is required, e.g. "api.internal"`)
	}
	if len(s.Name) > 253 {
		return bad("name", "must be at most 253 bytes, got %d", len(s.Name))
	}
	if _, ok := dns.IsDomainName(s.Name); !ok || strings.ContainsAny(s.Name, " \\\t\r\n") {
		return bad("name", "is not a domain name: %.80q", s.Name)
	}
	if s.Type != "" && !slices.Contains(dnsTypes, s.Type) {
		return bad("type", "must be one of %s (empty means A), got %.40q", strings.Join(dnsTypes, ", "), s.Type)
	}
	if err := validateHostPort("dns.server", s.Server); err != nil {
		return err
	}
	if _, ok := dns.StringToRcode[s.Rcode]; s.Rcode != "" && !ok {
		return bad("rcode", `must be a response code such as "NOERROR", "NXDOMAIN", "SERVFAIL" or "REFUSED", got %.40q`, s.Rcode)
	}
	for _, f := range []struct{ name, v string }{{"answer_contains", s.AnswerContains}, {"answer_regex", s.AnswerRegex}} {
		if len(f.v) > MaxPatternLen {
			return bad(f.name, "must be at most %d bytes, got %d", MaxPatternLen, len(f.v))
		}
	}
	if s.AnswerRegex != "" {
		if _, err := regexp.Compile(s.AnswerRegex); err != nil {
			return bad("answer_regex", "is not a valid RE2 regular expression: %v", err)
		}
	}
	return nil
}

// dnsProber asks one question of one server. Its fields are set once; it is
// safe for concurrent use and holds no connection between probes.
type dnsProber struct {
	dialer   *guardedDialer
	server   string
	name     string // fully qualified
	qtype    uint16
	rcode    int
	contains string
	re       *regexp.Regexp
}

// newDNSProber builds a prober for a validated spec.
func newDNSProber(s *DNSSpec, d *guardedDialer) *dnsProber {
	p := &dnsProber{dialer: d, server: s.Server, name: dns.Fqdn(s.Name), qtype: dns.TypeA, contains: s.AnswerContains}
	if s.Type != "" {
		p.qtype = dns.StringToType[s.Type]
	}
	if s.Rcode != "" {
		p.rcode = dns.StringToRcode[s.Rcode]
	}
	if s.AnswerRegex != "" {
		p.re = regexp.MustCompile(s.AnswerRegex)
	}
	return p
}

// Probe sends the question over UDP, and again over TCP when the answer is
// truncated, and checks the answer. Its failures read e.g. "dns: NXDOMAIN
// for api.internal." or `dns: no A record of api.internal. contains
// "10.0.0.7" (2 records)`.
func (p *dnsProber) Probe(ctx context.Context) error {
	m := new(dns.Msg)
	m.SetQuestion(p.name, p.qtype)
	r, err := p.exchange(ctx, "udp", m)
	if err == nil && r.Truncated {
		r, err = p.exchange(ctx, "tcp", m)
	}
	if err != nil {
		return withContext(ctx, err)
	}
	if r.Rcode != p.rcode {
		text := fmt.Sprintf("dns: %s for %s", rcodeName(r.Rcode), p.name)
		if p.rcode != dns.RcodeSuccess {
			text += ", want " + rcodeName(p.rcode)
		}
		return &ExpectError{Text: text}
	}
	if p.contains == "" && p.re == nil {
		return nil
	}
	typ := dns.TypeToString[p.qtype]
	n := 0
	for _, rr := range r.Answer {
		if rr.Header().Rrtype != p.qtype {
			continue
		}
		n++
		data := strings.TrimPrefix(rr.String(), rr.Header().String())
		if strings.Contains(data, p.contains) && (p.re == nil || p.re.MatchString(data)) {
			return nil
		}
	}
	if n == 0 {
		return expectErrorf("dns: no %s record for %s", typ, p.name)
	}
	var want []string
	if p.contains != "" {
		want = append(want, fmt.Sprintf("contains %q", p.contains))
	}
	if p.re != nil {
		want = append(want, fmt.Sprintf("matches /%s/", p.re))
	}
	return expectErrorf("dns: no %s record of %s %s (%d records)", typ, p.name, strings.Join(want, " and "), n)
}

// exchange sends m to the server over network ("udp" or "tcp") through the
// guarded dialer, under ctx.
func (p *dnsProber) exchange(ctx context.Context, network string, m *dns.Msg) (*dns.Msg, error) {
	conn, err := p.dialer.DialContext(ctx, network, p.server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := &dns.Client{Net: network}
	r, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, withContext(ctx, err)
		}
		return nil, fmt.Errorf("dns: %w", err)
	}
	return r, nil
}

// rcodeName returns a response code's name, e.g. "NXDOMAIN".
func rcodeName(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

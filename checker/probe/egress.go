package probe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// EgressPolicy decides which IP addresses probes may connect to, so that
// whoever registers targets cannot use the prober to reach what it should
// not (server-side request forgery): an address is permitted when it is in
// no Deny prefix and, if Allow is not empty, in some Allow prefix. Deny
// wins over Allow.
//
// Addresses are compared in the form the connection actually takes:
//
//   - a zone is dropped: fe80::1%eth0 is checked as fe80::1;
//   - an IPv4-mapped IPv6 address is unmapped: ::ffff:169.254.169.254
//     connects to, and is checked as, 169.254.169.254;
//   - a prefix written in IPv4-mapped form (::ffff:a.b.c.d/n, n at least
//     96) matches the IPv4 addresses it maps; any other IPv6 prefix matches
//     IPv6 addresses only, so ::/0 does not cover IPv4;
//   - the unspecified addresses 0.0.0.0 and :: connect to the local host,
//     so each is permitted only when 127.0.0.1 (for 0.0.0.0) or ::1 (for
//     ::) is permitted too.
//
// A Factory applies its policy twice: Factory.New rejects a Spec whose host
// is an IP address the policy denies (see CheckSpec), and every connection a
// probe opens is checked on the address it is about to connect to, after
// any DNS lookup, so a name that later resolves somewhere else (DNS
// rebinding) is caught on the probe that would go there.
//
// The zero EgressPolicy permits every address; DefaultEgressPolicy denies
// link-local and cloud metadata addresses. Its methods are safe for
// concurrent use as long as nobody modifies Allow or Deny meanwhile; a
// Factory keeps its own copy.
type EgressPolicy struct {
	// Allow, when not empty, lists the only prefixes probes may reach.
	Allow []netip.Prefix
	// Deny lists prefixes probes may never reach, whatever Allow says.
	Deny []netip.Prefix
}

// DefaultDenyTargets returns the prefixes denied when no deny list is given:
// link-local addresses, where clouds serve instance metadata and
// credentials, in every form that reaches them, and the metadata addresses
// that lie outside link-local ranges:
//
//	169.254.0.0/16          IPv4 link-local: 169.254.169.254 is the metadata
//	                        service of AWS, GCP, Azure, OCI, DigitalOcean and
//	                        OpenStack; 169.254.170.2 serves ECS task credentials
//	fe80::/10               IPv6 link-local (OpenStack's fe80::a9fe:a9fe)
//	::ffff:169.254.0.0/112  169.254.0.0/16 as IPv4-mapped IPv6 addresses
//	64:ff9b::a9fe:0/112     169.254.0.0/16 behind the NAT64 prefix (RFC 6052)
//	fd00:ec2::254/128       AWS instance metadata over IPv6
//	100.100.100.200/32      Alibaba Cloud instance metadata
//
// Loopback and private ranges are not denied: probing services on the same
// host or network is what a health checker is for. Each call returns a new
// slice.
func DefaultDenyTargets() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("::ffff:169.254.0.0/112"),
		netip.MustParsePrefix("64:ff9b::a9fe:0/112"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
		netip.MustParsePrefix("100.100.100.200/32"),
	}
}

// DefaultEgressPolicy returns the policy a Factory uses unless told
// otherwise: any address may be reached except DefaultDenyTargets.
func DefaultEgressPolicy() *EgressPolicy {
	return &EgressPolicy{Deny: DefaultDenyTargets()}
}

// ParseEgressPolicy builds an EgressPolicy from two lists of entries, each a
// CIDR prefix ("10.0.0.0/8", "fd00::/8") or a single address ("10.0.0.5",
// taken as a /32 or /128). Spaces around an entry are ignored; host bits
// after the prefix length are ignored ("10.1.2.3/8" is 10.0.0.0/8).
//
// A nil allow permits every address not denied, as does an empty one. A nil
// deny means DefaultDenyTargets(); a non-nil, empty deny denies nothing. So
// a caller that only restricts where probes go (an allow list) keeps the
// metadata ranges denied unless it says otherwise.
//
// The error names the list and the entry that is wrong, e.g.
// `deny list: "10.0.0.0/33" is not an IP address or CIDR prefix ...`.
func ParseEgressPolicy(allow, deny []string) (*EgressPolicy, error) {
	p := &EgressPolicy{}
	var err error
	if p.Allow, err = parsePrefixes("allow", allow); err != nil {
		return nil, err
	}
	if deny == nil {
		p.Deny = DefaultDenyTargets()
	} else if p.Deny, err = parsePrefixes("deny", deny); err != nil {
		return nil, err
	}
	return p, nil
}

// parsePrefixes parses one list of ParseEgressPolicy.
func parsePrefixes(list string, entries []string) ([]netip.Prefix, error) {
	prefixes := make([]netip.Prefix, 0, len(entries))
	for _, entry := range entries {
		s := strings.TrimSpace(entry)
		bad := func(why string) error {
			return fmt.Errorf(`%s list: %q %s; write an address or a CIDR prefix, e.g. "10.0.0.5", "10.0.0.0/8" or "fd00::/8"`, list, entry, why)
		}
		if s == "" {
			return nil, bad("is empty")
		}
		if strings.Contains(s, "%") {
			return nil, bad("has a zone; a policy applies to every interface")
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, bad("is not an IP address")
			}
			prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, bad("is not a CIDR prefix")
		}
		prefixes = append(prefixes, pf.Masked())
	}
	return prefixes, nil
}

// String describes p for a log line, e.g.
// "allow 10.0.0.0/8; deny 169.254.0.0/16, fe80::/10" or
// "allow any; deny none".
func (p *EgressPolicy) String() string {
	list := func(ps []netip.Prefix, empty string) string {
		if len(ps) == 0 {
			return empty
		}
		s := make([]string, len(ps))
		for i, pf := range ps {
			s[i] = pf.String()
		}
		return strings.Join(s, ", ")
	}
	return "allow " + list(p.Allow, "any") + "; deny " + list(p.Deny, "none")
}

// clone returns a copy of p that shares no slices with it.
func (p *EgressPolicy) clone() *EgressPolicy {
	return &EgressPolicy{Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}

// Check returns nil when p permits a connection to addr, and otherwise an
// *EgressError saying which rule denies it. The invalid (zero) Addr is
// denied.
func (p *EgressPolicy) Check(addr netip.Addr) error {
	a := addr.WithZone("").Unmap()
	if !a.IsValid() {
		return &EgressError{Addr: addr}
	}
	if deny, ok := p.permits(a); !ok {
		return &EgressError{Addr: addr, Deny: deny}
	}
	if a.IsUnspecified() {
		local := netip.IPv6Loopback()
		if a.Is4() {
			local = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		if deny, ok := p.permits(local); !ok {
			return &EgressError{Addr: addr, Deny: deny, via: local}
		}
	}
	return nil
}

// permits applies the rules to a, which has no zone and is not
// IPv4-mapped. When a is denied because it is in a deny prefix, that prefix
// is returned; when it is outside every allow prefix, the zero Prefix.
func (p *EgressPolicy) permits(a netip.Addr) (deny netip.Prefix, ok bool) {
	for _, pf := range p.Deny {
		if prefixContains(pf, a) {
			return pf, false
		}
	}
	if len(p.Allow) == 0 {
		return netip.Prefix{}, true
	}
	for _, pf := range p.Allow {
		if prefixContains(pf, a) {
			return netip.Prefix{}, true
		}
	}
	return netip.Prefix{}, false
}

// prefixContains reports whether pf contains a, reading a prefix written in
// IPv4-mapped form as the IPv4 prefix it maps.
func prefixContains(pf netip.Prefix, a netip.Addr) bool {
	if pa := pf.Addr(); pa.Is4In6() && pf.Bits() >= 96 {
		pf = netip.PrefixFrom(pa.Unmap(), pf.Bits()-96)
	}
	return pf.Contains(a)
}

// CheckSpec reports the first problem with s under p: s.Validate's error,
// or a *FieldError on the address field ("http.url", "tcp.address",
// "grpc.address") when the target's host is an IP address that p denies,
// e.g. "http.url: 169.254.169.254 is denied by egress policy (deny
// 169.254.0.0/16)". A host is an IP address in every form a C resolver
// accepts, so "2852039166", "0xa9.0xfe.0xa9.0xfe" and
// "::ffff:169.254.169.254" all count as 169.254.169.254.
//
// CheckSpec does no I/O: a host name passes, and what it resolves to is
// checked each time a probe connects.
func (p *EgressPolicy) CheckSpec(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return p.checkSpec(s)
}

// checkSpec is CheckSpec for a valid s.
func (p *EgressPolicy) checkSpec(s Spec) error {
	var field, host string
	switch {
	case s.HTTP != nil:
		u, err := parseProbeURL(s.HTTP.URL)
		if err != nil {
			return err
		}
		field, host = "http.url", u.Hostname()
	case s.TCP != nil:
		field = "tcp.address"
		host, _, _ = net.SplitHostPort(s.TCP.Address)
	case s.DNS != nil:
		field = "dns.server"
		host, _, _ = net.SplitHostPort(s.DNS.Server)
	default:
		field = "grpc.address"
		host, _, _ = net.SplitHostPort(s.GRPC.Address)
	}
	addr, ok := hostAddr(host)
	if !ok {
		return nil
	}
	if err := p.Check(addr); err != nil {
		var ee *EgressError
		if errors.As(err, &ee) {
			ee.Host = host
		}
		return &FieldError{Field: field, Reason: err.Error()}
	}
	return nil
}

// EgressError says that an EgressPolicy denies an address. A probe that
// fails because of the policy returns one (possibly wrapped), and Describe
// shows its text.
type EgressError struct {
	// Host is what the target named when it differs from Addr: a host
	// name that resolved to Addr, or an address written another way
	// ("2852039166"). Empty otherwise.
	Host string
	// Addr is the address denied, as given or resolved.
	Addr netip.Addr
	// Deny is the deny prefix that matched. The zero Prefix means Addr is
	// outside every allow prefix.
	Deny netip.Prefix

	via netip.Addr // the loopback address an unspecified Addr was checked as
}

// Error says what was denied and by which rule, e.g.
// "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)" or
// "db.example resolves to 10.9.0.4, which is denied by egress policy (not
// in the allow list)". It always contains "denied by egress policy".
func (e *EgressError) Error() string {
	if !e.Addr.IsValid() {
		return "an invalid address is denied by egress policy"
	}
	why := "not in the allow list"
	if e.Deny.IsValid() {
		why = "deny " + e.Deny.String()
	}
	if e.via.IsValid() {
		why = "it reaches " + e.via.String() + ": " + why
	}
	what := e.Addr.String()
	if e.Host != "" && e.Host != what {
		what = e.Host + " resolves to " + what + ", which"
	}
	return what + " is denied by egress policy (" + why + ")"
}

// hostAddr returns the IP address host denotes when it is an IP literal,
// including the IPv4 forms of inet_aton(3) that netip rejects but a C
// resolver (and so curl, or Go built with cgo) accepts: "2130706433",
// "0x7f.1" and "0177.0.0.1" are all 127.0.0.1. It reports false for a host
// name. An IPv6 zone is kept.
func hostAddr(host string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true
	}
	return parseInetAton(host)
}

// parseInetAton parses the numeric IPv4 forms of inet_aton(3): one to four
// parts separated by dots, each decimal, octal after a leading 0, or
// hexadecimal after 0x; every part but the last is one byte, and the last
// fills the bytes that remain.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var ip uint32
	for i, part := range parts {
		v, ok := parseInetAtonPart(part)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 0xff {
				return netip.Addr{}, false
			}
			ip |= uint32(v) << (24 - 8*i)
			continue
		}
		if rest := uint(8 * (4 - i)); v >= 1<<rest {
			return netip.Addr{}, false
		}
		ip |= uint32(v)
	}
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// parseInetAtonPart parses one part of an inet_aton address: decimal,
// octal after a leading 0, or hexadecimal after 0x ("0x" alone is 0).
func parseInetAtonPart(s string) (uint64, bool) {
	base := 10
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		base, s = 16, s[2:]
		if s == "" {
			return 0, true
		}
	case len(s) >= 2 && s[0] == '0':
		base, s = 8, s[1:]
	}
	v, err := strconv.ParseUint(s, base, 32) // no sign, no "0x", no "_" with an explicit base
	return v, err == nil
}

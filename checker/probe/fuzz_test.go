package probe

// Fuzz targets. Plain `go test` runs each on its seeds (the f.Add calls
// and testdata/fuzz/<Name>/); to search for new failures for a bounded
// time, run one at a time, e.g.
//
//	go test -run '^$' -fuzz '^FuzzValidate$' -fuzztime 30s ./checker/probe/
//
// A failing input is saved under testdata/fuzz/<Name>/ and becomes a seed.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FuzzValidate builds a Spec from fuzzed strings and checks what Validate
// promises: a *FieldError whose text carries no raw control characters
// for a bad Spec, and for a good HTTP Spec a request that net/http writes
// and reads back with exactly the header lines the Spec asked for, so no
// value can smuggle in another header or request.
func FuzzValidate(f *testing.F) {
	for _, seed := range []struct {
		kind                     uint8
		url, method, name, value string
		address                  string
	}{
		{0, "http://10.0.0.5:8080/healthz", "GET", "X-Token", "s3cret", ""},
		{0, "https://example.com/healthz?deep=1", "HEAD", "Host", "svc.internal:8443", ""},
		{0, "http://x/", "", "X-A", "1\r\nX-B: 2", ""},
		{0, "http://x/", "", "X-A\r\nX-B", "2", ""},
		{0, "http://x/", "", "Host", "a.example\r\nX-Evil: 1", ""},
		{0, "http://x/", "", "User-Agent", " lb-check\t", ""},
		{0, "http://x/", "", "Content-Length", "5", ""},
		{0, "http://[fe80::1%25eth0]:80/", "GET", "X A", "1", ""},
		{0, "http://2130706433/", "get", "", "", ""},
		{0, "http://0x7f.1/\r\nX: y", "", "", "", ""},
		{0, "ftp://x", "POST", "", "", ""},
		{0, "http://x:0/", "", "", "", ""},
		{0, "http://ü.example/", "", "", "", ""},
		{1, "", "", "", "", "db.internal:5432"},
		{1, "", "", "", "", "[::1]:65535"},
		{1, "", "", "", "", ":5432"},
		{1, "", "", "", "", "x:postgres"},
		{2, "", "", "", "", "10.0.0.5:50051"},
		{2, "", "", "", "", "unix:80"},
		{2, "", "", "", "", "[fe80::1%eth0]:50051"},
		{3, "http://x", "", "", "", "x:1"},
	} {
		f.Add(seed.kind, seed.url, seed.method, seed.name, seed.value, seed.address)
	}
	f.Fuzz(func(t *testing.T, kind uint8, rawURL, method, name, value, address string) {
		var s Spec
		httpSpec := &HTTPSpec{URL: rawURL, Method: method}
		if name != "" || value != "" {
			httpSpec.Headers = map[string]string{name: value}
		}
		switch kind % 4 {
		case 0:
			s.HTTP = httpSpec
		case 1:
			s.TCP = &TCPSpec{Address: address}
		case 2:
			s.GRPC = &GRPCSpec{Address: address}
		default:
			s.HTTP, s.TCP = httpSpec, &TCPSpec{Address: address}
		}

		err := s.Validate()
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v (%T), want a *FieldError", err, err)
			}
			if i := strings.IndexFunc(err.Error(), isControl); i >= 0 {
				t.Fatalf("error text has a raw control character at %d: %q", i, err.Error())
			}
			if err2 := DefaultEgressPolicy().CheckSpec(s); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("CheckSpec() = %v, want Validate's %v", err2, err)
			}
			return
		}

		if s.HTTP != nil {
			checkHTTPRoundTrip(t, s.HTTP)
		} else {
			addr := address
			host, port, err := net.SplitHostPort(addr)
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				t.Fatalf("Validate accepted %q: host %q, port %q, error %v", addr, host, port, err)
			}
		}

		// A literal host the default policy denies is rejected by
		// CheckSpec, naming the field.
		err = DefaultEgressPolicy().CheckSpec(s)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Reason, "denied by egress policy") {
				t.Fatalf("CheckSpec() = %v, want nil or a *FieldError saying denied by egress policy", err)
			}
		}
	})
}

// checkHTTPRoundTrip writes the request a valid HTTP spec makes and reads it
// back.
func checkHTTPRoundTrip(t *testing.T, h *HTTPSpec) {
	t.Helper()
	p := newNetHTTPProber(nil, h)
	req, err := http.NewRequest(p.method, p.url, nil)
	if err != nil {
		t.Fatalf("valid spec, but NewRequest: %v", err)
	}
	req.Header = p.header.Clone()
	req.Host = p.host
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		if !isASCII(req.URL.Host) {
			return // an international name that is not valid IDNA: net/http refuses it
		}
		t.Fatalf("valid spec, but the request cannot be written: %v", err)
	}
	got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf.Bytes())))
	if err != nil {
		t.Fatalf("a request from a valid spec does not read back: %v\n%q", err, buf.Bytes())
	}
	if got.Method != p.method {
		t.Fatalf("method %q, want %q", got.Method, p.method)
	}
	if p.host != "" && got.Host != p.host {
		t.Fatalf("Host %q, want %q\n%q", got.Host, p.host, buf.Bytes())
	}
	want := map[string]string{"User-Agent": strings.Trim(p.header.Get("User-Agent"), " \t")}
	for name, value := range h.Headers {
		switch key := http.CanonicalHeaderKey(name); key {
		case "Host", "User-Agent":
		case "Content-Length", "Transfer-Encoding", "Trailer":
			// net/http writes its own framing headers.
		default:
			want[key] = strings.Trim(value, " \t")
		}
	}
	for key, values := range got.Header {
		if len(values) != 1 {
			t.Fatalf("header %q sent %d times: %q\n%q", key, len(values), values, buf.Bytes())
		}
		w, ok := want[key]
		if !ok {
			t.Fatalf("request has a header %q that the spec did not ask for\n%q", key, buf.Bytes())
		}
		if values[0] != w {
			t.Fatalf("header %q = %q, want %q", key, values[0], w)
		}
	}
}

// FuzzAddress parses fuzzed text as an HTTP probe URL and as a host:port
// address and checks the parsers agree with each other and with the
// dialer: whatever Validate accepts splits into a host and a port the
// dialer understands, a host that is an IP literal is never looked up, and
// numeric hosts in inet_aton forms mean the address they print as.
func FuzzAddress(f *testing.F) {
	for _, seed := range []string{
		"10.0.0.5:8080", "[::1]:65535", "db.internal:5432", "x:0", ":80", "x:", "x",
		"2130706433:80", "0x7f.1:80", "0177.0.0.1:80", "127.1:80", "4294967296:80",
		"[::ffff:169.254.169.254]:80", "[fe80::1%eth0]:80", "[fe80::1%25eth0]:80",
		"http://10.0.0.5:8080/healthz", "https://[::1]/", "http://2852039166/",
		"http://:80/", "http:///x", "http://x:65536/", "unix:80", "1..2:80",
		"0x:80", "08.1:80", "1.2.3.4.5:80", "[::1%]:80",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// As a host.
		if a, ok := hostAddr(s); ok {
			if !a.IsValid() {
				t.Fatalf("hostAddr(%q) = invalid address, ok", s)
			}
			if b, err := netip.ParseAddr(s); err == nil && a != b {
				t.Fatalf("hostAddr(%q) = %v, netip says %v", s, a, b)
			}
			if _, err := netip.ParseAddr(s); err != nil {
				// An inet_aton form: four parts at most, only digits,
				// hex digits, x and dots.
				if strings.Count(s, ".") > 3 || strings.Trim(s, "0123456789abcdefABCDEFxX.") != "" || !a.Is4() {
					t.Fatalf("hostAddr(%q) = %v from a string that is no inet_aton form", s, a)
				}
			}
			if b, ok := hostAddr(a.String()); !ok || b != a {
				t.Fatalf("hostAddr(%q) = %v, but hostAddr(%q) = %v, %v", s, a, a.String(), b, ok)
			}
		}

		// As host:port, then as a URL.
		if err := validateHostPort("tcp.address", s); err == nil {
			host, port, err := net.SplitHostPort(s)
			if err != nil || host == "" {
				t.Fatalf("validateHostPort accepted %q, SplitHostPort = %q, %q, %v", s, host, port, err)
			}
			checkDialsOnlyLiterals(t, s)
		}
		for _, raw := range []string{s, "http://" + s + "/"} {
			u, err := parseProbeURL(raw)
			if err != nil {
				continue
			}
			if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
				t.Fatalf("parseProbeURL(%q) accepted scheme %q, host %q", raw, u.Scheme, u.Hostname())
			}
			port := u.Port()
			if port == "" {
				port = "80"
			}
			// What net/http hands the dialer is an address Validate
			// would accept for a TCP probe.
			dialAddr := net.JoinHostPort(u.Hostname(), port)
			if err := validateHostPort("tcp.address", dialAddr); err != nil {
				t.Fatalf("parseProbeURL(%q) accepted a URL whose dial address %q is invalid: %v", raw, dialAddr, err)
			}
			checkDialsOnlyLiterals(t, dialAddr)
		}
	})
}

// checkDialsOnlyLiterals runs the guarded dialer on address with a
// resolver that knows no names and a connect step that never connects: an
// IP literal host must be connected to (unless denied) without a lookup,
// and a name must be looked up and never connected to.
func checkDialsOnlyLiterals(t *testing.T, address string) {
	t.Helper()
	host, _, _ := net.SplitHostPort(address)
	literal, isLiteral := hostAddr(host)
	var lookups, dials int
	d := newGuardedDialer(DefaultEgressPolicy(), stubResolver(func(string) ([]netip.Addr, error) {
		lookups++
		return nil, &net.DNSError{Err: "no such host", IsNotFound: true}
	}))
	want := literal
	if want.Is4In6() {
		want = want.Unmap()
	}
	d.dial = func(_ context.Context, _, addr string) (net.Conn, error) {
		dials++
		if ap, err := netip.ParseAddrPort(addr); err != nil || ap.Addr() != want {
			t.Fatalf("dial of %q connected to %q, not to %v", address, addr, want)
		}
		return nil, errors.New("fuzz: no connections")
	}
	_, _ = d.DialContext(context.Background(), "tcp", address)
	switch {
	case isLiteral && lookups != 0:
		t.Fatalf("dial of %q looked up the IP literal %q", address, host)
	case !isLiteral && dials != 0:
		t.Fatalf("dial of %q connected without a successful lookup", address)
	case isLiteral && DefaultEgressPolicy().Check(literal) != nil && dials != 0:
		t.Fatalf("dial of %q connected to a denied address", address)
	}
}

// FuzzEgress checks the policy on arbitrary addresses and prefixes: no
// panic; an address in a deny prefix is never permitted, whichever form
// it takes (IPv4, IPv4-mapped, with a zone); the forms always get the same
// answer; and the dialer connects only to what Check permits.
func FuzzEgress(f *testing.F) {
	seed := func(addr, prefix string, asAllow bool) {
		a := netip.MustParseAddr(addr)
		b := a.AsSlice()
		pf := netip.MustParsePrefix(prefix)
		f.Add(b, a.Zone(), pf.Addr().AsSlice(), uint8(pf.Bits()), asAllow)
	}
	seed("169.254.169.254", "10.0.0.0/8", false)
	seed("::ffff:169.254.169.254", "10.0.0.0/8", true)
	seed("fe80::1%eth0", "::/0", true)
	seed("64:ff9b::a9fe:a9fe", "127.0.0.0/8", false)
	seed("0.0.0.0", "127.0.0.0/8", false)
	seed("::", "::1/128", false)
	seed("10.1.2.3", "::ffff:10.0.0.0/104", false)
	seed("::ffff:10.1.2.3", "::ffff:10.0.0.0/104", true)
	seed("127.0.0.1", "0.0.0.0/0", true)
	seed("2001:db8::1", "2001:db8::/32", false)
	f.Add([]byte{}, "", []byte{}, uint8(0), false)

	f.Fuzz(func(t *testing.T, addrBytes []byte, zone string, prefixBytes []byte, bits uint8, asAllow bool) {
		a, ok := netip.AddrFromSlice(addrBytes)
		if !ok {
			a = netip.Addr{}
		}
		if a.Is6() && !a.Is4In6() {
			// Zones are interface names; other bytes would only make the
			// literal below unparsable.
			a = a.WithZone(strings.Map(func(r rune) rune {
				if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
					return r
				}
				return -1
			}, zone))
		}
		policy := DefaultEgressPolicy()
		if pa, ok := netip.AddrFromSlice(prefixBytes); ok {
			if pf := netip.PrefixFrom(pa, int(bits)); pf.IsValid() {
				if asAllow {
					policy.Allow = append(policy.Allow, pf.Masked())
				} else {
					policy.Deny = append(policy.Deny, pf)
				}
			}
		}

		err := policy.Check(a)
		if !a.IsValid() {
			if err == nil {
				t.Fatal("Check(invalid) = nil, want denied")
			}
			return
		}
		if err != nil && !strings.Contains(err.Error(), "denied by egress policy") {
			t.Fatalf("Check(%v) = %q, want it to say denied by egress policy", a, err)
		}

		// Reference: map the address up to IPv6 and compare both forms
		// with every prefix as written.
		plain := a.WithZone("").Unmap()
		mapped := netip.AddrFrom16(plain.As16())
		in := func(ps []netip.Prefix) bool {
			for _, pf := range ps {
				if pf.Contains(plain) || (plain.Is4() && pf.Addr().Is4In6() && pf.Bits() >= 96 && pf.Contains(mapped)) {
					return true
				}
			}
			return false
		}
		if in(policy.Deny) && err == nil {
			t.Fatalf("Check(%v) = nil, but it is in a deny prefix of %v", a, policy)
		}
		if len(policy.Allow) > 0 && !in(policy.Allow) && err == nil {
			t.Fatalf("Check(%v) = nil, but it is outside the allow list of %v", a, policy)
		}
		if !in(policy.Deny) && (len(policy.Allow) == 0 || in(policy.Allow)) && !plain.IsUnspecified() && err != nil {
			t.Fatalf("Check(%v) = %v, but no rule of %v denies it", a, err, policy)
		}

		// Every form of the address gets the same answer.
		forms := []netip.Addr{plain, a.WithZone("")}
		if plain.Is4() {
			forms = append(forms, mapped)
		} else {
			forms = append(forms, plain.WithZone("eth0"))
		}
		for _, b := range forms {
			if errB := policy.Check(b); (errB == nil) != (err == nil) {
				t.Fatalf("Check(%v) = %v but Check(%v) = %v", a, err, b, errB)
			}
		}

		// The dialer connects only to what Check permits, whether it
		// meets the address as a literal or as a name's answer.
		d := newGuardedDialer(policy, stubResolver(func(string) ([]netip.Addr, error) {
			return []netip.Addr{a}, nil
		}))
		var dialled []string
		d.dial = func(_ context.Context, _, addr string) (net.Conn, error) {
			dialled = append(dialled, addr)
			return nil, errors.New("fuzz: no connections")
		}
		for _, target := range []string{"name.test:80", netip.AddrPortFrom(a, 80).String()} {
			dialled = nil
			_, derr := d.DialContext(context.Background(), "tcp", target)
			if err != nil && len(dialled) > 0 {
				t.Fatalf("DialContext(%s) for denied %v connected to %q", target, a, dialled)
			}
			var ee *EgressError
			if err != nil && target == "name.test:80" && !errors.As(derr, &ee) {
				t.Fatalf("DialContext(%s) = %v, want an *EgressError", target, derr)
			}
			for _, got := range dialled {
				ap, perr := netip.ParseAddrPort(got)
				if perr != nil || policy.Check(ap.Addr()) != nil {
					t.Fatalf("DialContext(%s) connected to %q, which the policy does not permit", target, got)
				}
			}
		}
	})
}

// FuzzDescribe checks that whatever text an error carries, Describe
// returns at most maxDescription bytes of printable UTF-8.
func FuzzDescribe(f *testing.F) {
	for _, seed := range []string{
		"", "connection reset", "malformed HTTP response \"\x00\x00\x06\x04\"",
		"a\xffb", "\x1b[2J\r\n", strings.Repeat("é", 150), strings.Repeat("x", 199) + "é",
		"abc\u202edef", "denied by egress policy",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, err := range []error{
			errors.New(s),
			status.Error(codes.Internal, s),
			newRPCError(status.Error(codes.Unavailable, s)),
		} {
			d := Describe(err)
			if len(d) > maxDescription {
				t.Fatalf("Describe is %d bytes, more than %d: %q", len(d), maxDescription, d)
			}
			if !utf8.ValidString(d) {
				t.Fatalf("Describe is not UTF-8: %q", d)
			}
			if i := strings.IndexFunc(d, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
				t.Fatalf("Describe has a non-printable character at %d: %q", i, d)
			}
		}
	})
}

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

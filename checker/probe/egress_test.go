package probe

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseEgressPolicy(t *testing.T) {
	prefixes := func(ss ...string) []netip.Prefix {
		ps := []netip.Prefix{}
		for _, s := range ss {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		return ps
	}
	tests := []struct {
		name        string
		allow, deny []string
		want        *EgressPolicy
	}{
		{name: "nil deny means the defaults", want: &EgressPolicy{Allow: prefixes(), Deny: DefaultDenyTargets()}},
		{name: "allow alone keeps the defaults", allow: []string{"10.0.0.0/8"}, want: &EgressPolicy{Allow: prefixes("10.0.0.0/8"), Deny: DefaultDenyTargets()}},
		{name: "empty deny denies nothing", deny: []string{}, want: &EgressPolicy{Allow: prefixes(), Deny: prefixes()}},
		{name: "explicit deny replaces the defaults", deny: []string{"127.0.0.0/8"}, want: &EgressPolicy{Allow: prefixes(), Deny: prefixes("127.0.0.0/8")}},
		{
			name:  "addresses, spaces, host bits",
			allow: []string{" 10.0.0.5 ", "fd00::1", "192.168.7.9/16"},
			deny:  []string{"::ffff:169.254.0.0/112"},
			want:  &EgressPolicy{Allow: prefixes("10.0.0.5/32", "fd00::1/128", "192.168.0.0/16"), Deny: prefixes("::ffff:169.254.0.0/112")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEgressPolicy(tt.allow, tt.deny)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Allow, tt.want.Allow) || !slices.Equal(got.Deny, tt.want.Deny) {
				t.Errorf("ParseEgressPolicy(%q, %q) = %v, want %v", tt.allow, tt.deny, got, tt.want)
			}
		})
	}
}

func TestParseEgressPolicyErrors(t *testing.T) {
	tests := []struct {
		allow, deny []string
		want        string
	}{
		{allow: []string{"10.0.0.0/8", "10.0.0.0/33"}, want: `allow list: "10.0.0.0/33" is not a CIDR prefix; write an address or a CIDR prefix, e.g. "10.0.0.5", "10.0.0.0/8" or "fd00::/8"`},
		{deny: []string{"metadata.google.internal"}, want: `deny list: "metadata.google.internal" is not an IP address;`},
		{deny: []string{""}, want: `deny list: "" is empty;`},
		{deny: []string{"fe80::/10", "fe80::1%eth0"}, want: `deny list: "fe80::1%eth0" has a zone;`},
		{allow: []string{"10.0.0.0/8/8"}, want: `allow list: "10.0.0.0/8/8" is not a CIDR prefix`},
		{allow: []string{"0177.0.0.1"}, want: `allow list: "0177.0.0.1" is not an IP address`},
	}
	for _, tt := range tests {
		p, err := ParseEgressPolicy(tt.allow, tt.deny)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseEgressPolicy(%q, %q) = %v, %v; want an error starting %q", tt.allow, tt.deny, p, err, tt.want)
		}
	}
}

func TestDefaultDenyTargets(t *testing.T) {
	want := []string{"169.254.0.0/16", "fe80::/10", "::ffff:169.254.0.0/112", "64:ff9b::a9fe:0/112", "fd00:ec2::254/128", "100.100.100.200/32"}
	var got []string
	for _, p := range DefaultDenyTargets() {
		got = append(got, p.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("DefaultDenyTargets() = %q, want %q (update the doc comment with the list)", got, want)
	}
	// Each call returns its own slice.
	DefaultDenyTargets()[0] = netip.Prefix{}
	if !DefaultDenyTargets()[0].IsValid() {
		t.Error("DefaultDenyTargets shares its slice between calls")
	}
}

func TestEgressPolicyCheck(t *testing.T) {
	parse := func(allow, deny []string) *EgressPolicy {
		t.Helper()
		p, err := ParseEgressPolicy(allow, deny)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	def := DefaultEgressPolicy()
	allowTen := parse([]string{"10.0.0.0/8"}, nil)
	noLoopback := parse(nil, []string{"127.0.0.0/8", "::1"})
	mappedDeny := parse(nil, []string{"::ffff:10.0.0.0/104"})
	allowAllV6 := parse([]string{"::/0"}, []string{})
	tests := []struct {
		name   string
		policy *EgressPolicy
		addr   string
		want   string // "" means permitted
	}{
		{"loopback", def, "127.0.0.1", ""},
		{"loopback v6", def, "::1", ""},
		{"private", def, "10.0.0.5", ""},
		{"public", def, "93.184.215.14", ""},
		{"unspecified", def, "0.0.0.0", ""},
		{"metadata", def, "169.254.169.254", "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{"ECS credentials", def, "169.254.170.2", "169.254.170.2 is denied by egress policy (deny 169.254.0.0/16)"},
		{"mapped metadata", def, "::ffff:169.254.169.254", "::ffff:169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{"NAT64 metadata", def, "64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe is denied by egress policy (deny 64:ff9b::a9fe:0/112)"},
		{"link-local v6", def, "fe80::a9fe:a9fe", "fe80::a9fe:a9fe is denied by egress policy (deny fe80::/10)"},
		{"link-local v6 with zone", def, "fe80::1%eth0", "fe80::1%eth0 is denied by egress policy (deny fe80::/10)"},
		{"AWS v6 metadata", def, "fd00:ec2::254", "fd00:ec2::254 is denied by egress policy (deny fd00:ec2::254/128)"},
		{"Alibaba metadata", def, "100.100.100.200", "100.100.100.200 is denied by egress policy (deny 100.100.100.200/32)"},
		{"next to Alibaba metadata", def, "100.100.100.201", ""},

		{"in allow list", allowTen, "10.1.2.3", ""},
		{"mapped, in allow list", allowTen, "::ffff:10.1.2.3", ""},
		{"outside allow list", allowTen, "127.0.0.1", "127.0.0.1 is denied by egress policy (not in the allow list)"},
		{"deny wins over allow", parse([]string{"169.254.0.0/16"}, nil), "169.254.169.254", "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},

		{"denied loopback", noLoopback, "127.0.0.53", "127.0.0.53 is denied by egress policy (deny 127.0.0.0/8)"},
		{"0.0.0.0 reaches loopback", noLoopback, "0.0.0.0", "0.0.0.0 is denied by egress policy (it reaches 127.0.0.1: deny 127.0.0.0/8)"},
		{":: reaches loopback", noLoopback, "::", ":: is denied by egress policy (it reaches ::1: deny ::1/128)"},
		{"mapped 0.0.0.0 reaches loopback", noLoopback, "::ffff:0.0.0.0", "::ffff:0.0.0.0 is denied by egress policy (it reaches 127.0.0.1: deny 127.0.0.0/8)"},
		{"unspecified outside allow list", allowTen, "0.0.0.0", "0.0.0.0 is denied by egress policy (not in the allow list)"},

		{"mapped prefix matches IPv4", mappedDeny, "10.9.8.7", "10.9.8.7 is denied by egress policy (deny ::ffff:10.0.0.0/104)"},
		{"mapped prefix matches mapped", mappedDeny, "::ffff:10.9.8.7", "::ffff:10.9.8.7 is denied by egress policy (deny ::ffff:10.0.0.0/104)"},
		{"mapped prefix, other address", mappedDeny, "11.0.0.1", ""},
		{"::/0 does not cover IPv4", allowAllV6, "10.0.0.1", "10.0.0.1 is denied by egress policy (not in the allow list)"},
		{"::/0 does not cover mapped IPv4", allowAllV6, "::ffff:10.0.0.1", "::ffff:10.0.0.1 is denied by egress policy (not in the allow list)"},
		{"::/0 covers IPv6", allowAllV6, "2001:db8::1", ""},

		{"zero policy permits all", &EgressPolicy{}, "169.254.169.254", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Check(netip.MustParseAddr(tt.addr))
			if tt.want == "" {
				if err != nil {
					t.Errorf("Check(%s) = %v, want nil", tt.addr, err)
				}
				return
			}
			var ee *EgressError
			if !errors.As(err, &ee) || err.Error() != tt.want {
				t.Errorf("Check(%s) = %v (%T), want *EgressError %q", tt.addr, err, err, tt.want)
			}
		})
	}
	if err := def.Check(netip.Addr{}); err == nil || !strings.Contains(err.Error(), "denied by egress policy") {
		t.Errorf("Check(invalid Addr) = %v, want it denied", err)
	}
}

func TestEgressPolicyString(t *testing.T) {
	p, err := ParseEgressPolicy([]string{"10.0.0.0/8", "fd00::/8"}, []string{"10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.String(), "allow 10.0.0.0/8, fd00::/8; deny 10.0.0.1/32"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := (&EgressPolicy{}).String(), "allow any; deny none"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestEgressErrorText(t *testing.T) {
	a := netip.MustParseAddr("10.9.0.4")
	for _, tt := range []struct {
		err  *EgressError
		want string
	}{
		{&EgressError{Host: "db.example", Addr: a}, "db.example resolves to 10.9.0.4, which is denied by egress policy (not in the allow list)"},
		{&EgressError{Host: "10.9.0.4", Addr: a, Deny: netip.MustParsePrefix("10.0.0.0/8")}, "10.9.0.4 is denied by egress policy (deny 10.0.0.0/8)"},
		{&EgressError{Host: "168427524", Addr: a, Deny: netip.MustParsePrefix("10.0.0.0/8")}, "168427524 resolves to 10.9.0.4, which is denied by egress policy (deny 10.0.0.0/8)"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if got := Describe(tt.err); got != tt.want {
			t.Errorf("Describe = %q, want %q", got, tt.want)
		}
	}
}

func TestEgressPolicyCheckSpec(t *testing.T) {
	httpURL := func(u string) Spec { return Spec{HTTP: &HTTPSpec{URL: u}} }
	tests := []struct {
		name      string
		spec      Spec
		wantField string // "" means no error
		want      string // the Reason
	}{
		{name: "metadata URL", spec: httpURL("http://169.254.169.254/latest/meta-data/"), wantField: "http.url", want: "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "decimal", spec: httpURL("http://2852039166/"), wantField: "http.url", want: "2852039166 resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "hex parts", spec: httpURL("http://0xa9.0xfe.0xa9.0xfe/"), wantField: "http.url", want: "0xa9.0xfe.0xa9.0xfe resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "octal parts", spec: httpURL("http://0251.0376.0251.0376:80/"), wantField: "http.url", want: "0251.0376.0251.0376 resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "two parts", spec: httpURL("http://169.16689662/"), wantField: "http.url", want: "169.16689662 resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "three parts", spec: httpURL("https://169.254.43518/"), wantField: "http.url", want: "169.254.43518 resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "mapped", spec: httpURL("http://[::ffff:169.254.169.254]/"), wantField: "http.url", want: "::ffff:169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "mapped hex", spec: httpURL("http://[::ffff:a9fe:a9fe]:8080/"), wantField: "http.url", want: "::ffff:a9fe:a9fe resolves to ::ffff:169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "zone", spec: httpURL("http://[fe80::a9fe:a9fe%25eth0]/"), wantField: "http.url", want: "fe80::a9fe:a9fe%eth0 is denied by egress policy (deny fe80::/10)"},
		{name: "userinfo", spec: httpURL("http://example.com@169.254.169.254/"), wantField: "http.url", want: "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "tcp", spec: Spec{TCP: &TCPSpec{Address: "169.254.169.254:80"}}, wantField: "tcp.address", want: "169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "tcp decimal", spec: Spec{TCP: &TCPSpec{Address: "2852039166:80"}}, wantField: "tcp.address", want: "2852039166 resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "grpc mapped", spec: Spec{GRPC: &GRPCSpec{Address: "[::ffff:169.254.169.254]:50051"}}, wantField: "grpc.address", want: "::ffff:169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"},
		{name: "grpc zone", spec: Spec{GRPC: &GRPCSpec{Address: "[fe80::1%eth0]:50051"}}, wantField: "grpc.address", want: "fe80::1%eth0 is denied by egress policy (deny fe80::/10)"},

		{name: "loopback", spec: httpURL("http://127.0.0.1:8080/healthz")},
		{name: "decimal loopback", spec: httpURL("http://2130706433/")},
		{name: "host name", spec: httpURL("http://metadata.google.internal/")},
		{name: "tcp host name", spec: Spec{TCP: &TCPSpec{Address: "db.internal:5432"}}},
		{name: "name with numeric labels", spec: Spec{TCP: &TCPSpec{Address: "169.254.169.254.nip.io:80"}}},

		{name: "invalid spec", spec: httpURL("ftp://169.254.169.254/"), wantField: "http.url", want: `unknown scheme "ftp"`},
	}
	p := DefaultEgressPolicy()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.CheckSpec(tt.spec)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("CheckSpec() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.HasPrefix(fe.Reason, tt.want) {
				t.Errorf("CheckSpec() = %v (%T), want *FieldError %s: %s", err, err, tt.wantField, tt.want)
			}
		})
	}
}

// TestFactoryNewRejectsDeniedLiteral: the check runs in New, which is how
// the checker's Add rejects such a target.
func TestFactoryNewRejectsDeniedLiteral(t *testing.T) {
	p, err := newTestFactory(t).New(Spec{HTTP: &HTTPSpec{URL: "http://169.254.169.254/latest/meta-data/"}})
	want := "http.url: 169.254.169.254 is denied by egress policy (deny 169.254.0.0/16)"
	var fe *FieldError
	if !errors.As(err, &fe) || err.Error() != want {
		t.Errorf("New() = %v (%T), want *FieldError %q", err, err, want)
	}
	if p != nil {
		t.Error("New returned a Prober with an error")
	}

	// A policy that allows only 10.0.0.0/8 rejects loopback; the zero
	// EgressPolicy rejects nothing.
	only10, err := ParseEgressPolicy([]string{"10.0.0.0/8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFactoryWith(FactoryOptions{Egress: only10})
	t.Cleanup(f.Close)
	if _, err := f.New(Spec{TCP: &TCPSpec{Address: "127.0.0.1:80"}}); err == nil || err.Error() != "tcp.address: 127.0.0.1 is denied by egress policy (not in the allow list)" {
		t.Errorf("New(127.0.0.1) with allow 10.0.0.0/8 = %v", err)
	}
	open := NewFactoryWith(FactoryOptions{Egress: &EgressPolicy{}})
	t.Cleanup(open.Close)
	if _, err := open.New(Spec{TCP: &TCPSpec{Address: "169.254.169.254:80"}}); err != nil {
		t.Errorf("New(169.254.169.254) with an empty policy = %v, want nil", err)
	}
}

// TestNewFactoryWithCopiesPolicy: changing the policy after handing it over
// changes nothing.
func TestNewFactoryWithCopiesPolicy(t *testing.T) {
	p := &EgressPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	f := NewFactoryWith(FactoryOptions{Egress: p})
	t.Cleanup(f.Close)
	p.Deny[0] = netip.MustParsePrefix("192.0.2.0/24")
	if _, err := f.New(Spec{TCP: &TCPSpec{Address: "10.0.0.1:80"}}); err == nil {
		t.Error("New(10.0.0.1) = nil error, want it denied by the policy as given")
	}
}

func TestHostAddr(t *testing.T) {
	tests := []struct {
		host string
		want string // "" means not an address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"0x.0.0.0", "0.0.0.0"},
		{"0", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"1.16777215", "1.255.255.255"},
		{"1.2.65535", "1.2.255.255"},
		{"::1", "::1"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
		{"fe80::1%eth0", "fe80::1%eth0"},

		{"", ""},
		{"localhost", ""},
		{"4294967296", ""},       // more than 32 bits
		{"1.16777216", ""},       // last part too big for 3 bytes
		{"1.2.65536", ""},        // last part too big for 2 bytes
		{"256.0.0.1", ""},        // a leading part over 255
		{"1.2.3.4.5", ""},        // five parts
		{"1..2", ""},             // an empty part
		{"127.0.0.1.", ""},       // a trailing dot is a name
		{"08.0.0.1", ""},         // 8 is not an octal digit
		{"0x7g.1", ""},           // g is not a hex digit
		{"+1.2.3.4", ""},         // no signs
		{"1_000", ""},            // no underscores
		{"0x0x1", ""},            // one prefix only
		{"1.2.3.4%eth0", ""},     // no zones in IPv4
		{"cafe.0x1", ""},         // a name with a hex-looking label
		{"127.0.0.1.nip.io", ""}, // a name
	}
	for _, tt := range tests {
		got, ok := hostAddr(tt.host)
		if tt.want == "" {
			if ok {
				t.Errorf("hostAddr(%q) = %v, want not an address", tt.host, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tt.want) {
			t.Errorf("hostAddr(%q) = %v, %v; want %s", tt.host, got, ok, tt.want)
		}
	}
}

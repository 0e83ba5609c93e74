package dns_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server/dns"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	c      *checker.Checker
	s      *dns.Server
	probes *fakeprobe.Switches
	addr   string // UDP and TCP
}

// start serves a checker (not started: tests drive probes with round) over
// DNS on loopback.
func start(t testing.TB, ccfg checker.Config, cfg dns.Config) *env {
	t.Helper()
	sp := fakeprobe.NewSwitches()
	ccfg.NewProber = sp.New
	if ccfg.Defaults == (checker.Defaults{}) {
		ccfg.Defaults = checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	}
	c, err := checker.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := dns.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, l, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(pc, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{c: c, s: s, probes: sp, addr: pc.LocalAddr().String()}
}

// tcpTarget returns a spec probing a TCP address.
func tcpTarget(name, group, addr string) checker.Spec {
	return checker.Spec{Name: name, Group: group, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: addr}}}
}

// add registers specs; up says which of them pass their probes.
func (e *env) add(t testing.TB, up bool, specs ...checker.Spec) {
	t.Helper()
	for _, s := range specs {
		if _, _, err := e.c.Add(s); err != nil {
			t.Fatal(err)
		}
		e.probes.Set(fakeprobe.Key(s.Probe), up)
	}
	e.sync(t)
}

// set flips the probe of the target at key (its address or URL).
func (e *env) set(key string, up bool) { e.probes.Set(key, up) }

// round probes every target once and waits for DNS to see the results.
func (e *env) round(t testing.TB) {
	t.Helper()
	e.c.RunRound(t.Context())
	e.sync(t)
}

// sync waits until the DNS server's view is at the checker's revision.
func (e *env) sync(t testing.TB) {
	t.Helper()
	want := e.c.Revision()
	deadline := time.Now().Add(5 * time.Second)
	for e.s.Revision() < want {
		if time.Now().After(deadline) {
			t.Fatalf("dns view at revision %d, checker at %d", e.s.Revision(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// ask sends m over net ("udp" or "tcp") and returns the response.
func (e *env) ask(t testing.TB, network string, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	cl := &mdns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := cl.Exchange(m, e.addr)
	if err != nil {
		t.Fatalf("%s %v: %v", network, m.Question, err)
	}
	return r
}

// query asks name's qtype over UDP.
func (e *env) query(t testing.TB, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	return e.ask(t, "udp", m)
}

// values returns the answer's records as "TYPE value" strings, sorted.
func values(rrs []mdns.RR) []string {
	var out []string
	for _, rr := range rrs {
		var v string
		switch rr := rr.(type) {
		case *mdns.A:
			v = "A " + rr.Hdr.Name + " " + rr.A.String()
		case *mdns.AAAA:
			v = "AAAA " + rr.Hdr.Name + " " + rr.AAAA.String()
		case *mdns.SRV:
			v = fmt.Sprintf("SRV %s %d %s", rr.Hdr.Name, rr.Port, rr.Target)
		case *mdns.SOA:
			v = fmt.Sprintf("SOA %s min=%d ttl=%d", rr.Hdr.Name, rr.Minttl, rr.Hdr.Ttl)
		case *mdns.OPT:
			continue
		default:
			v = rr.String()
		}
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// edge registers group edge: web-1 and web-2 up, web-3 down (IPv4), web-6
// up (IPv6), web-h up (a host name).
func edge(t *testing.T, e *env) {
	t.Helper()
	e.add(t, true,
		tcpTarget("web-1", "edge", "127.0.0.1:8081"),
		tcpTarget("web-2", "edge", "127.0.0.2:8082"),
		tcpTarget("web-6", "edge", "[::1]:8086"),
		tcpTarget("web-h", "edge", "backend.example:8088"),
	)
	e.add(t, false, tcpTarget("web-3", "edge", "127.0.0.3:8083"))
	e.add(t, true, tcpTarget("db-1", "db", "127.0.0.9:5432"))
	e.round(t)
}

func checkHeader(t *testing.T, r *mdns.Msg, rcode int) {
	t.Helper()
	if r.Rcode != rcode {
		t.Errorf("rcode %s, want %s", mdns.RcodeToString[r.Rcode], mdns.RcodeToString[rcode])
	}
	if r.RecursionAvailable {
		t.Error("RA is set: the server never recurses")
	}
}

func TestGroupAddresses(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{TTL: 3 * time.Second})
	edge(t, e)
	r := e.query(t, "edge.pulse.", mdns.TypeA)
	checkHeader(t, r, mdns.RcodeSuccess)
	if !r.Authoritative {
		t.Error("AA unset for a name in the domain")
	}
	want := []string{"A edge.pulse. 127.0.0.1", "A edge.pulse. 127.0.0.2"} // web-3 is down
	if diff := cmp.Diff(want, values(r.Answer)); diff != "" {
		t.Errorf("edge A (-want +got):\n%s", diff)
	}
	for _, rr := range r.Answer {
		if rr.Header().Ttl != 3 {
			t.Errorf("TTL %d, want 3: %v", rr.Header().Ttl, rr)
		}
	}
	r = e.query(t, "EDGE.Pulse.", mdns.TypeAAAA) // names are case-insensitive
	checkHeader(t, r, mdns.RcodeSuccess)
	if diff := cmp.Diff([]string{"AAAA EDGE.Pulse. ::1"}, values(r.Answer)); diff != "" {
		t.Errorf("edge AAAA (-want +got):\n%s", diff)
	}

	// web-3 recovers, web-1 fails: the answers follow.
	e.set("127.0.0.3:8083", true)
	e.set("127.0.0.1:8081", false)
	e.round(t)
	r = e.query(t, "edge.pulse.", mdns.TypeA)
	if diff := cmp.Diff([]string{"A edge.pulse. 127.0.0.2", "A edge.pulse. 127.0.0.3"}, values(r.Answer)); diff != "" {
		t.Errorf("edge A after flips (-want +got):\n%s", diff)
	}
}

func TestSRV(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	edge(t, e)
	wantAnswer := func(name string) []string {
		return []string{
			"SRV " + name + " 8081 web-1.target.pulse.",
			"SRV " + name + " 8082 web-2.target.pulse.",
			"SRV " + name + " 8086 web-6.target.pulse.",
			"SRV " + name + " 8088 backend.example.",
		}
	}
	wantExtra := []string{"A web-1.target.pulse. 127.0.0.1", "A web-2.target.pulse. 127.0.0.2", "AAAA web-6.target.pulse. ::1"}
	for _, name := range []string{"_edge._tcp.pulse.", "edge.pulse."} {
		r := e.query(t, name, mdns.TypeSRV)
		checkHeader(t, r, mdns.RcodeSuccess)
		if diff := cmp.Diff(wantAnswer(name), values(r.Answer)); diff != "" {
			t.Errorf("%s SRV (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(wantExtra, values(r.Extra)); diff != "" {
			t.Errorf("%s SRV additional (-want +got):\n%s", name, diff)
		}
	}
	// ANY gets the addresses of both families.
	r := e.query(t, "edge.pulse.", mdns.TypeANY)
	if diff := cmp.Diff([]string{"A edge.pulse. 127.0.0.1", "A edge.pulse. 127.0.0.2", "AAAA edge.pulse. ::1"}, values(r.Answer)); diff != "" {
		t.Errorf("edge ANY (-want +got):\n%s", diff)
	}
	// _edge._tcp is a service name, not an address.
	r = e.query(t, "_edge._tcp.pulse.", mdns.TypeA)
	checkHeader(t, r, mdns.RcodeSuccess)
	if len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("_edge._tcp A: answer %v, authority %v; want none and the SOA", r.Answer, r.Ns)
	}
}

func TestTargetName(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	edge(t, e)
	r := e.query(t, "web-1.target.pulse.", mdns.TypeA)
	checkHeader(t, r, mdns.RcodeSuccess)
	if diff := cmp.Diff([]string{"A web-1.target.pulse. 127.0.0.1"}, values(r.Answer)); diff != "" {
		t.Errorf("web-1 A (-want +got):\n%s", diff)
	}
	r = e.query(t, "web-6.target.pulse.", mdns.TypeAAAA)
	if diff := cmp.Diff([]string{"AAAA web-6.target.pulse. ::1"}, values(r.Answer)); diff != "" {
		t.Errorf("web-6 AAAA (-want +got):\n%s", diff)
	}
	// Down: known, nothing to answer.
	r = e.query(t, "web-3.target.pulse.", mdns.TypeA)
	checkHeader(t, r, mdns.RcodeSuccess)
	if len(r.Answer) != 0 {
		t.Errorf("web-3 (down) A answered %v", r.Answer)
	}
	// Removed: unknown.
	if _, err := e.c.Remove("web-1"); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	r = e.query(t, "web-1.target.pulse.", mdns.TypeA)
	checkHeader(t, r, mdns.RcodeNameError)
	if r = e.query(t, "edge.pulse.", mdns.TypeA); slices.Contains(values(r.Answer), "A edge.pulse. 127.0.0.1") {
		t.Errorf("removed web-1 still answered for edge: %v", r.Answer)
	}
}

func TestHTTPAndGRPCAddresses(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true,
		checker.Spec{Name: "h1", Group: "api", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.5:8080/health"}}},
		checker.Spec{Name: "h2", Group: "api", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "https://[::1]/health"}}},
		checker.Spec{Name: "h3", Group: "api", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://backend.example/"}}},
		checker.Spec{Name: "g1", Group: "api", Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: "127.0.0.6:9000"}}},
	)
	e.round(t)
	r := e.query(t, "_api._tcp.pulse.", mdns.TypeSRV)
	want := []string{
		"SRV _api._tcp.pulse. 443 h2.target.pulse.",
		"SRV _api._tcp.pulse. 80 backend.example.",
		"SRV _api._tcp.pulse. 8080 h1.target.pulse.",
		"SRV _api._tcp.pulse. 9000 g1.target.pulse.",
	}
	if diff := cmp.Diff(want, values(r.Answer)); diff != "" {
		t.Errorf("api SRV (-want +got):\n%s", diff)
	}
	r = e.query(t, "api.pulse.", mdns.TypeA)
	if diff := cmp.Diff([]string{"A api.pulse. 127.0.0.5", "A api.pulse. 127.0.0.6"}, values(r.Answer)); diff != "" {
		t.Errorf("api A (-want +got):\n%s", diff)
	}
}

func TestNegativeAnswers(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{TTL: 5 * time.Second})
	edge(t, e)
	e.add(t, false, tcpTarget("down-1", "down", "127.0.0.7:80"))
	e.round(t)
	soa := []string{"SOA pulse. min=5 ttl=5"}
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
	}{
		{"nothing.pulse.", mdns.TypeA, mdns.RcodeNameError},
		{"_nothing._tcp.pulse.", mdns.TypeSRV, mdns.RcodeNameError},
		{"nothing.target.pulse.", mdns.TypeA, mdns.RcodeNameError},
		{"down.pulse.", mdns.TypeA, mdns.RcodeSuccess},         // known, nothing routable
		{"_down._tcp.pulse.", mdns.TypeSRV, mdns.RcodeSuccess}, // the same
		{"down-1.target.pulse.", mdns.TypeA, mdns.RcodeSuccess},
		{"edge.pulse.", mdns.TypeTXT, mdns.RcodeSuccess},       // known, no such type
		{"web-h.target.pulse.", mdns.TypeA, mdns.RcodeSuccess}, // addressed by host name
		{"db.pulse.", mdns.TypeAAAA, mdns.RcodeSuccess},        // IPv4 only
		{"pulse.", mdns.TypeA, mdns.RcodeSuccess},              // the apex
		{"_tcp.pulse.", mdns.TypeSRV, mdns.RcodeSuccess},       // empty non-terminals
		{"target.pulse.", mdns.TypeA, mdns.RcodeSuccess},
	} {
		r := e.query(t, tc.name, tc.qtype)
		if r.Rcode != tc.rcode || len(r.Answer) != 0 || !r.Authoritative {
			t.Errorf("%s %s: %s AA=%v answers %v; want %s, AA, none", tc.name, mdns.TypeToString[tc.qtype],
				mdns.RcodeToString[r.Rcode], r.Authoritative, r.Answer, mdns.RcodeToString[tc.rcode])
		}
		if diff := cmp.Diff(soa, values(r.Ns)); diff != "" {
			t.Errorf("%s authority (-want +got):\n%s", tc.name, diff)
		}
	}
	r := e.query(t, "pulse.", mdns.TypeSOA)
	if diff := cmp.Diff(soa, values(r.Answer)); diff != "" {
		t.Errorf("apex SOA (-want +got):\n%s", diff)
	}
	if got := e.s.Stats().NXDomain; got != 3 {
		t.Errorf("Stats().NXDomain = %d, want 3", got)
	}
}

func TestDottedGroupHasEmptyNonTerminals(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true, tcpTarget("a.web", "eu.edge", "127.0.0.1:80"))
	e.round(t)
	for _, name := range []string{"eu.edge.pulse.", "a.web.target.pulse."} {
		if r := e.query(t, name, mdns.TypeA); len(r.Answer) != 1 {
			t.Errorf("%s: %v, want one A", name, r.Answer)
		}
	}
	for _, name := range []string{"edge.pulse.", "web.target.pulse."} {
		if r := e.query(t, name, mdns.TypeA); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s (above a name): %s %v, want NOERROR and no answers", name, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if _, err := e.c.Remove("a.web"); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	if r := e.query(t, "edge.pulse.", mdns.TypeA); r.Rcode != mdns.RcodeNameError {
		t.Errorf("edge.pulse. after the removal: %s, want NXDOMAIN", mdns.RcodeToString[r.Rcode])
	}
}

func TestRefused(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{Domain: "svc.example"})
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:80"))
	e.round(t)
	if r := e.query(t, "edge.svc.example.", mdns.TypeA); len(r.Answer) != 1 {
		t.Errorf("edge in the configured domain: %v", r.Answer)
	}
	for _, name := range []string{"edge.pulse.", "example.com.", "."} {
		r := e.query(t, name, mdns.TypeA)
		checkHeader(t, r, mdns.RcodeRefused)
		if len(r.Answer)+len(r.Ns)+len(r.Extra) != 0 || r.Authoritative {
			t.Errorf("%s: REFUSED carries records or AA: %v", name, r)
		}
	}
	m := new(mdns.Msg)
	m.SetQuestion("edge.svc.example.", mdns.TypeA)
	m.Question[0].Qclass = mdns.ClassCHAOS
	checkHeader(t, e.ask(t, "udp", m), mdns.RcodeRefused)
	m = new(mdns.Msg)
	m.SetNotify("edge.svc.example.")
	checkHeader(t, e.ask(t, "udp", m), mdns.RcodeNotImplemented)
	if st := e.s.Stats(); st.OutOfZone != 4 || st.Refused != 0 {
		t.Errorf("Stats(): OutOfZone %d, Refused %d; want 4 and 0 (every client is allowed)", st.OutOfZone, st.Refused)
	}
}

func TestAllowList(t *testing.T) {
	for _, tc := range []struct {
		allow []netip.Prefix
		rcode int
	}{
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, mdns.RcodeRefused},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}, mdns.RcodeSuccess},
	} {
		e := start(t, checker.Config{}, dns.Config{Allow: tc.allow})
		e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:80"))
		e.round(t)
		for _, network := range []string{"udp", "tcp"} {
			m := new(mdns.Msg)
			m.SetQuestion("edge.pulse.", mdns.TypeA)
			r := e.ask(t, network, m)
			checkHeader(t, r, tc.rcode)
			if want := map[int]int{mdns.RcodeRefused: 0, mdns.RcodeSuccess: 1}[tc.rcode]; len(r.Answer) != want {
				t.Errorf("allow %v over %s: %d answers, want %d", tc.allow, network, len(r.Answer), want)
			}
		}
		want := uint64(0)
		if tc.rcode == mdns.RcodeRefused {
			want = 2
		}
		if st := e.s.Stats(); st.Refused != want || st.OutOfZone != 0 {
			t.Errorf("allow %v: Stats(): Refused %d, OutOfZone %d; want %d and 0", tc.allow, st.Refused, st.OutOfZone, want)
		}
	}
}

// big registers group big of n routable IPv4 targets.
func big(t testing.TB, e *env, n int) {
	t.Helper()
	var specs []checker.Spec
	for i := range n {
		specs = append(specs, tcpTarget(fmt.Sprintf("big-%03d", i), "big", fmt.Sprintf("127.0.%d.%d:80", i/250, 1+i%250)))
	}
	e.add(t, true, specs...)
	e.round(t)
}

func TestTruncationEDNS0AndTCP(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	big(t, e, 100)

	// No EDNS0: 512 bytes, truncated.
	r := e.query(t, "big.pulse.", mdns.TypeA)
	if !r.Truncated || len(r.Answer) == 0 || len(r.Answer) >= 100 {
		t.Errorf("UDP without EDNS0: TC=%v with %d answers, want TC and a part", r.Truncated, len(r.Answer))
	}
	if n := wireLen(r); n > mdns.MinMsgSize {
		t.Errorf("UDP without EDNS0: %d bytes, over 512", n)
	}
	// The fallback a resolver makes on TC: TCP carries everything.
	m := new(mdns.Msg)
	m.SetQuestion("big.pulse.", mdns.TypeA)
	r = e.ask(t, "tcp", m)
	if r.Truncated || len(r.Answer) != 100 {
		t.Errorf("TCP: TC=%v with %d answers, want all 100", r.Truncated, len(r.Answer))
	}
	// EDNS0 with 4096 bytes: everything over UDP, and an OPT back.
	m.SetEdns0(4096, false)
	r = e.ask(t, "udp", m)
	if r.Truncated || len(r.Answer) != 100 || r.IsEdns0() == nil {
		t.Errorf("UDP with EDNS0 4096: TC=%v, %d answers, OPT %v; want all 100 and an OPT", r.Truncated, len(r.Answer), r.IsEdns0())
	}
	// EDNS0 with 1232 bytes: honoured.
	m.IsEdns0().SetUDPSize(1232) // one OPT: two are a FORMERR
	r = e.ask(t, "udp", m)
	if !r.Truncated || len(r.Answer) >= 100 || wireLen(r) > 1232 {
		t.Errorf("UDP with EDNS0 1232: TC=%v, %d answers, %d bytes; want TC within 1232 bytes", r.Truncated, len(r.Answer), wireLen(r))
	}
	// SRV with the additional addresses: TC over UDP, all of it over TCP.
	m = new(mdns.Msg)
	m.SetQuestion("_big._tcp.pulse.", mdns.TypeSRV)
	if r = e.ask(t, "udp", m); !r.Truncated {
		t.Errorf("SRV over UDP: %d answers and no TC", len(r.Answer))
	}
	if r = e.ask(t, "tcp", m); len(r.Answer) != 100 || len(r.Extra) != 100 {
		t.Errorf("SRV over TCP: %d answers, %d additional; want 100 and 100", len(r.Answer), len(r.Extra))
	}
	if e.s.Stats().Truncated != 3 {
		t.Errorf("Stats().Truncated = %d, want 3", e.s.Stats().Truncated)
	}
	// An EDNS version the server does not know.
	m.SetEdns0(4096, false)
	m.IsEdns0().SetVersion(1)
	if r = e.ask(t, "udp", m); r.Rcode != mdns.RcodeBadVers {
		t.Errorf("EDNS version 1: %s, want BADVERS", mdns.RcodeToString[r.Rcode])
	}
}

// wireLen is the size of r as sent, compressed.
func wireLen(r *mdns.Msg) int {
	r.Compress = true
	return r.Len()
}

func TestMaxAnswers(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{MaxAnswers: 3})
	big(t, e, 10)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"big.pulse.", mdns.TypeA}, {"_big._tcp.pulse.", mdns.TypeSRV}} {
		r := e.query(t, q.name, q.qtype)
		if len(r.Answer) != 3 || r.Truncated {
			t.Errorf("%s: %d answers (TC=%v), want 3", q.name, len(r.Answer), r.Truncated)
		}
	}
}

func TestShuffle(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	big(t, e, 10)
	orders := map[string]bool{}
	for range 50 {
		r := e.query(t, "big.pulse.", mdns.TypeA)
		if len(r.Answer) != 10 {
			t.Fatalf("%d answers, want 10", len(r.Answer))
		}
		var order []string
		for _, rr := range r.Answer {
			order = append(order, rr.(*mdns.A).A.String())
		}
		orders[strings.Join(order, ",")] = true
	}
	// Go's map order alone gives a handful of rotations; 50 shuffles of
	// 10 records (10! orders) repeat one with a chance of about 1 in 3000.
	if len(orders) < 40 {
		t.Errorf("50 queries gave %d orders: answers are not shuffled", len(orders))
	}
}

func TestSuspectAndPanicHeldAreAnswered(t *testing.T) {
	e := start(t, checker.Config{MaxUnhealthyFraction: 0.5}, dns.Config{})
	susp := tcpTarget("s-1", "three", "127.0.0.1:80")
	susp.Model = checker.ModelThreeState
	e.add(t, false, susp)
	e.set("127.0.0.1:80", true)
	e.round(t) // unhealthy -> suspect
	if st, _ := e.c.Status("s-1"); st.State != checker.StateSuspect {
		t.Fatalf("s-1 is %v, want suspect", st.State)
	}
	if r := e.query(t, "three.pulse.", mdns.TypeA); len(r.Answer) != 1 {
		t.Errorf("suspect target not answered: %v", r.Answer)
	}

	// Two targets of four fail at once: the panic threshold (at most half
	// unhealthy) marks one, and holds the other routable.
	e.add(t, true,
		tcpTarget("p-1", "panic", "127.0.1.1:80"), tcpTarget("p-2", "panic", "127.0.1.2:80"),
		tcpTarget("p-3", "panic", "127.0.1.3:80"), tcpTarget("p-4", "panic", "127.0.1.4:80"))
	e.round(t)
	e.set("127.0.1.1:80", false)
	e.set("127.0.1.2:80", false)
	e.set("127.0.1.3:80", false)
	e.round(t)
	statuses, _ := e.c.List("panic")
	var routable []string
	held := 0
	for _, st := range statuses {
		if st.Routable {
			routable = append(routable, "A panic.pulse. "+strings.Split(st.Spec.Probe.TCP.Address, ":")[0])
		}
		if st.PanicHeld {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("no target is panic-held: %+v", statuses)
	}
	r := e.query(t, "panic.pulse.", mdns.TypeA)
	if diff := cmp.Diff(routable, values(r.Answer)); diff != "" {
		t.Errorf("panic A against List's routable targets (-want +got):\n%s", diff)
	}
}

func TestRateLimit(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := start(t, checker.Config{}, dns.Config{RateLimit: 1, RateBurst: 3, Now: clock})
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:80"))
	e.round(t)
	want := []int{mdns.RcodeSuccess, mdns.RcodeSuccess, mdns.RcodeSuccess, mdns.RcodeRefused}
	for i, rcode := range want {
		network := []string{"udp", "tcp"}[i%2] // one bucket for both
		m := new(mdns.Msg)
		m.SetQuestion("edge.pulse.", mdns.TypeA)
		r := e.ask(t, network, m)
		checkHeader(t, r, rcode)
		if rcode == mdns.RcodeRefused && len(r.Answer) != 0 {
			t.Errorf("rate limited answer has records: %v", r.Answer)
		}
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if r := e.query(t, "edge.pulse.", mdns.TypeA); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("a second later: %s %v, want one answer", mdns.RcodeToString[r.Rcode], r.Answer)
	}
	if got := e.s.Stats().RateLimited; got != 1 {
		t.Errorf("Stats().RateLimited = %d, want 1", got)
	}
}

func TestCheckerClosedAnswersServfail(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:80"))
	e.round(t)
	e.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.query(t, "edge.pulse.", mdns.TypeA)
		if r.Rcode == mdns.RcodeServerFailure && len(r.Answer) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the checker closed: %s %v, want SERVFAIL", mdns.RcodeToString[r.Rcode], r.Answer)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  dns.Config
		want string // a substring of the error; "" for none
	}{
		{dns.Config{}, ""},
		{dns.Config{Domain: "consul", TTL: 5 * time.Second, MaxAnswers: 10, RateLimit: 100, RateBurst: 200}, ""},
		{dns.Config{Domain: "."}, "Domain"},
		{dns.Config{Domain: strings.Repeat("a", 64) + ".example"}, "Domain"},
		{dns.Config{TTL: -time.Second}, "TTL"},
		{dns.Config{TTL: 1500 * time.Millisecond}, "TTL"},
		{dns.Config{TTL: 25 * time.Hour}, "TTL"},
		{dns.Config{MaxAnswers: -1}, "MaxAnswers"},
		{dns.Config{RateLimit: -1}, "RateLimit"},
		{dns.Config{RateLimit: 10}, "RateBurst"},
		{dns.Config{MaxSources: -1}, "MaxSources"},
		{dns.Config{Allow: []netip.Prefix{{}}}, "Allow"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
		if tc.want != "" {
			if _, err := dns.New(nil, tc.cfg); err == nil {
				t.Errorf("New accepted %+v", tc.cfg)
			}
		}
	}
}

func TestListenSharesThePort(t *testing.T) {
	pc, l, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer l.Close()
	_, up, _ := net.SplitHostPort(pc.LocalAddr().String())
	_, tp, _ := net.SplitHostPort(l.Addr().String())
	if up != tp || up == "0" {
		t.Errorf("UDP port %s, TCP port %s; want the same one", up, tp)
	}
}

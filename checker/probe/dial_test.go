package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stubResolver answers lookups with a function of the host name.
type stubResolver func(host string) ([]netip.Addr, error)

func (r stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r(host)
}

// noLookups is a resolver for tests whose hosts are all addresses: it fails
// the test if it is asked anything.
func noLookups(t *testing.T) stubResolver {
	return func(host string) ([]netip.Addr, error) {
		t.Errorf("looked up %q; an IP literal must not be looked up", host)
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
}

// addrs parses IP addresses.
func addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = netip.MustParseAddr(s)
	}
	return as
}

// dialRecorder stands in for the connect step of the guarded dialer: it
// records every address it is asked to connect to and connects only to
// 127.0.0.0/8, so a test can never reach anything else, whatever the code
// under test does.
type dialRecorder struct {
	mu    sync.Mutex
	dials []string
}

func (r *dialRecorder) dial(ctx context.Context, network, address string) (net.Conn, error) {
	r.mu.Lock()
	r.dials = append(r.dials, address)
	r.mu.Unlock()
	if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("test dialer refuses %q", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// addresses returns the addresses dialled so far, with their ports.
func (r *dialRecorder) addresses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.dials...)
}

// newEgressFactory returns a Factory with the given policy (nil means the
// default) and resolver whose connections go through a dialRecorder, closed
// when the test ends.
func newEgressFactory(t *testing.T, policy *EgressPolicy, r Resolver) (*Factory, *dialRecorder) {
	t.Helper()
	f := NewFactoryWith(FactoryOptions{Egress: policy, Resolver: r})
	rec := &dialRecorder{}
	f.dial = rec.dial
	t.Cleanup(f.Close)
	return f, rec
}

// TestEgressDeniedName: a name that resolves into a denied range fails
// every kind of probe with "denied by egress policy", without a
// connection attempt.
func TestEgressDeniedName(t *testing.T) {
	resolver := stubResolver(func(host string) ([]netip.Addr, error) {
		switch host {
		case "metadata.test":
			return addrs("169.254.169.254"), nil
		case "mapped.test":
			return addrs("::ffff:169.254.169.254"), nil
		case "v6.test":
			return addrs("fd00:ec2::254", "fe80::a9fe:a9fe%eth0"), nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	f, rec := newEgressFactory(t, nil, resolver)
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"http", Spec{HTTP: &HTTPSpec{URL: "http://metadata.test/latest/meta-data/"}}, "metadata.test resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{"https", Spec{HTTP: &HTTPSpec{URL: "https://mapped.test:8443/"}}, "mapped.test resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
		{"tcp", Spec{TCP: &TCPSpec{Address: "v6.test:80"}}, "v6.test resolves to fd00:ec2::254, which is denied by egress policy (deny fd00:ec2::254/128)"},
		{"grpc", Spec{GRPC: &GRPCSpec{Address: "metadata.test:50051"}}, "metadata.test resolves to 169.254.169.254, which is denied by egress policy (deny 169.254.0.0/16)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProber(t, f, tt.spec)
			if c, ok := p.(interface{ Close() error }); ok {
				t.Cleanup(func() { c.Close() })
			}
			err := probeWithin(t, timeoutCtx(t, 10*time.Second), p)
			if d := Describe(err); d != tt.want {
				t.Errorf("Probe() = %v, Describe %q, want %q", err, d, tt.want)
			}
			var ee *EgressError
			if tt.spec.GRPC == nil && !errors.As(err, &ee) {
				t.Errorf("Probe() = %v (%T), want it to wrap an *EgressError", err, err)
			}
		})
	}
	if d := rec.addresses(); len(d) != 0 {
		t.Errorf("connection attempts to %q, want none", d)
	}
}

// TestEgressRebinding: a name that resolved to an allowed address and later
// resolves into a denied range is denied on the later probe. The check is
// made on each connection, not once when the target is added.
func TestEgressRebinding(t *testing.T) {
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // each probe dials again
	}))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for _, kind := range []string{"http", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			var lookups atomic.Int64
			resolver := stubResolver(func(host string) ([]netip.Addr, error) {
				if host != "rebind.test" {
					return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
				}
				if lookups.Add(1) == 1 {
					return addrs("127.0.0.1"), nil
				}
				return addrs("169.254.169.254"), nil
			})
			f, rec := newEgressFactory(t, nil, resolver)
			hostPort := net.JoinHostPort("rebind.test", strconv.Itoa(port))
			spec := Spec{TCP: &TCPSpec{Address: hostPort}}
			if kind == "http" {
				spec = Spec{HTTP: &HTTPSpec{URL: "http://" + hostPort + "/healthz"}}
			}
			p := newProber(t, f, spec)
			if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
				t.Fatalf("first probe (127.0.0.1) = %v, want nil", err)
			}
			err := p.Probe(timeoutCtx(t, 10*time.Second))
			if d := Describe(err); !strings.Contains(d, "denied by egress policy") || !strings.Contains(d, "169.254.169.254") {
				t.Errorf("second probe (169.254.169.254) = %v, Describe %q, want denied by egress policy", err, d)
			}
			want := []string{"127.0.0.1:" + strconv.Itoa(port)}
			if got := rec.addresses(); !equalStrings(got, want) {
				t.Errorf("dialled %q, want only %q", got, want)
			}
			if n := lookups.Load(); n != 2 {
				t.Errorf("looked the name up %d times, want once per probe", n)
			}
		})
	}
}

// TestEgressOddEncodings: a host written as a number in a form only a C
// resolver reads is taken as the address it means, without a lookup, so
// the policy applies to that address and a probe reaches it (here a
// loopback server).
func TestEgressOddEncodings(t *testing.T) {
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	f, rec := newEgressFactory(t, nil, noLookups(t))
	for _, host := range []string{"2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7f000001"} {
		for _, spec := range []Spec{
			{HTTP: &HTTPSpec{URL: "http://" + host + ":" + port + "/"}},
			{TCP: &TCPSpec{Address: host + ":" + port}},
		} {
			p := newProber(t, f, spec)
			if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
				t.Errorf("%s probe of %s = %v, want nil", spec.Kind(), host, err)
			}
		}
	}
	for _, addr := range rec.addresses() {
		if addr != "127.0.0.1:"+port {
			t.Errorf("dialled %q, want 127.0.0.1:%s only", addr, port)
		}
	}

	// The same forms of 127.0.0.1 are denied when loopback is.
	noLoopback, err := ParseEgressPolicy(nil, []string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	strict, rec := newEgressFactory(t, noLoopback, noLookups(t))
	for _, host := range []string{"2130706433", "0x7f.1", "[::ffff:127.0.0.1]", "0.0.0.0"} {
		_, err := strict.New(Spec{HTTP: &HTTPSpec{URL: "http://" + host + ":" + port + "/"}})
		if err == nil || !strings.Contains(err.Error(), "denied by egress policy") {
			t.Errorf("New(http://%s) = %v, want denied by egress policy", host, err)
		}
	}
	if d := rec.addresses(); len(d) != 0 {
		t.Errorf("connection attempts to %q, want none", d)
	}
}

// TestEgressSkipsDeniedAddresses: of a name's addresses, the denied ones are
// skipped and the others tried.
func TestEgressSkipsDeniedAddresses(t *testing.T) {
	ln := silentAddr(t)
	port := ln[strings.LastIndex(ln, ":")+1:]
	f, rec := newEgressFactory(t, nil, stubResolver(func(string) ([]netip.Addr, error) {
		return addrs("169.254.169.254", "fe80::1", "127.0.0.1"), nil
	}))
	p := newProber(t, f, Spec{TCP: &TCPSpec{Address: "mixed.test:" + port}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	if got, want := rec.addresses(), []string{"127.0.0.1:" + port}; !equalStrings(got, want) {
		t.Errorf("dialled %q, want %q", got, want)
	}
}

// TestEgressLookupErrors: a failed lookup fails the probe with the lookup's
// error, and an empty answer reads like "no such host".
func TestEgressLookupErrors(t *testing.T) {
	f, rec := newEgressFactory(t, nil, stubResolver(func(host string) ([]netip.Addr, error) {
		if host == "empty.test" {
			return nil, nil
		}
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}))
	for host, want := range map[string]string{
		"broken.test": "lookup broken.test: server misbehaving",
		"empty.test":  "lookup empty.test: no such host",
	} {
		p := newProber(t, f, Spec{TCP: &TCPSpec{Address: host + ":80"}})
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); Describe(err) != want {
			t.Errorf("Probe(%s) = %v, Describe %q, want %q", host, err, Describe(err), want)
		}
	}
	if d := rec.addresses(); len(d) != 0 {
		t.Errorf("connection attempts to %q, want none", d)
	}
}

// TestGRPCAddressIsNotATarget: gRPC would read "unix:80" as a Unix socket
// and "dns:80" as a resolver; a probe takes every address as host:port and
// looks the host up with the Factory's resolver.
func TestGRPCAddressIsNotATarget(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	f, rec := newEgressFactory(t, nil, stubResolver(func(host string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, host)
		mu.Unlock()
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}))
	for _, addr := range []string{"unix:80", "unix-abstract:80", "passthrough:80"} {
		p := newGRPCTestProber(t, f, GRPCSpec{Address: addr})
		host := strings.TrimSuffix(addr, ":80")
		want := "lookup " + host + ": no such host"
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); !strings.Contains(Describe(err), want) {
			t.Errorf("Probe(%s) = %v, Describe %q, want %q", addr, err, Describe(err), want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 3 {
		t.Errorf("resolver asked for %q, want unix, unix-abstract and passthrough", asked)
	}
	if d := rec.addresses(); len(d) != 0 {
		t.Errorf("connection attempts to %q, want none", d)
	}
}

// TestDialControlBackstop: the net.Dialer under the guarded dialer checks
// the policy again on the socket address, so even a connect step handed an
// address nobody checked refuses it before connect(2).
func TestDialControlBackstop(t *testing.T) {
	noLoopback, err := ParseEgressPolicy(nil, []string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	defer ln.Close()
	d := newGuardedDialer(noLoopback, noLookups(t))
	conn, err := d.dial(t.Context(), "tcp", ln.Addr().String()) // the connect step alone, skipping DialContext's check
	if err == nil {
		conn.Close()
	}
	var ee *EgressError
	if !errors.As(err, &ee) {
		t.Errorf("dial(%s) = %v, want an *EgressError from Control", ln.Addr(), err)
	}
	if n := cl.accepted.Load(); n != 0 {
		t.Errorf("listener accepted %d connections, want 0", n)
	}

	for addr, want := range map[string]bool{
		"169.254.169.254:80":         false,
		"[::ffff:169.254.169.254]:1": false,
		"[fe80::1%lo]:80":            false,
		"127.0.0.1:80":               true,
		"[::1]:80":                   true,
	} {
		err := newGuardedDialer(DefaultEgressPolicy(), noLookups(t)).control(t.Context(), "tcp", addr, nil)
		if (err == nil) != want {
			t.Errorf("control(%s) = %v, want permitted %v", addr, err, want)
		}
	}
	if err := d.control(t.Context(), "tcp", "not an address", nil); err == nil {
		t.Error("control(not an address) = nil, want an error")
	}
}

// fakeConn is a connection that is never used but for Close.
type fakeConn struct {
	net.Conn
	addr   string
	closed atomic.Bool
}

func (c *fakeConn) Close() error { c.closed.Store(true); return nil }

// TestDialFallback: when the first family's address hangs, the other
// family's is tried after the fallback delay and wins; the hung attempt is
// cancelled and waited for.
func TestDialFallback(t *testing.T) {
	d := newGuardedDialer(DefaultEgressPolicy(), stubResolver(func(string) ([]netip.Addr, error) {
		return addrs("2001:db8::1", "192.0.2.1"), nil
	}))
	d.fallbackDelay = time.Millisecond
	hungDone := make(chan struct{})
	d.dial = func(ctx context.Context, _, address string) (net.Conn, error) {
		if address == "[2001:db8::1]:80" {
			<-ctx.Done()
			close(hungDone)
			return nil, ctx.Err()
		}
		return &fakeConn{addr: address}, nil
	}
	c, err := d.DialContext(timeoutCtx(t, 30*time.Second), "tcp", "dual.test:80")
	if err != nil {
		t.Fatalf("DialContext() = %v, want a connection", err)
	}
	if got := c.(*fakeConn).addr; got != "192.0.2.1:80" {
		t.Errorf("connected to %s, want the fallback 192.0.2.1:80", got)
	}
	select {
	case <-hungDone:
	default:
		t.Error("DialContext returned before the hung attempt was cancelled")
	}
}

// TestDialFallbackAfterFailure: when the first family fails outright, the
// other is tried at once, not after the delay; when both fail, the first
// error is returned.
func TestDialFallbackAfterFailure(t *testing.T) {
	d := newGuardedDialer(DefaultEgressPolicy(), stubResolver(func(string) ([]netip.Addr, error) {
		return addrs("192.0.2.1", "192.0.2.2", "2001:db8::1"), nil
	}))
	d.fallbackDelay = time.Hour
	var mu sync.Mutex
	var tried []string
	d.dial = func(_ context.Context, _, address string) (net.Conn, error) {
		mu.Lock()
		tried = append(tried, address)
		mu.Unlock()
		if address == "[2001:db8::1]:80" {
			return &fakeConn{addr: address}, nil
		}
		return nil, errors.New("refused " + address)
	}
	c, err := d.DialContext(timeoutCtx(t, 30*time.Second), "tcp", "dual.test:80")
	if err != nil {
		t.Fatalf("DialContext() = %v, want the IPv6 connection", err)
	}
	if got := c.(*fakeConn).addr; got != "[2001:db8::1]:80" {
		t.Errorf("connected to %s, want [2001:db8::1]:80", got)
	}
	if want := []string{"192.0.2.1:80", "192.0.2.2:80", "[2001:db8::1]:80"}; !equalStrings(tried, want) {
		t.Errorf("tried %q, want %q", tried, want)
	}

	d.dial = func(_ context.Context, _, address string) (net.Conn, error) {
		return nil, errors.New("refused " + address)
	}
	if _, err := d.DialContext(timeoutCtx(t, 30*time.Second), "tcp", "dual.test:80"); err == nil || err.Error() != "refused 192.0.2.1:80" {
		t.Errorf("DialContext() = %v, want the first error", err)
	}
}

// TestDialSerialTriesNext: within one family, a refused address is followed
// by the next one.
func TestDialSerialTriesNext(t *testing.T) {
	ln := silentAddr(t)
	port := ln[strings.LastIndex(ln, ":")+1:]
	d := newGuardedDialer(DefaultEgressPolicy(), stubResolver(func(string) ([]netip.Addr, error) {
		return addrs("127.0.0.2", "127.0.0.1"), nil // nothing listens on 127.0.0.2
	}))
	rec := &dialRecorder{}
	d.dial = rec.dial
	c, err := d.DialContext(timeoutCtx(t, 30*time.Second), "tcp", "two.test:"+port)
	if err != nil {
		t.Fatalf("DialContext() = %v", err)
	}
	c.Close()
	if got, want := rec.addresses(), []string{"127.0.0.2:" + port, "127.0.0.1:" + port}; !equalStrings(got, want) {
		t.Errorf("dialled %q, want %q", got, want)
	}
}

func TestDialContextBadInput(t *testing.T) {
	d := newGuardedDialer(DefaultEgressPolicy(), noLookups(t))
	d.dial = (&dialRecorder{}).dial
	for _, tt := range []struct{ network, address string }{
		{"ip", "127.0.0.1:53"},
		{"unix", "/tmp/x"},
		{"tcp", "127.0.0.1"},
		{"tcp", "127.0.0.1:http"},
		{"tcp", "127.0.0.1:65536"},
	} {
		if c, err := d.DialContext(t.Context(), tt.network, tt.address); err == nil {
			c.Close()
			t.Errorf("DialContext(%s, %s) = nil error", tt.network, tt.address)
		}
	}
}

func TestPartialDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tt := range []struct {
		left      time.Duration
		remaining int
		want      time.Duration
	}{
		{10 * time.Second, 2, 5 * time.Second},
		{10 * time.Second, 10, 2 * time.Second}, // at least two seconds each
		{time.Second, 3, time.Second},           // but no more than is left
	} {
		if got := partialDeadline(now, now.Add(tt.left), tt.remaining).Sub(now); got != tt.want {
			t.Errorf("partialDeadline(%v left, %d remaining) = %v, want %v", tt.left, tt.remaining, got, tt.want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

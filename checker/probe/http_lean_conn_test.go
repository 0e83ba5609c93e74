package probe

// The lean prober's connections: how many it opens and keeps, what it
// does when a server hangs up, hangs or resets, and what it holds between
// probes. Its answers against net/http's are in http_lean_test.go.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

func closeProber(p Prober) {
	if c, ok := p.(interface{ Close() error }); ok {
		c.Close()
	}
}

// probeN probes n times, each under its own 10s timeout, failing the test
// on an error.
func probeN(t *testing.T, p Prober, n int) {
	t.Helper()
	for i := range n {
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
}

// leanConnectionCases are ways a server may end its responses, with the
// connections 5 probes open.
var leanConnectionCases = func() []leanConnectionCase {
	big := "HTTP/1.1 200 OK\r\nContent-Length: " + "1048576" + "\r\n\r\n" + strings.Repeat("x", 1<<20)
	return []leanConnectionCase{
		{name: "keep-alive", answer: reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), want: 1},
		{name: "HEAD", answer: reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), method: "HEAD", want: 1},
		// Heads over the read buffer, which http.ReadResponse reads.
		{name: "head over the buffer", answer: reply("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 2\r\n\r\nok"), want: 1},
		{name: "HEAD, head over the buffer", answer: reply("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 2\r\n\r\n"), method: "HEAD", want: 1},
		{name: "chunked with trailer", answer: reply("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n"), want: 1},
		{name: "1xx first", answer: reply("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"), want: 1},
		{name: "Connection close", answer: replyAndClose("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), want: 5},
		{name: "Connection close, kept open", answer: reply("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 2\r\n\r\nok"), want: 5},
		{name: "HTTP/1.0", answer: replyAndClose("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"), want: 5},
		{name: "HTTP/1.0 keep-alive", answer: reply("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"), want: 1},
		{name: "body until close", answer: replyAndClose("HTTP/1.1 200 OK\r\n\r\nok"), want: 5},
		{name: "body over the cap", answer: reply(big), want: 5},
		// The server closes every connection after its response without
		// saying so: each probe finds its kept connection closed and
		// redials within the same probe.
		{name: "closed while idle", answer: replyAndClose("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), want: 5},
		{name: "reset while idle", answer: replyAndReset("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), want: 5},
	}
}()

type leanConnectionCase struct {
	name   string
	answer func(net.Conn) bool
	method string
	want   int64 // connections for 5 probes
}

// TestHTTPLeanConnections counts the connections probes open for each way
// a server may end a response.
func TestHTTPLeanConnections(t *testing.T) {
	tests := leanConnectionCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, tt.answer)
			f := newTestFactory(t)
			lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url(), Method: tt.method})
			probeN(t, lean, 5)
			if n := srv.accepted.Load(); n != tt.want {
				t.Errorf("5 probes opened %d connections, want %d", n, tt.want)
			}
		})
	}
}

// TestHTTPLeanKeptConnectionBudget: past the Factory's bound on kept
// connections a prober closes its connection after each probe (and the
// next probe dials), so a fleet larger than the open-file limit keeps
// probing; a connection given back (Close) makes room for another.
func TestHTTPLeanKeptConnectionBudget(t *testing.T) {
	ok := reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	srvs := []*rawServer{newRawServer(t, ok), newRawServer(t, ok), newRawServer(t, ok)}
	f := NewFactoryWith(FactoryOptions{MaxIdleConns: 2})
	t.Cleanup(f.Close)
	var probers []*leanProber
	for _, s := range srvs {
		p, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: s.url()})
		probers = append(probers, p)
	}
	keeps := func() [3]bool { return [3]bool{probers[0].KeepsConn(), probers[1].KeepsConn(), probers[2].KeepsConn()} }
	if got := keeps(); got != [3]bool{} {
		t.Fatalf("KeepsConn before any probe: %v, want none", got)
	}
	for _, p := range probers {
		probeN(t, p, 3)
	}
	if a, b, c := srvs[0].accepted.Load(), srvs[1].accepted.Load(), srvs[2].accepted.Load(); a != 1 || b != 1 || c != 3 {
		t.Fatalf("connections with room for 2 kept: %d, %d, %d; want 1, 1, 3", a, b, c)
	}
	if got := keeps(); got != [3]bool{true, true, false} {
		t.Fatalf("KeepsConn with room for 2 kept: %v, want the first two", got)
	}
	probers[0].Close()
	probeN(t, probers[2], 3)
	if c := srvs[2].accepted.Load(); c != 4 {
		t.Fatalf("after one prober gave its connection back, the third opened %d in all, want 4 (one more, then kept)", c)
	}
	if got := keeps(); got != [3]bool{false, true, true} {
		t.Fatalf("KeepsConn after the first gave its connection to the third: %v", got)
	}
	tp, err := f.New(Spec{TCP: &TCPSpec{Address: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := tp.(interface{ KeepsConn() bool }); !ok || k.KeepsConn() {
		t.Errorf("a TCP prober has no KeepsConn, or it says true; want false (every probe dials)")
	}
	if got := defaultMaxIdle(20000); got != 15000 {
		t.Errorf("defaultMaxIdle(20000) = %d, want 15000", got)
	}
	if got := defaultMaxIdle(0); got != 4096 {
		t.Errorf("defaultMaxIdle(unknown) = %d, want 4096", got)
	}
}

// TestHTTPLeanNoRetryOnFreshConnection: a server that hangs up on every
// request fails each probe once, on the connection it dialled: only a kept
// connection is worth a second try.
func TestHTTPLeanNoRetryOnFreshConnection(t *testing.T) {
	srv := newRawServer(t, replyAndClose(""))
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	for range 3 {
		err := lean.Probe(timeoutCtx(t, 10*time.Second))
		if d := Describe(err); d != "connection closed by the server" {
			t.Fatalf("Probe() = %v (%q), want the server's EOF", err, d)
		}
	}
	if n := srv.accepted.Load(); n != 3 {
		t.Errorf("3 probes opened %d connections, want 3", n)
	}
}

// TestHTTPLeanHangingBody: a status followed by a body that never comes
// counts as the status, as with net/http, once the deadline ends the read.
func TestHTTPLeanHangingBody(t *testing.T) {
	srv := newRawServer(t, replyAndHold("HTTP/1.1 503 Unavailable\r\nContent-Length: 10\r\n\r\n"))
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	err := probeWithin(t, timeoutCtx(t, testscale.D(200*time.Millisecond)), lean)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 503 {
		t.Errorf("Probe() = %v, want status 503", err)
	}
}

// TestHTTPLeanCancelKeepsWorking: a probe cancelled while it waits leaves
// no past deadline behind: the next probe passes on a new connection.
func TestHTTPLeanCancelKeepsWorking(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	srv := newRawServer(t, func(c net.Conn) bool {
		if !first.Swap(true) {
			<-release
		}
		_, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
		return err == nil
	})
	defer close(release)
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- lean.Probe(ctx) }()
	waitFor(t, func() bool { return len(srv.requestHeads()) > 0 }, "the request to arrive")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || Describe(err) != "canceled" {
		t.Fatalf("Probe() = %v, want it to wrap context.Canceled", err)
	}
	probeN(t, lean, 2)
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("opened %d connections, want 2 (the cancelled one is not kept)", n)
	}
}

// TestHTTPLeanClose: Close closes the kept connection (the server sees it
// end), is idempotent, and a probe afterwards works without keeping one.
func TestHTTPLeanClose(t *testing.T) {
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f := newTestFactory(t)
	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL}}).(*leanProber)
	probeN(t, p, 2)
	p.Close()
	p.Close()
	waitFor(t, func() bool { return closed.Load() == 1 }, "the server to see the kept connection closed")
	probeN(t, p, 1)
	waitFor(t, func() bool { return closed.Load() == 2 }, "the server to see the probe's connection closed")
	f.leanMu.Lock()
	_, known := f.lean[p]
	f.leanMu.Unlock()
	if known {
		t.Error("the Factory still holds the closed prober")
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(testscale.D(10 * time.Second)); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHTTPLeanEgress: the lean path dials through the guarded dialer: a
// name that resolves to a denied address is refused at dial time, and
// nothing reaches the server.
func TestHTTPLeanEgress(t *testing.T) {
	srv := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	_, port, _ := net.SplitHostPort(srv.ln.Addr().String())
	f := NewFactoryWith(FactoryOptions{
		Egress:   &EgressPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Resolver: staticResolver{"rebind.test": {netip.MustParseAddr("127.0.0.1")}},
	})
	t.Cleanup(f.Close)
	lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: "http://rebind.test:" + port + "/"})
	err := lean.Probe(timeoutCtx(t, 10*time.Second))
	var ee *EgressError
	if !errors.As(err, &ee) {
		t.Fatalf("Probe() = %v, want an *EgressError", err)
	}
	if d, want := Describe(err), "rebind.test resolves to 127.0.0.1, which is denied by egress policy (deny 127.0.0.0/8)"; d != want {
		t.Errorf("Describe = %q, want %q", d, want)
	}
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("the server accepted %d connections, want 0", n)
	}
}

// staticResolver answers from a map.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := r[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestHTTPLeanConcurrent: probes of one prober from many goroutines at once
// all pass, and at most one connection stays kept.
func TestHTTPLeanConcurrent(t *testing.T) {
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	lean := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: srv.URL}}).(*leanProber)
	defer lean.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8*10)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				errs <- lean.Probe(timeoutCtx(t, 10*time.Second))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A kept connection holds no read buffer between probes: a probe read
// through Probe's code takes one from the shared pool and gives it back
// when the connection is kept with nothing buffered, so that thousands of
// idle kept connections hold no buffers. Each way of ending a response
// that keeps the connection, the slow path's included.
func TestHTTPLeanKeptConnectionHoldsNoBuffer(t *testing.T) {
	for _, tt := range leanConnectionCases {
		if tt.want != 1 {
			continue // not kept
		}
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, tt.answer)
			lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url(), Method: tt.method})
			probeN(t, lean, 3)
			lean.mu.Lock()
			c := lean.idle
			lean.mu.Unlock()
			if c == nil {
				t.Fatal("no kept connection after 3 probes")
			}
			if c.br != nil {
				t.Errorf("the kept connection holds a %d-byte read buffer between probes", c.br.Size())
			}
			if n := srv.accepted.Load(); n != 1 {
				t.Errorf("3 probes opened %d connections, want 1", n)
			}
		})
	}
}

// A dial connects to the address the URL names: an IPv4 address and port
// parsed once, when the prober is made, another address parsed at the
// dial, and a host name not at all (the blocking dial resolves it).
func TestLeanDialAddr(t *testing.T) {
	f := newTestFactory(t)
	for _, c := range []struct {
		url    string
		want   string // "" when ok is false
		parsed bool   // parsed when the prober was made
	}{
		{"http://127.0.0.7:8080/healthz", "127.0.0.7:8080", true},
		{"http://10.1.2.3/healthz", "10.1.2.3:80", true},
		{"http://[::1]:9000/healthz", "[::1]:9000", false},
		{"http://[::ffff:127.0.0.1]:80/", "[::ffff:127.0.0.1]:80", false},
		{"http://localhost:8080/healthz", "", false},
	} {
		lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: c.url})
		addr, ok := lean.dialAddr()
		if got := addr.String(); ok != (c.want != "") || ok && got != c.want {
			t.Errorf("%s: dialAddr = %s, %v; want %q", c.url, got, ok, c.want)
		}
		if parsed := lean.port != 0; parsed != c.parsed {
			t.Errorf("%s: parsed when made %v, want %v", c.url, parsed, c.parsed)
		}
	}
}

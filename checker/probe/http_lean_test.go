package probe

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// rawServer serves canned bytes on 127.0.0.1: for each request it reads
// (up to its blank line) it calls answer, which writes on the connection
// and says whether to keep serving it. It counts the connections it
// accepts and records the request heads it reads.
type rawServer struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	heads    []string
	wg       sync.WaitGroup
}

func newRawServer(t testing.TB, answer func(c net.Conn) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	var conns sync.Map
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			conns.Store(c, true)
			s.wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						head.WriteString(line)
						if line == "\r\n" {
							break
						}
					}
					s.mu.Lock()
					s.heads = append(s.heads, head.String())
					s.mu.Unlock()
					if !answer(c) {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) requestHeads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.heads...)
}

// reply answers every request with resp and keeps the connection.
func reply(resp string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		_, err := c.Write([]byte(resp))
		return err == nil
	}
}

// replyAndClose answers with resp and closes the connection.
func replyAndClose(resp string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		c.Write([]byte(resp))
		return false
	}
}

// replyAndReset answers with resp and resets the connection.
func replyAndReset(resp string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		c.Write([]byte(resp))
		c.(*net.TCPConn).SetLinger(0)
		return false
	}
}

// replyAndHold answers with resp and then sends nothing more, holding the
// connection open until the client closes it.
func replyAndHold(resp string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		c.Write([]byte(resp))
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return false
			}
		}
	}
}

// leanAndNetHTTP returns the lean prober for s and the net/http prober the
// Factory would have used before, failing the test if s is not served by
// the lean path.
func leanAndNetHTTP(t *testing.T, f *Factory, s *HTTPSpec) (lean *leanProber, std *httpProber) {
	t.Helper()
	p := newProber(t, f, Spec{HTTP: s})
	lean, ok := p.(*leanProber)
	if !ok {
		t.Fatalf("New(%+v) = %T, want the lean prober", s, p)
	}
	t.Cleanup(func() { lean.Close() })
	return lean, newNetHTTPProber(f.client, s)
}

// leanAnswerCases are answers a server may give to a probe's request.
var leanAnswerCases = func() []leanAnswerCase {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	return []leanAnswerCase{
		{name: "200", answer: reply(ok)},
		// A head larger than the kept connection's read buffer takes
		// http.ReadResponse's path on the same bytes.
		{name: "head over the buffer", answer: reply("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 2\r\n\r\nok")},
		{name: "503 head over the buffer", answer: reply("HTTP/1.1 503 Unavailable\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 0\r\n\r\n")},
		{name: "200 HEAD", answer: reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), method: "HEAD"},
		// On the slow path too a HEAD response has no body: were the
		// request net/http reads it with not a HEAD, it would wait for
		// two bytes that never come.
		{name: "HEAD head over the buffer", answer: reply("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 2\r\n\r\n"), method: "HEAD"},
		{name: "HEAD 503 head over the buffer", answer: reply("HTTP/1.1 503 Unavailable\r\nX-Pad: " + strings.Repeat("p", 3*leanBufferSize) + "\r\nContent-Length: 2\r\n\r\n"), method: "HEAD", expected: []int{200}},
		{name: "HEAD head cut short", answer: replyAndClose("HTTP/1.1 200 OK\r\nX-A: 1"), method: "HEAD"},
		{name: "HEAD garbage", answer: replyAndClose("garbage\r\n\r\n"), method: "HEAD"},
		{name: "204", answer: reply("HTTP/1.1 204 No Content\r\n\r\n")},
		{name: "299", answer: reply("HTTP/1.1 299 Odd\r\nContent-Length: 0\r\n\r\n")},
		{name: "300", answer: reply("HTTP/1.1 300 Multiple\r\nContent-Length: 0\r\n\r\n")},
		{name: "503", answer: reply("HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\ndown")},
		{name: "503 expected", answer: reply("HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n"), expected: []int{503}},
		{name: "200 not expected", answer: reply(ok), expected: []int{204}},
		{name: "no reason", answer: reply("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n")},
		{name: "bare LF", answer: reply("HTTP/1.1 200 OK\nContent-Length: 0\n\n")},
		{name: "spaces before code", answer: reply("HTTP/1.1   200 OK\r\nContent-Length: 0\r\n\r\n")},
		{name: "code 099", holds: true, answer: reply("HTTP/1.1 099 Low\r\n\r\n")},
		{name: "code 600", answer: reply("HTTP/1.1 600 High\r\nContent-Length: 0\r\n\r\n")},
		{name: "code +12", answer: replyAndClose("HTTP/1.1 +12 Signed\r\n\r\n")},
		{name: "code -12", answer: replyAndClose("HTTP/1.1 -12 Signed\r\n\r\n")},
		{name: "code abc", answer: replyAndClose("HTTP/1.1 abc OK\r\n\r\n")},
		{name: "code 2000", answer: replyAndClose("HTTP/1.1 2000 OK\r\n\r\n")},
		{name: "HTTP/2.0 line", answer: replyAndClose("HTTP/2.0 200 OK\r\n\r\n")},
		{name: "lower-case version", answer: replyAndClose("http/1.1 200 OK\r\n\r\n")},
		{name: "garbage", answer: replyAndClose("garbage\r\n\r\n")},
		{name: "binary then close", answer: replyAndClose("\x00\x00\x06\x04\x00\x00\x00\x00\x00")},
		{name: "binary line", answer: replyAndClose("\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x05\x00\x00@\x00\r\n")},
		{name: "header without colon", answer: replyAndClose("HTTP/1.1 200 OK\r\nbad header\r\n\r\n")},
		{name: "folded first header", answer: replyAndClose("HTTP/1.1 200 OK\r\n folded\r\n\r\n")},
		{name: "folded header", answer: reply("HTTP/1.1 200 OK\r\nX-A: 1\r\n  more\r\nContent-Length: 0\r\n\r\n")},
		{name: "control in value", answer: replyAndClose("HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n")},
		{name: "bad Content-Length", answer: replyAndClose("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")},
		{name: "two Content-Lengths", answer: replyAndClose("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")},
		{name: "same Content-Length twice", answer: reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")},
		{name: "gzip transfer encoding", answer: replyAndClose("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")},
		{name: "chunked", answer: reply("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n")},
		{name: "chunked and Content-Length", answer: reply("HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")},
		{name: "bad chunk", answer: replyAndClose("HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")},
		{name: "HTTP/1.0", answer: replyAndClose("HTTP/1.0 200 OK\r\n\r\nok")},
		{name: "HTTP/1.0 chunked", answer: replyAndClose("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nok")},
		{name: "100 then 200", answer: reply("HTTP/1.1 100 Continue\r\n\r\n" + ok)},
		{name: "103 then 503", answer: reply("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 503 No\r\nContent-Length: 0\r\n\r\n")},
		{name: "101", answer: replyAndClose("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nrest")},
		{name: "101 expected", answer: replyAndClose("HTTP/1.1 101 Switching Protocols\r\n\r\n"), expected: []int{101}},
		{name: "short body", answer: replyAndClose("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")},
		{name: "body held open", holds: true, answer: replyAndHold("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")},
		{name: "head cut short", answer: replyAndClose("HTTP/1.1 200 OK\r\nX-A: 1")},
		{name: "head held open", holds: true, answer: replyAndHold("HTTP/1.1 200 OK\r\nX-A: 1")},
		{name: "100 then close", answer: replyAndClose("HTTP/1.1 100 Continue\r\n\r\n")},
		{name: "space and short code then close", answer: replyAndClose(" 0")},
		{name: "nothing", answer: replyAndClose("")},
		{name: "reset", answer: replyAndReset("")},
		{name: "silence", holds: true, answer: replyAndHold("")},
	}
}()

type leanAnswerCase struct {
	name     string
	answer   func(net.Conn) bool
	holds    bool // the answer never ends: the probe ends at its timeout
	expected []int
	method   string
}

// timeout is a probe's timeout against the case's server: short where the
// probe must time out, long enough elsewhere for a probe to finish on a
// loaded machine, so that no answer is cut short into a timeout.
func (c leanAnswerCase) timeout() time.Duration {
	if c.holds {
		return testscale.D(300 * time.Millisecond)
	}
	return testscale.D(10 * time.Second)
}

// TestHTTPLeanMatchesNetHTTP is the lean prober's contract: against the
// same server answering the same bytes, it passes or fails as the net/http
// prober does, with the same error text, the same Describe and the same
// errors.Is answers.
func TestHTTPLeanMatchesNetHTTP(t *testing.T) {
	tests := leanAnswerCases
	f := newTestFactory(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, tt.answer)
			lean, std := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url() + "/healthz", ExpectedStatus: tt.expected, Method: tt.method})
			run := func(p Prober) error {
				return probeWithin(t, timeoutCtx(t, tt.timeout()), p)
			}
			sameProbeError(t, "lean", run(lean), "net/http", run(std))
		})
	}
}

// sameProbeError fails t unless got and want are the same result: both
// nil, or errors with the same text (but for the client's own port), the
// same Describe, the same errors.Is answers and the same StatusError.
func sameProbeError(t *testing.T, gotName string, got error, wantName string, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s Probe() = %v, %s = %v", gotName, got, wantName, want)
	}
	if want == nil {
		return
	}
	if Describe(got) != Describe(want) {
		t.Errorf("%s Describe = %q, %s %q\n%s: %v\n%s: %v", gotName, Describe(got), wantName, Describe(want), gotName, got, wantName, want)
	}
	// Texts naming a socket hold the client's own port.
	if !strings.Contains(want.Error(), "tcp 127.0.0.1") && got.Error() != want.Error() {
		t.Errorf("%s error:\n  %v\n%s:\n  %v", gotName, got, wantName, want)
	}
	for _, target := range []error{context.DeadlineExceeded, context.Canceled, syscall.ECONNREFUSED, syscall.ECONNRESET} {
		if errors.Is(got, target) != errors.Is(want, target) {
			t.Errorf("errors.Is(%s, %v) = %v, %s %v", gotName, target, errors.Is(got, target), wantName, errors.Is(want, target))
		}
	}
	var gotSE, wantSE *StatusError
	if errors.As(got, &gotSE) != errors.As(want, &wantSE) || (gotSE != nil && *gotSE != *wantSE) {
		t.Errorf("%s StatusError %v, %s %v", gotName, gotSE, wantName, wantSE)
	}
}

// leanRequestCases are specs whose requests the lean prober sends, and
// whether each is plain: kept as pieces of its URL, not as bytes.
func leanRequestCases(srv *rawServer) []struct {
	spec  HTTPSpec
	plain bool
} {
	addr := srv.ln.Addr().String()
	return []struct {
		spec  HTTPSpec
		plain bool
	}{
		{HTTPSpec{URL: srv.url()}, false}, // net/http sends "/", which the URL does not hold
		{HTTPSpec{URL: srv.url() + "/healthz"}, true},
		{HTTPSpec{URL: srv.url() + "/healthz?full=1&x=%20y#frag", Method: "HEAD"}, true},
		{HTTPSpec{URL: srv.url() + "/a%2Fb/ü"}, true}, // the URL the prober keeps is escaped, as sent
		{HTTPSpec{URL: "HTTP://" + addr + "/Up"}, true},
		{HTTPSpec{URL: srv.url() + "/a%2Fb/ü", Headers: map[string]string{"host": "svc.example:8080", "x-token": " s3cret\t", "X-Token": "two", "Accept": "*/*"}}, false},
		{HTTPSpec{URL: srv.url() + "/x", Headers: map[string]string{"User-Agent": "lb-check", "Authorization": "Bearer x"}}, false},
		{HTTPSpec{URL: "http://user:pa%20ss@" + addr + "/private"}, false},
		{HTTPSpec{URL: "http://user@" + addr + "/private"}, false},
	}
}

// TestHTTPLeanRequestBytes: the lean prober sends the bytes net/http sends
// for the same spec, whether it keeps them or their pieces in the URL.
func TestHTTPLeanRequestBytes(t *testing.T) {
	srv := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	f := newTestFactory(t)
	for _, tt := range leanRequestCases(srv) {
		s := tt.spec
		lean, std := leanAndNetHTTP(t, f, &s)
		if plain := lean.plain != (plainRequest{}); plain != tt.plain || plain == (lean.req != nil) {
			t.Errorf("%+v: plain %v with %d bytes kept, want plain %v", s, plain, len(lean.req), tt.plain)
		}
		for _, p := range []Prober{std, lean} {
			if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
				t.Fatalf("%+v: %v", s, err)
			}
		}
		heads := srv.requestHeads()
		if want, got := heads[len(heads)-2], heads[len(heads)-1]; got != want {
			t.Errorf("%+v: lean request\n%q\nnet/http request\n%q", s, got, want)
		}
	}
}

// TestHTTPLeanErrorURL: the URL in the lean prober's errors is the one
// net/http's client shows, however the spec spells it: normalised, with a
// password hidden, and the same whether the prober could keep the spec's
// own text or had to make its own.
func TestHTTPLeanErrorURL(t *testing.T) {
	srv := newRawServer(t, replyAndClose("garbage\r\n\r\n"))
	addr := srv.ln.Addr().String()
	f := newTestFactory(t)
	for _, u := range []string{
		srv.url(),
		srv.url() + "/healthz?x=%20y#frag",
		"HTTP://" + addr + "/healthz",
		"http://user:pa%20ss@" + addr + "/private",
		"http://user@" + addr + "/private",
		"http://" + addr + "/a b",
	} {
		for _, method := range []string{"", "HEAD"} {
			s := &HTTPSpec{URL: u, Method: method}
			lean, std := leanAndNetHTTP(t, f, s)
			want, got := std.Probe(timeoutCtx(t, 10*time.Second)), lean.Probe(timeoutCtx(t, 10*time.Second))
			if want == nil || got == nil || got.Error() != want.Error() {
				t.Errorf("%s %s: lean error\n  %v\nnet/http:\n  %v", method, u, got, want)
			}
			if strings.Contains(got.Error(), "pa%20ss") || strings.Contains(got.Error(), "pa ss") {
				t.Errorf("%s: the error shows the password: %v", u, got)
			}
		}
	}
}

// TestHTTPLeanChosen: only what the lean path can send exactly takes it.
func TestHTTPLeanChosen(t *testing.T) {
	f := newTestFactory(t)
	for _, tt := range []struct {
		spec HTTPSpec
		lean bool
	}{
		{HTTPSpec{URL: "http://127.0.0.1:8080/healthz"}, true},
		{HTTPSpec{URL: "http://svc.internal/", Method: "HEAD", Headers: map[string]string{"Host": "a.example", "X-A": "1"}}, true},
		{HTTPSpec{URL: "https://127.0.0.1:8443/healthz"}, false},
		{HTTPSpec{URL: "http://bücher.example/"}, false},
		{HTTPSpec{URL: "http://127.0.0.1/", Headers: map[string]string{"connection": "close"}}, false},
		{HTTPSpec{URL: "http://127.0.0.1/", Headers: map[string]string{"Transfer-Encoding": "chunked"}}, false},
		{HTTPSpec{URL: "http://127.0.0.1/", Headers: map[string]string{"Upgrade": "h2c"}}, false},
	} {
		p := newProber(t, f, Spec{HTTP: &tt.spec})
		if _, lean := p.(*leanProber); lean != tt.lean {
			t.Errorf("New(%+v) = %T, want lean %v", tt.spec, p, tt.lean)
		}
		closeProber(p)
	}
}

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

package probe

import (
	"bufio"
	"context"
	"errors"
	"net"
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

package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// newHTTPServer starts a plain HTTP/1.1 test server that counts the TCP
// connections it accepts.
func newHTTPServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// newTestFactory returns a NewFactory that is closed when the test ends.
func newTestFactory(t *testing.T) *Factory {
	t.Helper()
	f := NewFactory()
	t.Cleanup(f.Close)
	return f
}

func TestHTTPStatus(t *testing.T) {
	// /code/N answers status N.
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/code/"))
		if err != nil {
			code = http.StatusBadRequest
		}
		w.WriteHeader(code)
	}))
	f := newTestFactory(t)
	tests := []struct {
		name     string
		code     int
		expected []int
		wantCode int // 0 means pass
	}{
		{name: "200 passes by default", code: 200},
		{name: "204 passes by default", code: 204},
		{name: "299 passes by default", code: 299},
		{name: "300 fails by default", code: 300, wantCode: 300},
		{name: "503 fails by default", code: 503, wantCode: 503},
		{name: "404 fails by default", code: 404, wantCode: 404},
		{name: "in list passes", code: 204, expected: []int{200, 204}},
		{name: "5xx in list passes", code: 503, expected: []int{503}},
		{name: "2xx not in list fails", code: 200, expected: []int{204}, wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/code/" + strconv.Itoa(tt.code), ExpectedStatus: tt.expected}})
			err := p.Probe(timeoutCtx(t, 10*time.Second))
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("Probe() = %v, want nil", err)
				}
				return
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Code != tt.wantCode {
				t.Fatalf("Probe() = %v (%T), want *StatusError{%d}", err, err, tt.wantCode)
			}
			want := "status " + strconv.Itoa(tt.wantCode)
			if err.Error() != want || Describe(err) != want {
				t.Errorf("Error() = %q, Describe = %q, want %q for both", err.Error(), Describe(err), want)
			}
		})
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	var targetHits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusFound)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
	})
	srv, _ := newHTTPServer(t, mux)
	f := newTestFactory(t)

	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/old"}})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusFound {
		t.Errorf("Probe() = %v, want status 302", err)
	}

	p = newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/old", ExpectedStatus: []int{302}}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Errorf("Probe() with 302 expected = %v, want nil", err)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("redirect target was requested %d times, want 0", n)
	}
}

func TestHTTPRequest(t *testing.T) {
	type seen struct {
		method, host, token, userAgent, acceptEncoding string
	}
	got := make(chan seen, 1)
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.Host, r.Header.Get("X-Token"), r.UserAgent(), r.Header.Get("Accept-Encoding")}
	}))
	f := newTestFactory(t)
	tests := []struct {
		name string
		spec HTTPSpec
		want seen
	}{
		{
			name: "defaults",
			spec: HTTPSpec{URL: srv.URL},
			want: seen{method: "GET", host: srv.Listener.Addr().String(), userAgent: "pulse-probe/1"},
		},
		{
			name: "HEAD",
			spec: HTTPSpec{URL: srv.URL, Method: "HEAD"},
			want: seen{method: "HEAD", host: srv.Listener.Addr().String(), userAgent: "pulse-probe/1"},
		},
		{
			name: "headers and Host",
			spec: HTTPSpec{URL: srv.URL, Headers: map[string]string{"host": "svc.example", "X-Token": "s3cret"}},
			want: seen{method: "GET", host: "svc.example", token: "s3cret", userAgent: "pulse-probe/1"},
		},
		{
			name: "user agent override",
			spec: HTTPSpec{URL: srv.URL, Headers: map[string]string{"User-Agent": "lb-check"}},
			want: seen{method: "GET", host: srv.Listener.Addr().String(), userAgent: "lb-check"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProber(t, f, Spec{HTTP: &tt.spec})
			if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
				t.Fatalf("Probe() = %v, want nil", err)
			}
			// acceptEncoding stays "": DisableCompression, so no gzip is asked for.
			if s := <-got; s != tt.want {
				t.Errorf("server saw %+v, want %+v", s, tt.want)
			}
		})
	}
}

// TestHTTPReusesConnection shows that bodies up to the 64 KiB cap are
// drained, so the keep-alive connection serves the next probe. Bodies are
// sent chunked (no Content-Length), a flush per KiB.
func TestHTTPReusesConnection(t *testing.T) {
	for _, size := range []int{0, 1 << 10, 64 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			srv, conns := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				chunk := make([]byte, 1<<10)
				for sent := 0; sent < size; sent += len(chunk) {
					w.Write(chunk[:min(len(chunk), size-sent)])
					w.(http.Flusher).Flush()
				}
			}))
			f := newTestFactory(t)
			p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL}})
			for i := range 3 {
				if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("3 probes opened %d connections, want 1", n)
			}
		})
	}
}

// TestHTTPEndlessBodyPasses shows the cap: a 200 whose body never ends
// passes, and the prober hangs up on it (the handler's writes fail) well
// before the deadline instead of reading until it expires.
func TestHTTPEndlessBodyPasses(t *testing.T) {
	handlerDone := make(chan struct{})
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return // the prober hung up
			}
		}
	}))
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	ctx := timeoutCtx(t, 30*time.Second)
	if err := p.Probe(ctx); err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	<-handlerDone
	if ctx.Err() != nil {
		t.Error("the body was held open until the deadline; the probe must stop at the cap and close it")
	}
}

// TestHTTPSLargeBodyReusesConnection probes over HTTPS with HTTP/2, where a
// body over the cap is cut off by resetting its stream, so even a 1 MiB body
// passes and the connection is reused.
func TestHTTPSLargeBodyReusesConnection(t *testing.T) {
	cert, roots := testCert(t)
	protos := make(chan int, 3)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.ProtoMajor
		chunk := make([]byte, 32<<10)
		for range 32 { // 1 MiB
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	f := &Factory{rootCAs: roots}
	t.Cleanup(f.Close)
	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	for i := range 3 {
		if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		if proto := <-protos; proto != 2 {
			t.Fatalf("probe %d used HTTP/%d, want HTTP/2", i, proto)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("3 probes opened %d connections, want 1", n)
	}
}

func TestHTTPSVerifiesCertificate(t *testing.T) {
	cert, _ := testCert(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// NewFactory trusts only the system roots, not the test's own CA.
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	if err == nil || !strings.Contains(Describe(err), "certificate") {
		t.Errorf("Probe() = %v (Describe %q), want a certificate error", err, Describe(err))
	}
}

func TestHTTPHungServerTimesOut(t *testing.T) {
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: "http://" + silentAddr(t) + "/healthz"}})
	err := probeWithin(t, timeoutCtx(t, 200*time.Millisecond), p)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Probe() = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if d := Describe(err); d != "timeout" {
		t.Errorf("Describe = %q, want %q", d, "timeout")
	}
}

func TestHTTPCancel(t *testing.T) {
	entered := make(chan struct{})
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	}))
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Probe(ctx) }()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Probe() = %v, want it to wrap context.Canceled", err)
	}
}

func TestHTTPRefused(t *testing.T) {
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: "http://" + refusedAddr(t) + "/"}})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Probe() = %v, want connection refused", err)
	}
	if d := Describe(err); d != "connection refused" {
		t.Errorf("Describe = %q, want %q", d, "connection refused")
	}
}

// TestHTTPSlowButInTime holds the response until the probe is known to be
// waiting for it, then lets it through: the probe passes.
func TestHTTPSlowButInTime(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	srv, _ := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: srv.URL}})
	done := make(chan error, 1)
	go func() { done <- p.Probe(timeoutCtx(t, 30*time.Second)) }()
	<-entered
	select {
	case err := <-done:
		t.Fatalf("Probe returned %v before the server answered", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Probe() = %v, want nil", err)
	}
}

// TestHTTPNotHTTP: a server that answers in binary gets a description
// that says so without repeating the bytes.
func TestHTTPNotHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Answer once the request has arrived, so the client is waiting
		// for a response: an HTTP/2 SETTINGS frame, then a line break.
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			return
		}
		c.Write([]byte("\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x05\x00\x00@\x00\r\n"))
	}()
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: "http://" + ln.Addr().String() + "/healthz"}})
	err = p.Probe(timeoutCtx(t, 10*time.Second))
	<-served
	if d, want := Describe(err), "malformed HTTP response (not HTTP?)"; d != want {
		t.Errorf("Probe() = %v, Describe %q, want %q", err, d, want)
	}
}

// TestHTTPAtGRPCPort: an HTTP/1.1 probe of a gRPC server gets its HTTP/2
// settings frame, as a malformed response or, when the frame comes before
// the request is written, as an unsolicited one. Either way the text says
// "not HTTP?".
func TestHTTPAtGRPCPort(t *testing.T) {
	addr, _, _ := startHealth(t, nil)
	p := newProber(t, newTestFactory(t), Spec{HTTP: &HTTPSpec{URL: "http://" + addr + "/healthz"}})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	switch d := Describe(err); d {
	case "malformed HTTP response (not HTTP?)", "unsolicited response (not HTTP?)":
	default:
		t.Errorf("Probe() = %v, Describe %q, want it to say not HTTP", err, d)
	}
}

// A connection the Factory does not keep (its budget of kept connections
// is spent) is closed with a reset once its answer is read, as HAProxy
// ends its checks: the server reads "connection reset", and nothing is
// left in TIME_WAIT on the checker's side.
func TestConnectionNotKeptIsReset(t *testing.T) {
	addr, after := answerOnceThenRead(t)
	f := NewFactoryWith(FactoryOptions{MaxIdleConns: -1}) // keeps none
	t.Cleanup(f.Close)
	p := newProber(t, f, Spec{HTTP: &HTTPSpec{URL: "http://" + addr + "/healthz"}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if err := <-after; !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the server read %v after the answer, want a reset", err)
	}
}

// answerOnceThenRead serves one connection on a loopback listener: it
// answers one request with a 200 and then reads on, and sends what that
// read met (a reset, EOF, or the error that stopped it sooner).
func answerOnceThenRead(t *testing.T) (addr string, after <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	res := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			res <- err
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = br.ReadByte() // what the checker does with the connection next
		res <- err
	}()
	return ln.Addr().String(), res
}

//go:build linux

package probe

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// okAnswer is an HTTP/1.1 answer with status code, extra header lines
// (each ending in CRLF) and body, framed by Content-Length.
func okAnswer(code int, headers, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s", code, headers, len(body), body)
}

// proxyErrorPage is what a proxy answers, with status 200, when the
// service behind it is gone.
const proxyErrorPage = "<html><body><h1>502 Bad Gateway</h1><p>upstream connect error</p></body></html>"

// Every expectation gives the same result and text on the lean prober's
// blocking path, its asynchronous path and net/http's.
func TestHTTPExpectations(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nrea\r\n2\r\ndy\r\n0\r\n\r\n"
	large := okAnswer(200, "", strings.Repeat("x", 4*leanBufferSize)+"ready")
	tests := []struct {
		name   string
		answer string
		spec   HTTPSpec
		want   string // "" means pass
	}{
		{"contains", okAnswer(200, "", `{"status": "ready"}`), HTTPSpec{BodyContains: "ready"}, ""},
		{"proxy error page", okAnswer(200, "", proxyErrorPage), HTTPSpec{BodyContains: "ready"}, `body: "ready" not found in first 64 KiB`},
		{"not contains", okAnswer(200, "", proxyErrorPage), HTTPSpec{BodyNotContains: "Bad Gateway"}, `body: "Bad Gateway" found at byte 20, in first 64 KiB`},
		{"regex", okAnswer(200, "", `{"status": "ok"}`), HTTPSpec{BodyRegex: `"status":\s*"ok"`}, ""},
		{"regex no match", okAnswer(200, "", `{"status": "degraded"}`), HTTPSpec{BodyRegex: `"status":\s*"ok"`}, `body: no match for /"status":\s*"ok"/ in first 64 KiB`},
		{"past the limit", okAnswer(200, "", "xxxxxxxxxxready"), HTTPSpec{BodyContains: "ready", BodyLimit: 8}, `body: "ready" not found in first 8 bytes`},
		{"within the limit", okAnswer(200, "", "xxxready"), HTTPSpec{BodyContains: "ready", BodyLimit: 8}, ""},
		{"chunked", chunked, HTTPSpec{BodyContains: "ready"}, ""},
		{"body over the read buffer", large, HTTPSpec{BodyContains: "ready"}, ""},
		{"status before body", okAnswer(503, "", "ready"), HTTPSpec{BodyContains: "ready"}, "status 503"},
		{"header", okAnswer(200, "X-Status: ok\r\n", ""), HTTPSpec{HeaderMatches: []HeaderMatch{{"x-status", "^ok$"}}}, ""},
		{"header missing", okAnswer(200, "", ""), HTTPSpec{HeaderMatches: []HeaderMatch{{"X-Status", "^ok$"}}}, "header X-Status: missing, want a value matching /^ok$/"},
		{"header differs", okAnswer(200, "X-Status: degraded\r\n", ""), HTTPSpec{HeaderMatches: []HeaderMatch{{"X-Status", "^ok$"}}}, "header X-Status: no value matches /^ok$/"},
		{"header then body", okAnswer(200, "X-Status: ok\r\n", "busy"), HTTPSpec{HeaderMatches: []HeaderMatch{{"X-Status", "ok"}}, BodyContains: "ready"}, `body: "ready" not found in first 64 KiB`},
		{"range", okAnswer(302, "Location: /x\r\n", ""), HTTPSpec{ExpectedStatusRanges: []string{"200-399"}}, ""},
		{"out of range", okAnswer(404, "", ""), HTTPSpec{ExpectedStatusRanges: []string{"200-399"}}, "status 404"},
		{"code or range", okAnswer(404, "", ""), HTTPSpec{ExpectedStatus: []int{404}, ExpectedStatusRanges: []string{"200-299"}}, ""},
	}
	f := newTestFactory(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, reply(tt.answer))
			spec := tt.spec
			spec.URL = srv.url() + "/healthz"
			lean, std := leanAndNetHTTP(t, f, &spec)
			check := func(path string, err error) {
				t.Helper()
				if got := Describe(err); got != tt.want {
					t.Errorf("%s: %q (%v), want %q", path, got, err, tt.want)
				}
			}
			check("net/http", probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), std))
			check("lean", probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), lean)) // also primes
			check("lean again", probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), lean))
			err, async := probeAsync(t, lean, testscale.D(2*time.Second))
			if !async {
				t.Error("the probe was not asynchronous")
			}
			check("async", err)
		})
	}
}

// A small body is checked on the async loop itself: no probe is handed
// over to a goroutine of Probe's.
func TestHTTPBodyCheckStaysAsync(t *testing.T) {
	f := newTestFactory(t)
	srv := newRawServer(t, reply(okAnswer(200, "", strings.Repeat("x", 180)+"ready")))
	lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url() + "/healthz", BodyContains: "ready"})
	wantPass(t, probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), lean))
	l := f.loop()
	if l == nil {
		t.Skip("no async loop on this system")
	}
	before := l.handOvers.Load()
	for range 20 {
		err, async := probeAsync(t, lean, testscale.D(2*time.Second))
		wantPass(t, err)
		if !async {
			t.Fatal("ProbeAsync declined")
		}
	}
	if n := l.handOvers.Load() - before; n != 0 {
		t.Errorf("%d of 20 probes were handed over to a goroutine, want none", n)
	}
	// A body that does not fit the loop's buffer is: the check is right
	// all the same.
	big := newRawServer(t, reply(okAnswer(200, "", strings.Repeat("x", 2*leanBufferSize)+"ready")))
	lean2, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: big.url() + "/healthz", BodyContains: "ready"})
	wantPass(t, probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), lean2))
	err, _ := probeAsync(t, lean2, testscale.D(2*time.Second))
	wantPass(t, err)
	if n := l.handOvers.Load() - before; n != 1 {
		t.Errorf("%d probes handed over, want the one whose body is over the buffer", n)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("%d connections for 21 probes, want 1 kept", n)
	}
}

func TestHTTPPostWithBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || string(b) != `{"check": "deep"}` {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ready")
	}))
	defer srv.Close()
	f := newTestFactory(t)
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL, Method: "POST", Body: `{"check": "deep"}`, BodyContains: "ready"}}))
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL, Method: "POST", Body: `{}`}}), "status 400")
}

func TestHTTPFollowRedirects(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/hop/1", http.StatusFound) })
	mux.HandleFunc("/hop/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if n < 3 {
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n+1), http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "ready")
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := newTestFactory(t)
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/start", BodyContains: "ready"}}), "status 302")
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/start", BodyContains: "ready", FollowRedirects: true}}))
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/loop", FollowRedirects: true}}), "stopped after 10 redirects")

	// A redirect to an address the egress policy denies is not followed.
	deny, err := ParseEgressPolicy(nil, []string{"127.0.0.2/32"})
	if err != nil {
		t.Fatal(err)
	}
	fd := NewFactoryWith(FactoryOptions{Egress: deny})
	defer fd.Close()
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.2:"+srv.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):]+"/", http.StatusFound)
	})
	wantFail(t, probeErr(t, fd, Spec{HTTP: &HTTPSpec{URL: srv.URL + "/away", FollowRedirects: true}}), "127.0.0.2 is denied by egress policy")
}

// An https probe checks the body too, with TLS options.
func TestHTTPSBodyWithTLSOptions(t *testing.T) {
	ca := newTestCA(t, "CA")
	srv := newTLSServer(t, ca.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair, nil)
	f := NewFactory()
	defer f.Close()
	wantPass(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), BodyContains: "ready", TLS: &TLSSpec{CAPEM: string(ca.pem)}}}))
	wantFail(t, probeErr(t, f, Spec{HTTP: &HTTPSpec{URL: srv.url(), BodyContains: "serving", TLS: &TLSSpec{CAPEM: string(ca.pem)}}}), `body: "serving" not found in first 64 KiB`)
}

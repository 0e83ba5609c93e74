package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// misbehaving is a backend that is healthy but can fail requests: /reset
// drops the connection mid-request, /hang never answers, /slow answers
// once release is closed. arrived receives each /hang and /slow request.
type misbehaving struct {
	*httptest.Server
	arrived chan string
	release chan struct{}
}

func newMisbehaving(t *testing.T) *misbehaving {
	m := &misbehaving{arrived: make(chan string, 10), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/reset", func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
		}
	})
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) {
		m.arrived <- r.URL.Path
		<-r.Context().Done()
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		m.arrived <- r.URL.Path
		select {
		case <-m.release:
			io.WriteString(w, "slow but fine")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
	m.Server = httptest.NewServer(mux)
	t.Cleanup(m.Close)
	return m
}

func startOne(t *testing.T, m *misbehaving, extra ...string) *lbProc {
	t.Helper()
	lb := startLB(t, append(append(e2eFlags(), "--backends", m.URL, "--names", "web-1"), extra...)...)
	lb.logs.waitHealthy(t, 0, "web-1")
	return lb
}

// A backend that fails a request (a reset connection, no answer in time)
// gets that request a 502 naming it; it stays in rotation, since probes,
// not requests, decide its health.
func TestBackendFailsMidRequest(t *testing.T) {
	m := newMisbehaving(t)
	lb := startOne(t, m, "--response-timeout", "200ms")

	r := lb.getPath(t, "/reset")
	if r.status != http.StatusBadGateway || r.backend != "web-1" || !strings.Contains(r.body, "backend web-1 failed") {
		t.Errorf("reset mid-request: %d %q %q; want 502 from web-1", r.status, r.backend, r.body)
	}
	r = lb.getPath(t, "/hang")
	if r.status != http.StatusBadGateway || !strings.Contains(r.body, "backend web-1 failed: timeout") {
		t.Errorf("no answer within --response-timeout: %d %q; want 502 timeout", r.status, r.body)
	}
	if took := time.Since(r.start); took > testscale.D(10*time.Second) {
		t.Errorf("the timeout took %v", took)
	}
	if r := lb.getPath(t, "/"); r.status != http.StatusOK || r.body != "fine" {
		t.Errorf("after the failures: %d %q; want 200", r.status, r.body)
	}
	lb.logs.waitFor(t, 0, `msg="backend failed the request" component=proxy backend=web-1 method=GET path=/reset`)
}

// On shutdown pulse-lb stops accepting at once and lets requests in
// progress finish.
func TestGracefulShutdown(t *testing.T) {
	m := newMisbehaving(t)
	lb := startOne(t, m)

	got := make(chan reply, 1)
	go func() {
		r, _ := lb.tryPath("/slow")
		got <- r
	}()
	<-m.arrived
	lb.cancel() // as SIGTERM does
	lb.logs.waitFor(t, 0, `msg="pulse-lb shutting down"`)
	// New connections are refused while the request finishes.
	deadline := time.Now().Add(waitBound)
	for {
		conn, err := net.Dial("tcp", lb.addr)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("pulse-lb still accepts connections after shutting down")
		}
		time.Sleep(5 * time.Millisecond) // poll until the listener is closed
	}
	close(m.release)
	if r := <-got; r.status != http.StatusOK || r.body != "slow but fine" {
		t.Errorf("request in progress at shutdown: %d %q; want 200", r.status, r.body)
	}
	lb.stop(t)
	lb.logs.waitFor(t, 0, `msg="pulse-lb stopped"`)
}

// A request that outlasts --shutdown-timeout is cut off, and shutdown
// still ends within the bound.
func TestShutdownTimeout(t *testing.T) {
	m := newMisbehaving(t)
	lb := startOne(t, m, "--shutdown-timeout", "200ms")
	errc := make(chan error, 1)
	go func() {
		_, err := lb.tryPath("/hang")
		errc <- err
	}()
	<-m.arrived
	start := time.Now()
	lb.stop(t)
	if took := time.Since(start); took > testscale.D(10*time.Second) {
		t.Errorf("shutdown took %v with --shutdown-timeout 200ms", took)
	}
	if err := <-errc; err == nil {
		t.Errorf("the hung request succeeded")
	}
	lb.logs.waitFor(t, 0, `msg="shutdown timeout reached; closing the remaining requests"`)
}

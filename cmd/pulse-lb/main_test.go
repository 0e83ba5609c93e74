package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// TestMain fails the run if any test leaves a goroutine behind: a proxy
// connection, a checker, a gRPC channel, a server.
//
// With PULSE_LB_MAIN=1 the test binary is pulse-lb itself: tests run it
// that way to check exit codes and signal handling.
func TestMain(m *testing.M) {
	if os.Getenv("PULSE_LB_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// waitBound is how long any test waits for something that should happen
// within a few probe intervals: generous, so a loaded machine does not
// flake (and scaled by testscale), and a hang still fails instead of
// blocking the run.
var waitBound = testscale.D(30 * time.Second)

// logSink collects log lines with the time each was written, so a test can
// wait for one and compare when things happened.
type logSink struct {
	mu      sync.Mutex
	partial []byte
	lines   []logLine
	more    chan struct{}
}

type logLine struct {
	at   time.Time
	text string
}

func newLogSink() *logSink { return &logSink{more: make(chan struct{}, 1)} }

func (l *logSink) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, logLine{at: now, text: string(l.partial[:i])})
		l.partial = l.partial[i+1:]
	}
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// mark returns the number of lines so far: waitFor(mark, ...) looks only
// at lines written after it was taken.
func (l *logSink) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// find returns the first line at or after index from that contains sub.
func (l *logSink) find(from int, sub string) (logLine, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines[min(from, len(l.lines)):] {
		if strings.Contains(line.text, sub) {
			return line, true
		}
	}
	return logLine{}, false
}

// waitFor waits until a line at or after index from contains sub.
func (l *logSink) waitFor(t *testing.T, from int, sub string) logLine {
	t.Helper()
	return l.waitForAny(t, from, sub)
}

// waitHealthy waits until the log says the named backend became healthy:
// by a transition, or already so in a snapshot (a probe can pass between
// registering a backend and the watch's start).
func (l *logSink) waitHealthy(t *testing.T, from int, name string) logLine {
	t.Helper()
	return l.waitForAny(t, from, transition(name, "unhealthy", "healthy"), transition(name, "absent", "healthy"))
}

// waitForAny waits until a line at or after index from contains one of
// subs, and returns the first such line.
func (l *logSink) waitForAny(t *testing.T, from int, subs ...string) logLine {
	t.Helper()
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		var first logLine
		for _, sub := range subs {
			if line, ok := l.find(from, sub); ok && (first.at.IsZero() || line.at.Before(first.at)) {
				first = line
			}
		}
		if !first.at.IsZero() {
			return first
		}
		select {
		case <-l.more:
		case <-deadline.C:
			t.Fatalf("no log line containing any of %q within %v; the log:\n%s", subs, waitBound, l)
		}
	}
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.lines {
		b.WriteString(line.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// newTestLogger logs everything to w, as pulse-lb's text logger would.
func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", "test")
}

// testBackend is an HTTP backend on 127.0.0.1 whose / answers with its
// name and whose /healthz answers 200 and counts the probes. It can be
// stopped and started again on the same port.
type testBackend struct {
	t      *testing.T
	name   string
	addr   string
	probes atomic.Int64 // /healthz requests since the last start

	mu  sync.Mutex
	srv *http.Server
}

func newTestBackend(t *testing.T, name string) *testBackend {
	t.Helper()
	b := &testBackend{t: t, name: name, addr: "127.0.0.1:0"}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *testBackend) url() string { return "http://" + b.addr }

// start listens on the backend's address (a free port the first time),
// retrying within a bound in case the port is not free again yet.
func (b *testBackend) start() {
	b.t.Helper()
	var lis net.Listener
	deadline := time.Now().Add(waitBound)
	for {
		var err error
		if lis, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("backend %s: %v", b.name, err)
		}
		time.Sleep(10 * time.Millisecond) // the port is busy: poll until it is free
	}
	b.addr = lis.Addr().String()
	b.probes.Store(0)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		b.probes.Add(1)
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, b.name)
	})
	srv := &http.Server{Handler: mux}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go srv.Serve(lis)
}

// stop closes the listener and every connection: probes and requests to
// the backend are refused from now on.
func (b *testBackend) stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// lbProc is pulse-lb's run function, running in the test process.
type lbProc struct {
	addr   string
	logs   *logSink
	client *http.Client
	cancel context.CancelFunc
	done   chan error
}

var listeningAddr = regexp.MustCompile(`msg="pulse-lb listening" addr=(\S+)`)

// startLB runs pulse-lb with args (plus --listen 127.0.0.1:0) and waits
// until it listens. It is stopped when the test ends, if not before.
func startLB(t *testing.T, args ...string) *lbProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &lbProc{
		logs:   newLogSink(),
		client: &http.Client{Transport: &http.Transport{}, Timeout: waitBound},
		cancel: cancel,
		done:   make(chan error, 1),
	}
	go func() { p.done <- run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), p.logs) }()
	t.Cleanup(func() { p.stop(t) })
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		if line, ok := p.logs.find(0, `msg="pulse-lb listening"`); ok {
			p.addr = listeningAddr.FindStringSubmatch(line.text)[1]
			return p
		}
		select {
		case <-p.logs.more:
		case err := <-p.done:
			p.done <- err
			t.Fatalf("pulse-lb exited: %v\n%s", err, p.logs)
		case <-deadline.C:
			t.Fatalf("pulse-lb did not start:\n%s", p.logs)
		}
	}
}

// stop cancels run, as SIGTERM does, and checks that it returns cleanly
// within a bound. It is idempotent.
func (p *lbProc) stop(t *testing.T) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	p.client.CloseIdleConnections()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("pulse-lb: %v", err)
		}
	case <-time.After(waitBound):
		t.Fatalf("pulse-lb did not stop within %v", waitBound)
	}
}

// reply is one request through pulse-lb.
type reply struct {
	start   time.Time
	status  int
	backend string // the X-Pulse-Backend header
	body    string
}

func (p *lbProc) get(t *testing.T) reply {
	t.Helper()
	return p.getPath(t, "/")
}

func (p *lbProc) getPath(t *testing.T, path string) reply {
	t.Helper()
	r, err := p.tryPath(path)
	if err != nil {
		t.Fatalf("GET %s through pulse-lb: %v", path, err)
	}
	return r
}

func (p *lbProc) try() (reply, error) { return p.tryPath("/") }

func (p *lbProc) tryPath(path string) (reply, error) {
	r := reply{start: time.Now()}
	resp, err := p.client.Get("http://" + p.addr + path)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	r.status, r.backend, r.body = resp.StatusCode, resp.Header.Get("X-Pulse-Backend"), string(body)
	return r, err
}

// load sends requests through pulse-lb one after another, in the
// background, and keeps every reply.
type load struct {
	p    *lbProc
	mu   sync.Mutex
	got  []reply
	err  error
	more chan struct{}
	quit chan struct{}
	done chan struct{}
}

func startLoad(p *lbProc) *load {
	l := &load{p: p, more: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.quit:
				return
			default:
			}
			r, err := p.try()
			l.mu.Lock()
			if err != nil && l.err == nil {
				l.err = err
			}
			l.got = append(l.got, r)
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

// waitCount waits until n replies started after since.
func (l *load) waitCount(t *testing.T, since time.Time, n int) {
	t.Helper()
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		count := 0
		for _, r := range l.got {
			if r.start.After(since) {
				count++
			}
		}
		err := l.err
		l.mu.Unlock()
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		if count >= n {
			return
		}
		select {
		case <-l.more:
		case <-deadline.C:
			t.Fatalf("only %d requests in %v", count, waitBound)
		}
	}
}

// stop stops the load and returns its replies.
func (l *load) stop(t *testing.T) []reply {
	t.Helper()
	close(l.quit)
	<-l.done
	if l.err != nil {
		t.Fatalf("load: %v", l.err)
	}
	return l.got
}

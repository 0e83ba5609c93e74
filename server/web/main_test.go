package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// outcome is what a fake target answers: pass or fail, after taking
// latency on the fake clock.
type outcome struct {
	err     error
	latency time.Duration
}

// fakeProbers builds probers keyed by the address in their spec (HTTP URL,
// TCP or gRPC address), whose outcomes the test sets. A target nobody set
// fails with "connection refused". Safe for concurrent use.
type fakeProbers struct {
	clock *fakeclock.Clock
	mu    sync.Mutex
	next  map[string]outcome
}

func (f *fakeProbers) New(s probe.Spec) (checker.Prober, error) {
	var addr string
	switch {
	case s.HTTP != nil:
		addr = s.HTTP.URL
	case s.TCP != nil:
		addr = s.TCP.Address
	case s.GRPC != nil:
		addr = s.GRPC.Address
	}
	return fakeprobe.Func(func(context.Context) error {
		f.mu.Lock()
		o, ok := f.next[addr]
		f.mu.Unlock()
		if !ok {
			return errors.New("connection refused")
		}
		if o.latency > 0 {
			f.clock.Advance(o.latency)
		}
		return o.err
	}), nil
}

type proberFunc func(context.Context) error

func (p proberFunc) Probe(ctx context.Context) error { return p(ctx) }

type env struct {
	c     *checker.Checker
	obs   *web.Observer
	clock *fakeclock.Clock
	fp    *fakeProbers
	srv   *httptest.Server
}

// newEnv returns a checker with fake probers (not started: tests drive it
// with RunRound, one probe at a time so latencies on the fake clock are
// exact) and, if cfg.Checker is nil, a web handler over it on a loopback
// httptest server.
func newEnv(t *testing.T, ccfg checker.Config, wcfg web.Config) *env {
	t.Helper()
	clock := fakeclock.New(epoch)
	fp := &fakeProbers{clock: clock, next: map[string]outcome{}}
	obs := web.NewObserver(web.ObserverOptions{})
	ccfg.Clock = clock
	ccfg.NewProber = fp.New
	ccfg.MaxConcurrentProbes = 1
	// With one probe slot every round queues probes, which the checker's
	// overload detector would take for overload.
	ccfg.Overload = checker.OverloadPolicy{Disabled: true}
	if ccfg.Observer == nil {
		ccfg.Observer = obs
	}
	if ccfg.Defaults == (checker.Defaults{}) {
		ccfg.Defaults = checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 2}
	}
	c, err := checker.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, obs: obs, clock: clock, fp: fp}
	wcfg.Checker = c
	if wcfg.History != nil && wcfg.SLOs == nil {
		wcfg.SLOs = web.NewSLOs(c, wcfg.History)
	}
	if wcfg.Observer == nil {
		wcfg.Observer = obs
	}
	e.srv = httptest.NewServer(web.NewHandler(wcfg))
	t.Cleanup(e.srv.Close)
	// Before the server waits for its handlers, end the feeds: closing the
	// checker ends every watcher. (Cleanups run last-registered first.)
	t.Cleanup(func() { c.Close() })
	return e
}

func (e *env) set(addr string, o outcome) {
	e.fp.mu.Lock()
	defer e.fp.mu.Unlock()
	e.fp.next[addr] = o
}

func (e *env) add(t *testing.T, s checker.Spec) {
	t.Helper()
	if _, _, err := e.c.Add(s); err != nil {
		t.Fatalf("Add(%s): %v", s.Name, err)
	}
}

func (e *env) rounds(n int) {
	for range n {
		e.c.RunRound(context.Background())
	}
}

func tcpSpec(name, group string) checker.Spec {
	return checker.Spec{Name: name, Group: group, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: name + ":80"}}}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name, id, data string
}

func (ev sseEvent) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(ev.data), v); err != nil {
		t.Fatalf("event %s: %v\n%s", ev.name, err, ev.data)
	}
}

// feed is an open /events response read in the background.
type feed struct {
	resp   *http.Response
	events chan sseEvent // closed at the end of the stream
}

// openFeed opens path (e.g. "/events?names=a") with an optional
// Last-Event-ID; the test's cleanup closes it.
func (e *env) openFeed(t *testing.T, path, lastID string) *feed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	f := &feed{resp: resp, events: make(chan sseEvent, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(f.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					f.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return f
}

// next returns the next event other than those named in skip, failing the
// test if none comes within a generous deadline.
func (f *feed) next(t *testing.T, skip ...string) sseEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				t.Fatal("the feed ended")
			}
			if !slices.Contains(skip, ev.name) {
				return ev
			}
		case <-deadline:
			t.Fatal("no event within 10s")
		}
	}
}

// waitFor returns the first event for which ok holds, failing the test if
// none comes within a generous deadline.
func (f *feed) waitFor(t *testing.T, what string, ok func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, open := <-f.events:
			if !open {
				t.Fatalf("the feed ended before %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

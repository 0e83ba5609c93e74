//go:build linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// primed answers a connection's first request with a plain 200, which
// leaves it kept, and every later one with answer: the second probe of a
// prober runs on a kept connection, where asynchronous probes run.
func primed(answer func(net.Conn) bool) func(net.Conn) bool {
	var seen sync.Map
	return func(c net.Conn) bool {
		if _, again := seen.LoadOrStore(c, true); again {
			return answer(c)
		}
		return reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")(c) // no body: right for HEAD too
	}
}

// probeAsync runs one probe as the checker does: ProbeAsync, or Probe
// when it declines. It reports whether the probe was asynchronous.
func probeAsync(t *testing.T, p *leanProber, timeout time.Duration) (err error, async bool) {
	t.Helper()
	done := make(chan error, 1)
	if !p.ProbeAsync(time.Now().Add(timeout), func(err error) { done <- err }) {
		return probeWithin(t, timeoutCtx(t, timeout), p), false
	}
	select {
	case err := <-done:
		return err, true
	case <-time.After(hungBound):
		t.Fatalf("the asynchronous probe did not end within %v", hungBound)
		return nil, true
	}
}

// An asynchronous probe gives what Probe gives, for every answer of the
// lean prober's contract: the same result, error text, Describe,
// errors.Is answers and StatusError, and as many connections. "kept" runs
// it on a kept connection; "dialled" on a new one, with the Factory's
// budget of kept connections spent (dialAsync).
func TestHTTPAsyncMatchesProbe(t *testing.T) {
	for _, mode := range []string{"kept", "dialled"} {
		t.Run(mode, func(t *testing.T) {
			f := newTestFactory(t)
			if mode == "dialled" {
				f = NewFactoryWith(FactoryOptions{MaxIdleConns: -1})
				t.Cleanup(f.Close)
			}
			for _, tt := range leanAnswerCases {
				t.Run(tt.name, func(t *testing.T) {
					answer := tt.answer
					if mode == "kept" {
						answer = primed(answer)
					}
					// One server for both, so that error texts name the same URL.
					srv := newRawServer(t, answer)
					spec := &HTTPSpec{URL: srv.url() + "/healthz", ExpectedStatus: tt.expected, Method: tt.method}
					blocking, _ := leanAndNetHTTP(t, f, spec)
					if mode == "kept" {
						_ = probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), blocking) // primes a kept connection
					}
					want := probeWithin(t, timeoutCtx(t, tt.timeout()), blocking)
					byProbe := srv.accepted.Load()

					async, _ := leanAndNetHTTP(t, f, spec)
					if mode == "kept" {
						_ = probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), async)
					}
					got, wasAsync := probeAsync(t, async, tt.timeout())
					if !wasAsync {
						t.Fatalf("ProbeAsync declined the probe")
					}
					sameProbeError(t, "async", got, "Probe", want)
					if n := srv.accepted.Load() - byProbe; n != byProbe {
						t.Errorf("async probes opened %d connections, Probe %d", n, byProbe)
					}
				})
			}
		})
	}
}

// Asynchronous probes keep connections as Probe does: for each way a
// server ends its responses, five probes open as many connections.
func TestHTTPAsyncConnections(t *testing.T) {
	for _, tt := range leanConnectionCases {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, tt.answer)
			f := newTestFactory(t)
			lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url(), Method: tt.method})
			asyncs := 0
			for i := range 5 {
				err, async := probeAsync(t, lean, 10*time.Second)
				if err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
				if async {
					asyncs++
				}
			}
			if n := srv.accepted.Load(); n != tt.want {
				t.Errorf("5 probes opened %d connections, want %d", n, tt.want)
			}
			if tt.want == 1 && asyncs != 4 {
				t.Errorf("%d of the 4 probes on the kept connection were asynchronous", asyncs)
			}
		})
	}
}

// A probe without an answer ends at its deadline with Probe's timeout
// error, and its connection is not kept.
func TestHTTPAsyncDeadline(t *testing.T) {
	srv := newRawServer(t, primed(replyAndHold("")))
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	if err := probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), lean); err != nil {
		t.Fatal(err)
	}
	err, async := probeAsync(t, lean, 200*time.Millisecond)
	if !async {
		t.Fatal("ProbeAsync declined a probe on a kept connection")
	}
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != `Get "`+srv.url()+`": context deadline exceeded` {
		t.Errorf("got %v, want the deadline's error", err)
	}
	if c := lean.take(); c != nil {
		t.Errorf("the timed-out connection was kept")
	}
}

// A kept connection the server closes while it is idle is marked dead by
// the loop, and the next probe dials instead of trying it.
func TestHTTPAsyncIdleConnectionClosed(t *testing.T) {
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	ok := reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	srv := newRawServer(t, func(c net.Conn) bool {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return ok(c)
	})
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	for range 2 { // the second registers the connection with the loop
		if err, _ := probeAsync(t, lean, testscale.D(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	lean.mu.Lock()
	ac := lean.idle.async
	lean.mu.Unlock()
	if ac == nil {
		t.Fatal("the kept connection is not registered with the loop")
	}
	mu.Lock()
	conns[0].Close()
	mu.Unlock()
	waitFor(t, func() bool {
		ac.loop.mu.Lock()
		defer ac.loop.mu.Unlock()
		return ac.dead
	}, "the loop to mark the closed connection dead")
	if err, async := probeAsync(t, lean, testscale.D(time.Second)); err != nil || async {
		t.Errorf("probe after the close: %v, asynchronous %v; want a pass by Probe on a new connection", err, async)
	}
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// CancelAsync and Factory.Close end a probe in flight at once with a
// cancellation; after Close, probes block (and pass) again.
func TestHTTPAsyncCancel(t *testing.T) {
	srv := newRawServer(t, primed(replyAndHold("")))
	for _, stop := range []string{"CancelAsync", "Factory.Close"} {
		t.Run(stop, func(t *testing.T) {
			f := NewFactory()
			defer f.Close()
			lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url()})
			if err := probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), lean); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			if !lean.ProbeAsync(time.Now().Add(time.Hour), func(err error) { done <- err }) {
				t.Fatal("ProbeAsync declined a probe on a kept connection")
			}
			if stop == "CancelAsync" {
				lean.CancelAsync()
			} else {
				f.Close()
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got %v, want a cancellation", err)
				}
			case <-time.After(hungBound):
				t.Fatalf("%s did not end the probe", stop)
			}
			if stop == "Factory.Close" && lean.ProbeAsync(time.Now().Add(time.Second), func(error) { t.Error("done called after Close") }) {
				t.Error("ProbeAsync started a probe after Factory.Close")
			}
		})
	}
}

// With the budget of kept connections spent, a probe dials without
// blocking (dialAsync): a silent server runs it into its deadline, a
// refused connection gives Probe's error, and each probe's connection is
// closed.
func TestHTTPAsyncDialled(t *testing.T) {
	f := NewFactoryWith(FactoryOptions{MaxIdleConns: -1})
	defer f.Close()

	silent := newRawServer(t, replyAndHold(""))
	lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: silent.url()})
	err, async := probeAsync(t, lean, 200*time.Millisecond)
	if !async || !errors.Is(err, context.DeadlineExceeded) || err.Error() != `Get "`+silent.url()+`": context deadline exceeded` {
		t.Errorf("silent server: %v (asynchronous %v), want the deadline's error from an asynchronous probe", err, async)
	}

	url := "http://" + refusedAddr(t) + "/healthz"
	lean, _ = leanAndNetHTTP(t, f, &HTTPSpec{URL: url})
	want := probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), lean)
	got, _ := probeAsync(t, lean, testscale.D(time.Second))
	sameProbeError(t, "async", got, "Probe", want)

	ok := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	lean, _ = leanAndNetHTTP(t, f, &HTTPSpec{URL: ok.url()})
	for i := range 3 {
		if err, async := probeAsync(t, lean, testscale.D(time.Second)); err != nil || !async {
			t.Fatalf("probe %d: %v, asynchronous %v", i, err, async)
		}
	}
	if n := ok.accepted.Load(); n != 3 {
		t.Errorf("3 probes opened %d connections, want 3", n)
	}
	l := f.async.loop.Load()
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.conns.len() == 0
	}, "the loop to forget every closed connection")
}

// A connection dialAsync made is closed with a reset once its answer is
// read, as Probe closes one it does not keep (TestConnectionNotKeptIsReset):
// the server reads "connection reset", and nothing is left in TIME_WAIT.
func TestHTTPAsyncDialledIsReset(t *testing.T) {
	addr, after := answerOnceThenRead(t)
	f := NewFactoryWith(FactoryOptions{MaxIdleConns: -1}) // keeps none
	defer f.Close()
	lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: "http://" + addr + "/healthz"})
	if err, async := probeAsync(t, lean, testscale.D(time.Second)); err != nil || !async {
		t.Fatalf("probe: %v, asynchronous %v; want a passing asynchronous probe", err, async)
	}
	if err := <-after; !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the server read %v after the answer, want a reset", err)
	}
}

// Closing a prober while holding a lock its probe's callback takes does
// not deadlock: the cancelled probe's callback runs on another goroutine
// (a checker closes the prober of a changed target under its mutex).
func TestHTTPAsyncCloseUnderCallbackLock(t *testing.T) {
	srv := newRawServer(t, primed(replyAndHold("")))
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	if err := probeWithin(t, timeoutCtx(t, testscale.D(time.Second)), lean); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := make(chan error, 1)
	if !lean.ProbeAsync(time.Now().Add(time.Hour), func(err error) {
		mu.Lock()
		defer mu.Unlock()
		done <- err
	}) {
		t.Fatal("ProbeAsync declined a probe on a kept connection")
	}
	closed := make(chan struct{})
	go func() {
		mu.Lock()
		lean.Close()
		mu.Unlock()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(hungBound):
		t.Fatal("Close under the callback's lock did not return")
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want a cancellation", err)
		}
	case <-time.After(hungBound):
		t.Fatal("the cancelled probe's callback never ran")
	}
}

// The loop recycles its probes and the connections it dials: under many
// probes at once, dialled and on kept connections, ending by an answer or
// by their deadline, each result still reaches its own prober's callback,
// once. A probe given back while the loop still held it would hand one
// prober's answer to another.
func TestHTTPAsyncRecycledProbesKeepTheirResults(t *testing.T) {
	for _, c := range []struct {
		name string
		kept int // the Factory's budget of kept connections; -1: none, every probe dials; 0: the default
	}{{"dialled", -1}, {"kept", 0}} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFactoryWith(FactoryOptions{MaxIdleConns: c.kept})
			defer f.Close()
			up := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			down := newRawServer(t, reply("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"))
			silent := newRawServer(t, replyAndHold(""))
			type kind int
			const (
				isUp kind = iota
				isDown
				isSilent
			)
			const perKind, rounds = 12, 20
			var wg sync.WaitGroup
			errs := make(chan string, 3*perKind*rounds)
			for k, srv := range []*rawServer{up, down, silent} {
				for range perKind {
					lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url()})
					wg.Go(func() {
						timeout := testscale.D(time.Second)
						if kind(k) == isSilent {
							timeout = 20 * time.Millisecond
						}
						for i := range rounds {
							calls := make(chan error, 2)
							if !lean.ProbeAsync(time.Now().Add(timeout), func(err error) { calls <- err }) {
								// Probe's way, without the helpers that may t.Fatal: this is not the test goroutine.
								go func() {
									ctx, cancel := context.WithTimeout(context.Background(), timeout)
									defer cancel()
									calls <- lean.Probe(ctx)
								}()
							}
							var err error
							select {
							case err = <-calls:
							case <-time.After(hungBound):
								errs <- fmt.Sprintf("%s probe %d did not end", srv.url(), i)
								return
							}
							var st *StatusError
							switch kind(k) {
							case isUp:
								if err != nil {
									errs <- fmt.Sprintf("%s probe %d: %v, want a pass", srv.url(), i, err)
								}
							case isDown:
								if !errors.As(err, &st) || st.Code != 503 {
									errs <- fmt.Sprintf("%s probe %d: %v, want status 503", srv.url(), i, err)
								}
							case isSilent:
								if !errors.Is(err, context.DeadlineExceeded) {
									errs <- fmt.Sprintf("%s probe %d: %v, want the deadline", srv.url(), i, err)
								}
							}
							if len(calls) != 0 {
								errs <- fmt.Sprintf("%s probe %d: its callback ran twice", srv.url(), i)
							}
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
	}
}

// TestHTTPAsyncRequestBytes: the asynchronous paths send the bytes
// net/http sends for the same spec, a plain request's pieces in one
// writev: on a kept connection (probes after the first), and on
// connections dialAsync makes with the budget of kept connections spent.
func TestHTTPAsyncRequestBytes(t *testing.T) {
	for _, budget := range []int{0, -1} {
		f := NewFactoryWith(FactoryOptions{MaxIdleConns: budget})
		defer f.Close()
		srv := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
		for _, tt := range leanRequestCases(srv) {
			s := tt.spec
			lean, std := leanAndNetHTTP(t, f, &s)
			if err := std.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
				t.Fatalf("%+v: %v", s, err)
			}
			want := srv.requestHeads()[len(srv.requestHeads())-1]
			asyncs := 0
			for range 3 {
				err, async := probeAsync(t, lean, testscale.D(10*time.Second))
				if err != nil {
					t.Fatalf("%+v: %v", s, err)
				}
				if async {
					asyncs++
				}
				if heads := srv.requestHeads(); heads[len(heads)-1] != want {
					t.Errorf("budget %d, %+v: asynchronous request\n%q\nnet/http request\n%q", budget, s, heads[len(heads)-1], want)
				}
			}
			if asyncs < 2 {
				t.Errorf("budget %d, %+v: %d of 3 probes asynchronous, want at least 2", budget, s, asyncs)
			}
		}
	}
}

//go:build linux

package probe

import (
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// connRecorder answers like answer and keeps every connection the server
// accepted, so that the test can end them as a dying process would.
type connRecorder struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (r *connRecorder) wrap(answer func(net.Conn) bool) func(net.Conn) bool {
	return func(c net.Conn) bool {
		r.mu.Lock()
		if len(r.conns) == 0 || r.conns[len(r.conns)-1] != c {
			r.conns = append(r.conns, c)
		}
		r.mu.Unlock()
		return answer(c)
	}
}

func (r *connRecorder) last() net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[len(r.conns)-1]
}

// A kept connection the server closes (FIN) or resets (RST) while it is
// idle is closed at once and reported, with the reason, whether a
// blocking probe (the first) or an asynchronous one kept it.
func TestHTTPWatchReportsAClosedOrResetIdleConnection(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		end        func(net.Conn)
	}{
		{"fin", LostClosed, func(c net.Conn) { c.Close() }},
		{"rst", LostReset, func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }},
	} {
		for _, probes := range []int{1, 2} {
			t.Run(tt.name, func(t *testing.T) {
				var rec connRecorder
				srv := newRawServer(t, rec.wrap(reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
				f := newTestFactory(t)
				lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url()})
				lost := watched(lean)
				for range probes {
					if err, _ := probeAsync(t, lean, testscale.D(time.Second)); err != nil {
						t.Fatal(err)
					}
				}
				if n := f.kept.Load(); n != 1 {
					t.Fatalf("%d connections kept, want 1", n)
				}
				tt.end(rec.last())
				if got := receive(t, lost, "the lost connection to be reported"); got != tt.want {
					t.Errorf("reported %q, want %q", got, tt.want)
				}
				lean.mu.Lock()
				idle := lean.idle
				lean.mu.Unlock()
				if idle != nil || f.kept.Load() != 0 {
					t.Errorf("after the report: idle connection %v, %d kept; want none", idle != nil, f.kept.Load())
				}
				if err, _ := probeAsync(t, lean, testscale.D(time.Second)); err != nil || srv.accepted.Load() != 2 {
					t.Errorf("probe after the loss: %v on connection %d; want a pass on a second one", err, srv.accepted.Load())
				}
			})
		}
	}
}

// A connection the server closes after an answer with "Connection:
// close" is the prober's to close, not a lost one: nothing is reported.
// (The report of the keep-alive connection that follows it shows the
// watcher works, and comes after anything the closed one could cause.)
func TestHTTPWatchIgnoresConnectionClose(t *testing.T) {
	var rec connRecorder
	const closing = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
	srv := newRawServer(t, rec.wrap(primed(replyAndClose(closing))))
	f := newTestFactory(t)
	lean, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url()})
	lost := watched(lean)
	for i := range 3 { // kept; then "Connection: close" on it, asynchronous; then kept again
		err, async := probeAsync(t, lean, testscale.D(time.Second))
		if err != nil || async != (i == 1) {
			t.Fatalf("probe %d: %v, asynchronous %v", i+1, err, async)
		}
	}
	rec.last().Close()
	if got := receive(t, lost, "the keep-alive connection's loss"); got != LostClosed {
		t.Errorf("reported %q, want %q", got, LostClosed)
	}
	select {
	case r := <-lost:
		t.Errorf("a second report, %q: the connection closed after \"Connection: close\" was reported", r)
	default:
	}
}

// A probe that finds its kept connection reset before any byte of an
// answer tells the watcher too, from its own goroutine, before it dials
// again (and passes here: the server answers on a new connection). The
// reason may read "closed": the kernel reports a reset once, and the loop,
// which watches the connection, may have peeked at it first.
func TestHTTPWatchReportsAConnectionLostUnderAProbe(t *testing.T) {
	resetOnRequest := func(c net.Conn) bool { c.(*net.TCPConn).SetLinger(0); return false }
	srv := newRawServer(t, primed(resetOnRequest))
	lean, _ := leanAndNetHTTP(t, newTestFactory(t), &HTTPSpec{URL: srv.url()})
	lost := watched(lean)
	for i := range 2 {
		if err := probeWithin(t, timeoutCtx(t, testscale.D(5*time.Second)), lean); err != nil {
			t.Fatalf("probe %d: %v", i+1, err)
		}
	}
	if got := receive(t, lost, "the reset under the probe to be reported"); got != LostReset && got != LostClosed {
		t.Errorf("reported %q, want %q or %q", got, LostReset, LostClosed)
	}
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the second probe dials again", n)
	}
}

// keptWatched is a watched prober that keeps a connection, registered
// with the async loop, to a server that answers 200.
type keptWatched struct {
	srv  *rawServer
	rec  *connRecorder
	lean *leanProber
	lost chan string
	c    *leanConn  // the kept connection
	l    *asyncLoop // the loop that watches it
}

func newKeptWatched(t *testing.T) *keptWatched {
	t.Helper()
	k := &keptWatched{rec: &connRecorder{}}
	k.srv = newRawServer(t, k.rec.wrap(reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
	f := newTestFactory(t)
	k.lean, _ = leanAndNetHTTP(t, f, &HTTPSpec{URL: k.srv.url()})
	k.lost = watched(k.lean)
	if err, _ := probeAsync(t, k.lean, testscale.D(time.Second)); err != nil {
		t.Fatal(err)
	}
	k.lean.mu.Lock()
	k.c = k.lean.idle
	k.lean.mu.Unlock()
	k.l = f.loop()
	if k.c == nil || k.c.async == nil || k.l == nil {
		t.Fatalf("kept connection %v, watched %v, loop %v; want all three", k.c != nil, k.c != nil && k.c.async != nil, k.l != nil)
	}
	return k
}

// probeReports runs a probe that must pass on a connection it dials, and
// checks that it reported the kept connection's loss, as reset, before
// it returned.
func (k *keptWatched) probeReports(t *testing.T) {
	t.Helper()
	err, async := probeAsync(t, k.lean, testscale.D(time.Second))
	if err != nil || async {
		t.Fatalf("probe on the lost connection: %v, asynchronous %v; want a pass dialled by Probe", err, async)
	}
	select {
	case got := <-k.lost:
		if got != LostReset {
			t.Errorf("reported %q, want %q", got, LostReset)
		}
	default:
		t.Error("the probe that took the lost connection did not report it")
	}
	if n := k.srv.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the probe dials again", n)
	}
}

// A kept connection whose loss the loop saw, but which a probe took before
// the loop could report it (the loop leaves a connection a probe took to
// that probe), is reported by that probe, before it dials again: else the
// checker would not know the target's probe failed for a lost connection.
func TestHTTPWatchReportsALossTheLoopLeftToAProbe(t *testing.T) {
	k := newKeptWatched(t)
	// Where the loop is between seeing the reset and reporting it.
	k.l.mu.Lock()
	k.c.async.dead, k.c.async.lost = true, LostReset
	k.l.mu.Unlock()
	k.probeReports(t)
}

// A kept connection reset before the loop saw it fails the asynchronous
// probe's write: that probe reports the loss before Probe dials again.
func TestHTTPWatchReportsAWriteToALostConnection(t *testing.T) {
	k := newKeptWatched(t)
	// Out of the loop's sight, as when the loop has not yet taken the
	// reset's event.
	if err := syscall.EpollCtl(k.l.epfd, syscall.EPOLL_CTL_DEL, k.c.async.fd, nil); err != nil {
		t.Fatal(err)
	}
	end := k.rec.last().(*net.TCPConn)
	end.SetLinger(0)
	end.Close()
	// Wait for the reset to arrive; peeking takes the error, so the
	// probe's write then fails with EPIPE.
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for {
		var b [1]byte
		_, _, err := syscall.Recvfrom(k.c.async.fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != nil && err != syscall.EAGAIN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset did not arrive")
		}
		time.Sleep(time.Millisecond)
	}
	k.probeReports(t)
}

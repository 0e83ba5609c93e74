//go:build linux

package probe

import (
	"net/netip"
	"os"
	"testing"
	"time"
)

// openFiles returns the process's open descriptors, each with what it
// names (a socket's inode, say).
func openFiles(t *testing.T) map[string]string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	files := make(map[string]string, len(fds))
	for _, fd := range fds {
		if to, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil {
			files[fd.Name()] = to
		}
	}
	return files
}

// newFiles counts the descriptors open now that were not open in before:
// a descriptor an earlier test still had open, and closes meanwhile, is
// not counted either way.
func newFiles(t *testing.T, before map[string]string) int {
	t.Helper()
	n := 0
	for fd, to := range openFiles(t) {
		if before[fd] != to {
			n++
		}
	}
	return n
}

// A kept connection the async loop watches is a descriptor of the loop's
// alone, out of Go's poller and without a net.Conn; Probe's code makes it
// a net.Conn again and goes on with the same connection, the loop takes
// it back after, and nothing is left open once the probers and the
// Factory are closed.
func TestHTTPAsyncKeptConnectionLeavesGoPoller(t *testing.T) {
	srv := newRawServer(t, reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	before := openFiles(t)
	f := NewFactory()
	var probers []*leanProber
	for range 3 {
		p, _ := leanAndNetHTTP(t, f, &HTTPSpec{URL: srv.url()})
		probers = append(probers, p)
	}
	kept := func(p *leanProber) *leanConn {
		t.Helper()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.idle == nil {
			t.Fatalf("no connection kept")
		}
		return p.idle
	}
	for round, step := range []string{"dial", "async", "async", "sync", "async"} {
		for i, p := range probers {
			var err error
			async := false
			if step == "sync" {
				err = probeWithin(t, timeoutCtx(t, 10*time.Second), p)
			} else {
				err, async = probeAsync(t, p, 10*time.Second)
			}
			if err != nil {
				t.Fatalf("round %d (%s), prober %d: %v", round, step, i, err)
			}
			if want := step == "async"; async != want {
				t.Fatalf("round %d (%s), prober %d: asynchronous %v, want %v", round, step, i, async, want)
			}
			c := kept(p)
			switch step {
			case "async":
				if c.conn != nil || c.async == nil {
					t.Errorf("round %d: after an asynchronous probe the kept connection is a net.Conn (%T), want the loop's descriptor alone", round, c.conn)
				}
			default:
				if c.conn == nil {
					t.Errorf("round %d (%s): the kept connection is no net.Conn", round, step)
				}
			}
		}
		// One descriptor a connection on each side (the server runs in
		// this process), and the loop's epoll instance.
		if n, want := newFiles(t, before), 2*len(probers)+1; n != want {
			t.Errorf("round %d (%s): %d more files open, want %d", round, step, n, want)
		}
	}
	if n := srv.accepted.Load(); n != int64(len(probers)) {
		t.Errorf("%d probers opened %d connections, want one each", len(probers), n)
	}
	for _, p := range probers {
		p.Close()
	}
	f.Close()
	// The server closes its ends as it reads theirs.
	deadline := time.Now().Add(hungBound)
	for newFiles(t, before) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := newFiles(t, before); n != 0 {
		t.Errorf("after Close, %d more files open than before, want none", n)
	}
}

// A registered connection's ends name themselves as net names them, and
// one it could not tell is no address at all, not ":0".
func TestAsyncConnAddrs(t *testing.T) {
	ac := &asyncConn{c: &leanConn{}, local: netip.MustParseAddrPort("127.0.0.1:40000"), remote: netip.MustParseAddrPort("[::1]:8080")}
	local, remote := ac.addrs()
	if local.String() != "127.0.0.1:40000" || remote.String() != "[::1]:8080" {
		t.Errorf("addrs() = %v, %v, want 127.0.0.1:40000, [::1]:8080", local, remote)
	}
	ac.remote = netip.AddrPort{}
	if _, remote := ac.addrs(); remote != nil {
		t.Errorf("addrs() without a remote end = %#v, want nil", remote)
	}
}

package web_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// snapshot is a web.Snapshot in memory that records its Close.
type snapshot struct {
	*strings.Reader
	size   int64
	closed atomic.Bool
}

func newSnapshot(s string) *snapshot {
	return &snapshot{Reader: strings.NewReader(s), size: int64(len(s))}
}

func (s *snapshot) Size() int64  { return s.size }
func (s *snapshot) Close() error { s.closed.Store(true); return nil }

// waitUntil polls cond until it holds, failing the test after a generous
// deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stalledGet sends GET path on a raw connection with a small receive
// buffer, reads the status line and then nothing more; the connection is
// closed when the test ends.
func stalledGet(t *testing.T, base, path string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: pulsed\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the start of %s's answer: %v", path, err)
	}
	return conn, status
}

// The backup is sent whole with its length, and its copy is discarded.
func TestBackupSendsTheCopy(t *testing.T) {
	snap := newSnapshot("the-store")
	e := newEnv(t, checker.Config{}, web.Config{Backup: func() (web.Snapshot, error) { return snap, nil }})
	resp, err := http.Get(e.srv.URL + "/backup")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "the-store" {
		t.Fatalf("GET /backup: %d %q %v", resp.StatusCode, body, err)
	}
	if resp.ContentLength != int64(len("the-store")) {
		t.Errorf("Content-Length %d, want %d", resp.ContentLength, len("the-store"))
	}
	if got := resp.Header.Get("Content-Disposition"); got != `attachment; filename="pulse.db"` {
		t.Errorf("Content-Disposition %q", got)
	}
	waitUntil(t, "the copy to be closed", snap.closed.Load)
}

// A client that stops reading is cut off after the write timeout; while
// its backup runs, another gets 503 at once and takes no copy; once it is
// cut off, the next backup runs.
func TestBackupStalledClientIsCutOffAndBackupsRunOneAtATime(t *testing.T) {
	big := newSnapshot(strings.Repeat("x", 32<<20)) // more than any socket buffers
	var taken atomic.Int32
	e := newEnv(t, checker.Config{}, web.Config{
		Backup: func() (web.Snapshot, error) {
			if taken.Add(1) == 1 {
				return big, nil
			}
			return newSnapshot("the-store"), nil
		},
		WriteTimeout: 300 * time.Millisecond,
	})
	if _, status := stalledGet(t, e.srv.URL, "/backup"); !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("/backup answered %q", status)
	}

	code, body := get(t, e.srv.URL+"/backup")
	if code != http.StatusServiceUnavailable || body != "another backup is in progress (one at a time): try again when it has finished\n" {
		t.Errorf("a second /backup while one runs: %d %q", code, body)
	}
	if n := taken.Load(); n != 1 {
		t.Errorf("the refused backup took a copy: %d copies", n)
	}

	waitUntil(t, "the stalled client to be cut off", big.closed.Load)
	waitUntil(t, "the next backup to run", func() bool {
		code, body := get(t, e.srv.URL+"/backup")
		return code == http.StatusOK && body == "the-store"
	})
}

// A copy that cannot be taken is a 500 that says why.
func TestBackupCopyFails(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{Backup: func() (web.Snapshot, error) {
		return nil, errors.New("no space left on device")
	}})
	code, body := get(t, e.srv.URL+"/backup")
	if code != http.StatusInternalServerError || body != "backup failed: could not copy the store: no space left on device\n" {
		t.Errorf("GET /backup: %d %q", code, body)
	}
	// The failed backup freed its slot.
	code, _ = get(t, e.srv.URL+"/backup")
	if code != http.StatusInternalServerError {
		t.Errorf("GET /backup again: %d, want the same 500", code)
	}
}

// Without a store there is nothing to back up.
func TestBackupWithoutAStore(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	if code, body := get(t, e.srv.URL+"/backup"); code != http.StatusNotFound || !strings.Contains(body, "without a store") {
		t.Errorf("GET /backup: %d %q", code, body)
	}
}

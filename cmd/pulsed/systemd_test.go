package main

import (
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sdMessage is one sd_notify datagram pulsed sent, with what the test saw
// of pulsed the moment it arrived (for READY=1).
type sdMessage struct {
	state     string
	grpcUp    bool // the gRPC port accepted a connection
	readyCode int  // /readyz's status
}

// listenNotify listens on a unix datagram socket as systemd does for
// Type=notify services, and sends every message on the channel returned.
// On READY=1 it looks at once whether pulsed serves gRPC on grpcAddr and
// what /readyz on httpAddr answers. The socket closes when the test ends.
func listenNotify(t *testing.T, grpcAddr, httpAddr string) (string, <-chan sdMessage) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan sdMessage, 4096)
	done := make(chan struct{})
	t.Cleanup(func() { conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, state := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				m := sdMessage{state: state}
				if state == "READY=1" {
					if c, err := net.DialTimeout("tcp", grpcAddr, 5*time.Second); err == nil {
						m.grpcUp = true
						c.Close()
					}
					if resp, err := client.Get("http://" + httpAddr + "/readyz"); err == nil {
						m.readyCode = resp.StatusCode
						resp.Body.Close()
					}
				}
				select {
				case msgs <- m:
				default: // the test stopped reading
				}
			}
		}
	}()
	return sock, msgs
}

// next returns the next message, failing the test if none comes within d.
func next(t *testing.T, msgs <-chan sdMessage, d time.Duration, what string) sdMessage {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(d):
		t.Fatalf("no sd_notify message within %v: waiting for %s", d, what)
		return sdMessage{}
	}
}

// A real pulsed started as systemd starts a Type=notify service with
// WatchdogSec= (NOTIFY_SOCKET and WATCHDOG_USEC set) sends READY=1 once it
// serves gRPC and /readyz answers 200, then WATCHDOG=1 every half of
// WATCHDOG_USEC; once its scheduler is wedged (the pulse_testhook build's
// SIGUSR1) and /healthz fails, the pings stop, so that systemd kills and
// restarts it; SIGTERM sends STOPPING=1 at once.
func TestSystemdNotify(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := buildPulsedTags(t, "pulse_testhook")
	grpcAddr := "127.0.0.1:" + freePort(t)
	web := "127.0.0.1:" + freePort(t)
	sock, msgs := listenNotify(t, grpcAddr, web)
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000") // pings every 100ms
	p := startPulsedLines(t, bin, nil, "-listen", grpcAddr, "-http-listen", web, "-data-dir", t.TempDir(),
		"-liveness-timeout", "1s", "-shutdown-timeout", "1s")

	// Pings may come before READY=1: the watchdog runs from the start.
	var m sdMessage
	for m = next(t, msgs, 30*time.Second, "READY=1"); m.state == "WATCHDOG=1"; m = next(t, msgs, 30*time.Second, "READY=1") {
	}
	if m.state != "READY=1" {
		t.Fatalf("first message other than a ping: %q, want READY=1", m.state)
	}
	if !m.grpcUp || m.readyCode != http.StatusOK {
		t.Errorf("READY=1 came before pulsed served: gRPC port accepted %v, /readyz %d", m.grpcUp, m.readyCode)
	}
	start := time.Now()
	for i := 0; i < 5; i++ {
		if m := next(t, msgs, 5*time.Second, "WATCHDOG=1"); m.state != "WATCHDOG=1" {
			t.Fatalf("got %q while live, want WATCHDOG=1", m.state)
		}
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("5 pings in %v with WATCHDOG_USEC=200ms: want one every 100ms", took)
	}

	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/healthz to fail", func() bool {
		code, _ := get(t, "http://"+web+"/healthz")
		return code == http.StatusServiceUnavailable
	})
	// A ping sent just before /healthz failed may still be in the socket:
	// drain, then watch ten ping intervals go by without one.
	for drained := false; !drained; {
		select {
		case <-msgs:
		default:
			drained = true
		}
	}
	quiet := time.After(time.Second)
	for waiting := true; waiting; {
		select {
		case m := <-msgs:
			t.Fatalf("got %q while pulsed is not live; want no pings", m.state)
		case <-quiet:
			waiting = false
		}
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m := next(t, msgs, 5*time.Second, "STOPPING=1"); m.state != "STOPPING=1" {
		t.Errorf("after SIGTERM got %q, want STOPPING=1", m.state)
	}
	<-p.Done() // the wedged checker holds the shutdown to its bound
}

// A WATCHDOG_USEC that is not a positive number is an error that names
// it, not a silent lack of pings.
func TestSystemdBadWatchdogUsec(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	for _, v := range []string{"soon", "-5", "0"} {
		t.Setenv("WATCHDOG_USEC", v)
		n, err := startSystemd(func() error { return nil }, slog.New(slog.DiscardHandler))
		if err == nil {
			n.close()
			t.Errorf("WATCHDOG_USEC=%q: no error", v)
			continue
		}
		if !strings.Contains(err.Error(), "WATCHDOG_USEC") {
			t.Errorf("WATCHDOG_USEC=%q: error %q does not name it", v, err)
		}
	}
}

package server_test

import (
	"net"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/server"
)

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c: a read returns EOF
// (or a reset) before the deadline instead of timing out.
func closedByServer(t *testing.T, c net.Conn, within time.Duration) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil // EOF or a reset
}

// TestConnLimits: past the total or the per-source limit, a new connection
// is closed at once and counted; closing one frees its slot.
func TestConnLimits(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := server.LimitConns(inner, server.ConnLimits{Max: 3, PerSource: 2})
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := inner.Addr().String()
	take := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("a connection within the limits was not accepted")
			return nil
		}
	}

	a1 := dialFrom(t, "127.0.0.1", addr)
	s1 := take()
	dialFrom(t, "127.0.0.1", addr)
	take()
	over := dialFrom(t, "127.0.0.1", addr) // a third from one source
	if !closedByServer(t, over, 5*time.Second) {
		t.Error("the connection past the per-source limit was not closed")
	}
	dialFrom(t, "127.0.0.2", addr) // another source still gets in
	take()
	full := dialFrom(t, "127.0.0.3", addr) // but the total is reached
	if !closedByServer(t, full, 5*time.Second) {
		t.Error("the connection past the total limit was not closed")
	}
	if total, perSource := l.Rejected(); total != 1 || perSource != 1 {
		t.Errorf("Rejected() = %d total, %d per source; want 1 and 1", total, perSource)
	}
	if n := l.Open(); n != 3 {
		t.Errorf("Open() = %d, want 3", n)
	}
	if closedByServer(t, a1, 50*time.Millisecond) {
		t.Error("a connection within the limits was closed")
	}

	// Closing an accepted connection (twice: counted once) frees its slot.
	s1.Close()
	s1.Close()
	if n := l.Open(); n != 2 {
		t.Errorf("Open() after a close = %d, want 2", n)
	}
	dialFrom(t, "127.0.0.1", addr)
	take()
}

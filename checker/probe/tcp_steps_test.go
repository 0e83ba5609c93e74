package probe

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// scriptServer serves every connection with handle, on a goroutine each,
// and waits for them when the test ends. With tlsCert set it speaks TLS.
func scriptServer(t *testing.T, tlsCert *tls.Certificate, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*tlsCert}})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(testscale.D(10 * time.Second)))
				handle(c)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// fakeRedis answers PING with +PONG, or with -NOAUTH while auth is
// required, as a Redis server does.
func fakeRedis(requireAuth bool) func(net.Conn) {
	return func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch {
			case strings.TrimSpace(line) != "PING":
				fmt.Fprint(c, "-ERR unknown command\r\n")
			case requireAuth:
				fmt.Fprint(c, "-NOAUTH Authentication required.\r\n")
			default:
				fmt.Fprint(c, "+PONG\r\n")
			}
		}
	}
}

// banner sends text and then holds the connection until the client closes
// it.
func banner(text string) func(net.Conn) {
	return func(c net.Conn) {
		fmt.Fprint(c, text)
		_, _ = c.Read(make([]byte, 1))
	}
}

var redisPing = []TCPStep{{Send: "PING\r\n"}, {Expect: "+PONG\r\n"}}

func TestTCPSteps(t *testing.T) {
	ca := newTestCA(t, "CA")
	cert := ca.issue(t, time.Now().Add(time.Hour), false, "127.0.0.1").pair
	tests := []struct {
		name   string
		server func(net.Conn)
		tls    bool
		steps  []TCPStep
		want   string // "" means pass
	}{
		{"redis", fakeRedis(false), false, redisPing, ""},
		{"redis hex", fakeRedis(false), false, []TCPStep{{SendHex: "50 49 4e 47 0d 0a"}, {ExpectContains: "PONG"}}, ""},
		{"redis wants auth", fakeRedis(true), false, redisPing, `step 2: expected "+PONG\r\n", got different bytes`},
		{"redis wants auth, contains", fakeRedis(true), false, []TCPStep{{Send: "PING\r\n"}, {ExpectContains: "+PONG", ReadLimit: 16}}, `step 2: "+PONG" not found in first 16 bytes`},
		{"smtp banner", banner("220 mail.example ESMTP Postfix\r\n"), false, []TCPStep{{ExpectRegex: `^220 [^\r\n]*ESMTP`}}, ""},
		{"ssh banner", banner("SSH-2.0-OpenSSH_9.6\r\n"), false, []TCPStep{{Expect: "SSH-2.0-"}}, ""},
		{"not ssh", banner("HTTP/1.1 400 Bad Request\r\n\r\n"), false, []TCPStep{{Expect: "SSH-2.0-"}}, `step 1: expected "SSH-2.0-", got different bytes`},
		{"closed before the match", func(c net.Conn) { fmt.Fprint(c, "220 ") }, false, []TCPStep{{ExpectContains: "ESMTP"}}, `step 1: "ESMTP" not found in 4 bytes before the server closed the connection`},
		{"regex no match", banner(strings.Repeat("x", 100)), false, []TCPStep{{ExpectRegex: "^220", ReadLimit: 50}}, "step 1: /^220/ not found in first 50 bytes"},
		{"silent", func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) }, false, []TCPStep{{Expect: "+OK"}}, "timeout"},
		// A MySQL server greets first: a 3-byte length, sequence 0, then
		// protocol version 10.
		{"mysql handshake", banner("\x4a\x00\x00\x00\x0a8.0.36\x00"), false, []TCPStep{{ExpectRegex: `(?s)^.{3}\x00\x0a`}}, ""},
		{"mysql handshake hex", banner("\x4a\x00\x00\x00\x0a8.0.36\x00"), false, []TCPStep{{ExpectHex: "4a 00 00 00 0a"}}, ""},
		{"not mysql", banner("\x4a\x00\x00\x00\x09"), false, []TCPStep{{ExpectHex: "4a0000000a"}}, "step 1: expected hex 4a0000000a, got different bytes"},
		{"redis over TLS", fakeRedis(false), true, redisPing, ""},
		{"TLS and no steps", fakeRedis(false), true, nil, ""},
	}
	f := newTestFactory(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &TCPSpec{Steps: tt.steps}
			var c *tls.Certificate
			if tt.tls {
				c, spec.TLS = &cert, &TLSSpec{CAPEM: string(ca.pem)}
			}
			spec.Address = scriptServer(t, c, tt.server)
			p := newProber(t, f, Spec{TCP: spec})
			err := probeWithin(t, timeoutCtx(t, testscale.D(500*time.Millisecond)), p)
			if got := Describe(err); got != tt.want {
				t.Errorf("Probe: %q (%v), want %q", got, err, tt.want)
			}
		})
	}
	// TLS to a server that does not speak it.
	p := newProber(t, f, Spec{TCP: &TCPSpec{Address: scriptServer(t, nil, fakeRedis(false)), TLS: &TLSSpec{}}})
	wantFail(t, probeWithin(t, timeoutCtx(t, testscale.D(2*time.Second)), p), "first record does not look like a TLS handshake")
}

// TestTCPRealRedis runs the PING step against Debian's redis-server when it
// is installed.
func TestTCPRealRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server); the scripted server of TestTCPSteps covers the same steps")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(addr.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	f := newTestFactory(t)
	p := newProber(t, f, Spec{TCP: &TCPSpec{Address: addr.String(), Steps: redisPing}})
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for {
		err := probeWithin(t, timeoutCtx(t, time.Second), p)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not answer PING with +PONG: %s", Describe(err))
		}
		time.Sleep(50 * time.Millisecond) // polling a process that starts: no event to wait on
	}
}

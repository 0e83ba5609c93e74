package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// An address of pulsed without a port is a usage error that says so and
// names where the address came from, whichever that is: gRPC would dial
// port 443 and report pulsed unreachable.
func TestAddrWithoutPort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // PULSE_ADDR
		want string
	}{
		{[]string{"--addr", "127.0.0.1", "ls"}, "", "pulsectl: --addr 127.0.0.1 has no port: want host:port, e.g. 127.0.0.1:50051\n"},
		{[]string{"ls", "--addr=127.0.0.1:"}, "", "pulsectl: --addr 127.0.0.1: has no port: want host:port, e.g. 127.0.0.1:50051\n"},
		{[]string{"state", "web-1", "--addr", "[::1]"}, "", "pulsectl: --addr [::1] has no port: want host:port, e.g. [::1]:50051\n"},
		{[]string{"watch", "--addr", "::1"}, "", "pulsectl: --addr ::1 has no port: want host:port, e.g. [::1]:50051\n"},
		{[]string{"ls", "--addr", "127.0.0.1:50051,127.0.0.2"}, "", "pulsectl: --addr 127.0.0.1:50051,127.0.0.2: 127.0.0.2 has no port: want host:port, e.g. 127.0.0.1:50051\n"},
		{[]string{"ls", "--addr", "dns:///127.0.0.1"}, "", "pulsectl: --addr dns:///127.0.0.1 has no port: want dns:///host:port, e.g. dns:///127.0.0.1:50051\n"},
		{[]string{"ls", "--addr", "a:b:c"}, "", "pulsectl: --addr a:b:c is not host:port: want host:port, e.g. 127.0.0.1:50051\n"},
		{[]string{"ls"}, "127.0.0.1", "pulsectl: PULSE_ADDR 127.0.0.1 has no port: want host:port, e.g. 127.0.0.1:50051\n"},
	} {
		t.Setenv(envAddr, tc.env)
		r := pulsectl(t, tc.args...)
		if r.code != exitUsage || r.stderr != tc.want || r.stdout != "" {
			t.Errorf("PULSE_ADDR=%q pulsectl %q: exit %d\nstdout: %s\nstderr: %s\nwant exit %d and %q", tc.env, tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}

	path := writeConfig(t, "current-context: prod\ncontexts:\n  prod:\n    addr: 127.0.0.1\n")
	t.Setenv(envAddr, "")
	r := pulsectl(t, "ls")
	want := "pulsectl: config " + path + " (context prod): addr 127.0.0.1 has no port: want host:port, e.g. 127.0.0.1:50051\n"
	if r.code != exitUsage || r.stderr != want {
		t.Errorf("a context's addr without a port: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

// The addresses with a scheme gRPC resolves reach pulsed as before: a Unix
// socket (here a proxy to pulsed's port) and dns:/// or passthrough:///
// with a port.
func TestAddrSchemes(t *testing.T) {
	p := startPulsed(t)
	mustRun(t, "add", "--addr", p.Addr, "--name", "web-1", "--tcp", closedAddr(t), "--interval", "1h")
	sock := unixProxy(t, p.Addr)
	for _, addr := range []string{"unix:" + sock, "unix://" + sock, "dns:///" + p.Addr, "passthrough:///" + p.Addr} {
		if out := mustRun(t, "ls", "--addr", addr); !strings.Contains(out, "web-1") {
			t.Errorf("ls --addr %s: %s", addr, out)
		}
	}
	// A name and port is no scheme and port, though it reads as one.
	for _, addr := range []string{"localhost:50051", "pulse-1.internal:50051", "[::1]:50051", "dns:pulse-1.internal:50051"} {
		if problem := addrProblem(addr); problem != "" {
			t.Errorf("%s %s", addr, problem)
		}
	}
}

// unixProxy serves a Unix socket that relays each connection to addr,
// until the test ends, and returns the socket's path.
func unixProxy(t *testing.T, addr string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pulsectl-sock-") // short: a socket's path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pulsed.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // protects conns
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { io.Copy(up, c); up.Close() })
			wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return path
}

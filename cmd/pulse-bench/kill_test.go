package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// keptConn is a client connection to a farm target that sends one request
// and reads its answer, keeping the connection.
func keptConn(t *testing.T, f *Farm, i int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.Addr(i), testscale.D(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	if code, err := roundTrip(c, br, f.Addr(i)); err != nil || code != 200 {
		t.Fatalf("target %d: %d, %v", i, code, err)
	}
	return c, br
}

func roundTrip(c net.Conn, br *bufio.Reader, host string) (int, error) {
	_ = c.SetDeadline(time.Now().Add(testscale.D(5 * time.Second)))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A killed target resets the connection kept to it, at once, and every
// new one; the others keep answering; healed, it answers again. Its first
// refused connection is its first failure.
func TestFarmKillResetsConnections(t *testing.T) {
	f := newTestFarm(t, 2)
	dead, deadBr := keptConn(t, f, 0)
	alive, aliveBr := keptConn(t, f, 1)

	f.SetMode([]int{0}, ModeKill)
	_ = dead.SetReadDeadline(time.Now().Add(testscale.D(5 * time.Second)))
	if _, err := deadBr.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("kept connection after the kill: %v, want a reset", err)
	}
	if _, ok := f.FirstFail(0); ok {
		t.Error("a first failure before any new connection")
	}
	c, err := net.DialTimeout("tcp", f.Addr(0), testscale.D(5*time.Second))
	if err == nil {
		_, err = roundTrip(c, bufio.NewReader(c), f.Addr(0))
		c.Close()
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("new connection to the killed target: %v, want a reset", err)
	}
	if _, ok := f.FirstFail(0); !ok {
		t.Error("the refused connection is not the first failure")
	}
	if code, err := roundTrip(alive, aliveBr, f.Addr(1)); err != nil || code != 200 {
		t.Errorf("the other target after the kill: %d, %v", code, err)
	}

	f.SetMode([]int{0}, ModeOK)
	if code := get(t, testClient(t), f.URL(0)); code != 200 {
		t.Errorf("healed target answered %d", code)
	}
}

// A killed target with a socket of its own has it closed: its kept
// connection is reset and a new one is refused by the kernel, as a dead
// process's port refuses; the target beside it on the same port keeps
// answering; healed, the target listens again on the same address.
func TestFarmKillClosesAnOwnSocket(t *testing.T) {
	f, err := NewFarm(FarmConfig{N: 3, Own: []int{0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	addr := f.Addr(0)
	if p0, p1, p2 := portOf(t, addr), portOf(t, f.Addr(1)), portOf(t, f.Addr(2)); p0 == p1 || p0 != p2 {
		t.Fatalf("ports %d, %d, %d: want the own sockets on a port of their own, shared", p0, p1, p2)
	}
	dead, deadBr := keptConn(t, f, 0)
	alive, aliveBr := keptConn(t, f, 2)

	if _, err := f.SetMode([]int{0}, ModeKill); err != nil {
		t.Fatal(err)
	}
	_ = dead.SetReadDeadline(time.Now().Add(testscale.D(5 * time.Second)))
	if _, err := deadBr.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("kept connection after the kill: %v, want a reset", err)
	}
	if c, err := net.DialTimeout("tcp", addr, testscale.D(5*time.Second)); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("new connection to the killed target: %v, want it refused", err)
	}
	if code, err := roundTrip(alive, aliveBr, f.Addr(2)); err != nil || code != 200 {
		t.Errorf("the other own-socket target after the kill: %d, %v", code, err)
	}
	if code := get(t, testClient(t), f.URL(1)); code != 200 {
		t.Errorf("the wildcard socket's target after the kill answered %d", code)
	}

	if _, err := f.SetMode([]int{0}, ModeOK); err != nil {
		t.Fatal(err)
	}
	if f.Addr(0) != addr {
		t.Errorf("healed at %s, killed at %s", f.Addr(0), addr)
	}
	if code := get(t, testClient(t), f.URL(0)); code != 200 {
		t.Errorf("healed target answered %d", code)
	}
}

func portOf(t *testing.T, addr string) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

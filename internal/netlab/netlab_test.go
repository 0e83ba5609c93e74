package netlab

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves one line back on every connection until l closes.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// reach dials addr from h and says whether a byte came back.
func reach(t *testing.T, h *Host, addr string, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	c, err := h.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte("x")); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err
}

// Hosts reach each other over the bridge; a cut breaks exactly one path,
// silently (Drop: a timeout) or at once (Reject), and heals.
func TestCutAndHeal(t *testing.T) {
	lab := New(t)
	a, b, c := lab.AddHost("a"), lab.AddHost("b"), lab.AddHost("c")
	l, err := c.Listen(c.Addr + ":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echo(l)
	target := c.Addr + ":7000"
	for _, h := range []*Host{a, b} {
		if err := reach(t, h, target, 5*time.Second); err != nil {
			t.Fatalf("%s to c before any cut: %v", h.Name, err)
		}
	}

	a.Cut(c, Drop)
	err = reach(t, a, target, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("a to c dropped: %v, want a timeout", err)
	}
	if err := reach(t, b, target, 5*time.Second); err != nil {
		t.Fatalf("b to c while a's path is cut: %v", err)
	}
	a.Heal(c, Drop)
	if err := reach(t, a, target, 5*time.Second); err != nil {
		t.Fatalf("a to c healed: %v", err)
	}

	a.Cut(c, Reject)
	start := time.Now()
	err = reach(t, a, target, 5*time.Second)
	if err == nil || isTimeout(err) {
		t.Fatalf("a to c rejected: %v after %v, want a refusal before the deadline", err, time.Since(start))
	}
	a.Heal(c, Reject)
	if err := reach(t, a, target, 5*time.Second); err != nil {
		t.Fatalf("a to c healed: %v", err)
	}

	// A process in a host sees only that host's network.
	out, err := a.Command(t.Context(), "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), a.Addr+"/24") {
		t.Fatalf("ip addr in a: %v\n%s", err, out)
	}
	// Nothing of the lab is in the test's own namespace.
	if addrs, err := exec.Command("ip", "-4", "-o", "addr").Output(); err != nil || strings.Contains(string(addrs), "10.77.0.") {
		t.Fatalf("ip addr in the test's namespace: %v\n%s", err, addrs)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

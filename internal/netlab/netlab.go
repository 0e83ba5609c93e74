// Package netlab builds small networks of hosts for tests: each host is a
// Linux network namespace with one address on a private bridge, and a test
// can cut the path between two hosts (silently, as a broken switch port
// does, or with an ICMP refusal) and heal it again. Processes run in a host
// with Command; the test's own sockets enter a host with Dial and Listen.
//
// Every address is inside namespaces the lab made (10.77.0.0/24 on a bridge
// in a namespace of its own), so nothing a test sends leaves the machine
// or touches the host's own network. It needs root, ip(8) and iptables(8);
// New skips the test when they are missing, or fails it when
// PULSE_REQUIRE_NETNS=1 (CI).
package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Subnet is the network every lab's hosts share.
const Subnet = "10.77.0.0/24"

// Lab is a set of hosts on one bridge. Its methods are safe for concurrent
// use; they end the test on failure.
type Lab struct {
	t      testing.TB
	prefix string // of every namespace and device name the lab made
	hub    string // the namespace holding the bridge

	mu    sync.Mutex
	hosts []*Host
}

// Host is one namespace of a Lab, with Addr on the bridge.
type Host struct {
	Name string // the test's name for it
	NS   string // its namespace, as ip netns names it
	Addr string // its address on the bridge, e.g. 10.77.0.2
	lab  *Lab
}

// New returns an empty lab, removed when the test ends.
func New(t testing.TB) *Lab {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "not root"
	default:
		for _, prog := range []string{"ip", "iptables"} {
			if _, err := exec.LookPath(prog); err != nil {
				why = prog + " is not installed (Debian: apt-get install iproute2 iptables)"
			}
		}
	}
	if why != "" {
		if os.Getenv("PULSE_REQUIRE_NETNS") == "1" {
			t.Fatalf("network namespaces needed (PULSE_REQUIRE_NETNS=1): %s", why)
		}
		t.Skipf("needs network namespaces: %s; run as root with iproute2 and iptables", why)
	}
	b := make([]byte, 3)
	rand.Read(b)
	l := &Lab{t: t, prefix: "pl" + hex.EncodeToString(b)}
	l.hub = l.prefix + "-hub"
	t.Cleanup(l.close)
	l.ip("netns", "add", l.hub)
	l.ip("-n", l.hub, "link", "set", "lo", "up")
	l.ip("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.hub, "link", "set", "br0", "up")
	return l
}

// ip runs ip(8) with args and ends the test if it fails.
func (l *Lab) ip(args ...string) {
	l.t.Helper()
	l.run("ip", args...)
}

func (l *Lab) run(prog string, args ...string) {
	l.t.Helper()
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

// AddHost adds a host with the next address on the bridge.
func (l *Lab) AddHost(name string) *Host {
	l.t.Helper()
	l.mu.Lock()
	n := len(l.hosts) + 1
	h := &Host{Name: name, NS: fmt.Sprintf("%s-%d", l.prefix, n), Addr: fmt.Sprintf("10.77.0.%d", n+1), lab: l}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if n > 200 {
		l.t.Fatalf("netlab: at most 200 hosts")
	}
	outer, inner := fmt.Sprintf("%sv%d", l.prefix, n), fmt.Sprintf("%si%d", l.prefix, n)
	l.ip("netns", "add", h.NS)
	l.ip("-n", h.NS, "link", "set", "lo", "up")
	l.ip("link", "add", outer, "netns", l.hub, "type", "veth", "peer", "name", inner, "netns", h.NS)
	l.ip("-n", l.hub, "link", "set", outer, "master", "br0", "up")
	l.ip("-n", h.NS, "link", "set", inner, "name", "eth0")
	l.ip("-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
	l.ip("-n", h.NS, "link", "set", "eth0", "up")
	return h
}

// How says how a cut path fails.
type How int

const (
	// Drop discards every packet silently: connections time out, as
	// through a broken switch port or a security group that drops.
	Drop How = iota
	// Reject answers with an ICMP error: connections are refused at once.
	Reject
)

func (w How) target() []string {
	if w == Reject {
		return []string{"REJECT", "--reject-with", "icmp-host-unreachable"}
	}
	return []string{"DROP"}
}

// Cut breaks the path from h to other, both ways, in h's own namespace:
// h cannot reach other nor other reach h, while every other path stays.
func (h *Host) Cut(other *Host, how How) { h.rules("-I", other, how) }

// Heal restores a path Cut broke.
func (h *Host) Heal(other *Host, how How) { h.rules("-D", other, how) }

func (h *Host) rules(op string, other *Host, how How) {
	h.lab.t.Helper()
	for _, rule := range [][]string{
		{op, "OUTPUT", "-d", other.Addr},
		{op, "INPUT", "-s", other.Addr},
	} {
		args := append([]string{"netns", "exec", h.NS, "iptables", "-w"}, rule...)
		args = append(append(args, "-j"), how.target()...)
		h.lab.ip(args...)
	}
}

// Command returns a command that runs prog in h's namespace.
func (h *Host) Command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, prog}, args...)...)
}

// in runs f on a thread in h's namespace: a socket made there stays there.
func (h *Host) in(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer self.Close()
	ns, err := os.Open("/run/netns/" + h.NS)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", h.NS, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: never give it back to
		// the runtime (returning without UnlockOSThread ends it).
		runtime.LockOSThread()
		return fmt.Errorf("setns back: %w", err)
	}
	return ferr
}

// Dial connects from h, as a process in h would; use it as a gRPC
// context dialer.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.in(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// Listen listens on addr in h (":0" for any port on h's address).
func (h *Host) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := h.in(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// close removes every namespace the lab made; their devices go with them.
func (l *Lab) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		exec.Command("ip", "netns", "del", h.NS).Run()
	}
	exec.Command("ip", "netns", "del", l.hub).Run()
}

package main

import (
	"strings"
	"testing"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestWait drives wait against a real pulsed: at once when the targets
// already are there, after the transition that brings them there, exit 6
// naming the late ones on timeout, exit 3 for an unknown name.
func TestWait(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL+"/healthz", "--rise", "1")
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)
	// web-2 is probed only when asked to: it stays unhealthy until then.
	quiet(t, p.Addr, []string{"--name", "web-2", "--http", web.URL + "/healthz", "--rise", "1"})

	// Already there: at once, even with no time to wait.
	for _, args := range [][]string{
		{"wait", "web-1", "--for", "healthy", addr},
		{"wait", "web-1", "--for", "routable", "--timeout", "0", addr},
		{"wait", "web-2", "--for", "unhealthy", addr},
		{"wait", "gone", "--for", "removed", addr},
	} {
		if r := pulsectl(t, args...); r.code != exitOK || r.stdout != args[1]+": "+args[3]+"\n" {
			t.Errorf("%v: %+v", args, r)
		}
	}

	// Not there yet: exit 6, naming the late target and its state.
	r := pulsectl(t, "wait", "web-1", "web-2", "--for", "healthy", "--timeout", "200ms", addr)
	if r.code != exitTimeout || !strings.Contains(r.stderr, "timed out after 200ms") || !strings.Contains(r.stderr, "web-2 (unhealthy, active, not routable)") ||
		strings.Contains(r.stderr, "web-1 (") || r.stdout != "" {
		t.Errorf("wait past its timeout: %+v", r)
	}
	if r := pulsectl(t, "wait", "web-2", "--for", "healthy", "--timeout", "0", addr); r.code != exitTimeout {
		t.Errorf("wait --timeout 0 for a condition not met: %+v", r)
	}

	// Follows the transition: web-2 becomes healthy once probed.
	w := startBackground(t, "wait", "web-2", "web-1", "--for", "healthy", "--timeout", "1m", addr)
	eventually(t, "wait to start", func() bool {
		return strings.Contains(w.stderr.String(), "waiting up to 1m0s for web-1, web-2 to be healthy")
	})
	mustRun(t, "probe", "web-2", addr)
	if code := w.wait(t); code != exitOK || w.stdout.String() != "web-1: healthy\nweb-2: healthy\n" {
		t.Errorf("wait for a transition: exit %d\nstdout %q\nstderr %q", code, w.stdout.String(), w.stderr.String())
	}

	// Routable follows the mode too.
	mustRun(t, "drain", "web-1", addr)
	w = startBackground(t, "wait", "web-1", "--for", "routable", "--timeout", "1m", addr)
	eventually(t, "wait to start", func() bool { return strings.Contains(w.stderr.String(), "waiting up to") })
	mustRun(t, "activate", "web-1", addr)
	if code := w.wait(t); code != exitOK {
		t.Errorf("wait --for routable after activate: exit %d\n%s", code, w.stderr.String())
	}

	// Removed: when rm takes it away.
	w = startBackground(t, "wait", "web-2", "--for", "removed", "--timeout", "1m", addr)
	eventually(t, "wait to start", func() bool { return strings.Contains(w.stderr.String(), "waiting up to") })
	mustRun(t, "rm", "web-2", addr)
	if code := w.wait(t); code != exitOK || w.stdout.String() != "web-2: removed\n" {
		t.Errorf("wait --for removed: exit %d, %q %q", code, w.stdout.String(), w.stderr.String())
	}

	if r := pulsectl(t, "wait", "web-1", "nope", "--for", "healthy", addr); r.code != exitNotFound || !strings.Contains(r.stderr, `no target named "nope"`) {
		t.Errorf("wait for an unknown target: %+v", r)
	}
	if r := pulsectl(t, "wait", "web-1", "--for", "healthy", "--addr", closedAddr(t)); r.code != exitServer || !strings.Contains(r.stderr, "cannot reach pulsed") {
		t.Errorf("wait with pulsed unreachable: %+v", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "--for", "healthy"}, "name the targets"},
		{[]string{"wait", "web-1"}, "--for is required"},
		{[]string{"wait", "web-1", "--for", "helthy"}, `Did you mean "healthy"?`},
		{[]string{"wait", "web-1", "--for", "healthy", "--timeout", "-1s"}, "for flag --timeout: must be 0 or more, got -1s"},
		{[]string{"wait", "web-1", "--for", "healthy", "--timeout", "25h"}, "--timeout must be from 0 to 24h0m0s, got 25h0m0s"},
	} {
		r := pulsectl(t, append(tc.args, addr)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

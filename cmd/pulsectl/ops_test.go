package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// quiet adds targets probed once a day, and checks that their first
// scheduled probe (spread over the interval by a hash of the name) is
// hours away: only the test's own rounds probe them.
func quiet(t *testing.T, addr string, adds ...[]string) {
	t.Helper()
	for _, args := range adds {
		mustRun(t, append([]string{"add", "--addr", addr, "--interval", "24h", "--timeout", "1s"}, args...)...)
		name := args[1]
		if next := stateOf(t, addr, name).GetNextProbeTime().AsTime(); time.Until(next) < time.Hour {
			t.Fatalf("%s's first scheduled probe is at %v, within the hour: pick another name", name, next)
		}
	}
}

// TestProbeAndSet drives probe and set against a real pulsed.
func TestProbeAndSet(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	quiet(t, p.Addr,
		[]string{"--name", "web-1", "--group", "edge", "--http", web.URL + "/healthz", "--rise", "1"},
		[]string{"--name", "db", "--tcp", closedAddr(t), "--rise", "1", "--fall", "1"},
	)

	// probe: every target; the round's transitions, in name order.
	if out := mustRun(t, "probe", addr); out != "web-1: unhealthy -> healthy\n" {
		t.Errorf("probe printed %q, want web-1's transition", out)
	}
	r := pulsectl(t, "probe", addr, "db", "--results")
	if r.code != exitOK || !regexp.MustCompile(`^db\tunhealthy\tfail in \S+: connection refused\n$`).MatchString(r.stdout) {
		t.Errorf("probe db --results: %+v", r)
	}
	r = pulsectl(t, "probe", addr, "--group", "edge")
	if r.code != exitOK || r.stdout != "" || r.stderr != "probed 1 target: no transitions\n" {
		t.Errorf("probe --group edge, nothing changing: %+v", r)
	}
	if r := pulsectl(t, "probe", addr, "web-1", "nope"); r.code != exitNotFound || !strings.Contains(r.stderr, `unknown target "nope"`) {
		t.Errorf("probe of an unknown name: %+v", r)
	}

	// set: only the fields given change; the state stays.
	out := mustRun(t, "set", "web-1", addr, "--interval", "12h", "--group", "core")
	if want := "updated web-1: group edge -> core, interval 24h0m0s -> 12h0m0s\n"; out != want {
		t.Errorf("set printed %q, want %q", out, want)
	}
	st := stateOf(t, p.Addr, "web-1")
	if st.GetState() != pb.State_STATE_HEALTHY || st.GetSpec().GetRise() != 1 || st.GetSpec().GetHttp().GetUrl() != web.URL+"/healthz" {
		t.Errorf("after set: %v; want healthy, rise and URL kept", st)
	}
	// Bare numbers are seconds, as everywhere in pulsectl.
	mustRun(t, "set", "web-1", addr, "--timeout", "2", "--fast-interval", "3", "--flap-threshold", "4", "--passive", "--clear", "group")
	spec := stateOf(t, p.Addr, "web-1").GetSpec()
	if spec.GetTimeout().AsDuration() != 2*time.Second || spec.GetFastInterval().AsDuration() != 3*time.Second ||
		spec.GetFlapThreshold() != 4 || !spec.GetPassiveOutcomes() || spec.GetGroup() != "" {
		t.Errorf("after set with policy flags: %v", spec)
	}
	if out := mustRun(t, "set", "web-1", addr, "--timeout", "2s"); out != "web-1 unchanged\n" {
		t.Errorf("set to the same value printed %q", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"set", "web-1", addr, "--clear", "intervl"}, exitUsage, `update_mask.paths[0]: "intervl": Target has no field "intervl"`},
		{[]string{"set", "web-1", addr, "--timeout", "1h"}, exitUsage, "target.fast_interval: must be at least the timeout (1h0m0s)"},
		{[]string{"set", "nope", addr, "--interval", "5s"}, exitNotFound, `no target named "nope"`},
		{[]string{"set", "web-1", addr}, exitUsage, "nothing to change"},
		{[]string{"set", "web-1", addr, "--initial-state", "healthy"}, exitUsage, "--initial-state applies only to a new target"},
		{[]string{"set", "web-1", addr, "--interval", "soon"}, exitUsage, `want a duration such as 20s or a number of seconds, got "soon"`},
	} {
		r := pulsectl(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("pulsectl %v: exit %d, stderr %q; want exit %d with %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
	}

	// add on an existing name replaces the whole spec, and says so.
	out = mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL+"/healthz", "--interval", "12h")
	for _, want := range []string{"\nreplaced the spec of web-1: ", "timeout 2s -> 50ms", "rise 1 -> 2", "passive outcomes true -> (none)", "use pulsectl set"} {
		if !strings.Contains(out, want) {
			t.Errorf("add over an existing target printed\n%s\nwant it to contain %q", out, want)
		}
	}
}

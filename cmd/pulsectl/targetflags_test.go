package main

import (
	"strings"
	"testing"
	"time"
)

// TestSlowStartAndRemovalFlags sets a target's slow start and automatic
// removal with add and set against a real pulsed, bare numbers being
// seconds, and wants pulsed's bounds reported.
func TestSlowStartAndRemovalFlags(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "db-1", "--tcp", closedAddr(t), "--interval", "24h", "--timeout", "1s",
		"--slow-start", "30", "--remove-after-unhealthy", "2h")
	spec := stateOf(t, p.Addr, "db-1").GetSpec()
	if spec.GetSlowStart().AsDuration() != 30*time.Second || spec.GetRemoveAfterUnhealthy().AsDuration() != 2*time.Hour {
		t.Errorf("after add: slow_start %v, remove_after_unhealthy %v; want 30s and 2h", spec.GetSlowStart(), spec.GetRemoveAfterUnhealthy())
	}

	out := mustRun(t, "set", "db-1", addr, "--slow-start", "1m", "--remove-after-unhealthy", "90")
	if want := "updated db-1: slow start 30s -> 1m0s, remove after unhealthy 2h0m0s -> 1m30s\n"; out != want {
		t.Errorf("set printed %q, want %q", out, want)
	}
	spec = stateOf(t, p.Addr, "db-1").GetSpec()
	if spec.GetSlowStart().AsDuration() != time.Minute || spec.GetRemoveAfterUnhealthy().AsDuration() != 90*time.Second || spec.GetInterval().AsDuration() != 24*time.Hour {
		t.Errorf("after set: %v", spec)
	}
	mustRun(t, "set", "db-1", addr, "--clear", "slow-start")
	if spec = stateOf(t, p.Addr, "db-1").GetSpec(); spec.GetSlowStart() != nil || spec.GetRemoveAfterUnhealthy().AsDuration() != 90*time.Second {
		t.Errorf("after --clear slow-start: %v", spec)
	}

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"set", "db-1", addr, "--slow-start", "2h"}, "target.slow_start"},
		{[]string{"set", "db-1", addr, "--remove-after-unhealthy", "0.5"}, "target.remove_after_unhealthy"},
		{[]string{"add", addr, "--name", "db-2", "--tcp", closedAddr(t), "--remove-after-unhealthy", "745h"}, "target.remove_after_unhealthy"},
		{[]string{"set", "db-1", addr, "--slow-start", "soon"}, `want a duration such as 20s or a number of seconds, got "soon"`},
	} {
		r := pulsectl(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("pulsectl %v: exit %d, stderr %q; want exit %d with %q", tc.args, r.code, r.stderr, exitUsage, tc.msg)
		}
	}
	if spec = stateOf(t, p.Addr, "db-1").GetSpec(); spec.GetRemoveAfterUnhealthy().AsDuration() != 90*time.Second {
		t.Errorf("a refused set changed remove_after_unhealthy to %v", spec.GetRemoveAfterUnhealthy())
	}
}

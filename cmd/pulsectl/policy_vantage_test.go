package main

import (
	"regexp"
	"strings"
	"testing"
)

// policy set --vantages and --quorum reach pulsed: a single pulsed keeps
// one vantage, refuses more, naming the field and that it needs replicas,
// bounds both, and a refused call changes nothing.
func TestPolicyVantageBounds(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	if out := mustRun(t, "policy", "set", "edge", "--vantages", "1", addr); !strings.HasPrefix(out, "edge: ") {
		t.Errorf("policy set edge --vantages 1 printed %q", out)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"policy", "set", "edge", "--vantages", "3", addr}, "policy.vantages: must be at most 1 here (a single pulsed is one vantage: probing from several needs replicas"},
		{[]string{"policy", "set", "edge", "--vantages", "10", addr}, "policy.vantages: must be between 0 (one: the owner's) and 9, got 10"},
		{[]string{"policy", "set", "edge", "--vantages", "-3", addr}, "policy.vantages: must be between 0 (one: the owner's) and 9, got -3"},
		{[]string{"policy", "set", "edge", "--quorum", "2", addr}, "policy.quorum: must be between 0 (a majority) and vantages (1), got 2"},
		{[]string{"policy", "get", "edge", "--vantages", "3", addr}, "go with set"},
	} {
		r := pulsectl(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("pulsectl %v: exit %d, stderr %q; want exit %d with %q", tc.args, r.code, r.stderr, exitUsage, tc.msg)
		}
	}
	if out := mustRun(t, "policy", "get", "edge", "-o", "json", addr); !regexp.MustCompile(`"vantages":\s+1,`).MatchString(out) {
		t.Errorf("a refused policy set changed the policy:\n%s", out)
	}
}

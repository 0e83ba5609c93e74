package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The hint after an unreachable pulsed suggests 'make run' only for the
// default address, which is where make run serves it; an address from a
// flag, the environment or a context is named with its source.
func TestUnreachableHintNamesTheSource(t *testing.T) {
	if h := (&client{addrSource: "default"}).unreachableHint(); !strings.Contains(h, "'make run'") {
		t.Errorf("default address: %q", h)
	}
	addr := closedAddr(t)
	cfg := filepath.Join(t.TempDir(), "pulsectl.yaml")
	if err := os.WriteFile(cfg, []byte("current-context: far\ncontexts:\n  far:\n    addr: "+addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env    []string
		args   []string
		source string
	}{
		{nil, []string{"ls", "--addr", addr}, "flag --addr"},
		{[]string{envAddr, addr}, []string{"ls"}, "env " + envAddr},
		{[]string{envConfig, cfg}, []string{"state", "web-1"}, "config " + cfg + " (context far)"},
		{[]string{envConfig, cfg}, []string{"watch"}, "config " + cfg + " (context far)"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(tc.env[0], tc.env[1])
			}
			r := pulsectl(t, tc.args...)
			if r.code != exitServer || !strings.Contains(r.stderr, "cannot reach pulsed at "+addr) ||
				!strings.Contains(r.stderr, "The address came from "+tc.source+";") || strings.Contains(r.stderr, "make run") {
				t.Errorf("%v: exit %d\n%s", tc.args, r.code, r.stderr)
			}
		})
	}
}

// pulsed's hints name RPCs; pulsectl says which command does the same.
func TestErrorHintsNameCommands(t *testing.T) {
	if got, want := cliHint("x; list targets with ListTargets or add it with AddTarget", ""), "x; list targets with 'pulsectl ls' or add it with 'pulsectl add'"; got != want {
		t.Errorf("cliHint = %q, want %q", got, want)
	}
	// A method's path is the call's name, not a hint: the rate limit's
	// message keeps it whole.
	limited := "/pulse.v1.HealthChecker/ListTargets is rejected by grpc_ratelimit middleware, please retry later."
	if got := cliHint(limited, ""); got != limited {
		t.Errorf("cliHint = %q, want the method's path kept: %q", got, limited)
	}
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "b", "--http", web.URL+"/healthz", "--rise", "1")
	waitState(t, p.Addr, "b", pb.State_STATE_HEALTHY)
	rpc := regexp.MustCompile(`AddTarget|UpdateTarget|ListTargets|RemoveTarget|ReportOutcome|ProbeNow|passive_outcomes`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outcome", "b", "--fail", addr}, "enable them with 'pulsectl set b --passive' (and optionally --passive-rate"},
		{[]string{"probe", "b", "nope", addr}, "'pulsectl ls'"},
	} {
		r := pulsectl(t, tc.args...)
		if r.code == exitOK || !strings.Contains(r.stderr, tc.want) || rpc.MatchString(r.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want it to say %q and name no RPC", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

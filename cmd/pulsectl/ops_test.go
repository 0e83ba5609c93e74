package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"buf.build/go/protoyaml"

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
	out = mustRun(t, "set", "web-1", addr, "--timeout", "2", "--fast-interval", "3", "--flap-threshold", "4", "--passive", "--clear", "group")
	for _, want := range []string{"group cleared (was core)", "flap threshold set to 4", "passive outcomes off -> on"} {
		if !strings.Contains(out, want) {
			t.Errorf("set printed %q, want it to contain %q", out, want)
		}
	}
	if strings.Contains(out, "(none)") {
		t.Errorf("set printed %q", out)
	}
	spec := stateOf(t, p.Addr, "web-1").GetSpec()
	if spec.GetTimeout().AsDuration() != 2*time.Second || spec.GetFastInterval().AsDuration() != 3*time.Second ||
		spec.GetFlapThreshold() != 4 || !spec.GetPassiveOutcomes() || spec.GetGroup() != "" {
		t.Errorf("after set with policy flags: %v", spec)
	}
	// A probe's options change alone, the rest of the probe kept.
	mustRun(t, "set", "web-1", addr, "--body-contains", "ok", "--follow-redirects")
	if h := stateOf(t, p.Addr, "web-1").GetSpec().GetHttp(); h.GetBodyContains() != "ok" || !h.GetFollowRedirects() || h.GetUrl() != web.URL+"/healthz" {
		t.Errorf("after set --body-contains --follow-redirects: %v", h)
	}
	if out := mustRun(t, "set", "web-1", addr, "--timeout", "2s"); out != "web-1 unchanged\n" {
		t.Errorf("set to the same value printed %q", out)
	}

	// pulsed answers header values and a URL's password as <redacted>: a
	// set or add that sends them cannot tell whether they changed, and
	// says so rather than "unchanged". A header added is named.
	rec := newHeaderServer(t)
	quiet(t, p.Addr, []string{"--name", "hdr", "--http", rec.URL + "/"})
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "hdr", "--header", "X-Env=prod"}, "updated hdr: header X-Env added; also sent http.headers, whose values pulsed does not show\n"},
		{[]string{"set", "hdr", "--header", "X-Env=test"}, "hdr: no change shown; sent http.headers, whose values pulsed does not show\n"},
		{[]string{"set", "hdr", "--timeout", "1s"}, "hdr unchanged\n"}, // nothing hidden sent
		{[]string{"set", "hdr", "--header", "X-Env=staging", "--timeout", "2s"},
			"updated hdr: timeout 1s -> 2s; also sent http.headers, whose values pulsed does not show\n"},
		{[]string{"set", "hdr", "--timeout", "1s"}, "updated hdr: timeout 2s -> 1s\n"},
		{[]string{"set", "hdr", "--http", "http://ops:one@" + rec.Listener.Addr().String() + "/"},
			"updated hdr: probe http GET " + rec.URL + "/ -> http GET http://ops:%3Credacted%3E@" + rec.Listener.Addr().String() + "/; also sent the password of http.url, whose values pulsed does not show\n"},
		{[]string{"set", "hdr", "--http", "http://ops:two@" + rec.Listener.Addr().String() + "/"},
			"hdr: no change shown; sent the password of http.url, whose values pulsed does not show\n"},
	} {
		if out := mustRun(t, append(step.args, addr)...); out != step.want {
			t.Errorf("%v printed %q, want %q", step.args, out, step.want)
		}
	}
	mustRun(t, "probe", addr, "hdr")
	if h := rec.last(t); h.Get("X-Env") != "staging" || basicPassword(h) != "two" {
		t.Errorf("after the sets, the probe sent X-Env %q and password %q; want staging and two: pulsed applied them", h.Get("X-Env"), basicPassword(h))
	}
	out = mustRun(t, "add", addr, "--name", "hdr", "--http", "http://ops:two@"+rec.Listener.Addr().String()+"/", "--interval", "24h", "--timeout", "1s", "--header", "X-Env=test")
	if want := "\nhdr: no change shown; sent http.headers and the password of http.url, whose values pulsed does not show\n"; !strings.HasSuffix(out, want) {
		t.Errorf("add of hdr with another header value printed\n%s\nwant it to end with %q", out, want)
	}
	mustRun(t, "probe", addr, "hdr")
	if h := rec.last(t); h.Get("X-Env") != "test" {
		t.Errorf("after the add, the probe sent X-Env %q, want test", h.Get("X-Env"))
	}
	out = mustRun(t, "add", addr, "--name", "hdr", "--http", rec.URL+"/", "--interval", "24h", "--timeout", "2s", "--header", "X-Env=test")
	if want := "\nreplaced the spec of hdr: probe http GET http://ops:%3Credacted%3E@" + rec.Listener.Addr().String() + "/ -> http GET " + rec.URL + "/, timeout 1s -> 2s; also sent http.headers, whose values pulsed does not show\n"; !strings.Contains(out, want) {
		t.Errorf("add of hdr with a new timeout and a header printed\n%s\nwant it to hold %q", out, want)
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
		{[]string{"set", "web-1", addr, "--probe-tls-server-name", "x"}, exitUsage, "--probe-tls-server-name cannot be changed with set"},
		{[]string{"set", "web-1", addr, "--body-contains", "x", "--dns-server", "y:53"}, exitUsage, "the flags given are of probes of different kinds"},
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
	for _, want := range []string{"\nreplaced the spec of web-1: ", "timeout 2s -> " + testTimeout.String(), "rise 1 -> 2", "passive outcomes on -> off", "use pulsectl set"} {
		if !strings.Contains(out, want) {
			t.Errorf("add over an existing target printed\n%s\nwant it to contain %q", out, want)
		}
	}
}

// headerServer answers 200 and keeps the headers of the last request.
type headerServer struct {
	*httptest.Server
	headers atomic.Pointer[http.Header]
}

func newHeaderServer(t *testing.T) *headerServer {
	t.Helper()
	s := &headerServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		s.headers.Store(&h)
	}))
	t.Cleanup(s.Close)
	return s
}

// last returns the headers of the last request; it fails the test if
// there was none.
func (s *headerServer) last(t *testing.T) http.Header {
	t.Helper()
	h := s.headers.Load()
	if h == nil {
		t.Fatal("the server got no request")
	}
	return *h
}

// basicPassword is the password of h's basic authorization.
func basicPassword(h http.Header) string {
	_, pw, _ := (&http.Request{Header: h}).BasicAuth()
	return pw
}

// switchServer answers 200 until down is set, then 503.
type switchServer struct {
	*httptest.Server
	down atomic.Bool
}

func newSwitchServer(t *testing.T) *switchServer {
	t.Helper()
	s := &switchServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestPoliciesOutcomesAndStates drives policy, outcome, ls's filters and
// formats and the aliases against a real pulsed, and checks that held and
// flapping targets say so in text.
func TestPoliciesOutcomesAndStates(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	a, b, f := newSwitchServer(t), newSwitchServer(t), newSwitchServer(t)
	mustRun(t, "add", addr, "--name", "a", "--group", "edge", "--http", a.URL)
	mustRun(t, "add", addr, "--name", "b", "--group", "edge", "--http", b.URL)
	waitState(t, p.Addr, "a", pb.State_STATE_HEALTHY)
	waitState(t, p.Addr, "b", pb.State_STATE_HEALTHY)
	if out := mustRun(t, "policy", "get", "edge", addr); out != "edge: max_unhealthy_fraction 0.5 (pulsed's default); 2 targets, 0 down, at most 1 at once\n" {
		t.Errorf("policy get: %q", out)
	}

	// Both fail: pulsed's default threshold lets one of two go; the other
	// is held, and says so.
	a.down.Store(true)
	b.down.Store(true)
	var held string
	eventually(t, "a target held", func() bool {
		for _, n := range []string{"a", "b"} {
			if stateOf(t, p.Addr, n).GetPanicHeld() {
				held = n
			}
		}
		return held != ""
	})
	if out := mustRun(t, "ls", addr); !regexp.MustCompile(`(?m)^` + held + `\s+edge\s+healthy \(held: panic in edge\)\s`).MatchString(out) {
		t.Errorf("ls does not show %s held:\n%s", held, out)
	}
	out := mustRun(t, "state", held, addr)
	for _, want := range []string{"healthy (held: panic in edge; routable)\n", "verdict:", "unhealthy (what its results alone say)"} {
		if !strings.Contains(out, want) {
			t.Errorf("state %s lacks %q:\n%s", held, want, out)
		}
	}
	if out := mustRun(t, "ls", addr, "--state", "held"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "\n"+held+" ") {
		t.Errorf("ls --state held:\n%s", out)
	}
	if out := mustRun(t, "policy", "get", "edge", addr); !strings.HasSuffix(out, "; panic: holding "+held+"\n") {
		t.Errorf("policy get in panic: %q", out)
	}
	if out := mustRun(t, "healthy", "edge", addr); out != held+"\n" {
		t.Errorf("healthy edge with %s held: %q", held, out)
	}
	out = mustRun(t, "policy", "set", "edge", "--max-unhealthy-fraction", "1", addr)
	if !strings.HasPrefix(out, "edge: max_unhealthy_fraction 1 (the group's own); 2 targets, 2 down") {
		t.Errorf("policy set: %q", out)
	}
	if r := pulsectl(t, "healthy", "edge", addr); r.code != exitNoneRoutable {
		t.Errorf("healthy edge, all down: %+v", r)
	}
	if out := mustRun(t, "policy", "set", "edge", "--default", addr); !strings.Contains(out, "(pulsed's default)") {
		t.Errorf("policy set --default: %q", out)
	}
	if r := pulsectl(t, "policy", "get", "nope", addr); r.code != exitNotFound {
		t.Errorf("policy get of an unknown group: %+v", r)
	}
	if r := pulsectl(t, "policy", "set", "edge", "--max-unhealthy-fraction", "2", addr); r.code != exitUsage || !strings.Contains(r.stderr, "policy.max_unhealthy_fraction") {
		t.Errorf("policy set 2: %+v", r)
	}
	// An objective, then a threshold: set keeps what it is not given.
	if out := mustRun(t, "policy", "set", "edge", "--objective", "99.9%", "--objective-window", "168h", addr); !strings.HasSuffix(out, "; objective 99.9% over 7d\n") {
		t.Errorf("policy set --objective: %q", out)
	}
	if out := mustRun(t, "policy", "set", "edge", "--max-unhealthy-fraction", "0.5", addr); !strings.Contains(out, "max_unhealthy_fraction 0.5 (the group's own)") || !strings.HasSuffix(out, "; objective 99.9% over 7d\n") {
		t.Errorf("policy set after the objective: %q", out)
	}
	if r := pulsectl(t, "policy", "set", "edge", "--objective", "1", addr); r.code != exitUsage || !strings.Contains(r.stderr, "policy.availability_objective: must be in (0, 1)") {
		t.Errorf("policy set --objective 1: %+v", r)
	}
	if r := pulsectl(t, "policy", "set", "edge", "--objective-window", "90m", addr); r.code != exitUsage || !strings.Contains(r.stderr, "policy.objective_window: must be whole hours") {
		t.Errorf("policy set --objective-window 90m: %+v", r)
	}
	if out := mustRun(t, "policy", "set", "edge", "--objective", "0", addr); strings.Contains(out, "objective") {
		t.Errorf("policy set --objective 0 kept it: %q", out)
	}

	// Flapping: up, then down, with a threshold of two transitions.
	mustRun(t, "add", addr, "--name", "f", "--group", "lab", "--http", f.URL, "--rise", "1", "--fall", "1", "--flap-threshold", "2")
	waitState(t, p.Addr, "f", pb.State_STATE_HEALTHY)
	f.down.Store(true)
	eventually(t, "f flapping", func() bool { return stateOf(t, p.Addr, "f").GetFlapping() })
	if out := mustRun(t, "list", addr, "--state", "flapping"); !regexp.MustCompile(`(?m)^f\s+lab\s+unhealthy \(flapping\)\s`).MatchString(out) {
		t.Errorf("list --state flapping:\n%s", out)
	}

	// Formats and aliases.
	if out := mustRun(t, "ls", addr, "-o", "wide"); !strings.Contains(strings.SplitN(out, "\n", 2)[0], "VERDICT") || !strings.Contains(out, "http GET "+f.URL) {
		t.Errorf("ls -o wide:\n%s", out)
	}
	var list pb.ListTargetsResponse
	if err := protoyaml.Unmarshal([]byte(mustRun(t, "ls", addr, "-o", "yaml")), &list); err != nil || len(list.GetTargets()) != 3 {
		t.Errorf("ls -o yaml: %d targets, %v", len(list.GetTargets()), err)
	}
	if out := mustRun(t, "get", "f", addr); !strings.Contains(out, "unhealthy (flapping; not routable)") {
		t.Errorf("get f:\n%s", out)
	}

	// Passive outcomes.
	mustRun(t, "set", "a", addr, "--passive")
	if out := mustRun(t, "outcome", "a", "--ok", "--latency", "5ms", addr); !strings.HasPrefix(out, "counted; a is ") {
		t.Errorf("outcome --ok: %q", out)
	}
	if r := pulsectl(t, "outcome", "b", "--fail", "--error", "502", addr); r.code != exitUsage || !strings.Contains(r.stderr, "passive outcomes are off") {
		t.Errorf("outcome to a target without --passive: %+v", r)
	}
	if r := pulsectl(t, "outcome", "nope", "--ok", addr); r.code != exitNotFound {
		t.Errorf("outcome to an unknown target: %+v", r)
	}
	if out := mustRun(t, "delete", "f", addr); out != "removed f\n" {
		t.Errorf("delete: %q", out)
	}
}

// ls warns on stderr when pulsed's checker is degraded: every row's
// timeouts then mean less.
func TestLsWarnsOfADegradedChecker(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(40 * time.Millisecond) }))
	t.Cleanup(slow.Close) // after pulsed is gone: its probes would hold Close
	p := startPulsed(t, "-max-concurrent-probes", "1", "-overload-waiting", "1", "-overload-recovery", "1m")
	addr := "--addr=" + p.Addr
	for _, n := range []string{"s1", "s2", "s3"} {
		mustRun(t, "add", addr, "--name", n, "--http", slow.URL)
	}
	eventually(t, "a degraded checker", func() bool {
		r := pulsectl(t, "ls", addr)
		return r.code == exitOK && strings.Contains(r.stderr, "pulsectl: warning: pulsed's checker is degraded (") && strings.Contains(r.stdout, "s1 ")
	})
}

// A shorter --interval without --timeout fits the timeout to it: add says
// it capped pulsed's default timeout, set lowers the timeout pulsed holds
// and says so, and a set pulsed refuses changes nothing and says what was
// sent. A timeout that fits, or one given, is left as it is.
func TestIntervalBelowTimeout(t *testing.T) {
	p := startPulsed(t, "-interval", "2s", "-timeout", "1s") // pulsed's own defaults
	addr := "--addr=" + p.Addr
	closed := closedAddr(t)
	spec := func() (interval, timeout, maxLatency time.Duration) {
		s := stateOf(t, p.Addr, "web-1").GetSpec()
		return s.GetInterval().AsDuration(), s.GetTimeout().AsDuration(), s.GetMaxLatency().AsDuration()
	}

	out := mustRun(t, "add", addr, "--name", "web-1", "--tcp", closed, "--interval", "500ms")
	if want := "timeout 500ms: pulsed's default, at most the interval (give --timeout to choose it)\n"; !strings.HasSuffix(out, want) {
		t.Errorf("add --interval 500ms printed %q, want it to end with %q", out, want)
	}
	if out := mustRun(t, "add", addr, "--name", "web-1", "--tcp", closed, "--interval", "4s"); strings.Contains(out, "capped") {
		t.Errorf("add --interval 4s, the default timeout fitting, printed %q", out)
	}

	out = mustRun(t, "set", "web-1", addr, "--interval", "500ms")
	if want := "updated web-1: interval 4s -> 500ms, timeout 1s -> 500ms\ntimeout lowered to 500ms to fit the interval (give --timeout to choose it)\n"; out != want {
		t.Errorf("set --interval 500ms printed %q, want %q", out, want)
	}
	if iv, to, _ := spec(); iv != 500*time.Millisecond || to != 500*time.Millisecond {
		t.Errorf("after set --interval 500ms: interval %v, timeout %v", iv, to)
	}
	if out := mustRun(t, "set", "web-1", addr, "--interval", "300ms", "--timeout", "100ms"); out != "updated web-1: interval 500ms -> 300ms, timeout 500ms -> 100ms\n" {
		t.Errorf("set --interval 300ms --timeout 100ms printed %q", out)
	}
	if out := mustRun(t, "set", "web-1", addr, "--interval", "1s"); out != "updated web-1: interval 300ms -> 1s\n" {
		t.Errorf("set --interval 1s, the timeout fitting, printed %q", out)
	}

	// -o json: the note on stderr, the response alone on stdout.
	mustRun(t, "set", "web-1", addr, "--timeout", "800ms")
	r := pulsectl(t, "set", "web-1", addr, "--interval", "600ms", "-o", "json")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "{") || r.stderr != "timeout lowered to 600ms to fit the interval (give --timeout to choose it)\n" {
		t.Errorf("set -o json: %+v", r)
	}

	// A max latency above the lowered timeout: pulsed refuses the set.
	mustRun(t, "set", "web-1", addr, "--interval", "1s", "--timeout", "800ms", "--max-latency", "700ms")
	r = pulsectl(t, "set", "web-1", addr, "--interval", "500ms")
	want := "pulsectl: target.max_latency: must be at most the timeout (500ms), got 700ms\nThe request had the timeout lowered to 500ms to fit the interval (give --timeout to choose it)\n"
	if r.code != exitUsage || r.stderr != want || r.stdout != "" {
		t.Errorf("set --interval 500ms under a max latency of 700ms: exit %d\nstdout: %s\nstderr: %s\nwant exit %d and %q", r.code, r.stdout, r.stderr, exitUsage, want)
	}
	if iv, to, ml := spec(); iv != time.Second || to != 800*time.Millisecond || ml != 700*time.Millisecond {
		t.Errorf("a refused set changed the spec: interval %v, timeout %v, max latency %v", iv, to, ml)
	}
}

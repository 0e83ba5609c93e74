package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// okServer answers every request with 200 until closed.
func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	return srv
}

// stateOf returns a target's status through pulsectl state -o json.
func stateOf(t *testing.T, addr, name string) *pb.TargetStatus {
	t.Helper()
	var resp pb.StateResponse
	if err := protojson.Unmarshal([]byte(mustRun(t, "state", name, "--addr", addr, "-o", "json")), &resp); err != nil {
		t.Fatalf("state -o json: %v", err)
	}
	return resp.GetStatus()
}

func waitState(t *testing.T, addr, name string, want pb.State) {
	t.Helper()
	eventually(t, name+" "+want.String(), func() bool { return stateOf(t, addr, name).GetState() == want })
}

// TestClientCommands drives add, state, ls, healthy and rm against a real
// pulsed and a real HTTP target.
func TestClientCommands(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr

	// add: created, then updated; only the flags given are set in the
	// request, so pulsed's defaults fill the rest.
	out := mustRun(t, "add", addr, "--name", "web-1", "--group", "edge", "--http", web.URL+"/healthz", "--rise", "1")
	want := "added web-1: http GET " + web.URL + "/healthz; every " + testInterval.String() + ", timeout " + testTimeout.String() + ", rise 1, fall 2, rise_fall; state unhealthy\n"
	if out != want {
		t.Errorf("add printed %q, want %q", out, want)
	}
	out = mustRun(t, "add", addr, "--name", "web-1", "--group", "edge", "--http", web.URL+"/healthz", "--rise", "1")
	if !strings.HasPrefix(out, "updated web-1: ") || !strings.HasSuffix(out, "\nthe spec of web-1 was already this one\n") {
		t.Errorf("second add printed %q, want updated, the spec already this one", out)
	}
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)

	st := stateOf(t, p.Addr, "web-1")
	if got := st.GetSpec(); got.GetRise() != 1 || got.GetFall() != 2 || got.GetInterval().AsDuration() != testInterval || got.GetGroup() != "edge" {
		t.Errorf("spec %v: want rise 1 as given and pulsed's defaults for the rest", got)
	}

	// state in text: flags after the name work too.
	out = mustRun(t, "state", "web-1", addr)
	for _, re := range []string{
		`(?m)^name:\s+web-1$`, `(?m)^group:\s+edge$`, `(?m)^state:\s+healthy \(routable\)$`,
		`(?m)^streak:\s+pass \d+$`, `(?m)^last probe:\s+pass in \S+ at \S+$`, `(?m)^since:\s+\S+ \(\d+s ago\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("state output does not match %s:\n%s", re, out)
		}
	}

	// ls: the table, and JSON.
	out = mustRun(t, "ls", addr)
	if !regexp.MustCompile(`^NAME\s+GROUP\s+STATE\s+MODE\s+STREAK\s+LATENCY\s+LAST-ERROR\s+SINCE\n`).MatchString(out) {
		t.Errorf("ls header:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^web-1\s+edge\s+healthy\s+active\s+pass \d+\s+\S+\s+-\s+\d+s$`).MatchString(out) {
		t.Errorf("ls row for web-1:\n%s", out)
	}
	var list pb.ListTargetsResponse
	if err := protojson.Unmarshal([]byte(mustRun(t, "ls", addr, "-o", "json", "--group", "edge")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.GetTargets()) != 1 || list.GetTargets()[0].GetSpec().GetName() != "web-1" {
		t.Errorf("ls -o json --group edge = %v", &list)
	}
	if out := pulsectl(t, "ls", addr, "--group", "nope"); out.code != 0 || out.stdout != "" || !strings.Contains(out.stderr, `no targets in group "nope"`) {
		t.Errorf("ls of an empty group = %+v", out)
	}

	// healthy, with and without a group.
	if out := mustRun(t, "healthy", addr); out != "web-1\n" {
		t.Errorf("healthy = %q", out)
	}
	if out := mustRun(t, "healthy", "edge", addr); out != "web-1\n" {
		t.Errorf("healthy edge = %q", out)
	}
	if r := pulsectl(t, "healthy", "other", addr); r.code != exitNotFound || r.stdout != "" || !strings.Contains(r.stderr, `no targets in group "other"`) {
		t.Errorf("healthy of an unknown group: %+v", r)
	}
	var healthy pb.HealthyResponse
	if err := protojson.Unmarshal([]byte(mustRun(t, "healthy", addr, "-o", "json")), &healthy); err != nil || !cmp.Equal(healthy.GetNames(), []string{"web-1"}) {
		t.Errorf("healthy -o json = %v (%v)", &healthy, err)
	}

	// The target goes away: ls shows the failure streak and the error.
	web.Close()
	waitState(t, p.Addr, "web-1", pb.State_STATE_UNHEALTHY)
	out = mustRun(t, "ls", addr)
	if !regexp.MustCompile(`(?m)^web-1\s+edge\s+unhealthy\s+active\s+fail \d+\s+\S+\s+connection refused\s+\d+s$`).MatchString(out) {
		t.Errorf("ls row for a down web-1:\n%s", out)
	}
	if r := pulsectl(t, "healthy", "edge", addr); r.code != exitNoneRoutable || r.stdout != "" || !strings.Contains(r.stderr, `no routable target in group "edge" (1 target)`) {
		t.Errorf("healthy with nothing routable: %+v", r)
	}

	// rm, then the target is unknown to every command.
	if out := mustRun(t, "rm", "web-1", addr); out != "removed web-1\n" {
		t.Errorf("rm = %q", out)
	}
	for _, args := range [][]string{{"state", "web-1"}, {"rm", "web-1"}} {
		r := pulsectl(t, append(args, addr)...)
		if r.code != exitNotFound || !strings.Contains(r.stderr, `no target named "web-1"`) {
			t.Errorf("%v after rm: exit %d, stderr %q; want exit %d, no target named", args, r.code, r.stderr, exitNotFound)
		}
	}
	if r := pulsectl(t, "rm", "--missing-ok", "web-1", addr); r.code != 0 {
		t.Errorf("rm --missing-ok of an unknown target: %+v", r)
	}
}

// TestAddEveryFlag: each add flag lands in the request's field.
func TestAddEveryFlag(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "db", "--tcp", "127.0.0.1:5432", "--interval", "3s", "--timeout", "200ms",
		"--rise", "4", "--fall", "5", "--initial-state", "healthy", "--model", "three-state", "--max-latency", "150ms")
	seen := make(chan string, 100) // the probes' Host and X-Token
	target := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Host + " " + r.Header.Get("X-Token"):
		default:
		}
	}))
	defer target.Close()
	mustRun(t, "add", addr, "--name", "web", "--http", target.URL+"/healthz", "--method", "HEAD",
		"--expect-status", "200,204", "--expect-status", "301", "--header", "Host=web.internal", "--header", "X-Token=a=b")
	mustRun(t, "add", addr, "--name", "api", "--grpc", "127.0.0.1:9", "--grpc-service", "api.v1.Orders", "--grpc-tls")

	opts := []cmp.Option{protocmp.Transform()}
	db := stateOf(t, p.Addr, "db").GetSpec()
	wantDB := &pb.Target{
		Name: "db", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:5432"}},
		Interval: durationpb.New(3 * time.Second), Timeout: durationpb.New(200 * time.Millisecond),
		Rise: ptr[int32](4), Fall: ptr[int32](5), InitialState: pb.State_STATE_HEALTHY, Model: pb.Model_MODEL_THREE_STATE,
		MaxLatency: durationpb.New(150 * time.Millisecond),
	}
	if diff := cmp.Diff(wantDB, db, opts...); diff != "" {
		t.Errorf("db spec (-want +got):\n%s", diff)
	}
	web := stateOf(t, p.Addr, "web").GetSpec().GetHttp()
	// pulsed shows header names only; the values reach the target.
	wantWeb := &pb.HttpProbe{Url: target.URL + "/healthz", Method: "HEAD", ExpectedStatus: []int32{200, 204, 301},
		Headers: map[string]string{"Host": "<redacted>", "X-Token": "<redacted>"}}
	if diff := cmp.Diff(wantWeb, web, opts...); diff != "" {
		t.Errorf("web probe (-want +got):\n%s", diff)
	}
	select {
	case got := <-seen:
		if got != "web.internal a=b" {
			t.Errorf("the target got Host and X-Token %q, want web.internal a=b", got)
		}
	case <-time.After(30 * time.Second):
		t.Error("no probe reached the web target within 30s")
	}
	api := stateOf(t, p.Addr, "api").GetSpec().GetGrpc()
	if diff := cmp.Diff(&pb.GrpcProbe{Address: "127.0.0.1:9", Service: "api.v1.Orders", Tls: true}, api, opts...); diff != "" {
		t.Errorf("api probe (-want +got):\n%s", diff)
	}

	// Values only pulsed can judge come back with its message, which names
	// the field; the exit code is the usage error's.
	r := pulsectl(t, "add", addr, "--name", "bad", "--tcp", "127.0.0.1:1", "--rise", "0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "target.rise: must be at least 1, got 0") {
		t.Errorf("add --rise 0: %+v", r)
	}
	r = pulsectl(t, "add", addr, "--name", "bad", "--tcp", "127.0.0.1:1", "--interval", "1s", "--timeout", "2s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "target.timeout") {
		t.Errorf("add --timeout > --interval: %+v", r)
	}
	r = pulsectl(t, "add", addr, "--name", "bad", "--http", "ftp://x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "target.http.url") {
		t.Errorf("add --http ftp://x: %+v", r)
	}
}

func ptr[T any](v T) *T { return &v }

// TestUnreachable: every client command names the address and suggests
// pulsed is not running, with exit code 4.
func TestUnreachable(t *testing.T) {
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"ls"}, {"state", "web-1"}, {"healthy"}, {"rm", "web-1"}, {"watch"},
		{"add", "--name", "x", "--tcp", "127.0.0.1:1"},
		{"set", "x", "--interval", "5s"}, {"probe"}, {"probe", "x"},
	} {
		r := pulsectl(t, append(args, "--addr", addr)...)
		if r.code != exitServer || !strings.Contains(r.stderr, "cannot reach pulsed at "+addr) ||
			!strings.Contains(r.stderr, "Is pulsed running there? The address came from flag --addr") || strings.Contains(r.stderr, "make run") ||
			strings.Contains(r.stderr, "watching") || r.stdout != "" {
			t.Errorf("%v against a closed port: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"help", "nope"},
		{"ls", "--bogus"},
		{"ls", "extra"},
		{"ls", "-o", "xml"},
		{"ls", "--state", "down"},
		{"state", "a", "-o", "wide"},
		{"policy"},
		{"policy", "edge"},
		{"policy", "get", "edge", "--default"},
		{"policy", "set", "edge"},
		{"policy", "set", "edge", "--default", "--max-unhealthy-fraction", "0.5"},
		{"outcome", "a"},
		{"outcome", "a", "--ok", "--fail"},
		{"outcome", "a", "--ok", "--error", "x"},
		{"outcome", "--ok"},
		{"state"},
		{"state", "a", "b"},
		{"healthy", "a", "b"},
		{"rm"},
		{"add", "--http", "http://x"},
		{"add", "--name", "x"},
		{"add", "--name", "x", "--http", "http://x", "--tcp", "x:1"},
		{"add", "--name", "x", "--tcp", "x:1", "--header", "A=b"},
		{"add", "--name", "x", "--tcp", "x:1", "--grpc-service", "s"},
		{"add", "--name", "x", "--tcp", "x:1", "--initial-state", "maybe"},
		{"add", "--name", "x", "--tcp", "x:1", "--model", "four_state"},
		{"add", "--name", "x", "--http", "http://x", "--expect-status", "ok"},
		{"add", "--name", "x", "--http", "http://x", "--header", "novalue"},
		{"add", "--name", "x", "--tcp", "x:1", "--interval", "soon"},
		{"add", "--name", "x", "--tcp", "x:1", "--rise", "99999999999"},
		{"add", "web-1", "--tcp", "x:1"},
		{"set"},
		{"set", "a", "b", "--interval", "5s"},
		{"set", "x"},
		{"set", "x", "--name", "y"},
		{"set", "x", "--http", "http://x", "--tcp", "x:1"},
		{"probe", "--bogus"},
		{"watch", "extra"},
		{"watch", "--since", "abc"},
		{"watch", "--since", "0"},
		{"watch", "--since", "5", "--snapshot"},
		{"check"},
		{"check", "a.yaml", "b.yaml"},
		{"check", "--workers", "0", "a.yaml"},
		{"check", "--retries", "-1", "a.yaml"},
		{"check", "--deadline", "0", "a.yaml"},
		{"check", "--deadline", "soon", "a.yaml"},
	} {
		r := pulsectl(t, args...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "pulsectl: ") || r.stdout != "" {
			t.Errorf("pulsectl %q: exit %d, stdout %q, stderr %q; want exit 1 with a message on stderr", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestHelp: every command has --help with an example, on stdout, exit 0.
func TestHelp(t *testing.T) {
	for _, c := range commands() {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := pulsectl(t, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: pulsectl "+c.name+" ") ||
				!strings.Contains(r.stdout, "\nExamples:\n  pulsectl "+c.name) || !regexp.MustCompile(`\nFlags:\n  (-|none\n$)`).MatchString(r.stdout) {
				t.Errorf("pulsectl %q: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := pulsectl(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Commands:\n") || !strings.Contains(r.stdout, "Exit codes:") {
			t.Errorf("pulsectl %q: exit %d\n%s", args, r.code, r.stdout)
		}
	}
}

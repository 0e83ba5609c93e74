package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testpki"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// settingsClient returns a client with the connection settings of args,
// resolved as a command resolves them, and no connection.
func settingsClient(t *testing.T, args ...string) *client {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cf := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := cf.resolve(); err != nil {
		t.Fatal(err)
	}
	return &client{addr: cf.addr, addrSource: cf.sources["addr"], cf: cf}
}

// A token or certificate pulsed refuses, and TLS on one side only, exit 7
// (exitRefused), not 4, and say what to change rather than ask whether
// pulsed is running: against a real pulsed with mutual TLS and tokens, and
// one in plaintext.
func TestRefusedCredentials(t *testing.T) {
	pki := testpki.Write(t, t.TempDir())
	other := testpki.Write(t, t.TempDir())
	tokens := writeFile(t, "tokens", "read a-read-token-0123456789 reader\n")
	token := writeFile(t, "token", "a-read-token-0123456789\n")
	wrong := writeFile(t, "wrong", "not-a-token-of-pulsed-0123\n")
	config := writeFile(t, "pulsectl.yaml", "current-context: prod\ncontexts:\n  prod:\n    token-file: "+wrong+"\n")
	mtls := startPulsed(t, "-tls-cert", pki.ServerCert, "-tls-key", pki.ServerKey, "-client-ca", pki.CA, "-token-file", tokens)
	plain := startPulsed(t)

	good := []string{"--addr", mtls.Addr, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}
	with := func(args ...string) []string { return append(append([]string{"ls"}, good...), args...) }
	mustRun(t, with("--token-file", token)...) // the settings that work

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no client certificate", []string{"ls", "--addr", mtls.Addr, "--tls-ca", pki.CA, "--token-file", token},
			[]string{"pulsed at " + mtls.Addr + " refused the TLS handshake: remote error: tls: certificate required", "pulsectl sent none: pass one that CA signed with --tls-cert and --tls-key"}},
		{"a client certificate of another CA", []string{"ls", "--addr", mtls.Addr, "--tls-ca", pki.CA, "--tls-cert", other.ClientCert, "--tls-key", other.ClientKey, "--token-file", token},
			[]string{"refused the TLS handshake: remote error: tls: ", "pulsed did not accept the client certificate " + other.ClientCert + " (from flag --tls-cert)"}},
		{"pulsed's CA not given", []string{"ls", "--addr", mtls.Addr, "--tls", "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--token-file", token},
			[]string{"pulsectl does not accept the certificate of pulsed at " + mtls.Addr + ": tls: failed to verify certificate: x509: certificate signed by unknown authority", "checked it against the system's CAs: pass the CA that signed pulsed's -tls-cert with --tls-ca"}},
		{"another CA", []string{"ls", "--addr", mtls.Addr, "--tls-ca", other.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--token-file", token},
			[]string{"x509: certificate signed by unknown authority", "The CA file " + other.CA + " (from flag --tls-ca) did not sign it"}},
		{"a name the certificate does not carry", with("--tls-server-name", "pulse.example", "--token-file", token),
			[]string{"pulse.example", "set --tls-server-name to a name it carries"}},
		{"TLS to a plaintext pulsed", []string{"ls", "--addr", plain.Addr, "--tls-ca", pki.CA},
			[]string{"pulsed at " + plain.Addr + " does not speak TLS, and pulsectl connected with TLS: tls: first record does not look like a TLS handshake", "Connect without --tls, --tls-ca and --tls-cert"}},
		// gRPC sees only a closed connection: the handshake made to see why
		// tells.
		{"plaintext to a TLS pulsed", []string{"ls", "--addr", mtls.Addr, "--token-file", token},
			[]string{"pulsed at " + mtls.Addr + " speaks TLS, and pulsectl connected without it", "with --tls-ca", "a TLS handshake made to see why"}},
		// A token missing or unknown wants another token; a known one
		// without the role, a token with the role. Each is named by where
		// it came from.
		{"no token", with(), []string{"refused the call: missing token",
			"\npulsectl sent no token: pass one listed in pulsed's -token-file with --token-file, PULSE_TOKEN or a config context's token-file.\n"}},
		{"a token pulsed does not know", with("--token-file", wrong), []string{"refused the call: invalid token\n" +
			"pulsed does not know the token in " + wrong + " (from flag --token-file): pass a token listed in pulsed's -token-file.\n"}},
		{"a token given with --token pulsed does not know", with("--token", "not-a-token-of-pulsed-0123"), []string{"refused the call: invalid token\n" +
			"pulsed does not know the token from flag --token: pass a token listed in pulsed's -token-file.\n"}},
		{"a token of a config context pulsed does not know", with("--config", config), []string{"refused the call: invalid token\n" +
			"pulsed does not know the token in " + wrong + " (from config " + config + " (context prod)): pass a token listed in pulsed's -token-file.\n"}},
		{"a token without the role", append([]string{"rm", "web-1"}, append(good, "--token-file", token)...), []string{
			`refused the call: token "reader" has the read role; 'pulsectl rm' needs write` + "\n" +
				"pulsed knows the token in " + token + " (from flag --token-file), but its role does not allow this call: pass a token with the role this command needs.\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pulsectl(t, tc.args...)
			if r.code != exitRefused {
				t.Errorf("exit %d, want %d\n%s", r.code, exitRefused, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "Is pulsed running") || strings.Contains(r.stderr, "make run") {
				t.Errorf("stderr asks whether pulsed runs:\n%s", r.stderr)
			}
		})
	}

	// PULSE_TOKEN comes before a config context's token file.
	t.Setenv("PULSE_TOKEN", "not-a-token-of-pulsed-0123")
	r := pulsectl(t, with("--config", config)...)
	if want := "pulsed does not know the token from env PULSE_TOKEN: pass a token listed in pulsed's -token-file.\n"; r.code != exitRefused || !strings.HasSuffix(r.stderr, want) {
		t.Errorf("a token of PULSE_TOKEN pulsed does not know: exit %d, stderr\n%s\nwant it to end with %q", r.code, r.stderr, want)
	}

	// TLS 1.3 refuses a client certificate after the client's side of
	// the handshake, so a call may see only a broken pipe: the handshake
	// made to see why tells what pulsed refused.
	var stderr bytes.Buffer
	cl := settingsClient(t, "--addr", mtls.Addr, "--tls-ca", pki.CA)
	code := cl.fail(&env{stderr: &stderr}, status.Error(codes.Unavailable, "write tcp 127.0.0.1:1->"+mtls.Addr+": write: broken pipe"), "")
	if code != exitRefused || !strings.Contains(stderr.String(), "remote error: tls: certificate required") || !strings.Contains(stderr.String(), `The call saw only "write tcp`) {
		t.Errorf("a broken pipe from a pulsed that wants a client certificate: exit %d\n%s", code, stderr.String())
	}
	// A broken pipe from a pulsed that accepts the handshake is pulsed
	// gone or failing: exit 4, and the usual question.
	stderr.Reset()
	cl = settingsClient(t, good...)
	code = cl.fail(&env{stderr: &stderr}, status.Error(codes.Unavailable, "write tcp 127.0.0.1:1->"+mtls.Addr+": write: broken pipe"), "")
	if code != exitServer || !strings.Contains(stderr.String(), "Is pulsed running there?") {
		t.Errorf("a broken pipe from a pulsed that accepts the handshake: exit %d\n%s", code, stderr.String())
	}
}

// stallPulse accepts every call and answers none until the call ends.
type stallPulse struct {
	pb.UnimplementedHealthCheckerServer
}

func (stallPulse) ListTargets(ctx context.Context, _ *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	return nil, stall(ctx)
}

func (stallPulse) RemoveTarget(ctx context.Context, _ *pb.RemoveTargetRequest) (*pb.RemoveTargetResponse, error) {
	return nil, stall(ctx)
}

// stall waits for the call to end, and returns how it ended.
func stall(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

func (stallPulse) WatchTransitions(_ *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
	<-stream.Context().Done()
	return status.FromContextError(stream.Context().Err()).Err()
}

// silentListener accepts connections and never writes to them.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex // protects conns
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// pulsectlWithin runs args with the calls bounded by d instead of the 5s
// of callTimeout: each call's context is the command's, with its
// deadline.
func pulsectlWithin(t *testing.T, d time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return pulsectlIn(ctx, &env{}, args...)
}

// A server that accepted the connection and does not answer may be a
// stalled pulsed: the hint says what tells, not to start it. One that
// never completes a connection gets the usual question.
func TestNoAnswer(t *testing.T) {
	stalled := serveAPI(t, stallPulse{})
	short := testscale.D(300 * time.Millisecond)

	r := pulsectlWithin(t, short, "ls", "--addr", stalled)
	for _, w := range []string{"pulsed at " + stalled + " accepted the connection but did not answer within", "stalled or overloaded", "/healthz", `"pulsed is not live: ..."`} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("ls of a stalled server: stderr does not say %q:\n%s", w, r.stderr)
		}
	}
	if r.code != exitServer || strings.Contains(r.stderr, "Is pulsed running") {
		t.Errorf("ls of a stalled server: exit %d, want %d, and no doubt that it runs:\n%s", r.code, exitServer, r.stderr)
	}
	// At the default address too: no 'make run'.
	var stderr bytes.Buffer
	(&client{addr: defaultAddr, addrSource: "default"}).fail(&env{stderr: &stderr}, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "")
	if !strings.Contains(stderr.String(), "stalled or overloaded") || strings.Contains(stderr.String(), "make run") {
		t.Errorf("no answer at the default address:\n%s", stderr.String())
	}

	// wait: no snapshot comes, from a stalled pulsed or from a listener
	// that is no pulsed: wait cannot tell which, and does not say pulsed
	// is there.
	silent := silentListener(t)
	for _, a := range []string{stalled, silent} {
		r = pulsectl(t, "wait", "web-1", "--for", "healthy", "--timeout", short.String(), "--addr", a)
		want := "pulsectl: timed out after " + short.String() + " waiting for the target to be healthy: web-1\n" +
			"no snapshot from " + a + " within " + short.String() + ": nothing answered the watch there, or pulsed is stalled or overloaded.\n" +
			"Is pulsed running there? The address came from flag --addr; 'pulsectl config view' shows the settings in force.\n" +
			"If it is: " + stalledHint + "\n"
		if r.code != exitTimeout || r.stderr != want {
			t.Errorf("wait on %s: exit %d, want %d, and stderr\n%s\nwant\n%s", a, r.code, exitTimeout, r.stderr, want)
		}
	}

	// A listener that never speaks: no connection is made (gRPC waits for
	// the server's HTTP/2 preface).
	r = pulsectlWithin(t, short, "ls", "--addr", silent)
	if r.code != exitServer || !strings.Contains(r.stderr, "no connection to pulsed at "+silent+" within") ||
		!strings.Contains(r.stderr, "Is pulsed running there?") || strings.Contains(r.stderr, "stalled") {
		t.Errorf("ls of a listener that never speaks: exit %d\n%s", r.code, r.stderr)
	}
}

// commandBound finds the bound a no-answer message names.
var commandBound = regexp.MustCompile(`within ([0-9.]+m?s):`)

// A call that gets no connection fails after the connect bound, not after
// its own (30s for a write, 2m for probe), and one that gets no answer
// names the time it was given: the command's, when shorter than the
// call's bound.
func TestNoAnswerNamesTheBoundThatRanOut(t *testing.T) {
	stalled := serveAPI(t, stallPulse{})
	silent := silentListener(t)
	short := testscale.D(300 * time.Millisecond)
	connectWithin := func(args ...string) result { return pulsectlIn(t.Context(), &env{connectTimeout: short}, args...) }
	// The command's bound is what is left of the context's when pulsectl
	// starts: on a loaded machine a millisecond or so less than short.
	within := func(args ...string) result {
		r := pulsectlWithin(t, short, args...)
		r.stderr = commandBound.ReplaceAllStringFunc(r.stderr, func(m string) string {
			d, err := time.ParseDuration(commandBound.FindStringSubmatch(m)[1])
			if err != nil || d > short || d < short-testscale.D(100*time.Millisecond) {
				return m
			}
			return "within " + short.String() + ":"
		})
		return r
	}
	noConnection := "pulsectl: no connection to pulsed at " + silent + " within " + short.String() + ": nothing answered, or the TLS or HTTP/2 handshake did not finish\n" +
		"Is pulsed running there?"
	noAnswer := "pulsectl: pulsed at " + stalled + " accepted the connection but did not answer within " + short.String() + ": it may be stalled or overloaded\n"

	for _, tc := range []struct {
		name string
		run  func(args ...string) result
		args []string
		want string
	}{
		{"a write, connect bound", connectWithin, []string{"rm", "web-1", "--addr", silent}, noConnection},
		{"a read, connect bound", connectWithin, []string{"ls", "--addr", silent}, noConnection},
		{"probe, connect bound", connectWithin, []string{"probe", "--addr", silent}, noConnection},
		{"a write, command deadline", within, []string{"rm", "web-1", "--addr", silent}, noConnection},
		{"a stalled write, command deadline", within, []string{"rm", "web-1", "--addr", stalled}, noAnswer},
		{"a stalled read, command deadline", within, []string{"ls", "--addr", stalled}, noAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := tc.run(tc.args...)
			if took := time.Since(start); took > writeTimeout/2 {
				t.Errorf("took %v: the call's bound, not %v", took, short)
			}
			if r.code != exitServer || !strings.HasPrefix(r.stderr, tc.want) {
				t.Errorf("exit %d, want %d, and stderr\n%s\nwant it to start with\n%s", r.code, exitServer, r.stderr, tc.want)
			}
		})
	}
}

// watch and wait reconnect after losing pulsed, but not to a pulsed that
// refuses their token: one restarted with other tokens. They exit 7 at
// once, not at --reconnect or --timeout, and watch says where to resume.
func TestReconnectStopsOnRefusedToken(t *testing.T) {
	dir := t.TempDir()
	p := startPulsed(t, "-data-dir", dir, "-token-file", writeFile(t, "tokens", "write old-token-0123456789abcdef\n"))
	tokenFile := writeFile(t, "token", "old-token-0123456789abcdef\n")
	auth := []string{"--addr", p.Addr, "--token-file", tokenFile}
	mustRun(t, append([]string{"add", "--name", "web-1", "--http", "http://" + closedAddr(t) + "/"}, auth...)...)

	watch := startBackground(t, append([]string{"watch", "--reconnect", "1h"}, auth...)...)
	wait := startBackground(t, append([]string{"wait", "web-1", "--for", "healthy", "--timeout", "1h"}, auth...)...)
	eventually(t, "the watch to start", func() bool { return strings.Contains(watch.stderr.String(), "watching pulsed at "+p.Addr) })
	eventually(t, "the wait to start", func() bool { return strings.Contains(wait.stderr.String(), "waiting up to 1h0m0s") })

	p.stop(t)
	eventually(t, "the watch to say it lost pulsed", func() bool { return strings.Contains(watch.stderr.String(), "lost pulsed at "+p.Addr) })
	startPulsed(t, "-listen", p.Addr, "-data-dir", dir, "-token-file", writeFile(t, "tokens", "write new-token-0123456789abcdef\n"))

	for _, b := range []struct {
		name string
		b    *background
		want string
	}{
		{"watch", watch, "Once that is fixed, resume with pulsectl watch --since "},
		{"wait", wait, "pulsed does not know the token in " + tokenFile + " (from flag --token-file): pass a token listed in pulsed's -token-file.\n"},
	} {
		if code := b.b.wait(t); code != exitRefused {
			t.Errorf("%s: exit %d, want %d\n%s", b.name, code, exitRefused, b.b.stderr.String())
		}
		if s := b.b.stderr.String(); !strings.Contains(s, "pulsed at "+p.Addr+" refused the call: invalid token") || !strings.Contains(s, b.want) {
			t.Errorf("%s: stderr does not say the token was refused and %q:\n%s", b.name, b.want, s)
		}
	}
}

// deadlinePulse answers every call UNAVAILABLE, as a pulsed whose shared
// registry is down does, and records how long each call was given.
type deadlinePulse struct {
	pb.UnimplementedHealthCheckerServer
	mu    sync.Mutex
	given map[string]time.Duration
}

func (d *deadlinePulse) note(ctx context.Context, call string) error {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.given[call] = time.Until(dl)
	d.mu.Unlock()
	return status.Error(codes.Unavailable, "registry unavailable")
}

func (d *deadlinePulse) ListTargets(ctx context.Context, _ *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	return nil, d.note(ctx, "ListTargets")
}

func (d *deadlinePulse) SetMode(ctx context.Context, _ *pb.SetModeRequest) (*pb.SetModeResponse, error) {
	return nil, d.note(ctx, "SetMode")
}

func (d *deadlinePulse) RemoveTarget(ctx context.Context, _ *pb.RemoveTargetRequest) (*pb.RemoveTargetResponse, error) {
	return nil, d.note(ctx, "RemoveTarget")
}

// A call that changes the registry is given longer than pulsed waits for
// its shared registry to confirm a write (10s), so that while etcd is
// down pulsectl shows pulsed's answer rather than calling it stalled.
// ListTargets is given longer than pulsed waits for its revision to be
// stored (5s), for the same reason while its disk is full: with 5s, ls
// said pulsed "did not answer within 5s: it may be stalled" every time.
func TestWritesOutwaitTheSharedRegistry(t *testing.T) {
	d := &deadlinePulse{given: map[string]time.Duration{}}
	addr := serveAPI(t, d)
	pulsectl(t, "ls", "--addr", addr)
	pulsectl(t, "drain", "web-1", "--addr", addr)
	pulsectl(t, "rm", "web-1", "--addr", addr)
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := d.given["ListTargets"]; got < 10*time.Second || got > listTimeout {
		t.Errorf("ls was given %v, want more than pulsed's 5s wait for its store, at most %v", got, listTimeout)
	}
	for _, call := range []string{"SetMode", "RemoveTarget"} {
		if got := d.given[call]; got < 15*time.Second {
			t.Errorf("%s was given %v, want more than pulsed's 10s wait for its shared registry", call, got)
		}
	}
}

// statePulse answers State and ListTargets with a status whose last
// result is a passive outcome that took latency (nil: reported without
// one).
type statePulse struct {
	pb.UnimplementedHealthCheckerServer
	latency *durationpb.Duration
}

func (p statePulse) status() *pb.TargetStatus {
	return &pb.TargetStatus{
		Spec:       &pb.Target{Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:1"}}},
		State:      pb.State_STATE_UNHEALTHY,
		LastResult: &pb.ProbeResult{Pass: false, Error: "502", Passive: true, Latency: p.latency, Time: timestamppb.Now()},
	}
}

func (p statePulse) State(context.Context, *pb.StateRequest) (*pb.StateResponse, error) {
	return &pb.StateResponse{Status: p.status()}, nil
}

func (p statePulse) ListTargets(context.Context, *pb.ListTargetsRequest) (*pb.ListTargetsResponse, error) {
	return &pb.ListTargetsResponse{Targets: []*pb.TargetStatus{p.status()}}, nil
}

// state does not call a passive outcome a probe.
func TestStateNamesAPassiveOutcome(t *testing.T) {
	out := mustRun(t, "state", "web-1", "--addr", serveAPI(t, statePulse{latency: durationpb.New(5 * time.Millisecond)}))
	if !regexp.MustCompile(`(?m)^last result:\s+fail in 5ms at \S+: 502 \(passive outcome\)$`).MatchString(out) || strings.Contains(out, "last probe") {
		t.Errorf("state of a target whose last result is a passive outcome:\n%s", out)
	}
}

// A passive outcome reported without a latency (ReportOutcome's latency
// is optional) has none: state and ls do not show it as 0s, as if the
// request had taken no time.
func TestPassiveOutcomeWithoutLatency(t *testing.T) {
	addr := serveAPI(t, statePulse{})
	out := mustRun(t, "state", "web-1", "--addr", addr)
	if !regexp.MustCompile(`(?m)^last result:\s+fail at \S+: 502 \(passive outcome\)$`).MatchString(out) {
		t.Errorf("state of a target whose last result is a passive outcome without a latency:\n%s", out)
	}
	out = mustRun(t, "ls", "--addr", addr)
	if !regexp.MustCompile(`(?m)^web-1\s+-\s+unhealthy\s+active\s+-\s+-\s+502\s`).MatchString(out) {
		t.Errorf("ls of a target whose last result is a passive outcome without a latency, want LATENCY -:\n%s", out)
	}
}

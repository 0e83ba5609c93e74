package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// The end-to-end test builds the real pulsed, starts it, and drives it the
// way the README does: go tool grpcurl and grpc-health-probe against real
// HTTP targets on 127.0.0.1.
func TestEndToEndWithGrpcurl(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := buildPulsed(t)

	web1 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer web1.Close()
	web2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer web2.Close()

	p := startPulsed(t, bin, "-interval", "200ms", "-timeout", "100ms", "-rise", "2", "-fall", "2")

	if out, err := goTool(t, "grpc-health-probe", "-addr", p.Addr, "-service", "pulse.v1.HealthChecker"); err != nil || !strings.Contains(out, "SERVING") {
		t.Fatalf("grpc-health-probe: %v\n%s", err, out)
	}
	if out, err := goTool(t, "grpcurl", "-plaintext", p.Addr, "list"); err != nil || !strings.Contains(out, "pulse.v1.HealthChecker") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}

	watch := startWatch(t, p.Addr, "")

	for _, tg := range []struct{ name, url string }{{"web-1", web1.URL}, {"web-2", web2.URL}} {
		req := fmt.Sprintf(`{"target": {"name": %q, "group": "edge", "http": {"url": "%s/healthz"}}}`, tg.name, tg.url)
		out, err := goTool(t, "grpcurl", "-plaintext", "-d", req, p.Addr, "pulse.v1.HealthChecker/AddTarget")
		if err != nil || !strings.Contains(out, `"created": true`) {
			t.Fatalf("AddTarget %s: %v\n%s", tg.name, err, out)
		}
	}
	watch.waitFor(t, "web-1: unhealthy -> healthy")
	watch.waitFor(t, "web-2: unhealthy -> healthy")

	out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"group": "edge"}`, p.Addr, "pulse.v1.HealthChecker/Healthy")
	if err != nil || !regexp.MustCompile(`"names": \[\s*"web-1",\s*"web-2"\s*\]`).MatchString(out) {
		t.Fatalf("Healthy: %v\n%s", err, out)
	}

	// List, then resume from the list's revision (filtered by group): the
	// stream replays nothing older and goes on live.
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{}`, p.Addr, "pulse.v1.HealthChecker/ListTargets")
	m := regexp.MustCompile(`"revision": "(\d+)"`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("ListTargets: %v\n%s", err, out)
	}
	resumed := startWatch(t, p.Addr, fmt.Sprintf(`start_revision: %s group: "edge"`, m[1]))

	// Stop web-1: after fall=2 refused probes it turns unhealthy.
	web1.Close()
	watch.waitFor(t, "web-1: healthy -> unhealthy")
	resumed.waitFor(t, "web-1: healthy -> unhealthy")
	// pulsed's own overload events (a loaded machine can start a probe
	// late) change no target; nothing else may come before the fall.
	if got := resumed.seenTargets(); got != "web-1: healthy -> unhealthy" {
		t.Errorf("the resumed stream showed %q, want only web-1's fall", resumed.seen())
	}

	// The group's health over grpc.health.v1: web-2 still serves edge.
	if out, err := goTool(t, "grpc-health-probe", "-addr", p.Addr, "-service", "edge"); err != nil || !strings.Contains(out, "SERVING") {
		t.Errorf("grpc-health-probe -service edge: %v\n%s", err, out)
	}
	if out, err := goTool(t, "grpc-health-probe", "-addr", p.Addr, "-service", "no-such-group"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("grpc-health-probe -service no-such-group: %v\n%s", err, out)
	}
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "web-1"}`, p.Addr, "pulse.v1.HealthChecker/State")
	if err != nil || !strings.Contains(out, `"state": "STATE_UNHEALTHY"`) || !strings.Contains(out, `"error": "connection refused"`) {
		t.Fatalf("State(web-1): %v\n%s", err, out)
	}
	out, _ = goTool(t, "grpcurl", "-plaintext", "-d", `{}`, p.Addr, "pulse.v1.HealthChecker/Healthy")
	if !strings.Contains(out, `"web-2"`) || strings.Contains(out, `"web-1"`) {
		t.Errorf("Healthy after web-1 stopped:\n%s", out)
	}

	// Bad input is a clear error naming the field, and the server lives on.
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "x", "rise": 0, "tcp": {"address": "127.0.0.1:1"}}}`, p.Addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "target.rise: must be at least 1, got 0") {
		t.Errorf("AddTarget with rise 0: %v\n%s", err, out)
	}
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "nope"}`, p.Addr, "pulse.v1.HealthChecker/State")
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("State(nope): %v\n%s", err, out)
	}

	// The transition was logged as "<name>: <from> -> <to>", and SIGTERM
	// stops pulsed promptly, ending the watch stream.
	p.stop(t)
	if !strings.Contains(p.Logs(), `msg="web-1: healthy -> unhealthy"`) {
		t.Errorf("pulsed did not log the transition:\n%s", p.Logs())
	}
	if err := watch.wait(); err == nil {
		t.Errorf("the watch ended without an error after shutdown")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-rise", "0"},
		{"-interval", "1s", "-timeout", "2s"},
		{"-max-concurrent-probes", "-1"},
		{"-schedule-tick", "-1ms"},
		{"-overload-stall", "-1ms"},
		{"-reprobe-fast-interval", "0s"},
		{"-reprobe-fast-interval", "2m"},
		{"-max-unhealthy-fraction", "NaN"},
		{"-max-connections", "-1"},
		{"-log-format", "xml"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	var stderr bytes.Buffer
	if _, err := parseFlags([]string{"-help"}, &stderr); err == nil || !strings.Contains(stderr.String(), "-max-concurrent-probes") {
		t.Errorf("-help: %v\n%s", err, stderr.String())
	}
}

func buildPulsed(t *testing.T) string { return buildPulsedTags(t, "") }

// buildPulsedTags builds this package's pulsed with the build tags given
// (none when empty), with -race when this test binary has it.
func buildPulsedTags(t *testing.T, tags string) string {
	t.Helper()
	var flags []string
	if tags != "" {
		flags = append(flags, "-tags", tags)
	}
	if raceEnabled {
		flags = append(flags, "-race")
	}
	bin, err := pulsedproc.Build(t.Context(), t.TempDir(), ".", flags...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// goTool runs `go tool NAME args...` with a bound and returns its combined
// output.
func goTool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", append([]string{"tool", name}, args...)...).CombinedOutput()
	return string(out), err
}

// pulsed is a pulsed process started by a test.
type pulsed struct{ *pulsedproc.Process }

// startPulsed starts bin with both listeners on free loopback ports and a
// data directory of the test's own unless args name one.
func startPulsed(t *testing.T, bin string, args ...string) *pulsed {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == "data-dir" || strings.HasPrefix(a, "data-dir=") || a == "registry"
	}) {
		args = append([]string{"-data-dir", t.TempDir()}, args...)
	}
	// Port 0 for the HTTP listener too: the default 9090 may be taken.
	return startPulsedLines(t, bin, nil, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0"}, args...)...)
}

// startPulsedLines starts bin with exactly args, hands each line of its
// log to onLine (if not nil), and kills it when the test ends.
func startPulsedLines(t *testing.T, bin string, onLine func(string), args ...string) *pulsed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(time.Minute))
	defer cancel()
	proc, err := pulsedproc.Start(ctx, bin, args, onLine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	return &pulsed{proc}
}

// stop sends SIGTERM and checks that pulsed exits cleanly within 30s.
func (p *pulsed) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(testscale.D(30 * time.Second)); err != nil {
		t.Errorf("pulsed: %v\n%s", err, p.Logs())
	}
}

// watchProc is `grpcurl -v ... WatchTransitions` running in the background.
type watchProc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	texts   []string
	more    chan struct{}
	exited  chan struct{} // closed once the process has been waited for
	exitErr error         // set before exited is closed
}

var textField = regexp.MustCompile(`^\s*text: ("(?:[^"\\]|\\.)*")`)

// startWatch runs the README's watch command (with -v, whose "Response
// headers received" line says the watch is registered) and a request in
// protobuf text format.
func startWatch(t *testing.T, addr, req string) *watchProc {
	t.Helper()
	w := &watchProc{more: make(chan struct{}, 1), exited: make(chan struct{})}
	w.cmd = exec.Command("go", "tool", "grpcurl", "-v", "-plaintext", "-format", "text", "-d", req, addr, "pulse.v1.HealthChecker/WatchTransitions")
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = os.Stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go tool runs grpcurl as a child
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	subscribed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "Response headers received") {
				close(subscribed)
			}
			if m := textField.FindStringSubmatch(line); m != nil {
				text, _ := strconv.Unquote(m[1])
				w.mu.Lock()
				w.texts = append(w.texts, text)
				w.mu.Unlock()
				select {
				case w.more <- struct{}{}:
				default:
				}
			}
		}
		w.exitErr = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			<-w.exited
		}
	})
	select {
	case <-subscribed:
	case <-w.exited:
		t.Fatalf("watch exited before subscribing: %v", w.exitErr)
	case <-time.After(time.Minute):
		t.Fatal("watch did not subscribe within a minute")
	}
	return w
}

// seen returns the texts the stream has shown, one a line.
func (w *watchProc) seen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.texts, "\n")
}

// seenTargets is seen without pulsed's own overload events.
func (w *watchProc) seenTargets() string {
	var out []string
	for line := range strings.Lines(w.seen()) {
		if !strings.HasPrefix(line, "checker degraded: ") && !strings.HasPrefix(line, "checker recovered: ") {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}

// waitFor waits until the stream has shown text.
func (w *watchProc) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.After(testscale.D(30 * time.Second))
	for {
		w.mu.Lock()
		seen := strings.Join(w.texts, "\n")
		w.mu.Unlock()
		if strings.Contains(seen+"\n", text+"\n") {
			return
		}
		select {
		case <-w.more:
		case <-deadline:
			t.Fatalf("the stream did not show %q; it showed:\n%s", text, seen)
		}
	}
}

// wait returns the watch's exit error, or nil if it is still running after
// a bound.
func (w *watchProc) wait() error {
	select {
	case <-w.exited:
		return w.exitErr
	case <-time.After(testscale.D(30 * time.Second)):
		return nil
	}
}

// syncBuffer is a strings.Builder safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

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

	if out, err := goTool(t, "grpc-health-probe", "-addr", p.addr, "-service", "pulse.v1.HealthChecker"); err != nil || !strings.Contains(out, "SERVING") {
		t.Fatalf("grpc-health-probe: %v\n%s", err, out)
	}
	if out, err := goTool(t, "grpcurl", "-plaintext", p.addr, "list"); err != nil || !strings.Contains(out, "pulse.v1.HealthChecker") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}

	watch := startWatch(t, p.addr, "")

	for _, tg := range []struct{ name, url string }{{"web-1", web1.URL}, {"web-2", web2.URL}} {
		req := fmt.Sprintf(`{"target": {"name": %q, "group": "edge", "http": {"url": "%s/healthz"}}}`, tg.name, tg.url)
		out, err := goTool(t, "grpcurl", "-plaintext", "-d", req, p.addr, "pulse.v1.HealthChecker/AddTarget")
		if err != nil || !strings.Contains(out, `"created": true`) {
			t.Fatalf("AddTarget %s: %v\n%s", tg.name, err, out)
		}
	}
	watch.waitFor(t, "web-1: unhealthy -> healthy")
	watch.waitFor(t, "web-2: unhealthy -> healthy")

	out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"group": "edge"}`, p.addr, "pulse.v1.HealthChecker/Healthy")
	if err != nil || !regexp.MustCompile(`"names": \[\s*"web-1",\s*"web-2"\s*\]`).MatchString(out) {
		t.Fatalf("Healthy: %v\n%s", err, out)
	}

	// List, then resume from the list's revision (filtered by group): the
	// stream replays nothing older and goes on live.
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{}`, p.addr, "pulse.v1.HealthChecker/ListTargets")
	m := regexp.MustCompile(`"revision": "(\d+)"`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("ListTargets: %v\n%s", err, out)
	}
	resumed := startWatch(t, p.addr, fmt.Sprintf(`start_revision: %s group: "edge"`, m[1]))

	// Stop web-1: after fall=2 refused probes it turns unhealthy.
	web1.Close()
	watch.waitFor(t, "web-1: healthy -> unhealthy")
	resumed.waitFor(t, "web-1: healthy -> unhealthy")
	if got := resumed.seen(); got != "web-1: healthy -> unhealthy" {
		t.Errorf("the resumed stream showed %q, want only web-1's fall", got)
	}

	// The group's health over grpc.health.v1: web-2 still serves edge.
	if out, err := goTool(t, "grpc-health-probe", "-addr", p.addr, "-service", "edge"); err != nil || !strings.Contains(out, "SERVING") {
		t.Errorf("grpc-health-probe -service edge: %v\n%s", err, out)
	}
	if out, err := goTool(t, "grpc-health-probe", "-addr", p.addr, "-service", "no-such-group"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("grpc-health-probe -service no-such-group: %v\n%s", err, out)
	}
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "web-1"}`, p.addr, "pulse.v1.HealthChecker/State")
	if err != nil || !strings.Contains(out, `"state": "STATE_UNHEALTHY"`) || !strings.Contains(out, `"error": "connection refused"`) {
		t.Fatalf("State(web-1): %v\n%s", err, out)
	}
	out, _ = goTool(t, "grpcurl", "-plaintext", "-d", `{}`, p.addr, "pulse.v1.HealthChecker/Healthy")
	if !strings.Contains(out, `"web-2"`) || strings.Contains(out, `"web-1"`) {
		t.Errorf("Healthy after web-1 stopped:\n%s", out)
	}

	// Bad input is a clear error naming the field, and the server lives on.
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "x", "rise": 0, "tcp": {"address": "127.0.0.1:1"}}}`, p.addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "target.rise: must be at least 1, got 0") {
		t.Errorf("AddTarget with rise 0: %v\n%s", err, out)
	}
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "nope"}`, p.addr, "pulse.v1.HealthChecker/State")
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("State(nope): %v\n%s", err, out)
	}

	// The transition was logged in seed 000's form, and SIGTERM stops pulsed
	// promptly, ending the watch stream.
	p.stop(t)
	if !strings.Contains(p.logs.String(), `msg="web-1: healthy -> unhealthy"`) {
		t.Errorf("pulsed did not log the transition:\n%s", p.logs.String())
	}
	if err := watch.wait(); err == nil {
		t.Errorf("the watch ended without an error after shutdown")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-rise", "0"},
		{"-interval", "1s", "-timeout", "2s"},
		{"-max-concurrent-probes", "0"},
		{"-schedule-tick", "-1ms"},
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

func buildPulsed(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pulsed")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
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

type pulsed struct {
	cmd     *exec.Cmd
	addr    string
	logs    *syncBuffer
	exited  chan struct{} // closed once the process has been waited for
	exitErr error         // set before exited is closed
}

func startPulsed(t *testing.T, bin string, args ...string) *pulsed {
	t.Helper()
	p := &pulsed{logs: &syncBuffer{}, exited: make(chan struct{})}
	if !slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == "data-dir" || strings.HasPrefix(a, "data-dir=") || a == "registry"
	}) {
		args = append([]string{"-data-dir", t.TempDir()}, args...)
	}
	// Port 0 for the HTTP listener too: the default 9090 may be taken.
	p.cmd = exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0"}, args...)...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`msg="pulsed listening" addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.logs.WriteString(line + "\n")
			if m := re.FindStringSubmatch(line); m != nil {
				addrc <- m[1]
			}
		}
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("pulsed exited: %v\n%s", p.exitErr, p.logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("pulsed did not start:\n%s", p.logs.String())
	}
	return p
}

func (p *pulsed) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.exitErr != nil {
			t.Errorf("pulsed exited with %v after SIGTERM\n%s", p.exitErr, p.logs.String())
		}
	case <-time.After(testscale.D(30 * time.Second)):
		t.Fatalf("pulsed still running 30s after SIGTERM")
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

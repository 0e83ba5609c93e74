package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// The client tests run pulsectl's run function against the real pulsed
// binary, built once per test run and started on 127.0.0.1:0 by each test
// that needs it, with real HTTP targets on 127.0.0.1. Building the binary
// rather than serving package server in-process keeps these tests on the
// wire contract only: pulsectl imports neither server nor checker, and
// neither do its tests.

// built is the pulsed binary, built by pulsedBinary.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	// The tests see no config file and no PULSE_* variable of the
	// machine's: they set those they test.
	home, err := os.MkdirTemp("", "pulsectl-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", home)
	for _, v := range []string{envAddr, envCACert, envCert, envKey, envOutput, envConfig, envContext, "PULSE_TOKEN"} {
		os.Unsetenv(v)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(home)
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
		os.Exit(code)
	}))
}

// pulsedBinary builds cmd/pulsed (without -race: it is not the code under
// test) and returns its path.
func pulsedBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "pulsectl-test-")
		if built.err != nil {
			return
		}
		built.path, built.err = pulsedproc.Build(context.Background(), built.dir, pulsedproc.Package)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// testPulsed is a pulsed process.
type testPulsed struct{ *pulsedproc.Process }

// The fast defaults of a test's pulsed, scaled (see testscale): a probe
// of a loopback target must not time out on a loaded machine.
var (
	testInterval = testscale.D(100 * time.Millisecond)
	testTimeout  = testscale.D(50 * time.Millisecond)
)

// startPulsed starts pulsed on a free loopback port with fast defaults
// (testInterval, testTimeout, rise 2, fall 2) plus args, and kills it when
// the test ends.
func startPulsed(t *testing.T, args ...string) *testPulsed {
	t.Helper()
	base := []string{"-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", t.TempDir(),
		"-interval", testInterval.String(), "-timeout", testTimeout.String(), "-rise", "2", "-fall", "2"}
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(30*time.Second))
	defer cancel()
	p, err := pulsedproc.Start(ctx, pulsedBinary(t), append(base, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &testPulsed{p}
}

// stop sends SIGTERM and waits for pulsed to exit.
func (p *testPulsed) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(testscale.D(30 * time.Second)); errors.Is(err, pulsedproc.ErrStillRunning) {
		t.Fatal(err)
	}
}

// serveAPI serves srv as pulse.v1.HealthChecker on a loopback port until
// the test ends, and returns its address.
func serveAPI(t *testing.T, srv pb.HealthCheckerServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterHealthCheckerServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// result is one run of pulsectl.
type result struct {
	stdout, stderr string
	code           int
}

// pulsectl runs the command line args to completion.
func pulsectl(t *testing.T, args ...string) result {
	t.Helper()
	return pulsectlIn(t.Context(), &env{}, args...)
}

// pulsectlIn runs args to completion in e, under ctx, with e's output
// captured.
func pulsectlIn(ctx context.Context, e *env, args ...string) result {
	var stdout, stderr bytes.Buffer
	e.stdout, e.stderr = &stdout, &stderr
	code := e.run(ctx, args)
	return result{stdout.String(), stderr.String(), code}
}

// mustRun runs args and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	r := pulsectl(t, args...)
	if r.code != exitOK {
		t.Fatalf("pulsectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// background is a pulsectl command running until its context ends.
type background struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

func startBackground(t *testing.T, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	b := &background{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { b.done <- run(ctx, args, b.stdout, b.stderr) }()
	t.Cleanup(func() {
		cancel()
		<-b.done
		b.done <- -1
	})
	return b
}

// stop cancels the command and returns its exit code.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	return b.wait(t)
}

// wait waits for the command to end by itself and returns its exit code.
func (b *background) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(testscale.D(30 * time.Second)):
		t.Fatalf("command did not end\nstdout: %s\nstderr: %s", b.stdout.String(), b.stderr.String())
		return 0
	}
}

// eventually polls cond every 20ms until it holds, failing the test after
// 20s (scaled by testscale).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testscale.D(20 * time.Second))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
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

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/liveness"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
)

// The watchdog's wiring in pulsed: a committer stuck in a store that does
// not return turns pulse_stalled{component="committer"} to 1, pulsed's own
// grpc health to NOT_SERVING and /healthz's answer to what stalled, with
// one error logged; all of it clears when the store returns.
func TestWatchdogWiring(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := &gatedStore{gate: make(chan struct{})}
	var release sync.Once
	open := func() { release.Do(func() { close(store.gate) }) }
	c, err := checker.New(checker.Config{
		Clock:     clock,
		Store:     store,
		NewProber: func(probe.Spec) (checker.Prober, error) { return nopProber{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer open() // before Close, which waits for the committer
	gs, hs := server.NewGRPCServer(server.New(c), server.Options{})
	defer gs.Stop()
	logs := &lockedLog{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	obs := newObservability(false, logger)
	wd, err := startWatchdog(c, 30*time.Second, hs, obs, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Close()

	self := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hs.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if got := gauges(t, obs); got != "checker_lock=0 commit_queue=0 committer=0 scheduler=0 watch_hub=0 write_lock=0" {
		t.Errorf("pulse_stalled at start: %s", got)
	}
	if err := obs.live(); err != nil || self() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("at start: live() = %v, health %v", err, self())
	}

	if _, _, err := c.Add(checker.Spec{Name: "a", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}}); err != nil {
		t.Fatal(err)
	}
	// The committer now waits for the store. Move the clock a second at a
	// time (the watchdog looks every second) until it says so.
	eventually(t, "the committer to be reported stalled", func() bool {
		clock.Advance(time.Second)
		return self() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if got := gauges(t, obs); got != "checker_lock=0 commit_queue=0 committer=1 scheduler=0 watch_hub=0 write_lock=0" {
		t.Errorf("pulse_stalled while the store hangs: %s", got)
	}
	if err := obs.live(); err == nil || !regexp.MustCompile(`^committer: no progress for \d+s$`).MatchString(err.Error()) {
		t.Errorf("live() while the store hangs = %v", err)
	}

	open()
	eventually(t, "the committer to recover", func() bool {
		clock.Advance(time.Second)
		return self() == healthpb.HealthCheckResponse_SERVING
	})
	if got := gauges(t, obs); got != "checker_lock=0 commit_queue=0 committer=0 scheduler=0 watch_hub=0 write_lock=0" {
		t.Errorf("pulse_stalled once recovered: %s", got)
	}
	if err := obs.live(); err != nil {
		t.Errorf("live() once recovered = %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, `level=ERROR msg="pulsed is not live: committer: no progress for`); n != 1 {
		t.Errorf("%d errors logged for the stall, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, `level=INFO msg="pulsed is live again: committer progresses"`); n != 1 {
		t.Errorf("%d info lines logged for the recovery, want 1:\n%s", n, out)
	}
}

// gauges returns pulse_stalled's series as "component=value", sorted.
func gauges(t *testing.T, obs *observability) string {
	t.Helper()
	mfs, err := obs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "pulse_stalled" {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := "0"
			if m.GetGauge().GetValue() == 1 {
				v = "1"
			}
			out = append(out, m.GetLabel()[0].GetValue()+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// A spec write stuck in the store (here a store that does not return; in
// production bbolt waiting for a reader, a full disk...) wedges AddTarget
// and every write behind it: within the liveness timeout /healthz answers
// 503 with what stalled, pulsed's own grpc health is NOT_SERVING and
// pulse_stalled{component="write_lock"} is 1; all of it clears, and the
// call succeeds, when the store returns.
func TestWatchdogSeesAStuckWrite(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := &gatedStore{specGate: make(chan struct{})}
	var release sync.Once
	open := func() { release.Do(func() { close(store.specGate) }) }
	c, err := checker.New(checker.Config{
		Clock:     clock,
		Store:     store,
		NewProber: func(probe.Spec) (checker.Prober, error) { return nopProber{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer open()
	srv := server.New(c)
	gs, hs := server.NewGRPCServer(srv, server.Options{})
	defer gs.Stop()
	logger := slog.New(slog.DiscardHandler)
	obs := newObservability(false, logger)
	const timeout = 30 * time.Second
	wd, err := startWatchdog(c, timeout, hs, obs, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Close()
	httpSrv := httptest.NewServer(webHandler(c, obs))
	defer httpSrv.Close()

	self := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hs.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if code, body := get(t, httpSrv.URL+"/healthz"); code != http.StatusOK || self() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("at start: /healthz %d %q, health %v", code, body, self())
	}

	added := make(chan error, 1)
	go func() {
		_, err := srv.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "a", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}}})
		added <- err
	}()
	eventually(t, "the write to reach the store", func() bool { return store.writing.Load() })
	// The watchdog looks every second of the fake clock: once past the
	// timeout, it reports the write within a look or two.
	start := clock.Now()
	eventually(t, "the stuck write to be reported", func() bool {
		clock.Advance(time.Second)
		return self() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if took := clock.Now().Sub(start); took > timeout+2*time.Second {
		t.Errorf("reported %v after the write stuck, with a timeout of %v", took, timeout)
	}
	code, body := get(t, httpSrv.URL+"/healthz")
	if code != http.StatusServiceUnavailable || !regexp.MustCompile(`^not live: write_lock: lock held for \d+s\n$`).MatchString(body) {
		t.Errorf("/healthz while the write is stuck: %d %q", code, body)
	}
	if got := gauges(t, obs); got != "checker_lock=0 commit_queue=0 committer=0 scheduler=0 watch_hub=0 write_lock=1" {
		t.Errorf("pulse_stalled while the write is stuck: %s", got)
	}

	open()
	if err := <-added; err != nil {
		t.Errorf("AddTarget once the store returned: %v", err)
	}
	eventually(t, "pulsed to be live again", func() bool {
		clock.Advance(time.Second)
		return self() == healthpb.HealthCheckResponse_SERVING
	})
	if code, body := get(t, httpSrv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz once recovered: %d %q", code, body)
	}
	if got := gauges(t, obs); got != "checker_lock=0 commit_queue=0 committer=0 scheduler=0 watch_hub=0 write_lock=0" {
		t.Errorf("pulse_stalled once recovered: %s", got)
	}
}

// webHandler is pulsed's HTTP handler over c, as obs.start builds it.
func webHandler(c *checker.Checker, obs *observability) http.Handler {
	return web.NewHandler(web.Config{Checker: c, Gatherer: obs.reg, Ready: obs.ready, Live: obs.live})
}

// gatedStore is a checker.Store whose CommitStates waits for gate and
// whose PutSpec waits for specGate, when they are set.
type gatedStore struct {
	gate     chan struct{}
	specGate chan struct{}
	writing  atomic.Bool // a PutSpec has begun
}

func (*gatedStore) Load() ([]checker.StoredTarget, uint64, error) { return nil, 0, nil }
func (s *gatedStore) PutSpec(checker.Spec) error {
	s.writing.Store(true)
	if s.specGate != nil {
		<-s.specGate
	}
	return nil
}
func (s *gatedStore) PutSpecs([]checker.Spec) error { return s.PutSpec(checker.Spec{}) }
func (*gatedStore) DeleteTarget(string) error       { return nil }
func (*gatedStore) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) {
	return nil, nil
}
func (*gatedStore) PutGroupPolicy(string, checker.GroupPolicy) error { return nil }
func (s *gatedStore) CommitStates([]checker.StoredState, []string, uint64) error {
	if s.gate != nil {
		<-s.gate
	}
	return nil
}

// A real pulsed, built with the pulse_testhook tag so that SIGUSR1 wedges
// its scheduler while it holds the checker's lock: /healthz and pulsed's
// own grpc health fail within -liveness-timeout, and SIGTERM still ends it
// within -shutdown-timeout plus the grace, with status 1; a second signal
// ends it at once.
func TestWedgedPulsed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := buildPulsedTags(t, "pulse_testhook")

	t.Run("liveness and bounded shutdown", func(t *testing.T) {
		p := startPulsed(t, bin, "-liveness-timeout", "1s", "-shutdown-timeout", "1s")
		web := httpAddr(t, p)
		eventually(t, "pulsed to be ready", func() bool { code, _ := get(t, web+"/readyz"); return code == http.StatusOK })
		if code, body := get(t, web+"/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("/healthz before the wedge: %d %q", code, body)
		}
		if got := selfHealth(t, p.Addr); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("grpc health before the wedge: %v", got)
		}

		wedged := time.Now()
		p.Signal(syscall.SIGUSR1)
		var body string
		eventually(t, "/healthz to fail", func() bool {
			var code int
			code, body = get(t, web+"/healthz")
			return code == http.StatusServiceUnavailable
		})
		// The watchdog looks every tenth of the timeout; allow for a slow,
		// shared machine on top.
		if took := time.Since(wedged); took > 1*time.Second+3*time.Second {
			t.Errorf("/healthz failed %v after the wedge, with -liveness-timeout 1s", took)
		}
		if !strings.HasPrefix(body, "not live: ") || !strings.Contains(body, "scheduler: no progress for") {
			t.Errorf("/healthz body %q does not say what stalled", body)
		}
		if got := selfHealth(t, p.Addr); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("grpc health of a wedged pulsed: %v, want NOT_SERVING", got)
		}
		if code, _ := get(t, web+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz of a wedged pulsed: %d; readiness keeps its meaning", code)
		}

		stopped := time.Now()
		p.Signal(syscall.SIGTERM)
		select {
		case <-p.Done():
		case <-time.After(1*time.Second + shutdownGrace + 10*time.Second):
			t.Fatalf("a wedged pulsed still runs %v after SIGTERM\n%s", time.Since(stopped), p.Logs())
		}
		took := time.Since(stopped)
		if took < 1*time.Second+shutdownGrace-500*time.Millisecond {
			t.Errorf("pulsed exited %v after SIGTERM, before its bound: did it wedge?", took)
		}
		assertExit1(t, p)
		logs := p.Logs()
		for _, want := range []string{
			`level=ERROR msg="pulsed is not live: scheduler: no progress for`,
			`level=ERROR msg="shutdown did not finish within -shutdown-timeout plus grace: exiting now" bound=6s waiting_for="the checker to close`,
		} {
			if !strings.Contains(logs, want) {
				t.Errorf("the log lacks %s\n%s", want, logs)
			}
		}
	})

	t.Run("second signal", func(t *testing.T) {
		p := startPulsed(t, bin, "-liveness-timeout", "1s", "-shutdown-timeout", "1m")
		web := httpAddr(t, p)
		eventually(t, "pulsed to be ready", func() bool { code, _ := get(t, web+"/readyz"); return code == http.StatusOK })
		p.Signal(syscall.SIGUSR1)
		eventually(t, "/healthz to fail", func() bool { code, _ := get(t, web+"/healthz"); return code == http.StatusServiceUnavailable })
		p.Signal(syscall.SIGTERM)
		eventually(t, "pulsed to wait for its checker", func() bool {
			return strings.Contains(p.Logs(), `msg="pulsed shutting down: waiting for the checker to close`)
		})
		second := time.Now()
		p.Signal(syscall.SIGTERM)
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("pulsed still runs 10s after a second SIGTERM (its bound is a minute)\n%s", p.Logs())
		}
		t.Logf("exited %v after the second signal", time.Since(second))
		assertExit1(t, p)
		if want := `level=ERROR msg="second signal: exiting now" signal=terminated waiting_for="the checker to close`; !strings.Contains(p.Logs(), want) {
			t.Errorf("the log lacks %s\n%s", want, p.Logs())
		}
	})
}

// httpAddr returns the base URL of p's HTTP listener, from its log.
func httpAddr(t *testing.T, p *pulsed) string {
	t.Helper()
	m := regexp.MustCompile(`msg="http listening" component=http addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("pulsed did not log its HTTP address:\n%s", p.Logs())
	}
	return "http://" + m[1]
}

// get returns the status and body of GET url, within a bound.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// selfHealth asks grpc.health.v1 for pulsed's own status.
func selfHealth(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("grpc health Check: %v", err)
	}
	return resp.GetStatus()
}

// assertExit1 checks that p exited with status 1.
func assertExit1(t *testing.T, p *pulsed) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != 1 {
		t.Errorf("pulsed exited with %v, want exit status 1\n%s", p.Err(), p.Logs())
	}
}

// lockedLog is a log destination safe for concurrent use.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestLivenessTimeoutFlag(t *testing.T) {
	var stderr bytes.Buffer
	cfg, err := parseFlags(nil, &stderr)
	if err != nil || cfg.livenessTimeout != liveness.DefaultTimeout || liveness.DefaultTimeout != 30*time.Second {
		t.Errorf("default -liveness-timeout: %v, %v", cfg.livenessTimeout, err)
	}
	for _, v := range []string{"0", "-1s"} {
		if _, err := parseFlags([]string{"-liveness-timeout", v}, &stderr); err == nil || !strings.Contains(err.Error(), "-liveness-timeout must be positive") {
			t.Errorf("-liveness-timeout %s: %v", v, err)
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

func dial(t *testing.T, addr string) pb.HealthCheckerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewHealthCheckerClient(conn)
}

// tcpTarget is a target whose probes go to a closed port on 127.0.0.1,
// every minute: the durability tests care about specs, not probes.
func tcpTarget(name string) *pb.Target {
	return &pb.Target{
		Name: name, Group: "crash",
		Probe:    &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}},
		Interval: durationpb.New(time.Minute),
	}
}

// The crash test: 1,000 concurrent AddTarget calls, SIGKILL in the middle,
// restart: every acknowledged target is there with its spec intact.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	p := startPulsed(t, bin, "-data-dir", dir)
	client := dial(t, p.Addr)

	const n = 1000
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	killed := make(chan struct{})
	var once sync.Once
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("t-%04d", i)
			ctx, cancel := context.WithTimeout(context.Background(), testscale.D(30*time.Second))
			defer cancel()
			if _, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: tcpTarget(name)}); err != nil {
				return
			}
			mu.Lock()
			acked = append(acked, name)
			k := len(acked)
			mu.Unlock()
			if k == n/3 {
				once.Do(func() {
					p.Signal(syscall.SIGKILL)
					close(killed)
				})
			}
		})
	}
	wg.Wait()
	<-p.Done()
	select {
	case <-killed:
	default:
		t.Fatal("every call finished before the kill; nothing was tested")
	}
	mu.Lock()
	got := append([]string(nil), acked...)
	mu.Unlock()
	if len(got) >= n {
		t.Fatalf("all %d calls were acknowledged: the kill came too late", n)
	}
	t.Logf("%d of %d AddTarget calls acknowledged before SIGKILL", len(got), n)

	p2 := startPulsed(t, bin, "-data-dir", dir)
	list, err := dial(t, p2.Addr).ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]*pb.TargetStatus{}
	for _, st := range list.GetTargets() {
		have[st.GetSpec().GetName()] = st
	}
	for _, name := range got {
		st, ok := have[name]
		if !ok {
			t.Errorf("acknowledged target %s is gone after the crash", name)
			continue
		}
		spec := st.GetSpec()
		if spec.GetTcp().GetAddress() != "127.0.0.1:9" || spec.GetInterval().AsDuration() != time.Minute || spec.GetGroup() != "crash" {
			t.Errorf("%s came back with spec %v", name, spec)
		}
	}
	p2.stop(t)
}

func TestSecondPulsedOnTheSameDataDirRefusesToStart(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	p := startPulsed(t, bin, "-data-dir", dir)
	out, err := exec.Command(bin, "-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", dir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("second pulsed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "is locked (is another pulsed using data dir") {
		t.Errorf("second pulsed does not say why:\n%s", out)
	}
	p.stop(t)

	// A data dir that cannot be created is refused at start, with the path.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	out, err = exec.Command(bin, "-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", filepath.Join(file, "sub")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-data-dir: create data dir") {
		t.Errorf("pulsed with an impossible data dir: %v\n%s", err, out)
	}
}

// A target's state survives a restart without a flip, and a watch resumes
// across it.
func TestRestartKeepsStateWithoutFlip(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	web := okServer(t)
	p := startPulsed(t, bin, "-data-dir", dir, "-interval", "100ms", "-timeout", "50ms", "-rise", "1")
	client := dial(t, p.Addr)
	tg := &pb.Target{Name: "web-1", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: web.URL}}}
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web-1 healthy", func() bool {
		st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
		return err == nil && st.GetStatus().GetState() == pb.State_STATE_HEALTHY
	})
	list, _ := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	rev := list.GetRevision()
	p.stop(t)

	p2 := startPulsed(t, bin, "-data-dir", dir, "-interval", "100ms", "-timeout", "50ms", "-rise", "1")
	client = dial(t, p2.Addr)
	st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil || st.GetStatus().GetState() != pb.State_STATE_HEALTHY {
		t.Fatalf("web-1 after restart: %v %v", st, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{StartRevision: rev})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a fresh result", func() bool {
		st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
		return err == nil && !st.GetStatus().GetCarriedOver() && st.GetStatus().GetPassStreak() > 0
	})
	client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "web-1"})
	ev, err := w.Recv()
	// A loaded machine may make pulsed itself late (100ms intervals): its
	// CHECKER_DEGRADED/RECOVERED events say so and change no target.
	for err == nil && (ev.GetPolicy().GetKind() == pb.PolicyEvent_KIND_CHECKER_DEGRADED || ev.GetPolicy().GetKind() == pb.PolicyEvent_KIND_CHECKER_RECOVERED) {
		ev, err = w.Recv()
	}
	if err != nil || ev.GetRemoved().GetName() != "web-1" {
		t.Errorf("first target event after the restart: %v %v; want web-1's removal, no flip", ev, err)
	}
	old, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{StartRevision: rev - 1})
	if err == nil {
		_, err = old.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("resuming from before the restart's revision: %v, want OUT_OF_RANGE", err)
	}
	p2.stop(t)
}

// A draining target's verdict is stored with its state: after a restart
// it still says healthy (no probe since could have risen 50 times), and
// the target activated is healthy at once, as without the restart.
func TestRestartKeepsADrainedTargetsVerdict(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	web := okServer(t)
	args := []string{"-data-dir", dir, "-interval", "100ms", "-timeout", "50ms"}
	p := startPulsed(t, bin, args...)
	client := dial(t, p.Addr)
	tg := &pb.Target{Name: "web-1", Rise: proto.Int32(50), InitialState: pb.State_STATE_HEALTHY, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: web.URL}}}
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web-1 probed", func() bool {
		st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
		return err == nil && st.GetStatus().GetPassStreak() > 0
	})
	if _, err := client.SetMode(t.Context(), &pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_DRAINING, Reason: "deploy"}); err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	p2 := startPulsed(t, bin, args...)
	client = dial(t, p2.Addr)
	st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil || st.GetStatus().GetState() != pb.State_STATE_UNHEALTHY || st.GetStatus().GetVerdict() != pb.State_STATE_HEALTHY {
		t.Fatalf("web-1 after a restart: %v %v; want unhealthy (draining) with verdict healthy", st, err)
	}
	resp, err := client.SetMode(t.Context(), &pb.SetModeRequest{Target: "web-1", Mode: pb.Mode_MODE_ACTIVE})
	if err != nil || len(resp.GetTargets()) != 1 || resp.GetTargets()[0].GetState() != pb.State_STATE_HEALTHY {
		t.Errorf("web-1 activated after a restart: %v %v; want healthy at once", resp, err)
	}
	p2.stop(t)
}

// SIGTERM with 1,000 open streams, as many as one address may hold: each
// ends with UNAVAILABLE naming the revision to resume from, and pulsed
// exits within its bound.
func TestShutdownWithThousandStreams(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-shutdown-timeout", "5s", "-rate-limit", "0") // 1,000 streams at once from one client
	client := dial(t, p.Addr)
	const n = 1000
	streams := make([]grpc.ServerStreamingClient[pb.WatchTransitionsResponse], n)
	var rev uint64
	for i := range streams {
		s, err := client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Recv()
		if err != nil || ev.GetSnapshotComplete() == nil {
			t.Fatalf("stream %d: %v %v", i, ev, err)
		}
		rev = ev.GetRevision()
		streams[i] = s
	}
	// One more from the same address is past -max-watchers-per-source's
	// default, 1,000.
	more, err := client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{})
	if err == nil {
		_, err = more.Recv()
	}
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "limit reached: at most 1000 watchers from 127.0.0.1; ") || !strings.HasSuffix(st.Message(), "raise pulsed's -max-watchers-per-source") {
		t.Errorf("stream 1,001 from one address: %v", err)
	}
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	want := regexp.MustCompile(fmt.Sprintf(`pulsed is shutting down; reconnect and resume with start_revision %d$`, rev))
	for i, s := range streams {
		_, err := s.Recv()
		if st := status.Convert(err); st.Code() != codes.Unavailable || !want.MatchString(st.Message()) {
			t.Fatalf("stream %d ended with %v", i, err)
		}
	}
	select {
	case <-p.Done():
	case <-time.After(testscale.D(30 * time.Second)):
		t.Fatal("pulsed still running 30s after SIGTERM")
	}
	if p.Err() != nil {
		t.Errorf("pulsed exited with %v", p.Err())
	}
	t.Logf("1,000 streams ended and pulsed exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// A data dir on a full disk: AddTarget fails with UNAVAILABLE saying so, and
// nothing is acknowledged. It needs a small tmpfs, so root; without one it
// skips, unless PULSE_REQUIRE_FULLDISK=1 (CI sets it) makes that a failure.
func TestFullDiskFailsAddTargetClearly(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("PULSE_REQUIRE_FULLDISK") == "1" {
			t.Fatalf("PULSE_REQUIRE_FULLDISK=1 but a small tmpfs cannot be mounted (needs root): %v %s", err, out)
		}
		t.Skipf("SKIPPED: cannot mount a small tmpfs to fill (needs root; PULSE_REQUIRE_FULLDISK=1 makes this a failure): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-data-dir", filepath.Join(dir, "data"))
	client := dial(t, p.Addr)
	// Fill the disk, then add targets with large headers (16 KiB, in
	// headers within the per-header bound) until the store has to grow its
	// file and cannot.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	pad := map[string]string{}
	for i := range 4 {
		pad[fmt.Sprintf("X-Pad-%d", i)] = strings.Repeat("x", 4000)
	}
	var acked, failed int
	var lastErr error
	for i := range 200 {
		tg := tcpTarget(fmt.Sprintf("big-%03d", i))
		tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/", Headers: pad}}
		_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
		if err == nil {
			acked++
			continue
		}
		failed++
		lastErr = err
		break
	}
	if failed == 0 {
		t.Fatalf("%d targets stored on a full disk", acked)
	}
	if st := status.Convert(lastErr); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "could not store the change") || !strings.Contains(st.Message(), "nothing was changed") {
		t.Errorf("AddTarget on a full disk: %v", lastErr)
	}
	list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil || len(list.GetTargets()) != acked {
		t.Errorf("%d acknowledged, %d listed (%v): a refused target was kept", acked, len(list.GetTargets()), err)
	}
	t.Logf("%d targets stored before the disk filled: %v", acked, lastErr)
	p.stop(t)
}

// okServer is an HTTP target that always answers 200.
func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(s.Close)
	return s
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testscale.D(30 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// GET /backup on the HTTP listener copies the store while pulsed runs; the
// copy opens as a data dir with the same targets.
func TestHotBackup(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin)
	client := dial(t, p.Addr)
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("kept")}); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", p.Logs())
	}
	resp, err := http.Get("http://" + m[1] + "/backup")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "pulse.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("backup: %v %s", err, resp.Status)
	}
	f.Close()
	p.stop(t)

	p2 := startPulsed(t, bin, "-data-dir", dir)
	st, err := dial(t, p2.Addr).State(t.Context(), &pb.StateRequest{Name: "kept"})
	if err != nil || st.GetStatus().GetSpec().GetGroup() != "crash" {
		t.Errorf("the restored backup lacks the target: %v %v", st, err)
	}
	p2.stop(t)
}

// An update of an existing target and a changed group policy are durable
// as a new target is: after a restart the last acknowledged ones are in
// force.
func TestUpdatesSurviveARestart(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	p := startPulsed(t, bin, "-data-dir", dir)
	client := dial(t, p.Addr)
	tg := tcpTarget("web-1")
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
		t.Fatal(err)
	}
	tg.Group, tg.Rise, tg.Fall = "edge", proto.Int32(4), proto.Int32(5)
	tg.Interval = durationpb.New(2 * time.Minute)
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
		t.Fatal(err)
	}
	want, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{0.25, 0.75} {
		if _, err := client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(f)}}); err != nil {
			t.Fatal(err)
		}
	}
	p.stop(t)

	p2 := startPulsed(t, bin, "-data-dir", dir)
	client = dial(t, p2.Addr)
	got, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.GetStatus().GetSpec(), got.GetStatus().GetSpec(), protocmp.Transform()); diff != "" {
		t.Errorf("web-1's spec after an update and a restart (-updated +got):\n%s", diff)
	}
	list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	if gs := list.GetGroups(); len(gs) != 1 || gs[0].GetMaxUnhealthyFraction() != 0.75 {
		t.Errorf("group edge after a restart: %v, want the last policy set, 0.75", gs)
	}
	p2.stop(t)
}

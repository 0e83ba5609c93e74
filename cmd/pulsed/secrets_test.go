package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pdial "github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

// probeSecret is a credential pulsed sends to a target as a probe header.
const probeSecret = "s3cret-probe-credential-7f3a9c"

// dialToken is a client of pulsed at addr that sends token.
func dialToken(t *testing.T, addr, token string) pb.HealthCheckerClient {
	t.Helper()
	f := pdial.Flags{Token: token}
	opts, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewHealthCheckerClient(conn)
}

func buildPulsectl(t *testing.T) string {
	t.Helper()
	bin, err := pulsedproc.Build(t.Context(), t.TempDir(), pulsedproc.Module+"/cmd/pulsectl")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ctlWatch is `pulsectl watch` running in the background.
type ctlWatch struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func startCtlWatch(t *testing.T, ctl string, args ...string) *ctlWatch {
	t.Helper()
	w := &ctlWatch{cmd: exec.Command(ctl, append([]string{"watch"}, args...)...), out: &syncBuffer{}, done: make(chan struct{})}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = w.cmd.Stdout
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.out.WriteString(sc.Text() + "\n")
		}
		w.cmd.Wait()
	}()
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		<-w.done
	})
	return w
}

// stop interrupts the watch (by its PID) and returns what it printed.
func (w *ctlWatch) stop(t *testing.T) string {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("pulsectl watch did not stop within 30s of SIGINT")
	}
	return w.out.String()
}

// A probe header's value reaches its target and the store (so /backup),
// and nothing else: not the API's answers, the HTTP listener's page, data
// and feed, pulsed's log at debug level, nor pulsectl's output. A spec read
// back and written again keeps it.
func TestProbeHeaderValuesStaySecret(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed and pulsectl")
	}
	bin, ctl := buildPulsed(t), buildPulsectl(t)
	var good, bad atomic.Int64 // probes with and without the credential
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+probeSecret || r.Header.Get("X-Api-Key") != probeSecret {
			bad.Add(1)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		good.Add(1)
		io.WriteString(w, "ok")
	}))
	defer target.Close()
	p, base := startPulsedJSON(t, bin, "-data-dir", t.TempDir(), "-token-file", writeTokenFile(t), "-log-level", "debug",
		"-interval", "100ms", "-timeout", "80ms", "-rise", "1", "-fall", "1")
	ctlToken := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(ctlToken, []byte(readToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctlArgs := []string{"--addr", p.Addr, "--token-file", ctlToken}
	watchText := startCtlWatch(t, ctl, append([]string{"--snapshot"}, ctlArgs...)...)
	watchJSON := startCtlWatch(t, ctl, append([]string{"-o", "json"}, ctlArgs...)...)

	outputs := map[string]string{} // surface -> what it showed
	text := func(m proto.Message) string { return prototext.Format(m) }
	writer, reader := dialToken(t, p.Addr, writeToken), dialToken(t, p.Addr, readToken)
	ctx := t.Context()

	// A watch that starts before the target exists sees it added.
	watch, err := reader.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var watched strings.Builder
	for {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetSnapshotComplete() != nil {
			break
		}
	}
	added, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{
		Name: "web-1", Group: "edge",
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: target.URL + "/healthz", Headers: map[string]string{
			"Authorization": "Bearer " + probeSecret, "X-Api-Key": probeSecret,
		}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	outputs["gRPC AddTarget"] = text(added)
	for watched.Len() == 0 || !strings.Contains(watched.String(), "transition") {
		ev, err := watch.Recv() // added, then web-1's rise
		if err != nil {
			t.Fatal(err)
		}
		watched.WriteString(text(ev))
	}
	outputs["gRPC WatchTransitions"] = watched.String()

	// A target that fails, so that pulsed logs its probes at debug level.
	if _, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{
		Name: "down-1", Group: "edge",
		// The credential in the URL's user info too.
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://probe:" + probeSecret + "@127.0.0.1:1/healthz", Headers: map[string]string{"Authorization": "Bearer " + probeSecret}}},
	}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a failed probe in the debug log", func() bool { return strings.Contains(p.Logs(), `"msg":"probe failed"`) })

	// Read, modify, write: what ListTargets shows goes back as is.
	list, err := reader.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	outputs["gRPC ListTargets"] = text(list)
	spec := list.GetTargets()[1].GetSpec() // down-1, web-1
	spec.Rise = proto.Int32(2)
	updated, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: spec})
	if err != nil {
		t.Fatalf("writing back a spec as read: %v", err)
	}
	outputs["gRPC AddTarget (write back)"] = text(updated)
	since := good.Load()
	eventually(t, "probes with the credential after the write back", func() bool { return good.Load() >= since+3 })
	st, err := reader.State(ctx, &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	outputs["gRPC State"] = text(st)
	if st.GetStatus().GetState() != pb.State_STATE_HEALTHY || st.GetStatus().GetSpec().GetRise() != 2 {
		t.Errorf("web-1 after the write back: %v rise %d, want healthy, rise 2", st.GetStatus().GetState(), st.GetStatus().GetSpec().GetRise())
	}

	// The HTTP listener, with a read token.
	getRead := func(path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	for _, path := range []string{"/", "/app.js", "/api/targets", "/metrics"} {
		outputs["GET "+path] = getRead(path)
	}
	fctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(fctx, "GET", base+"/events?names=web-1", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var feed strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && !strings.Contains(feed.String(), "event: results") {
		feed.WriteString(sc.Text() + "\n") // the snapshot, then web-1's results
	}
	cancel()
	resp.Body.Close()
	outputs["GET /events"] = feed.String()
	if !strings.Contains(outputs["GET /api/targets"], `"name":"web-1"`) || !strings.Contains(feed.String(), `"name":"web-1"`) {
		t.Errorf("the page's data lacks web-1:\n%s\n%s", outputs["GET /api/targets"], feed.String())
	}

	// pulsectl.
	for _, args := range [][]string{{"ls"}, {"ls", "-o", "json"}, {"state", "web-1"}, {"state", "-o", "json", "web-1"}} {
		out, err := exec.CommandContext(ctx, ctl, append(args, ctlArgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("pulsectl %v: %v\n%s", args, err, out)
		}
		outputs["pulsectl "+strings.Join(args, " ")] = string(out)
	}
	if out := outputs["pulsectl state web-1"]; !strings.Contains(out, "Authorization=<redacted> X-Api-Key=<redacted>") {
		t.Errorf("pulsectl state does not name the headers:\n%s", out)
	}
	eventually(t, "pulsectl watch to show web-1", func() bool {
		return strings.Contains(watchText.out.String(), "web-1") && strings.Contains(watchJSON.out.String(), "web-1")
	})
	outputs["pulsectl watch --snapshot"] = watchText.stop(t)
	outputs["pulsectl watch -o json"] = watchJSON.stop(t)

	// The store keeps the value: /backup, with a write token.
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"/backup", nil)
	req.Header.Set("Authorization", "Bearer "+writeToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	backup, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(backup), probeSecret) {
		t.Errorf("/backup: %d, %d bytes, the credential in it: %v", resp.StatusCode, len(backup), strings.Contains(string(backup), probeSecret))
	}

	p.stop(t)
	outputs["pulsed's log"] = p.Logs()
	for surface, out := range outputs {
		if strings.Contains(out, probeSecret) {
			t.Errorf("%s shows the probe header's value:\n%s", surface, out)
		}
		if out == "" {
			t.Errorf("%s showed nothing: the check means nothing", surface)
		}
	}
	for _, surface := range []string{"gRPC AddTarget", "gRPC WatchTransitions", "gRPC ListTargets", "gRPC State", "pulsectl ls -o json", "pulsectl state -o json web-1", "pulsectl watch -o json"} {
		if !strings.Contains(outputs[surface], "X-Api-Key") || !strings.Contains(outputs[surface], "<redacted>") {
			t.Errorf("%s does not show the header's name with its value redacted:\n%s", surface, outputs[surface])
		}
	}
	if n := bad.Load(); n != 0 {
		t.Errorf("%d probes reached the target without the credential (the placeholder was stored?)", n)
	}
}

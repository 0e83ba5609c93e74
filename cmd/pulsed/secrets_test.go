package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	pdial "github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

// probeSecret is a credential pulsed sends to a target as a probe header.
const probeSecret = "s3cret-probe-credential-7f3a9c"

// Secrets only the write role may read back (and the store keeps): a URL
// query parameter of a secret name and a request body.
const (
	querySecret = "s3cret-query-token-2d81"
	bodySecret  = "s3cret-post-body-5b70"
)

// Secrets no one reads back: a gRPC probe's metadata value, and the base64
// of an inline TLS key (see testKeyPEM).
const metadataSecret = "s3cret-metadata-value-c4e2"

// testKeyPEM returns a self-signed certificate and its key, in PEM, and
// the key's first base64 line, a string unique to it.
func testKeyPEM(t *testing.T) (certPEM, keyPEM, keyLine string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "prober"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}))
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), keyPEM, strings.Split(keyPEM, "\n")[1]
}

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

// A probe header's value, a URL's password, a gRPC probe's metadata value
// and an inline TLS key reach their target and the store (so /backup),
// and nothing else: not the API's answers, the HTTP listener's page, data
// and feed, pulsed's log at debug level (refused calls included), nor
// pulsectl's output. A URL's query token and a request body are seen by
// the write role only: not by the read role's calls, page and feed, nor
// in the log. A spec read back and written again keeps them all.
func TestProbeHeaderValuesStaySecret(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed and pulsectl")
	}
	bin, ctl := buildPulsed(t), buildPulsectl(t)
	var good, bad atomic.Int64 // probes with and without the credential
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") != "Bearer "+probeSecret || r.Header.Get("X-Api-Key") != probeSecret ||
			r.URL.Query().Get("access_token") != querySecret || !strings.Contains(string(body), bodySecret) {
			bad.Add(1)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		good.Add(1)
		io.WriteString(w, "ok")
	}))
	defer target.Close()
	p, base := startPulsedJSON(t, bin, "-data-dir", t.TempDir(), "-token-file", writeTokenFile(t), "-log-level", "debug", "-xds",
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
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: target.URL + "/healthz?check=deep&access_token=" + querySecret, Method: "POST", Body: `{"key":"` + bodySecret + `"}`,
			Headers: map[string]string{"Authorization": "Bearer " + probeSecret, "X-Api-Key": probeSecret}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	writeOutputs := map[string]string{"gRPC AddTarget": text(added)} // the write role's: query token and body shown
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
		// The credential in the URL's user info too, and a query token.
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://probe:" + probeSecret + "@127.0.0.1:1/healthz?apikey=" + querySecret, Headers: map[string]string{"Authorization": "Bearer " + probeSecret}}},
	}}); err != nil {
		t.Fatal(err)
	}
	// A gRPC probe with metadata and a TCP probe with an inline TLS key.
	certPEM, keyPEM, keyLine := testKeyPEM(t)
	for _, tg := range []*pb.Target{
		{Name: "grpc-1", Group: "edge", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "127.0.0.1:1", Metadata: map[string]string{"x-api-key": metadataSecret}}}},
		{Name: "tls-1", Group: "edge", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:1", Tls: &pb.TlsOptions{CertPem: certPEM, KeyPem: keyPEM}}}},
	} {
		resp, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: tg})
		if err != nil {
			t.Fatal(err)
		}
		outputs["gRPC AddTarget "+tg.GetName()] = text(resp)
	}
	// Refused calls, each quoting what it refuses.
	for _, u := range []string{
		"http://probe:" + probeSecret + "@127.0.0.1:bad/healthz?access_token=" + querySecret,
		"ftp://probe:" + probeSecret + "@127.0.0.1/healthz",
		"http://probe:" + probeSecret + "@127.0.0.1/?X-Amz-Signature=" + querySecret + "&a=b c",
		"http://probe:" + probeSecret + "@127.0.0.1:99999/?token=" + querySecret,
	} {
		_, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{Name: "refused", Probe: &pb.Target_Http{Http: &pb.HttpProbe{
			Url: u, Method: "POST", Body: bodySecret, Headers: map[string]string{"Authorization": probeSecret}}}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("AddTarget(%q) = %v, want INVALID_ARGUMENT", u, err)
		}
		outputs["refused AddTarget "+u[:4]] += err.Error() + "\n"
	}
	_, err = writer.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{Name: "refused", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{
		Address: "127.0.0.1:1", Metadata: map[string]string{"x-api-key": metadataSecret + "\n"}, TlsOptions: &pb.TlsOptions{KeyPem: keyPEM}}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("AddTarget with a bad metadata value = %v, want INVALID_ARGUMENT", err)
	}
	outputs["refused AddTarget grpc"] = err.Error()
	_, err = reader.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{Name: "refused", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://probe:" + probeSecret + "@127.0.0.1:1/?token=" + querySecret}}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("AddTarget with a read token = %v, want PERMISSION_DENIED", err)
	}
	outputs["refused AddTarget read token"] = err.Error()
	eventually(t, "a failed probe in the debug log", func() bool { return strings.Contains(p.Logs(), `"msg":"probe failed"`) })

	// Read, modify, write: what ListTargets shows goes back as is.
	list, err := reader.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	outputs["gRPC ListTargets"] = text(list)
	wlist, err := writer.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeOutputs["gRPC ListTargets"] = text(wlist)
	spec := wlist.GetTargets()[3].GetSpec() // down-1, grpc-1, tls-1, web-1
	spec.Rise = proto.Int32(2)
	updated, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: spec})
	if err != nil {
		t.Fatalf("writing back a spec as read: %v", err)
	}
	writeOutputs["gRPC AddTarget (write back)"] = text(updated)
	for _, name := range []string{"grpc-1", "tls-1"} {
		spec := byName(t, wlist, name).GetSpec()
		spec.Fall = proto.Int32(3)
		if _, err := writer.AddTarget(ctx, &pb.AddTargetRequest{Target: spec}); err != nil {
			t.Fatalf("writing back %s as read: %v", name, err)
		}
	}
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

	// xDS, with a read token: the clusters, and the group's endpoints.
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
		outputs["xDS "+typ] = fetchXDS(t, p.Addr, typ, "edge")
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

	for _, s := range []string{metadataSecret, keyLine, querySecret, bodySecret} {
		if !strings.Contains(string(backup), s) {
			t.Errorf("/backup lacks %.20s...: a write back lost it", s)
		}
	}

	p.stop(t)
	outputs["pulsed's log"] = p.Logs()
	if !strings.Contains(outputs["pulsed's log"], `"msg":"finished call"`) || !strings.Contains(outputs["pulsed's log"], "xxxxx") {
		t.Errorf("pulsed's debug log lacks the calls, or a refused call's masked password:\n%s", outputs["pulsed's log"])
	}
	secrets := map[string]string{ // secret -> what it is
		probeSecret: "a probe header's value or a URL's password", metadataSecret: "a gRPC metadata value", keyLine: "a TLS key",
	}
	readSecrets := map[string]string{querySecret: "a URL's query token", bodySecret: "a request body"}
	for surface, out := range outputs {
		for _, m := range []map[string]string{secrets, readSecrets} {
			for sec, what := range m {
				if strings.Contains(out, sec) {
					t.Errorf("%s shows %s:\n%s", surface, what, out)
				}
			}
		}
		if out == "" {
			t.Errorf("%s showed nothing: the check means nothing", surface)
		}
	}
	for surface, out := range writeOutputs {
		for sec, what := range secrets {
			if strings.Contains(out, sec) {
				t.Errorf("%s (write role) shows %s:\n%s", surface, what, out)
			}
		}
		if !strings.Contains(out, querySecret) || !strings.Contains(out, bodySecret) {
			t.Errorf("%s (write role) lacks the query token or the body it needs to write the spec back:\n%s", surface, out)
		}
	}
	for _, surface := range []string{"gRPC State", "gRPC ListTargets", "gRPC WatchTransitions"} {
		if out := outputs[surface]; !strings.Contains(out, "access_token=%3Credacted%3E") || !strings.Contains(out, "<"+strconv.Itoa(len(`{"key":"`+bodySecret+`"}`))+" bytes>") {
			t.Errorf("%s does not show the read role the query token redacted and the body's size:\n%s", surface, out)
		}
	}
	for _, surface := range []string{"gRPC AddTarget", "gRPC WatchTransitions", "gRPC ListTargets", "gRPC State", "pulsectl ls -o json", "pulsectl state -o json web-1", "pulsectl watch -o json"} {
		out := outputs[surface] + writeOutputs[surface]
		if !strings.Contains(out, "X-Api-Key") || !strings.Contains(out, "<redacted>") {
			t.Errorf("%s does not show the header's name with its value redacted:\n%s", surface, out)
		}
	}
	if n := bad.Load(); n != 0 {
		t.Errorf("%d probes reached the target without the credential (the placeholder was stored?)", n)
	}
}

// byName returns list's status of the target name.
func byName(t *testing.T, list *pb.ListTargetsResponse, name string) *pb.TargetStatus {
	t.Helper()
	for _, st := range list.GetTargets() {
		if st.GetSpec().GetName() == name {
			return st
		}
	}
	t.Fatalf("ListTargets lacks %s", name)
	return nil
}

// A targets file's errors, printed at start and logged at a reload, mask
// the target's secrets as the API's errors do.
func TestTargetsFileErrorsMaskSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, "targets:\n  - name: a\n    http: {url: \"http://probe:"+probeSecret+"@127.0.0.1:bad/?token="+querySecret+"\"}\n")
	_, err := loadTargets(path, checker.StandardDefaults())
	if err == nil || !strings.Contains(err.Error(), `target "a": http.url:`) || !strings.Contains(err.Error(), "probe:xxxxx@") ||
		strings.Contains(err.Error(), probeSecret) || strings.Contains(err.Error(), querySecret) {
		t.Errorf("loading a bad URL: %v; want the field named and the secrets masked", err)
	}
}

// By default pulsed logs API calls that end OK or with the client's own
// mistake at debug, so that the info log shows transitions and warnings;
// -access-log logs every call at info. A call pulsed could not serve is
// logged at warn either way.
func TestAccessLogFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	bin := buildPulsed(t)
	for _, accessLog := range []bool{false, true} {
		args := []string{"-data-dir", t.TempDir()}
		if accessLog {
			args = append(args, "-access-log")
		}
		p, _ := startPulsedJSON(t, bin, args...)
		client := dial(t, p.Addr)
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web-1",
			Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:1"}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.State(t.Context(), &pb.StateRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
			t.Fatalf("State(nope) = %v, want NOT_FOUND", err)
		}
		_, err := client.ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "web-1", Ok: true})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("ReportOutcome without passive outcomes = %v, want FAILED_PRECONDITION", err)
		}
		p.stop(t)
		var calls []string
		for line := range strings.SplitSeq(p.Logs(), "\n") {
			if strings.Contains(line, `"msg":"finished call"`) {
				calls = append(calls, line)
			}
		}
		want := 1 // ReportOutcome, at warn
		if accessLog {
			want = 3
		}
		if len(calls) != want || !strings.Contains(strings.Join(calls, "\n"), `"level":"WARN"`) {
			t.Errorf("-access-log=%v: %d calls logged, want %d with ReportOutcome's at WARN:\n%s", accessLog, len(calls), want, strings.Join(calls, "\n"))
		}
	}
}

// fetchXDS returns, as text, the first answer of pulsed's ADS at addr to a
// read token's request for resources of type typ (names only for
// endpoints).
func fetchXDS(t *testing.T, addr, typ, name string) string {
	t.Helper()
	f := pdial.Flags{Token: readToken}
	opts, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "secrets-test"}, TypeUrl: typ}
	if typ == resourcev3.EndpointType {
		req.ResourceNames = []string{name}
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("xDS %s: %v", typ, err)
	}
	if len(r.GetResources()) == 0 {
		t.Fatalf("xDS %s: no resources", typ)
	}
	return prototext.Format(r)
}

package deploy_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testpki"
)

// podman runs podman with a deadline and returns what it printed.
func podman(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// runtimeArgs finds podman arguments that can run a container of image on
// this host: the default runtime first, then runc, each with the process
// limits podman sets by default and then with limits inside this process's
// own (a host that is itself a container often forbids raising them). It
// returns podman's global arguments (the runtime), the arguments of podman
// run (the limits), and why each other choice failed.
func runtimeArgs(ctx context.Context, image string) (global, run []string, failed []string, ok bool) {
	limits := []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}
	for _, rt := range [][]string{nil, {"--runtime", "runc"}} {
		if len(rt) > 0 {
			if _, err := exec.LookPath("runc"); err != nil {
				failed = append(failed, "runc: not installed")
				continue
			}
		}
		for _, lim := range [][]string{nil, limits} {
			args := append(append([]string{}, rt...), "run", "--rm", "--network", "host")
			args = append(args, lim...)
			out, err := podman(ctx, append(args, "--entrypoint", "/pulsed", image, "-version")...)
			if err == nil && strings.HasPrefix(out, "pulsed ") {
				return rt, lim, failed, true
			}
			failed = append(failed, fmt.Sprintf("%q: %v", args, err))
		}
	}
	return nil, nil, failed, false
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// poll calls f until it returns nil or the deadline passes.
func poll(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The image built the way make image builds it runs in podman: it starts,
// answers /readyz, takes a target from the host and probes a backend on the
// host, stops on SIGTERM by itself with exit status 0, and a new container
// on the same volume has its targets.
func TestImageRunsInPodman(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and runs it in podman")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (Debian: apt-get install podman runc): the image is not run")
	}
	ctx := t.Context()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	id := "pulse-test-" + hex.EncodeToString(suffix)
	repo := "localhost/" + id

	// The image, as make image builds it.
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin+"/",
		"../cmd/pulsed", "../cmd/pulsectl", "../cmd/pulse-lb")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	archive := filepath.Join(t.TempDir(), "image.tar")
	if out, err := exec.CommandContext(ctx, "go", "run", "./image", "-bin", bin, "-version", "test",
		"-name", repo, "-out", archive).CombinedOutput(); err != nil {
		t.Fatalf("building the image: %v\n%s", err, out)
	}
	if _, err := podman(ctx, "load", "-i", archive); err != nil {
		t.Fatal(err)
	}
	image := repo + ":test"
	t.Cleanup(func() {
		podman(context.Background(), "rm", "-f", "-v", id)
		podman(context.Background(), "volume", "rm", "-f", id)
		podman(context.Background(), "rmi", "-f", image, repo+":latest")
	})

	rt, limits, failed, ok := runtimeArgs(ctx, image)
	if !ok {
		t.Skipf("podman is installed but runs no container on this host; tried:\n%s", strings.Join(failed, "\n"))
	}
	t.Logf("podman arguments this host needs: %q %q (tried first: %q)", rt, limits, failed)

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()

	if _, err := podman(ctx, "volume", "create", id); err != nil {
		t.Fatal(err)
	}
	grpcPort, httpPort := freePort(t), freePort(t)
	args := append([]string{}, rt...)
	args = append(args, "run", "-d", "--name", id, "--network", "host", "-v", id+":/data")
	args = append(args, limits...)
	args = append(args, image,
		"-data-dir", "/data",
		"-listen", "127.0.0.1:"+strconv.Itoa(grpcPort),
		"-http-listen", "127.0.0.1:"+strconv.Itoa(httpPort),
		"-shutdown-timeout", "5s")
	if _, err := podman(ctx, args...); err != nil {
		t.Fatal(err)
	}
	logs := func() string { out, _ := podman(context.Background(), "logs", id); return out }

	ready := readyAt(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", httpPort))
	poll(t, time.Minute, "pulsed in the container answering /readyz", ready)

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewHealthCheckerClient(conn)
	if _, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{
		Name:  "host-backend",
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backend.URL + "/healthz"}},
	}}); err != nil {
		t.Fatalf("AddTarget from the host: %v\n%s", err, logs())
	}
	healthy := func() error {
		st, err := client.State(ctx, &pb.StateRequest{Name: "host-backend"})
		if err != nil {
			return err
		}
		if st.GetStatus().GetState() != pb.State_STATE_HEALTHY {
			return fmt.Errorf("state %v", st.GetStatus().GetState())
		}
		return nil
	}
	poll(t, time.Minute, "the host's backend probed healthy from the container", healthy)

	// SIGTERM (podman stop), then SIGKILL after the shutdown bound
	// (-shutdown-timeout plus 5s): exit status 0 means pulsed stopped by
	// itself within it.
	if _, err := podman(ctx, "stop", "-t", "10", id); err != nil {
		t.Fatal(err)
	}
	code, err := podman(ctx, "inspect", "--format", "{{.State.ExitCode}}", id)
	if err != nil {
		t.Fatal(err)
	}
	if code != "0" {
		t.Fatalf("pulsed in the container exited %s on SIGTERM, want 0\n%s", code, logs())
	}

	// A new container on the same volume: the target is back.
	if _, err := podman(ctx, "rm", id); err != nil {
		t.Fatal(err)
	}
	if _, err := podman(ctx, args...); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "pulsed answering /readyz after the restart", ready)
	list, err := client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tg := range list.GetTargets() {
		names = append(names, tg.GetSpec().GetName())
	}
	if len(names) != 1 || names[0] != "host-backend" {
		t.Fatalf("after a restart on the same volume the targets are %q, want [host-backend]\n%s", names, logs())
	}
	poll(t, time.Minute, "the restored target probed healthy", healthy)
	if _, err := podman(ctx, "stop", "-t", "30", id); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := podman(ctx, "rm", id); err != nil {
		t.Fatal(err)
	}

	// The image's own arguments: TLS and tokens from /etc/pulse. Only the
	// listeners move to free loopback ports, since the container shares
	// the host's network.
	out, err := podman(ctx, "image", "inspect", "--format", "{{json .Config.Cmd}}", image)
	if err != nil {
		t.Fatal(err)
	}
	var cmd []string
	if err := json.Unmarshal([]byte(out), &cmd); err != nil {
		t.Fatalf("the image's Cmd %q: %v", out, err)
	}
	for i := range cmd[:len(cmd)-1] {
		switch cmd[i] {
		case "-listen":
			cmd[i+1] = "127.0.0.1:" + strconv.Itoa(grpcPort)
		case "-http-listen":
			cmd[i+1] = "127.0.0.1:" + strconv.Itoa(httpPort)
		}
	}
	etc := t.TempDir()
	pki := testpki.Write(t, etc)
	const token = "container-test-token-0123456789"
	for _, f := range [][2]string{{pki.ServerCert, "tls.crt"}, {pki.ServerKey, "tls.key"}} {
		if err := os.Rename(f[0], filepath.Join(etc, f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(etc, "tokens"), []byte("write "+token+" ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsArgs := append([]string{}, rt...)
	tlsArgs = append(tlsArgs, "run", "-d", "--name", id, "--network", "host", "-v", id+":/data", "-v", etc+":/etc/pulse:ro")
	tlsArgs = append(tlsArgs, limits...)
	tlsArgs = append(tlsArgs, image)
	tlsArgs = append(tlsArgs, cmd...)

	// Files only root may read (as root writes them): pulsed, run as
	// 65532, stops at once and names the file.
	if os.Geteuid() == 0 {
		if _, err := podman(ctx, tlsArgs...); err != nil {
			t.Fatal(err)
		}
		poll(t, time.Minute, "pulsed stopped over unreadable files", func() error {
			if st, _ := podman(ctx, "inspect", "--format", "{{.State.Status}}", id); st != "exited" {
				return fmt.Errorf("container %s", st)
			}
			return nil
		})
		if l := logs(); !strings.Contains(l, "/etc/pulse/") || !strings.Contains(l, "permission denied") {
			t.Fatalf("pulsed with unreadable files: want a log naming the file and permission denied, got\n%s", l)
		}
		if _, err := podman(ctx, "rm", id); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tls.crt", "tls.key", "tokens"} {
			if err := os.Chown(filepath.Join(etc, f), imageUID, -1); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		for _, f := range []string{"tls.crt", "tls.key", "tokens"} {
			if err := os.Chmod(filepath.Join(etc, f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := podman(ctx, tlsArgs...); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if ca, err := os.ReadFile(pki.CA); err != nil || !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("reading the test CA: %v", err)
	}
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	poll(t, time.Minute, "pulsed answering /readyz over TLS", readyAt(web, fmt.Sprintf("https://127.0.0.1:%d/readyz", httpPort)))
	// pulsectl inside the container, as the deployment guide runs it:
	// trusting pulsed's own certificate, with a token from the
	// environment.
	var ls string
	poll(t, time.Minute, "pulsectl in the container listing the stored target", func() error {
		ls, err = podman(ctx, "exec", "-e", "PULSE_TOKEN="+token, id,
			"/pulsectl", "--addr", "127.0.0.1:"+strconv.Itoa(grpcPort), "--tls-ca", "/etc/pulse/tls.crt", "ls")
		if err != nil {
			return err
		}
		if !strings.Contains(ls, "host-backend") {
			return fmt.Errorf("pulsectl ls printed %q", ls)
		}
		return nil
	})
	// Without the token the call is refused: the token file is in force.
	if out, err := podman(ctx, "exec", id, "/pulsectl", "--addr", "127.0.0.1:"+strconv.Itoa(grpcPort),
		"--tls-ca", "/etc/pulse/tls.crt", "ls"); err == nil || !strings.Contains(out, "token") {
		t.Fatalf("pulsectl without a token: want a refusal naming the token, got %v\n%s", err, out)
	}
	if _, err := podman(ctx, "stop", "-t", "30", id); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// readyAt returns a check that url, a /readyz, answers 200 through client.
func readyAt(client *http.Client, url string) func() error {
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}
}

// imageUID is the user the image runs pulsed as.
const imageUID = 65532

package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags([]string{"--backends", "http://127.0.0.1:9001, http://127.0.0.1:9002/api/"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:8000" || cfg.healthInterval != 500*time.Millisecond || cfg.healthTimeout != 250*time.Millisecond ||
		cfg.unhealthyAfter != 3 || cfg.healthyAfter != 2 || cfg.healthPath != "/healthz" || cfg.pulse != "" || cfg.group != "pulse-lb" {
		t.Errorf("defaults: %+v", cfg)
	}
	type b struct{ Name, URL, Health string }
	var got []b
	for _, bc := range cfg.backends {
		got = append(got, b{bc.name, bc.url.String(), bc.healthURL})
	}
	want := []b{
		{"127.0.0.1:9001", "http://127.0.0.1:9001", "http://127.0.0.1:9001/healthz"},
		{"127.0.0.1:9002", "http://127.0.0.1:9002/api/", "http://127.0.0.1:9002/api/healthz"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
}

func TestParseFlagsNames(t *testing.T) {
	cfg, err := parseFlags([]string{"--backends", "http://a.test:1,https://b.test", "--names", "web-1,web-2", "--health-path", "/ready", "--pulse", "127.0.0.1:50051", "--group", "edge"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.backends[0].name != "web-1" || cfg.backends[1].name != "web-2" || cfg.backends[1].healthURL != "https://b.test/ready" || cfg.pulse != "127.0.0.1:50051" || cfg.group != "edge" {
		t.Errorf("%+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	ok := []string{"--backends", "http://127.0.0.1:9001"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--backends is required"},
		{[]string{"--backends", "127.0.0.1:9001"}, "is not an absolute http:// or https:// URL"},
		{[]string{"--backends", "ftp://h:1"}, "is not an absolute http:// or https:// URL"},
		{[]string{"--backends", "http://h:1?x=1"}, "must not have a query"},
		{[]string{"--backends", "http://h:1,http://h:1"}, "is listed twice"},
		{[]string{"--backends", "http://[::1]:9001"}, "name it with --names"},
		{[]string{"--backends", "http://h:1,http://h:2", "--names", "a"}, "--names lists 1 names for 2 backends"},
		{[]string{"--backends", "http://h:1,http://h:2", "--names", "a,a"}, `"a" is used twice`},
		{[]string{"--backends", "http://h:1", "--names", "-x"}, "must start with a letter or digit"},
		{append(ok, "--health-interval", "0s"), "--health-interval must be positive"},
		{append(ok, "--health-timeout", "1s"), "--health-timeout must be positive and at most --health-interval"},
		{append(ok, "--unhealthy-after", "0"), "--unhealthy-after must be at least 1"},
		{append(ok, "--healthy-after", "0"), "--healthy-after must be at least 1"},
		{append(ok, "--health-path", "healthz"), "--health-path must start with /"},
		{append(ok, "--pulse", "nohost"), "--pulse must be host:port"},
		{append(ok, "--group", "bad group"), "--group may contain only"},
		{append(ok, "--log-format", "xml"), "--log-format must be text or json"},
		{append(ok, "--log-level", "loud"), "--log-level"},
		{append(ok, "--shutdown-timeout", "0s"), "--shutdown-timeout must be positive"},
		{append(ok, "--no-such-flag"), "flag provided but not defined"},
		{append(ok, "extra"), `unexpected argument "extra"`},
	} {
		_, err := parseFlags(tc.args, &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v; want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// --help documents every flag.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{
		"-listen", "-backends", "-names", "-health-path", "-health-interval", "-health-timeout",
		"-unhealthy-after", "-healthy-after", "-pulse", "-group", "-pulse-idle-timeout",
		"-response-timeout", "-backend-header", "-shutdown-timeout", "-log-level", "-log-format",
	} {
		if !strings.Contains(out.String(), "  "+f+" ") && !strings.Contains(out.String(), "  "+f+"\n") {
			t.Errorf("--help does not document %s:\n%s", f, out.String())
		}
	}
	if !strings.Contains(out.String(), "503") || !strings.Contains(out.String(), "502") {
		t.Errorf("--help does not say what 502 and 503 mean:\n%s", out.String())
	}
}

// pulseLB runs the test binary as pulse-lb (see TestMain).
func pulseLB(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PULSE_LB_MAIN=1")
	return cmd
}

// The process exits 2 with a clear message on a bad command line, 0 on
// --help, and 1 when it cannot run.
func TestExitCodes(t *testing.T) {
	lis := newTestBackend(t, "busy") // a port that is taken
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Usage: pulse-lb"},
		{[]string{"--backends", "http://h:1", "--health-timeout", "2s"}, 2, "pulse-lb: --health-timeout must be positive and at most --health-interval (500ms), got 2s"},
		{[]string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"--backends", "http://h:1", "--listen", lis.addr}, 1, "pulse-lb: --listen: listen tcp " + lis.addr},
	} {
		var stderr bytes.Buffer
		cmd := pulseLB(tc.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("pulse-lb %q: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// SIGTERM stops the process gracefully, promptly, with exit status 0.
func TestSIGTERM(t *testing.T) {
	b := newTestBackend(t, "web-1")
	logs := newLogSink()
	cmd := pulseLB("--listen", "127.0.0.1:0", "--backends", b.url(), "--health-interval", "50ms", "--health-timeout", "50ms")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	logs.waitFor(t, 0, `msg="pulse-lb listening"`)
	logs.waitFor(t, 0, `msg="127.0.0.1`) // the backend's first transition
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs)
		}
	case <-time.After(waitBound):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running %v after SIGTERM:\n%s", waitBound, logs)
	}
	logs.waitFor(t, 0, `msg="pulse-lb stopped"`)
}

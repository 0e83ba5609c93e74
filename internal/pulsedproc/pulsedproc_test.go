package pulsedproc_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListeningAddr(t *testing.T) {
	for _, tt := range []struct {
		line, want string
	}{
		{`time=2026-11-30T10:00:00.000Z level=INFO msg="pulsed listening" addr=127.0.0.1:40123`, "127.0.0.1:40123"},
		{`{"time":"2026-11-30T10:00:00Z","level":"INFO","msg":"pulsed listening","addr":"127.0.0.1:40124"}`, "127.0.0.1:40124"},
		{`level=INFO msg="probe egress policy" policy=x`, ""},
		{`level=INFO msg="http listening" component=http addr=127.0.0.1:9090`, ""},
		{`{"msg":"http listening","addr":"127.0.0.1:9090"}`, ""},
	} {
		got, ok := pulsedproc.ListeningAddr(tt.line)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("ListeningAddr(%s) = %q, %v; want %q", tt.line, got, ok, tt.want)
		}
	}
}

// TestStartAndStop builds the real pulsed, starts it, reaches it at the
// address it logged, and stops it with SIGTERM.
func TestStartAndStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pulsed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := pulsedproc.Build(ctx, t.TempDir(), pulsedproc.Package)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	p, err := pulsedproc.Start(ctx, bin, []string{"-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", ""}, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	conn, err := net.DialTimeout("tcp", p.Addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial the logged address %s: %v", p.Addr, err)
	}
	conn.Close()
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop: %v\n%s", err, p.Logs())
	}
	if !strings.Contains(p.Logs(), "pulsed listening") || len(lines) == 0 {
		t.Errorf("log not kept or not handed on: %d lines\n%s", len(lines), p.Logs())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	p.Kill() // idempotent
}

// TestStartReportsAnEarlyExit: a pulsed that refuses its flags is an error
// carrying what it said, not a hang.
func TestStartReportsAnEarlyExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pulsed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := pulsedproc.Build(ctx, t.TempDir(), pulsedproc.Package)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pulsedproc.Start(ctx, bin, []string{"-listen", "127.0.0.1:0", "-interval", "-1s"}, nil)
	if err == nil || !strings.Contains(err.Error(), "exited before listening") || !strings.Contains(err.Error(), "interval") {
		t.Errorf("Start = %v, want an early exit naming the flag", err)
	}
}

func TestBuildReportsTheCompiler(t *testing.T) {
	_, err := pulsedproc.Build(t.Context(), t.TempDir(), pulsedproc.Module+"/no/such/package")
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || !strings.Contains(err.Error(), "no/such/package") {
		t.Errorf("Build = %v, want the go command's error", err)
	}
}

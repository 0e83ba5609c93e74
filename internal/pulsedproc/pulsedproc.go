// Package pulsedproc builds the pulsed binary and runs it as a child
// process: start it, read the gRPC address it logs, stop it. The tests of
// every command and the benchmark harness use it, so that one place knows
// how pulsed announces itself and how it is stopped.
package pulsedproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Module is Pulse's module path.
const Module = "github.com/pulsehealth/pulse"

// Package is the import path of pulsed's main package.
const Package = Module + "/cmd/pulsed"

// Build runs `go build` of pkg (an import path, or a directory relative to
// the current one) with flags (e.g. "-race", "-tags", "x") into dir and
// returns the binary's path. Its error carries the compiler's output.
func Build(ctx context.Context, dir, pkg string, flags ...string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(strings.TrimSuffix(pkg, "/")))
	if pkg == "." {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		bin = filepath.Join(dir, filepath.Base(wd))
	}
	args := append([]string{"build", "-o", bin}, flags...)
	out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

var listening = regexp.MustCompile(`msg="pulsed listening".* addr=(\S+)`)

// ListeningAddr returns the gRPC address of pulsed's
// `msg="pulsed listening" addr=...` log line, in the text or the JSON log
// format.
func ListeningAddr(line string) (string, bool) {
	if strings.HasPrefix(line, "{") {
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "pulsed listening" || l.Addr == "" {
			return "", false
		}
		return l.Addr, true
	}
	m := listening.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Process is a running pulsed. Its methods are safe for concurrent use.
type Process struct {
	// Addr is the gRPC address pulsed listens on.
	Addr string

	cmd  *exec.Cmd
	done chan struct{} // closed once the process is waited for
	err  error         // Wait's error, set before done is closed

	mu   sync.Mutex // protects logs
	logs strings.Builder
}

// Start starts bin with args, hands every line it writes on stderr to
// onLine (when not nil; from one goroutine, in order) and returns once
// pulsed logs its gRPC address. args should include a -listen on port 0 of
// a loopback address. If pulsed exits first, or ctx ends first, Start kills
// it and returns an error with its output.
func Start(ctx context.Context, bin string, args []string, onLine func(string)) (*Process, error) {
	p := &Process{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the caller
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if onLine != nil {
				onLine(line)
			}
			if addr, ok := ListeningAddr(line); ok {
				select {
				case addrc <- addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line too long: drain the rest
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("pulsed exited before listening: %v\n%s", p.err, p.Logs())
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("pulsed did not start: %w\n%s", ctx.Err(), p.Logs())
	}
}

// Logs returns everything pulsed wrote on stderr so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to pulsed.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed once pulsed has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil for status 0); valid once Done is
// closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// ErrStillRunning is Stop's error when pulsed outlived its bound.
var ErrStillRunning = errors.New("pulsed still running")

// Stop sends SIGTERM and waits up to bound for pulsed to exit, killing it
// after that. It returns the exit error, or ErrStillRunning when it had to
// kill. Stopping a process that already exited returns its exit error.
func (p *Process) Stop(bound time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(bound):
		p.Kill()
		return fmt.Errorf("%w %v after SIGTERM", ErrStillRunning, bound)
	}
}

// Kill kills pulsed at once, as a crash would, and waits for it. It is
// idempotent.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

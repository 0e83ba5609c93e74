package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the harness started (pulsed or haproxy), with the
// tail of its output kept for error messages.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read
	err  error         // Wait's error, set before done is closed

	mu   sync.Mutex
	tail []string // the last lines of output
}

const tailLines = 40

// withFileLimit returns bin and args to run under an open-file limit of n
// (soft and hard) through prlimit(1), which execs bin in its own process;
// for n <= 0, bin and args as they are.
func withFileLimit(n int, bin string, args []string) (string, []string) {
	if n <= 0 {
		return bin, args
	}
	return "prlimit", append([]string{fmt.Sprintf("--nofile=%d:%d", n, n), "--", bin}, args...)
}

// startChild starts cmd and hands every line of its stdout and stderr to
// onLine (from one goroutine per stream) after keeping it in the tail.
func startChild(name string, cmd *exec.Cmd, onLine func(line string)) (*child, error) {
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	var wg sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		wg.Go(func() {
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				c.keep(line)
				if onLine != nil {
					onLine(line)
				}
			}
			_, _ = io.Copy(io.Discard, r) // a line too long: drain the rest
		})
	}
	go func() {
		wg.Wait() // the pipes must be read to EOF before Wait
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) keep(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) == tailLines {
		copy(c.tail, c.tail[1:])
		c.tail = c.tail[:tailLines-1]
	}
	c.tail = append(c.tail, line)
}

// Tail returns the last lines of output, one string.
func (c *child) Tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// Pid returns the process id.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (c *child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to grace, then kills. It is idempotent and
// returns once the process has exited.
func (c *child) Stop(grace time.Duration) {
	if c.Exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// waitLine waits until ready yields a value, the process exits, or ctx
// ends, whichever is first.
func waitLine[T any](ctx context.Context, c *child, ready <-chan T, what string) (T, error) {
	var zero T
	select {
	case v := <-ready:
		return v, nil
	case <-c.done:
		return zero, fmt.Errorf("%s exited before %s (%v):\n%s", c.name, what, c.err, c.Tail())
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%s: timed out waiting for %s:\n%s", c.name, what, c.Tail())
		}
		return zero, ctx.Err()
	}
}

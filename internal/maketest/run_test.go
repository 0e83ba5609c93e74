// Package maketest checks the Makefile's targets as a person at a terminal
// uses them.
package maketest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// make run on a terminal, stopped with Ctrl-C: pulsed shuts down cleanly
// and make exits 0, not "Interrupt" (130).
func TestMakeRunCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed through make")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed (Debian: apt-get install make)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", root, "run", "BIN="+dir,
		"ARGS=-data-dir "+filepath.Join(dir, "data")+" -listen 127.0.0.1:0 -http-listen 127.0.0.1:0")
	tty, err := pty.Start(cmd) // make gets a terminal, as from a shell
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(tty)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log strings.Builder
	wait := func(text string) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("make ended before printing %q:\n%s", text, log.String())
				}
				log.WriteString(line + "\n")
				if strings.Contains(line, text) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q in 2m:\n%s", text, log.String())
			}
		}
	}
	wait("http listening")
	if _, err := tty.Write([]byte{3}); err != nil { // Ctrl-C, as the terminal's line discipline sends it
		t.Fatal(err)
	}
	wait("pulsed stopped")
	for range lines {
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("make was killed by %v, want exit status 0:\n%s", ws.Signal(), log.String())
		}
	}
	if err != nil {
		t.Fatalf("make run after Ctrl-C: %v, want exit status 0:\n%s", err, log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "pulsed")); err != nil {
		t.Fatalf("make run did not build pulsed into BIN: %v", err)
	}
}

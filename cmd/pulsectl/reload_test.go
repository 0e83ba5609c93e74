package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reload makes pulsed re-read its targets file, and exits 1 naming the
// line of a bad one, which changes nothing.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("targets:\n  - {name: a, tcp: {address: \"127.0.0.1:9\"}}\n")
	p := startPulsed(t, "-targets", path)
	addr := "--addr=" + p.Addr
	write("targets:\n  - {name: a, tcp: {address: \"127.0.0.1:9\"}}\n  - {name: b, tcp: {address: \"127.0.0.1:9\"}}\n")
	if out := mustRun(t, "reload", addr); out != "targets "+path+": reloaded\n" {
		t.Errorf("reload: %q", out)
	}
	mustRun(t, "state", addr, "b") // exits 3 for an unknown target
	write("targets:\n  - {name: a, tcp: {address: \"127.0.0.1:9\"}}\n  - {name: c, rise: 0, tcp: {address: \"127.0.0.1:9\"}}\n")
	r := pulsectl(t, "reload", addr)
	if r.code != exitUsage || !strings.Contains(r.stdout, "not applied, nothing changed") || !strings.Contains(r.stdout, "targets.yaml:3") {
		t.Errorf("reload of a bad file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := pulsectl(t, "state", addr, "c"); r.code != exitNotFound {
		t.Errorf("state c after the bad file: exit %d, want %d (a bad file changes nothing)", r.code, exitNotFound)
	}
	// An unknown field: the error shows the line and points at the
	// field, on lines of their own after the first, indented.
	write("targets:\n  - {name: c, bogus: 1, tcp: {address: \"127.0.0.1:9\"}}\n")
	r = pulsectl(t, "reload", addr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != exitUsage || strings.Contains(r.stdout, `\n`) || len(lines) < 2 || !strings.Contains(r.stdout, "bogus") || !strings.HasPrefix(lines[len(lines)-1], "  ") {
		t.Errorf("reload of a file with an unknown field: exit %d, stdout %q", r.code, r.stdout)
	}
}

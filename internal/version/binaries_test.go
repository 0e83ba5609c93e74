package version

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every binary answers --version (and -version) with its name, exit 0, and
// the commit it was built from, here passed as make build passes it (the
// toolchain stamps none in a linked worktree or with -buildvcs=false).
func TestEveryBinaryHasVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	head, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Logf("no git (%v): not checking the revision", err)
	}
	dir := t.TempDir()
	ldflags := "-X github.com/pulsehealth/pulse/internal/version.revision=" + strings.TrimSpace(string(head))
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-ldflags", ldflags, "-o", dir+"/", "../../cmd/...").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, bin := range []string{"pulsed", "pulsectl", "pulse-lb", "pulse-target", "pulse-bench"} {
		for _, flag := range []string{"--version", "-version"} {
			out, err := exec.CommandContext(t.Context(), filepath.Join(dir, bin), flag).CombinedOutput()
			got := string(out)
			if err != nil || !strings.HasPrefix(got, bin+" ") || strings.Count(got, "\n") != 1 {
				t.Errorf("%s %s: %v\n%s", bin, flag, err, got)
			}
			if rev := strings.TrimSpace(string(head)); rev != "" && !strings.Contains(got, "(revision "+rev) {
				t.Errorf("%s %s: %q, want revision %s", bin, flag, got, rev)
			}
		}
	}
}

package boltstore_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/checker/boltstore"
)

// A data directory on a read-only file system is said to be one, not a
// damaged store: the store in it may be whole, and the message must not
// send the operator to restore a backup. It mounts a read-only tmpfs, so
// root; without one it skips, unless PULSE_REQUIRE_FULLDISK=1 (CI sets
// it) makes that a failure.
func TestOpenOnAReadOnlyFileSystem(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("PULSE_REQUIRE_FULLDISK") == "1" {
			t.Fatalf("PULSE_REQUIRE_FULLDISK=1 but a tmpfs cannot be mounted (needs root): %v %s", err, out)
		}
		t.Skipf("SKIPPED: cannot mount a read-only tmpfs (needs root; PULSE_REQUIRE_FULLDISK=1 makes this a failure): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	s, err := boltstore.Open(dir, 0)
	if err == nil {
		s.Close()
		t.Fatal("Open on a read-only file system succeeded")
	}
	if !strings.Contains(err.Error(), "read-only file system") || strings.Contains(err.Error(), "damaged") {
		t.Errorf("Open = %v, want it to say read-only, not damaged", err)
	}
}

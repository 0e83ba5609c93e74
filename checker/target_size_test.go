package checker

import (
	"testing"
	"unsafe"
)

// TestTargetSize: a target fits the runtime's 512-byte size class. There is
// one per registered target, so each byte past it costs 64 at once (the
// next class is 576): 6 MiB of live heap at 100,000 targets, and about
// twice that in RSS. A field that must be added past it is better kept
// behind a pointer made when it is first needed, as the passive outcomes'
// bucket is.
func TestTargetSize(t *testing.T) {
	if size := unsafe.Sizeof(target{}); size > 512 {
		t.Errorf("target is %d bytes, want at most 512", size)
	}
}

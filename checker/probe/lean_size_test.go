package probe

import (
	"testing"
	"unsafe"
)

// TestLeanProberSize: a lean prober fits the runtime's 144-byte size
// class. There is one per http:// target, so each byte past it costs 16 at
// once (the next class is 160): 1.5 MiB of live heap at 100,000 targets.
func TestLeanProberSize(t *testing.T) {
	if size := unsafe.Sizeof(leanProber{}); size > 144 {
		t.Errorf("leanProber is %d bytes, want at most 144", size)
	}
}

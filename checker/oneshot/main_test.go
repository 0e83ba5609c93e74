package oneshot

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind: a worker, a
// sleeping check, an HTTP connection or a gRPC channel.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind (a farm
// listener, a hanging handler, a connection).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

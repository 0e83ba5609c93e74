//go:build pulse_testhook && unix

package checker

import (
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// In a build with the pulse_testhook tag, SIGUSR1 wedges the checker: the
// scheduler's next pass holds the checker's lock and never lets go, as a
// bug that spins under the lock would. pulsed's end-to-end liveness tests
// build it so, to see the watchdog notice and shutdown stay bounded. A
// normal build has no such hook (testhook_off.go).

// wedged is set by SIGUSR1: the hook is the process's, not one checker's.
var wedged atomic.Bool

// startTestHook wakes the scheduler on SIGUSR1 so that its next pass,
// which comes at once, wedges.
func (s *scheduler) startTestHook() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		select {
		case <-sig:
			wedged.Store(true)
			s.wakeUp()
		case <-s.ctx.Done():
		}
	}()
}

// testHookLocked blocks forever, with the registry's lock held, once SIGUSR1 came.
func (s *scheduler) testHookLocked() {
	if wedged.Load() {
		select {}
	}
}

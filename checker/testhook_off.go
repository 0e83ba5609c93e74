//go:build !pulse_testhook || !unix

package checker

// The test hooks are no-ops in a normal build; see testhook_on.go.

func (s *scheduler) startTestHook()  {}
func (s *scheduler) testHookLocked() {}

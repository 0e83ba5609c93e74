//go:build !pulse_testhook || !unix

package checker

// The test hooks are no-ops in a normal build; see testhook_on.go.

func (c *Checker) startTestHook()  {}
func (c *Checker) testHookLocked() {}

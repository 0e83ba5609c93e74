package checker

import (
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
)

// HoldLock takes c's lock, as a wedged component would, and returns what
// releases it.
func HoldLock(c *Checker) (release func()) {
	c.reg.mu.Lock()
	return c.reg.mu.Unlock
}

// HoldHubLock takes c's watch hub lock and returns what releases it.
func HoldHubLock(c *Checker) (release func()) {
	c.hub.mu.Lock()
	return c.hub.mu.Unlock
}

// HoldWriteLock takes c's write lock (wmu), as a write that does not end
// would, and returns what releases it.
func HoldWriteLock(c *Checker) (release func()) {
	c.wmu.Lock()
	return c.wmu.Unlock
}

// HoldCommitQueue takes the lock of c's committer's queue and returns what
// releases it. c must have a Store.
func HoldCommitQueue(c *Checker) (release func()) {
	c.commit.mu.Lock()
	return c.commit.mu.Unlock
}

// ProgressDue returns when the scheduler, the committer or the write
// lock's holder was due to make progress; ok is false while it owes none.
func ProgressDue(c *Checker, component string) (due time.Time, ok bool) {
	switch component {
	case liveness.ComponentCommitter:
		return c.commit.progress().Due()
	case liveness.ComponentWriteLock:
		return c.wmu.Held().Due()
	}
	return c.sched.progress().Due()
}

package checker

import "time"

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

// ProgressDue returns when the scheduler or the committer was due to make
// progress; ok is false while it owes none.
func ProgressDue(c *Checker, component string) (due time.Time, ok bool) {
	p, commit := c.stamps()
	if component == ComponentCommitter {
		p = commit
	}
	ns := p.due.Load()
	return p.base.Add(time.Duration(ns - 1)), ns != 0
}

// Probing reports whether w's probe of a lock (ComponentWatchHub or
// ComponentLock) is still waiting for it.
func Probing(w *Watchdog, component string) bool {
	for i := range w.locks {
		if w.locks[i].component == component {
			return w.locks[i].waiting.due.Load() != 0
		}
	}
	return false
}

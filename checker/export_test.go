package checker

import "time"

// AddUnchecked registers a new target as Add does, but skips WithDefaults
// and Validate and makes its first probe due at first: it is how a spec
// that no rule bounded (a bug, or data from elsewhere) would reach the
// scheduler, for tests that show the scheduler survives it.
func (c *Checker) AddUnchecked(spec Spec, first time.Time) error {
	p, err := c.newProber(spec.Probe)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.unlockAndReport()
	t := newTarget(spec, p, StateUnhealthy)
	c.setNextLocked(t, first)
	c.targets[spec.Name] = t
	c.joinPoolLocked(t)
	c.due.push(t)
	c.wakeScheduler()
	return nil
}

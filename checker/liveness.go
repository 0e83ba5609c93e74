package checker

import (
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
)

// NewWatchdog returns a Watchdog of c's own progress that has not
// started: the scheduler's and the committer's stamps, the write lock's,
// and probes of the watch hub's lock, the checker's lock and, with a
// store, the commit queue's (see package liveness).
func NewWatchdog(c *Checker, cfg liveness.Config) (*liveness.Watchdog, error) {
	parts := liveness.Parts{
		Scheduler: c.sched.progress(),
		WriteLock: c.wmu.Held(),
		Locks: []liveness.Lock{
			{Component: liveness.ComponentWatchHub, Locker: c.hub.locker()},
			{Component: liveness.ComponentLock, Locker: c.reg.locker()},
		},
		Now: c.clock.Now,
		Timer: func(at time.Time) (<-chan time.Time, func() bool) {
			t := c.clock.TimerAt(at)
			return t.C(), t.Stop
		},
	}
	if c.commit != nil {
		parts.Committer = c.commit.progress()
		parts.Locks = append(parts.Locks, liveness.Lock{Component: liveness.ComponentCommitQueue, Locker: &c.commit.mu})
	}
	return liveness.New(parts, cfg)
}

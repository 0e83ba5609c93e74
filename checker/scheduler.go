package checker

import (
	"container/heap"
	"hash/fnv"
	"math"
	"time"
)

// Start begins probing every target on its interval, in the background,
// until Close. Calling it more than once has no further effect.
//
// Scheduling: each target is due at a fixed rate, every Spec.IntervalFor
// its machine: Interval while steady, FastInterval while on its way to a
// transition, DownInterval while unhealthy. Each result (probe or passive)
// moves the next probe to the last scheduled start plus the interval of the
// state it left, so a target that starts failing is probed again
// FastInterval after its first failure. Its first probe is delayed by a
// stable offset in [0, Interval) derived from its name, so many targets
// added at once do not probe in lockstep. A target whose previous probe is
// still running when it falls due skips that slot: there is at most one
// probe in flight per target. Probes are batched by Config.ScheduleTick:
// one due within a tick starts at the tick's end, with the others due in
// it (see startBy). A slot missed because the checker was late is
// skipped, not made up in a burst. At most Config.MaxConcurrentProbes
// probes run at once, on as many workers (see pool.go); the others wait in
// a queue, first due first served, and the scheduler counts them and how
// late probes start to tell when it is overloaded (see overload.go).
func (c *Checker) Start() {
	c.startOnce.Do(func() {
		c.startTestHook()
		c.wg.Go(c.schedule)
	})
}

// Scheduled is closed once the scheduler has made its first pass over the
// registry: every target loaded or registered before Start has its first
// probe scheduled. Readiness checks wait for it.
func (c *Checker) Scheduled() <-chan struct{} { return c.scheduled }

func (c *Checker) schedule() {
	for {
		now := c.clock.Now()
		c.schedStamp.set(now) // a pass is due: see liveness.go
		c.mu.Lock()
		c.testHookLocked()
		c.dueLocked(now)
		c.dispatchLocked()
		var wake time.Time
		if len(c.due) > 0 {
			wake = time.Unix(0, c.due[0].startNs)
		}
		if !wake.After(now) { // no target, or the clock at the end of time
			wake = time.Time{}
		}
		c.unlockAndReport()

		c.scheduledOnce.Do(func() { close(c.scheduled) })

		var (
			timer Timer
			tick  <-chan time.Time
		)
		if !wake.IsZero() {
			timer = c.clock.TimerAt(wake)
			tick = timer.C()
		}
		c.schedStamp.set(wake) // the next pass is due at wake; none if zero
		select {
		case <-c.ctx.Done():
		case <-c.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if c.ctx.Err() != nil {
			c.schedStamp.set(time.Time{})
			return
		}
	}
}

// dueLocked takes every target due at now, schedules its next probe and
// queues the probes to start. It takes each target once: a next probe is
// after now (see nextSlot), except at the last time UnixNano holds, where
// none can be; such a target is set aside until the pass ends.
func (c *Checker) dueLocked(now time.Time) {
	var stuck []*target
	for nowNs := now.UnixNano(); len(c.due) > 0 && c.due[0].startNs <= nowNs; {
		t := c.due[0]
		if !t.inFlight {
			c.enqueueLocked(c.jobLocked(t, t.next))
		}
		t.slot = t.next
		c.setNextLocked(t, nextSlot(t.next, t.spec.IntervalFor(t.m), now))
		if t.startNs <= nowNs {
			c.due.remove(t)
			stuck = append(stuck, t)
			continue
		}
		c.due.fix(t)
	}
	for _, t := range stuck {
		c.due.push(t)
	}
}

// rescheduleLocked moves t's next probe to its last scheduled start plus
// the interval of its state now, after a result changed it. A target with a
// probe in flight is left alone: that probe's result reschedules it.
func (c *Checker) rescheduleLocked(t *target, now time.Time) {
	if t.inFlight || t.slot.IsZero() || t.index < 0 {
		return
	}
	iv := t.spec.IntervalFor(t.m)
	next := addDur(t.slot, iv)
	if !next.After(now) {
		next = nextSlot(t.slot, iv, now)
	}
	start := t.startNs
	c.setNextLocked(t, next)
	if t.startNs == start {
		return
	}
	earlier := t.startNs < start
	c.due.fix(t)
	if earlier {
		c.wakeScheduler()
	}
}

// startBy returns when a probe due at due, of a target probed every
// interval, is started: at the first multiple of Config.ScheduleTick at or
// after due, so that the probes due within one tick start in one wake-up
// of the scheduler. A target whose interval is under ten ticks is probed
// at its due time: a tick's delay would be more than a tenth of its
// interval.
func (c *Checker) startBy(due time.Time, interval time.Duration) time.Time {
	if c.tick <= 0 || interval/10 < c.tick { // interval < 10 ticks, without overflow
		return due
	}
	w := due.Truncate(c.tick)
	if w.Before(due) {
		w = addDur(w, c.tick)
	}
	return w
}

// setNextLocked sets when t's next probe is due and when it starts; the
// caller pushes or fixes t in the due heap. Both are clamped to the times
// UnixNano can hold, whatever the caller computed.
func (c *Checker) setNextLocked(t *target, next time.Time) {
	t.next = addDur(next, 0)
	t.startNs = c.startBy(t.next, t.spec.IntervalFor(t.m)).UnixNano()
}

// nextSlot returns the first time after now on prev's fixed-rate grid. A
// target far behind steps over its missed slots in one computation, never
// one slot at a time. An interval under MinInterval, which only a spec that
// skipped Validate can have, is taken as MinInterval.
func nextSlot(prev time.Time, interval time.Duration, now time.Time) time.Time {
	interval = max(interval, MinInterval)
	next := addDur(prev, interval)
	if next.After(now) {
		return next
	}
	steps := int64(now.Sub(prev)/interval) + 1
	if next = addDur(prev, mulDur(steps, interval)); next.After(now) {
		return next
	}
	// now.Sub(prev) saturated: prev is centuries behind. Leave the grid.
	return addDur(now, interval)
}

// firstDelay spreads first probes over the interval by a hash of the name.
func firstDelay(name string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return time.Duration(h.Sum64() % uint64(interval))
}

// addDur returns t+d clamped to the times whose UnixNano an int64 holds
// (the years 1678 to 2262): the due heap orders targets by UnixNano, and a
// time past its range would wrap around into the past and be due forever.
// Validate keeps every duration of a spec far below that; addDur keeps the
// scheduler safe whatever it is given.
func addDur(t time.Time, d time.Duration) time.Time {
	u := t.Add(d)
	if last := time.Unix(0, math.MaxInt64); u.After(last) {
		return last
	}
	if first := time.Unix(0, math.MinInt64); u.Before(first) {
		return first
	}
	return u
}

// mulDur returns n x d for n, d >= 0, saturating at the largest Duration.
func mulDur(n int64, d time.Duration) time.Duration {
	if n > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

func (c *Checker) wakeScheduler() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dueHeap orders targets by the start of their next probe, then by age.
type dueHeap []*target

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].startNs != h[j].startNs {
		return h[i].startNs < h[j].startNs
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	t := x.(*target)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

func (h *dueHeap) push(t *target) { heap.Push(h, t) }
func (h *dueHeap) fix(t *target)  { heap.Fix(h, t.index) }
func (h *dueHeap) remove(t *target) {
	if t.index >= 0 {
		heap.Remove(h, t.index)
	}
}

package checker

import (
	"context"
	"hash/fnv"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulsehealth/pulse/checker/liveness"
)

// scheduler starts the registry's probes on time and applies their
// results: the due heap and the schedule loop (here), the probe pool, its
// workers and the asynchronous probe path (pool.go), and the detection of
// its own overload (overload.go). Data flows one way: the scheduler hands
// each result to the registry (resultLocked), which decides what it does
// to the target's state.
//
// It has no lock of its own. Its heap, its pool and its overload state,
// and the scheduling fields of every target (next, slot, startNs, index,
// inFlight), are guarded by the registry's lock: a result changes a
// target's machine and, by its new interval, its place in the heap, and
// doing both in one critical section costs one lock per probe, not two.
// The registry calls addLocked, removeLocked, rescheduleLocked and
// hurryLocked with that lock held when a target comes, goes or changes.
type scheduler struct {
	reg      *registry // its lock, its targets, where results go
	clock    Clock
	observer Observer      // nil if none
	tick     time.Duration // the tick in force; see tick.go
	frame    frame         // the clock its times are kept on
	overload OverloadPolicy
	reprobe  ReprobePolicy
	stamp    liveness.Stamp // see package liveness
	waiting  atomic.Int64   // probes waiting for a slot
	lastLag  atomic.Int64   // how late the last probe started, in ns

	ctx           context.Context // ends when the checker closes
	cancel        context.CancelFunc
	wg            sync.WaitGroup // the schedule loop, the workers, the asynchronous probes
	wake          chan struct{}  // the schedule changed
	scheduled     chan struct{}  // closed after the first pass
	scheduledOnce sync.Once
	startOnce     sync.Once
	lost          lostConns // connections lost, for the next pass; see reprobe.go

	// Guarded by the registry's lock.
	demand       *demandLimiter // ProbeNow rounds; see demandlimit.go
	due          dueHeap
	pool         probePool
	ov           overloadState
	reprobes     map[string]uint64 // reprobes by reason; see reprobe.go
	reprobeSkips uint64            // lost connections within an interval of a reprobe
	tuner        tickTuner         // sets tick from the probe rate; see tick.go
}

// newScheduler returns the scheduler of reg's targets, not started.
func newScheduler(reg *registry, cfg Config, clock Clock) (*scheduler, error) {
	s := &scheduler{
		reg:       reg,
		clock:     clock,
		observer:  cfg.Observer,
		overload:  cfg.Overload,
		reprobe:   cfg.Reprobe,
		wake:      make(chan struct{}, 1),
		scheduled: make(chan struct{}),
		demand:    newDemandLimiter(),
	}
	if err := s.overload.validate(); err != nil {
		return nil, err
	}
	if err := s.reprobe.validate(); err != nil {
		return nil, err
	}
	var err error
	if s.tuner, err = newTickTuner(cfg, clock.Now()); err != nil {
		return nil, err
	}
	s.tick = cfg.ScheduleTick
	n := cfg.MaxConcurrentProbes
	if n <= 0 {
		n = 256
	}
	s.pool.init(reg.locker(), n)
	if s.overload.RecoverAfter == 0 {
		s.overload.RecoverAfter = DefaultOverloadRecovery
	}
	s.frame = newFrame(clock.Now())
	s.stamp.Start(clock.Now())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// start begins the schedule loop; see Checker.Start.
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
// probe in flight per target. Probes are batched by a schedule tick: one
// due within a tick starts at the tick's end, with the others due in it
// (see startBy); the tick adapts to the probe rate (see tick.go). A slot
// missed because the checker was late is
// skipped, not made up in a burst. At most Config.MaxConcurrentProbes
// probes run at once, on as many workers (see pool.go); the others wait in
// a queue, first due first served, and the scheduler counts them and how
// late probes start to tell when it is overloaded (see overload.go).
func (s *scheduler) start() {
	s.startOnce.Do(func() {
		s.startTestHook()
		s.wg.Go(s.schedule)
	})
}

func (s *scheduler) schedule() {
	for {
		now := s.clock.Now()
		s.stamp.Set(now) // a pass is due: see package liveness
		s.reg.lock()
		s.testHookLocked()
		s.reprobesLocked(now)
		s.dueLocked(now)
		s.dispatchLocked()
		var wake time.Time
		if len(s.due) > 0 {
			wake = s.frame.at(s.due[0].startNs)
		}
		if !wake.After(now) { // no target, or the clock at the end of time
			wake = time.Time{}
		}
		s.reg.unlockAndReport()

		s.scheduledOnce.Do(func() { close(s.scheduled) })

		var (
			timer Timer
			tick  <-chan time.Time
		)
		if !wake.IsZero() {
			timer = s.clock.TimerAt(wake)
			tick = timer.C()
		}
		s.stamp.Set(wake) // the next pass is due at wake; none if zero
		select {
		case <-s.ctx.Done():
		case <-s.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if s.ctx.Err() != nil {
			s.stamp.Set(time.Time{})
			return
		}
	}
}

// dueLocked takes every target due at now, schedules its next probe and
// queues the probes to start, then lets the tick adapt to how many fell
// due (see tick.go). It takes each target once: a next probe is after now
// (see nextSlot), except at the last time the frame holds, where none can
// be; such a target is set aside until the pass ends.
func (s *scheduler) dueLocked(now time.Time) {
	var stuck []*target
	n, adaptive := 0, s.tuner.adaptive()
	for nowNs := s.frame.ns(now); len(s.due) > 0 && s.due[0].startNs <= nowNs; {
		t := s.due[0].t
		if adaptive {
			n += s.tuner.weight(t)
		}
		due := s.frame.at(t.next)
		if !t.inFlight {
			j := s.jobLocked(t, due)
			j.startNs = t.startNs
			s.enqueueLocked(j)
		}
		t.slot = t.next
		s.setNextLocked(t, nextSlot(due, s.intervalLocked(t), now))
		if t.startNs <= nowNs {
			s.due.remove(t)
			stuck = append(stuck, t)
			continue
		}
		s.due.fix(t)
	}
	for _, t := range stuck {
		s.due.push(t)
	}
	s.tick = s.tuner.observe(now, n, s.tick)
}

// rescheduleLocked moves t's next probe to its last scheduled start plus
// the interval of its state now, after a result changed it. A target with a
// probe in flight is left alone: that probe's result reschedules it.
func (s *scheduler) rescheduleLocked(t *target, now time.Time) {
	if t.inFlight || t.slot == noTime || t.index < 0 {
		return
	}
	iv := s.intervalLocked(t)
	slot := s.frame.at(t.slot)
	next := addDur(slot, iv)
	if !next.After(now) {
		next = nextSlot(slot, iv, now)
	}
	start := t.startNs
	s.setNextLocked(t, next)
	if t.startNs == start {
		return
	}
	earlier := t.startNs < start
	s.due.fix(t)
	if earlier {
		s.wakeUp()
	}
}

// startBy returns when a probe due at due, of a target probed every
// interval, is started: at the first multiple of the tick in force (see
// tick.go) at or after due, so that the probes due within one tick start
// in one wake-up of the scheduler. A target whose interval is under ten
// ticks is probed at its due time: a tick's delay would be more than a
// tenth of its interval.
func (s *scheduler) startBy(due time.Time, interval time.Duration) time.Time {
	if s.tick <= 0 || interval/10 < s.tick { // interval < 10 ticks, without overflow
		return due
	}
	w := due.Truncate(s.tick)
	if w.Before(due) {
		w = addDur(w, s.tick)
	}
	// Truncate reads the wall clock and drops the monotonic reading: move
	// due by as much, which keeps its own.
	return due.Add(w.Sub(due))
}

// setNextLocked sets when t's next probe is due and when it starts; the
// caller pushes or fixes t in the due heap. Both are clamped to the times
// UnixNano can hold, whatever the caller computed.
func (s *scheduler) setNextLocked(t *target, next time.Time) {
	next = addDur(next, 0)
	t.next = s.frame.ns(next)
	t.startNs = s.frame.ns(s.startBy(next, s.intervalLocked(t)))
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

// frame is the clock the scheduler keeps its times on, as int64
// nanoseconds (a target's slot, next and start, the pool's fullEnd): the
// Unix time its clock read when the scheduler was made, plus the time
// since, measured with the monotonic clock when the clock's times carry
// it, as the real clock's do. A step of the wall clock (NTP, a VM resumed,
// date -s) then moves no due time: a step back does not stall every
// probe for its length, and a step forward does not make every probe
// late. The times the scheduler shows (Status.NextProbe) are read from
// the wall clock of the moment (see wall). With a fake clock, whose times
// carry no monotonic reading, a frame's time is the Unix time.
type frame struct {
	base   time.Time
	baseNs int64 // base's UnixNano
}

func newFrame(base time.Time) frame { return frame{base: base, baseNs: base.UnixNano()} }

// ns returns t on the frame, clamped to the int64 range but never noTime.
func (f frame) ns(t time.Time) int64 {
	d := int64(t.Sub(f.base)) // saturates
	n := f.baseNs + d
	switch {
	case d > 0 && n < f.baseNs:
		return math.MaxInt64
	case d < 0 && n > f.baseNs, n == noTime:
		return noTime + 1
	}
	return n
}

// at returns the time ns stands for, carrying the base's monotonic
// reading; the zero time for noTime.
func (f frame) at(ns int64) time.Time {
	if ns == noTime {
		return time.Time{}
	}
	d := ns - f.baseNs
	switch {
	case f.baseNs > 0 && d > ns:
		d = math.MinInt64
	case f.baseNs < 0 && d < ns:
		d = math.MaxInt64
	}
	return f.base.Add(time.Duration(d))
}

// wall returns ns as a time on the wall clock at now: now plus the time
// until ns, so that after a step of the wall clock a time shown is
// still that far away. The zero time for noTime.
func (f frame) wall(ns int64, now time.Time) time.Time {
	if ns == noTime {
		return time.Time{}
	}
	return now.Add(f.at(ns).Sub(now))
}

// addDur returns t+d clamped to the times whose UnixNano an int64 holds
// (the years 1678 to 2262): the due heap orders targets by their times on
// the frame, Unix times in nanoseconds, and a time past its range would
// wrap around into the past and be due forever.
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

func (s *scheduler) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dueHeap orders targets by the start of their next probe, then by age.
// Each entry carries its target's keys, so that ordering reads the heap's
// own array and not every target it compares; fix takes a target's new
// start into its entry.
//
// It is a 4-ary heap, as the runtime's timers are: the children of entry i
// are 4i+1 to 4i+4. Moving an entry writes its target's index, and at
// 100,000 targets each target written is a cache miss: a sift crosses
// half the levels of a binary heap, reading four siblings side by side in
// the array at each. A sift moves the entries it passes and writes the
// sifted one once, at its place.
type dueHeap []dueEntry

const dueArity = 4

func dueParent(i int) int { return (i - 1) / dueArity }

type dueEntry struct {
	startNs int64 // the target's startNs when last pushed or fixed
	seq     uint32
	t       *target
}

func (e *dueEntry) before(o *dueEntry) bool {
	if e.startNs != o.startNs {
		return e.startNs < o.startNs
	}
	return e.seq < o.seq
}

// set puts e at i.
func (h dueHeap) set(i int, e dueEntry) {
	h[i] = e
	e.t.index = int32(i)
}

// up sifts the entry at j0 up; it reports whether it moved.
func (h dueHeap) up(j0 int) bool {
	e, j := h[j0], j0
	for j > 0 {
		p := dueParent(j)
		if !e.before(&h[p]) {
			break
		}
		h.set(j, h[p])
		j = p
	}
	if j != j0 {
		h.set(j, e)
	}
	return j != j0
}

// down sifts the entry at i0 down among the first n; it reports whether it
// moved.
func (h dueHeap) down(i0, n int) bool {
	e, i := h[i0], i0
	for {
		c := dueArity*i + 1
		if c >= n || c < 0 { // c < 0 after int overflow
			break
		}
		m := c // the first of the children
		for k := c + 1; k < n && k < c+dueArity; k++ {
			if h[k].before(&h[m]) {
				m = k
			}
		}
		if !h[m].before(&e) {
			break
		}
		h.set(i, h[m])
		i = m
	}
	if i != i0 {
		h.set(i, e)
	}
	return i != i0
}

func (h *dueHeap) push(t *target) {
	t.index = int32(len(*h))
	*h = append(*h, dueEntry{startNs: t.startNs, seq: t.seq, t: t})
	h.up(len(*h) - 1)
}

func (h dueHeap) fix(t *target) {
	i := int(t.index)
	h[i].startNs = t.startNs
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

func (h *dueHeap) remove(t *target) {
	i := int(t.index)
	if i < 0 {
		return
	}
	n := len(*h) - 1
	if n != i {
		h.set(i, (*h)[n])
		if !h.down(i, n) {
			h.up(i)
		}
	}
	(*h)[n] = dueEntry{}
	*h = (*h)[:n]
	t.index = -1
}

// addLocked schedules a new target's first probe at first.
func (s *scheduler) addLocked(t *target, first time.Time) {
	s.setNextLocked(t, first)
	s.due.push(t)
	s.wakeUp()
}

// removeLocked stops scheduling t; a probe in flight is discarded when it
// ends (the registry no longer has t).
func (s *scheduler) removeLocked(t *target) {
	s.due.remove(t)
}

// hurryLocked brings t's next probe forward to one interval from now if
// that is sooner, after its spec changed. A target in no heap (in
// maintenance, or not this replica's) is left alone.
func (s *scheduler) hurryLocked(t *target, now time.Time) {
	if t.index < 0 {
		return
	}
	if want := now.Add(s.intervalLocked(t)); want.Before(s.frame.at(t.next)) {
		s.setNextLocked(t, want)
		s.due.fix(t)
		s.wakeUp()
	}
}

// degradedLocked reports whether the checker is degraded (overloaded).
func (s *scheduler) degradedLocked() bool { return s.ov.degraded }

// progress returns the scheduler's progress stamp, for a Watchdog.
func (s *scheduler) progress() *liveness.Stamp { return &s.stamp }

// scheduledCh is closed after the first pass; see Checker.Scheduled.
func (s *scheduler) scheduledCh() <-chan struct{} { return s.scheduled }

// closing returns a context that ends when the checker closes.
func (s *scheduler) closing() context.Context { return s.ctx }

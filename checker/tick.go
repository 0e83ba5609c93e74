package checker

import (
	"fmt"
	"time"
)

// The adaptive schedule tick. Batching probe starts on a tick (see
// startBy) saves a wake-up of the scheduler, of a worker and of the
// answers' loop for every probe a tick holds beyond the first: the wider
// the tick, the less CPU per probe. But a tick's probes start at once, and
// a burst of many probes, most of them dialling a new connection, costs
// more than the wake-ups it saves: the checker then falls behind its
// schedule. So the tick adapts to the probe rate. The scheduler counts the
// probes that fall due over a window of tickWindow, a probe that will dial
// a new connection counting twice (see ConnKeeper), and sets its tick to
// the time in which Config.ScheduleBurst of them fall due, within
// [Config.ScheduleTick, Config.ScheduleTickMax]:
//
//   - a quiet schedule (few probes a second) widens the tick up to
//     ScheduleTickMax: each wake-up starts up to ScheduleBurst probes;
//   - a busy one narrows it down to ScheduleTick, so that a tick's burst
//     stays about ScheduleBurst probes however many targets there are,
//     and half as many when they all dial.
//
// With pulsed's defaults (10ms to 25ms, 125): 5,000 probes a second on kept
// connections (5,000 targets at 1s) take a 25ms tick, 10,000 a second
// (10,000 at 1s) 12ms, and 100,000 targets at 10s, 85% of whose probes
// dial (the file limit leaves 15,000 kept connections), 10ms. The tick
// changes in whole milliseconds (or to one of its bounds), and only by
// more than an eighth, so that the rate's noise does not move it back and
// forth.
//
// Lateness is bounded whatever the tick: a probe never starts before its
// due time, and at most min(ScheduleTickMax, interval/10) after it (a
// target whose interval is under ten ticks is probed at its due time). A
// new tick applies to the probes scheduled from then on; those already
// scheduled keep the start they were given, which is how lateness is
// measured for overload (see startLocked): batching, even on a tick since
// given up, is not lateness.

// ConnKeeper is a Prober that can tell whether its next probe will reuse a
// connection it keeps, or dial a new one: a dial costs the checker and the
// target about as much again as the probe, and the adaptive tick weighs it
// so (see Config.ScheduleBurst). The scheduler asks each probe that falls
// due while its tick adapts, with the checker's lock held: KeepsConn must
// be cheap and never block. A Prober that is no ConnKeeper counts as one
// that keeps its connection.
type ConnKeeper interface {
	Prober
	KeepsConn() bool
}

// Bounds and defaults of the schedule tick.
const (
	// MaxScheduleTick bounds Config.ScheduleTick and
	// Config.ScheduleTickMax: no probe starts later than this after its
	// due time for batching's sake.
	MaxScheduleTick = time.Second
	// DefaultScheduleBurst is Config.ScheduleBurst's default.
	DefaultScheduleBurst = 125
	// MaxScheduleBurst bounds Config.ScheduleBurst.
	MaxScheduleBurst = 100_000
)

// tickWindow is how long the scheduler counts due probes before it sets
// its tick again; tickGrain is the step of a tick between its bounds.
const (
	tickWindow = time.Second
	tickGrain  = time.Millisecond
)

// tickTuner sets the schedule tick from the probe rate. It is a value
// with no lock: the scheduler's, guarded by the registry's lock.
type tickTuner struct {
	base, max time.Duration // the tick's bounds; it adapts only if 0 < base < max
	burst     int           // the probes a tick aims to hold
	since     time.Time     // when the current window began
	due       int           // probes due since then, a dial counting twice
}

// newTickTuner validates cfg's tick settings and returns their tuner, its
// window starting at now, and the first tick: ScheduleTick.
func newTickTuner(cfg Config, now time.Time) (tickTuner, error) {
	k := tickTuner{base: cfg.ScheduleTick, max: cfg.ScheduleTickMax, burst: cfg.ScheduleBurst, since: now}
	switch {
	case k.base < 0 || k.base > MaxScheduleTick:
		return k, fmt.Errorf("ScheduleTick must be between 0 and %v, got %v", MaxScheduleTick, k.base)
	case k.max < 0 || k.max > MaxScheduleTick:
		return k, fmt.Errorf("ScheduleTickMax must be between 0 and %v, got %v", MaxScheduleTick, k.max)
	case k.burst < 0 || k.burst > MaxScheduleBurst:
		return k, fmt.Errorf("ScheduleBurst must be between 0 (the default, %d) and %d, got %d", DefaultScheduleBurst, MaxScheduleBurst, k.burst)
	}
	if k.burst == 0 {
		k.burst = DefaultScheduleBurst
	}
	return k, nil
}

// adaptive reports whether the tick adapts at all.
func (k *tickTuner) adaptive() bool { return k.base > 0 && k.max > k.base }

// weight is what t's probe counts toward a burst: 2 when it will dial a
// new connection, else 1.
func (k *tickTuner) weight(t *target) int {
	if ck, ok := t.prober.(ConnKeeper); ok && !ck.KeepsConn() {
		return 2
	}
	return 1
}

// observe counts n probes that fell due at now (a dial counting twice)
// and returns the tick to use from now on, cur being the tick in force.
func (k *tickTuner) observe(now time.Time, n int, cur time.Duration) time.Duration {
	if !k.adaptive() {
		return cur
	}
	k.due += n
	elapsed := now.Sub(k.since)
	if elapsed < tickWindow {
		if elapsed < 0 { // the clock went back: start again
			k.since, k.due = now, 0
		}
		return cur
	}
	want := k.width(k.due, elapsed)
	k.since, k.due = now, 0
	if want == k.base || want == k.max {
		return want
	}
	if d := want - cur; d*8 > cur || -d*8 > cur {
		return want
	}
	return cur
}

// width returns the tick in which burst probes fall due, when due probes
// fell due in elapsed, in whole tickGrains within [base, max].
//
// An example: 100,000 targets at 10s, 85,000 of which dial, count 18,500
// a second: 125 of them fall due in 6.8ms, under a 10ms base: 10ms.
func (k *tickTuner) width(due int, elapsed time.Duration) time.Duration {
	if due <= 0 {
		return k.max
	}
	w := float64(elapsed) * float64(k.burst) / float64(due)
	if w >= float64(k.max) {
		return k.max
	}
	return max(time.Duration(w).Truncate(tickGrain), k.base)
}

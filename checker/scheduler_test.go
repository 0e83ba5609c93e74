package checker_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// The scheduler probes each target once per interval, and a target that
// never answers (here: a probe that hangs until its timeout) delays no other
// target's schedule.
func TestScheduleHungTargetDoesNotDelayOthers(t *testing.T) {
	e := newEnv(t, checker.Config{})
	hung := spec("hung")
	hung.Interval, hung.Timeout = time.Second, time.Second
	hung.InitialState = checker.StateHealthy
	hung.Fall = 2
	e.add(t, hung)
	ok := spec("ok")
	ok.Interval, ok.Timeout = time.Second, 500*time.Millisecond
	e.add(t, ok)
	e.probes.set("hung", outcome{hang: true})
	e.probes.set("ok", pass)
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()

	// Every step moves one interval: both targets fall due exactly once per
	// step, whatever their first offset. Each step waits for the checker to
	// be at rest (hung's probe started too): a probe that starts only after
	// the clock jumped on would be a whole interval late, which the checker
	// takes for overload.
	for i := 1; i <= 10; i++ {
		step(t, e, time.Second)
		waitFor(t, fmt.Sprintf("ok's probe %d", i), func() bool { return applied(e, "ok") >= i })
		if n := applied(e, "ok"); n != i {
			t.Fatalf("after %d intervals ok was probed %d times", i, n)
		}
	}
	if n := e.probes.callCount("hung"); n < 4 || n > 10 {
		t.Errorf("hung was probed %d times in 10 intervals; want one probe at a time, each ending at its timeout", n)
	}
	if got := e.probes.maxActive("hung"); got != 1 {
		t.Errorf("hung had %d probes in flight at once, want 1", got)
	}
	waitFor(t, "hung's fall", func() bool {
		st, _ := e.c.Status("hung")
		return st.State == checker.StateUnhealthy
	})
	got := kinds(next(t, w))
	want := map[string]bool{"ok: unhealthy -> healthy": true, "hung: healthy -> unhealthy": true}
	if len(got) != 2 || !want[got[0]] || !want[got[1]] {
		t.Errorf("transitions %v, want ok rising and hung falling", got)
	}
	st, _ := e.c.Status("hung")
	if st.LastResult == nil || st.LastResult.Err != "timeout after 1s" {
		t.Errorf("hung's last result %+v, want a timeout", st.LastResult)
	}
}

// A probe still running when its target falls due again makes the target
// skip that slot instead of starting a second probe.
func TestScheduleAtMostOneProbeInFlightPerTarget(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("slow")
	s.Interval, s.Timeout = time.Second, time.Second
	e.add(t, s)
	e.probes.set("slow", outcome{hang: true})
	e.c.Start()
	e.clock.Advance(time.Second)
	waitFor(t, "the first probe", func() bool { return e.probes.callCount("slow") == 1 })
	// Advance a quarter interval at a time: each probe times out exactly
	// when the target falls due again, or in between.
	waitFor(t, "later probes", func() bool {
		e.clock.Advance(250 * time.Millisecond)
		return e.probes.callCount("slow") >= 4
	})
	if got := e.probes.maxActive("slow"); got != 1 {
		t.Errorf("%d probes in flight at once, want 1", got)
	}
}

// applied returns how many of name's probe results were applied, or -1
// while a probe that started has not been applied yet.
func applied(e *testEnv, name string) int {
	st, err := e.c.Status(name)
	if err != nil || st.Probing || int(st.ActiveResults) != e.probes.callCount(name) {
		return -1
	}
	return int(st.ActiveResults)
}

// At most MaxConcurrentProbes probes run at once; the rest wait for a slot.
func TestScheduleConcurrencyBound(t *testing.T) {
	e := newEnv(t, checker.Config{MaxConcurrentProbes: 2})
	for i := range 5 {
		s := spec(fmt.Sprintf("t%d", i))
		s.Interval, s.Timeout = time.Second, time.Second
		e.add(t, s)
		e.probes.set(s.Name, outcome{hang: true})
	}
	e.c.Start()
	e.clock.Advance(time.Second) // all five due; two may run
	waitFor(t, "two probes running", func() bool { return e.probes.inFlight() == 2 })
	total := func() int {
		n := 0
		for i := range 5 {
			n += e.probes.callCount(fmt.Sprintf("t%d", i))
		}
		return n
	}
	for total() < 5 {
		e.clock.Advance(time.Second) // times out the running pair, letting others in
		waitFor(t, "the next probes", func() bool { return e.probes.inFlight() == 2 || total() >= 5 })
	}
	if got := e.probes.maxInFlight(); got != 2 {
		t.Errorf("max probes in flight %d, want 2", got)
	}
}

// A backlog waits in the scheduler's queue, not as goroutines: with 200
// hung targets due at once and 4 slots, 4 probes run, 196 wait, and the
// checker holds a worker per slot and no goroutine per waiting probe.
func TestScheduleBacklogHoldsNoGoroutinePerProbe(t *testing.T) {
	const targets, slots = 200, 4
	e := newEnv(t, checker.Config{MaxConcurrentProbes: slots, Overload: checker.OverloadPolicy{Disabled: true}})
	for i := range targets {
		s := spec(fmt.Sprintf("t%03d", i))
		s.Interval, s.Timeout = time.Second, time.Second
		e.add(t, s)
		e.probes.set(s.Name, outcome{hang: true})
	}
	before := runtime.NumGoroutine()
	e.c.Start()
	e.clock.Advance(time.Second) // all due
	waitFor(t, "the backlog", func() bool {
		ov := e.c.Overload()
		return ov.InFlight == slots && ov.Waiting == targets-slots && e.probes.inFlight() == slots
	})
	// The scheduler, the lifecycle's loop and one worker per slot; a
	// goroutine per probe would be 200 more.
	if n := runtime.NumGoroutine() - before; n > 2+slots {
		t.Errorf("%d more goroutines with %d probes due, want at most %d", n, targets, 2+slots)
	}
}

// Removing a target stops its probes; adding one wakes the scheduler.
func TestScheduleFollowsAddAndRemove(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.c.Start()
	s := spec("a")
	s.Interval, s.Timeout = time.Second, time.Second
	e.add(t, s)
	e.probes.set("a", pass)
	e.clock.Advance(time.Second)
	waitFor(t, "a's first probe", func() bool { return e.probes.callCount("a") == 1 })
	e.c.Remove("a")
	b := spec("b")
	b.Interval, b.Timeout = time.Second, time.Second
	e.add(t, b)
	e.probes.set("b", pass)
	for step := 1; step <= 3; step++ {
		e.clock.Advance(time.Second)
		// Applied, not only started: a target whose result is still on its
		// way when the clock moves on skips that slot.
		waitFor(t, "b's probe", func() bool { return applied(e, "b") == step })
	}
	if n := e.probes.callCount("a"); n != 1 {
		t.Errorf("a was probed %d times after its removal", n-1)
	}
}

func TestScheduledAfterTheFirstPass(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	select {
	case <-e.c.Scheduled():
		t.Fatal("Scheduled before Start")
	default:
	}
	e.c.Start()
	waitFor(t, "the first pass", func() bool {
		select {
		case <-e.c.Scheduled():
			return true
		default:
			return false
		}
	})
}

// With a ScheduleTick, a probe starts at the first multiple of the tick at
// or after its due time, never before it: the probes due within one tick
// start in one wake-up. A target whose interval is under ten ticks is
// probed at its own due times, whatever the batched targets around it do.
// Batching is not lateness: a MaxLag far under the tick signals no
// overload.
func TestScheduleTickBatchesProbeStarts(t *testing.T) {
	const tick = 100 * time.Millisecond
	starts := &probeTimes{at: map[string][]time.Time{}}
	e := newEnv(t, checker.Config{
		ScheduleTick: tick,
		Overload:     checker.OverloadPolicy{MaxLag: time.Millisecond},
		Observer:     starts,
	})
	for i := range 20 {
		s := spec(fmt.Sprintf("t%02d", i))
		s.Interval, s.Timeout = 10*time.Second, time.Second
		if i%5 == 0 { // under ten ticks: not batched
			s.Interval, s.Timeout = 900*time.Millisecond, 500*time.Millisecond
		}
		e.add(t, s)
		e.probes.set(s.Name, pass)
	}
	e.c.Start()
	<-e.c.Scheduled()

	// Every probe start expected in the first ten seconds, by target.
	end := epoch.Add(10 * time.Second)
	want := map[string][]time.Time{}
	var times []time.Time // every due time and every start, in order
	offTick := 0
	for _, st := range list(e.c) {
		due, name := st.NextProbe, st.Spec.Name
		if st.Spec.Interval < 10*tick {
			for ; due.Before(end); due = due.Add(st.Spec.Interval) {
				want[name] = append(want[name], due)
				times = append(times, due)
			}
			continue
		}
		start := due.Truncate(tick)
		if start.Before(due) {
			start = start.Add(tick)
			offTick++
		}
		want[name] = []time.Time{start}
		times = append(times, due, start)
	}
	if offTick < 10 {
		t.Fatalf("only %d of 16 batched targets are due off a tick; the test needs most of them to be", offTick)
	}
	slices.SortFunc(times, time.Time.Compare)
	times = slices.Compact(times)

	// Move the clock to each due time and each start in turn; at each, wait
	// for the probes expected by then and for the scheduler to be at rest
	// (its timer armed, no probe queued or running), so that every probe
	// runs at the time it was started at.
	atRest := func() bool { return schedulerAtRest(e) }
	waitFor(t, "the scheduler's first timer", atRest)
	for _, at := range times {
		e.clock.Advance(at.Sub(e.clock.Now()))
		waitFor(t, fmt.Sprintf("the probes started by %v", at.Sub(epoch)), func() bool {
			for name, ts := range want {
				n, _ := slices.BinarySearchFunc(ts, at, func(a, b time.Time) int {
					if a.After(b) {
						return 1
					}
					return -1
				})
				if len(starts.of(name)) < n {
					return false
				}
			}
			return atRest()
		})
	}
	for name, ts := range want {
		if got := starts.of(name); !slices.EqualFunc(got, ts, time.Time.Equal) {
			t.Errorf("%s probed at %v, want %v", name, sinceEpoch(got), sinceEpoch(ts))
		}
	}
	if o := e.c.Overload(); o.Degraded || o.Lag != 0 {
		t.Errorf("overload %+v after batched starts; a tick's delay is not lateness", o)
	}
}

// probeTimes is an Observer that keeps the time of each probe result by
// target: with a fake clock that stands still while a probe runs, the
// time it started.
type probeTimes struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (p *probeTimes) ObserveProbe(s checker.Spec, r checker.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at[s.Name] = append(p.at[s.Name], r.Time)
}

func (p *probeTimes) ObserveTransition(checker.Transition) {}

func (p *probeTimes) of(name string) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.at[name])
}

func sinceEpoch(ts []time.Time) []time.Duration {
	out := []time.Duration{}
	for _, t := range ts {
		out = append(out, t.Sub(epoch))
	}
	return out
}

func list(c *checker.Checker) []checker.Status {
	sts, _ := c.List("")
	return sts
}

// The schedule loop follows an adaptive tick: eight targets at 1s are a
// quiet schedule (8 probes a second, far under ScheduleBurst per widest
// tick), so after its first second the checker widens its tick from
// ScheduleTick to ScheduleTickMax and, one interval later, wakes and
// starts probes on the wider tick only. No probe starts before its due
// time or more than ScheduleTickMax after it, and none of that is
// lateness to the overload detector.
func TestAdaptiveTickWidensOnAQuietSchedule(t *testing.T) {
	const base, widest = 10 * time.Millisecond, 50 * time.Millisecond
	starts := &probeTimes{at: map[string][]time.Time{}}
	e := newEnv(t, checker.Config{
		ScheduleTick:    base,
		ScheduleTickMax: widest,
		Overload:        checker.OverloadPolicy{MaxLag: time.Millisecond},
		Observer:        starts,
	})
	for i := range 8 {
		s := spec(fmt.Sprintf("q%d", i))
		s.Interval, s.Timeout = time.Second, 500*time.Millisecond
		e.add(t, s)
		e.probes.set(s.Name, pass)
	}
	first := map[string]time.Time{}
	for _, st := range list(e.c) {
		first[st.Spec.Name] = st.NextProbe
	}
	if tick := e.c.Overload().ScheduleTick; tick != base {
		t.Fatalf("tick %v before any probe, want ScheduleTick %v", tick, base)
	}
	e.c.Start()
	<-e.c.Scheduled()
	atRest := func() bool { return schedulerAtRest(e) }
	waitFor(t, "the scheduler's first timer", atRest)
	// Steps of 10ms land on every start of either tick.
	for i := range 400 {
		e.clock.Advance(base)
		waitFor(t, fmt.Sprintf("the checker at rest after step %d", i), atRest)
	}
	if tick := e.c.Overload().ScheduleTick; tick != widest {
		t.Fatalf("tick %v after 4s of 8 probes a second, want ScheduleTickMax %v", tick, widest)
	}
	wide := epoch.Add(2500 * time.Millisecond) // widened by 1.5s at the latest, plus an interval
	for name, due := range first {
		got := starts.of(name)
		if len(got) != 4 {
			t.Errorf("%s probed %d times in 4s, want 4: %v", name, len(got), sinceEpoch(got))
		}
		for k, at := range got {
			due := due.Add(time.Duration(k) * time.Second)
			if late := at.Sub(due); late < 0 || late > widest {
				t.Errorf("%s: probe %d due at %v started at %v, want within [0, %v] of it", name, k, due.Sub(epoch), at.Sub(epoch), widest)
			}
			if at.After(wide) && !at.Truncate(widest).Equal(at) {
				t.Errorf("%s: probe %d started at %v, off the %v tick", name, k, at.Sub(epoch), widest)
			}
		}
	}
	if o := e.c.Overload(); o.Degraded {
		t.Errorf("overload %+v after batched starts; a tick's delay is not lateness", o)
	}
}

// schedulerAtRest reports whether no probe is queued or running and the
// scheduler's timer, the clock's one waiter, is armed for the first start
// due (see Checker.SchedulerAtRest). A result that moves a start earlier
// wakes the scheduler to arm its timer again; until it has, the timer
// still armed is the old one.
func schedulerAtRest(e *testEnv) bool {
	return e.c.SchedulerAtRest() && e.clock.Waiters() == 1
}

package checker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// The tuner sets the tick to the time in which ScheduleBurst probes fall
// due, in whole milliseconds within its bounds, once per window, and moves
// it only by more than an eighth or to a bound.
func TestTickTunerFollowsTheProbeRate(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	k := tickTuner{base: 10 * time.Millisecond, max: 40 * time.Millisecond, burst: 100, since: t0}
	for _, tt := range []struct {
		name string
		at   time.Duration // since t0
		due  int           // probes due in this pass
		cur  time.Duration
		want time.Duration
	}{
		{"window not over: unchanged", 500 * time.Millisecond, 100, 10 * time.Millisecond, 10 * time.Millisecond},
		{"a quiet window widens to the max", time.Second, 0, 10 * time.Millisecond, 40 * time.Millisecond},
		{"10,000 probes a second narrow to the base", 2 * time.Second, 10000, 40 * time.Millisecond, 10 * time.Millisecond},
		{"100,000 a second: not under the base", 3 * time.Second, 100000, 10 * time.Millisecond, 10 * time.Millisecond},
		{"4,000 a second: 25ms", 4 * time.Second, 4000, 10 * time.Millisecond, 25 * time.Millisecond},
		{"3,700 a second: 27ms is within an eighth of 25ms", 5 * time.Second, 3700, 25 * time.Millisecond, 25 * time.Millisecond},
		{"3,000 a second: 33ms is not", 6 * time.Second, 3000, 25 * time.Millisecond, 33 * time.Millisecond},
		{"2,900 a second: 34ms, within an eighth of 33ms", 7 * time.Second, 2900, 33 * time.Millisecond, 33 * time.Millisecond},
		{"2,000 a second: the max, however close", 8 * time.Second, 2000, 37 * time.Millisecond, 40 * time.Millisecond},
		{"9,500 a second: 10.5ms is 10ms, the base", 9 * time.Second, 9500, 11 * time.Millisecond, 10 * time.Millisecond},
	} {
		if got := k.observe(t0.Add(tt.at), tt.due, tt.cur); got != tt.want {
			t.Errorf("%s: tick %v, want %v", tt.name, got, tt.want)
		}
	}
	// Probes counted before the window ends count in it.
	k.since = t0
	k.observe(t0.Add(400*time.Millisecond), 3000, 10*time.Millisecond)
	if got := k.observe(t0.Add(time.Second), 1000, 10*time.Millisecond); got != 25*time.Millisecond {
		t.Errorf("4,000 probes over two passes of a window: %v, want 25ms", got)
	}
	// A clock that went back starts the window again.
	k.observe(t0.Add(-time.Hour), 50000, 10*time.Millisecond)
	if got := k.observe(t0.Add(-time.Hour+time.Second), 4000, 10*time.Millisecond); got != 25*time.Millisecond {
		t.Errorf("after the clock went back: %v, want 25ms from the new window alone", got)
	}

	// A fixed tick: no ScheduleTickMax above it, or no tick at all.
	for _, fixed := range []tickTuner{
		{base: 10 * time.Millisecond, max: 0, burst: 100, since: t0},
		{base: 20 * time.Millisecond, max: 10 * time.Millisecond, burst: 100, since: t0},
		{base: 0, max: 20 * time.Millisecond, burst: 100, since: t0},
	} {
		if got := fixed.observe(t0.Add(time.Minute), 0, fixed.base); got != fixed.base {
			t.Errorf("tick %v, max %v: adapted to %v", fixed.base, fixed.max, got)
		}
	}
}

// Config's tick settings are bounded, and an error names the field and
// its bound.
func TestScheduleTickConfigBounds(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string // "" means accepted
	}{
		{Config{}, ""},
		{Config{ScheduleTick: MaxScheduleTick, ScheduleTickMax: MaxScheduleTick, ScheduleBurst: MaxScheduleBurst}, ""},
		{Config{ScheduleTick: 30 * time.Millisecond, ScheduleTickMax: 20 * time.Millisecond}, ""},
		{Config{ScheduleTick: -time.Millisecond}, "ScheduleTick must be between 0 and 1s, got -1ms"},
		{Config{ScheduleTick: 2 * time.Second}, "ScheduleTick must be between 0 and 1s, got 2s"},
		{Config{ScheduleTickMax: -time.Millisecond}, "ScheduleTickMax must be between 0 and 1s, got -1ms"},
		{Config{ScheduleTickMax: time.Hour}, "ScheduleTickMax must be between 0 and 1s, got 1h0m0s"},
		{Config{ScheduleBurst: -1}, "ScheduleBurst must be between 0 (the default, 125) and 100000, got -1"},
		{Config{ScheduleBurst: MaxScheduleBurst + 1}, "ScheduleBurst must be between 0 (the default, 125) and 100000, got 100001"},
	} {
		tt.cfg.NewProber = func(probe.Spec) (Prober, error) { return nopProber{}, nil }
		c, err := New(tt.cfg)
		if err == nil {
			c.Close()
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v, want accepted", tt.cfg, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}

// The schedule, pass by pass, as the tick adapts: a quiet schedule widens
// the tick to ScheduleTickMax; more targets, whose bursts would be over
// ScheduleBurst, narrow it to ScheduleTick; fewer widen it again in
// between. Whatever the tick, no probe starts before its due time or more
// than min(ScheduleTickMax, interval/10) after it, and batching, on a tick
// since given up included, is no lateness to the overload detector (its
// MaxLag is 1ms here); a pass that really is late still is.
func TestAdaptiveTickSchedule(t *testing.T) {
	const (
		base, widest = 10 * time.Millisecond, 40 * time.Millisecond
		burst        = 10
	)
	sim := newTickSim(t, Config{
		ScheduleTick: base, ScheduleTickMax: widest, ScheduleBurst: burst,
		Overload: OverloadPolicy{MaxLag: time.Millisecond},
	}, nopProber{})
	// Five targets under ten ticks of the widest: probed at their due time
	// while the tick is wide, batched while it is narrow.
	for i := range 5 {
		sim.add(t, fmt.Sprintf("short%d", i), 250*time.Millisecond)
	}

	// 50 targets at 1s: 70 probes a second, a tick of 10 probes would be
	// 142ms: the widest.
	sim.addMany(t, 0, 50, time.Second)
	sim.run(4 * time.Second)
	sim.expect(t, "50 targets", widest, widest)

	// 1,000 targets: 1,020 probes a second, bursts of 40 on the 40ms tick.
	sim.addMany(t, 50, 1000, time.Second)
	sim.run(time.Second)
	if b := sim.maxBurst(); b <= 2*burst {
		t.Fatalf("1,000 targets on a 40ms tick: bursts of at most %d probes; the test needs them over %d", b, 2*burst)
	}
	sim.run(4 * time.Second)
	sim.expect(t, "1,000 targets", base, base)

	// 400 targets: 420 a second, a tick of 23-24ms.
	for i := 400; i < 1000; i++ {
		if _, err := sim.c.Remove(fmt.Sprintf("t%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	sim.run(5 * time.Second)
	sim.expect(t, "400 targets", 23*time.Millisecond, 24*time.Millisecond)

	if o := sim.c.Overload(); o.Degraded || o.Lag != 0 {
		t.Fatalf("overload %+v after batched starts; a tick's delay is not lateness, whatever the tick is now", o)
	}
	sim.passLate(5 * time.Millisecond)
	if o := sim.c.Overload(); !o.Degraded || !strings.Contains(o.Reason, "started 5ms late") {
		t.Errorf("overload %+v after a pass 5ms late, MaxLag 1ms: want degraded", o)
	}
}

// A probe that will dial a new connection counts twice toward a burst:
// the same 500 targets at 1s take a 20ms tick while their probers keep
// their connections (a ConnKeeper that says so, or a Prober that is none),
// and a 10ms one while every probe dials.
func TestAdaptiveTickWeighsDials(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Prober
		want time.Duration
	}{
		{"no ConnKeeper", nopProber{}, 20 * time.Millisecond},
		{"keeps its connection", keeperProber{keeps: true}, 20 * time.Millisecond},
		{"dials", keeperProber{keeps: false}, 10 * time.Millisecond},
	} {
		sim := newTickSim(t, Config{ScheduleTick: 5 * time.Millisecond, ScheduleTickMax: 40 * time.Millisecond, ScheduleBurst: 10}, tt.p)
		sim.addMany(t, 0, 500, time.Second)
		sim.run(3 * time.Second)
		sim.expect(t, tt.name, tt.want, tt.want)
	}
}

type keeperProber struct {
	nopProber
	keeps bool
}

func (p keeperProber) KeepsConn() bool { return p.keeps }

// tickSim drives a checker's scheduler pass by pass on a clock of its own,
// without its goroutines: each pass starts at the first start in the due
// heap, as the schedule loop's timer would fire, and each probe it queues
// starts, and ends, at once.
type tickSim struct {
	c      *Checker
	clock  *simClock
	starts []simStart // since the last run began
}

type simStart struct {
	name          string
	due, start    time.Time
	interval, tck time.Duration // tck: the tick in force when the probe started
	pass          int
}

// newTickSim returns the simulation of a checker of cfg whose targets are
// probed by p.
func newTickSim(t *testing.T, cfg Config, p Prober) *tickSim {
	clock := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Clock = clock
	cfg.NewProber = func(probe.Spec) (Prober, error) { return p, nil }
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &tickSim{c: c, clock: clock}
}

func (s *tickSim) add(t *testing.T, name string, interval time.Duration) {
	t.Helper()
	sp := Spec{Name: name, Interval: interval, Timeout: interval / 2, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: name + ":80"}}}
	if _, _, err := s.c.Add(sp); err != nil {
		t.Fatal(err)
	}
}

func (s *tickSim) addMany(t *testing.T, from, to int, interval time.Duration) {
	t.Helper()
	for i := from; i < to; i++ {
		s.add(t, fmt.Sprintf("t%04d", i), interval)
	}
}

// run runs the passes of the next d.
func (s *tickSim) run(d time.Duration) {
	s.starts = s.starts[:0]
	end := s.clock.Now().Add(d)
	for n := 0; s.clock.Now().Before(end) && s.pass(0, n); n++ {
	}
}

// passLate runs the next pass late by late.
func (s *tickSim) passLate(late time.Duration) { s.pass(late, 0) }

// pass runs the next pass, late by late, numbered n; false if no target
// is scheduled.
func (s *tickSim) pass(late time.Duration, n int) bool {
	sc := s.c.sched
	s.c.reg.lock()
	defer s.c.reg.unlockAndReport()
	if len(sc.due) == 0 {
		return false
	}
	now := time.Unix(0, sc.due[0].startNs).Add(late)
	s.clock.set(now)
	sc.dueLocked(now)
	for {
		j, ok := sc.pool.pop()
		if !ok {
			return true
		}
		var a probeArgs
		sc.startLocked(j, &a)
		sc.pool.running--
		j.t.inFlight = false
		s.starts = append(s.starts, simStart{name: j.t.spec.Name, due: j.due, start: now, interval: j.interval, tck: sc.tick, pass: n})
	}
}

// maxBurst returns the most probes one pass of the last run started.
func (s *tickSim) maxBurst() int {
	per := map[int]int{}
	most := 0
	for _, st := range s.starts {
		per[st.pass]++
		most = max(most, per[st.pass])
	}
	return most
}

// expect checks that the tick is within [lo, hi] after the last run, that
// its last second's batched probes started on that tick, and that every
// probe of the run started within the lateness bound.
func (s *tickSim) expect(t *testing.T, what string, lo, hi time.Duration) {
	t.Helper()
	sc := s.c.sched
	s.c.reg.lock()
	tick, widest := sc.tick, sc.tuner.max
	s.c.reg.unlock()
	if tick < lo || tick > hi {
		t.Fatalf("%s: tick %v, want it in [%v, %v]", what, tick, lo, hi)
	}
	if got := s.c.Overload().ScheduleTick; got != tick {
		t.Errorf("%s: Overload().ScheduleTick %v, the tick in force %v", what, got, tick)
	}
	if len(s.starts) == 0 {
		t.Fatalf("%s: no probe started", what)
	}
	last := s.starts[len(s.starts)-1].start.Add(-time.Second)
	onTick := 0
	for _, st := range s.starts {
		late := st.start.Sub(st.due)
		if late < 0 || late > min(widest, st.interval/10) {
			t.Errorf("%s: %s due at %v started %v late, want within [0, %v]", what, st.name, st.due, late, min(widest, st.interval/10))
		}
		if st.start.Before(last) || st.interval/10 < tick {
			continue
		}
		if !st.start.Truncate(tick).Equal(st.start) {
			t.Errorf("%s: %s started at %v, off the %v tick", what, st.name, st.start, tick)
		}
		onTick++
	}
	if onTick == 0 {
		t.Errorf("%s: no batched probe started in the last second", what)
	}
}

// simClock is a Clock set by hand whose timers never fire: nothing runs the
// schedule loop.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *simClock) TimerAt(time.Time) Timer { return simTimer{} }

func (c *simClock) WithTimeout(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

type simTimer struct{}

func (simTimer) C() <-chan time.Time { return nil }
func (simTimer) Stop() bool          { return true }

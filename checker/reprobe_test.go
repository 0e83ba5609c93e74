package checker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
)

// watchingProbers are fake probers that keep a connection: the test says
// when the peer ends it (lose).
type watchingProbers struct {
	*fakeProbers
	mu      sync.Mutex
	lost    map[string]func(string) // by address: the last callback given
	watches int
	order   []string // addresses in the order their probes started
}

type watchingProber struct {
	*fakeProber
	w *watchingProbers
}

func (p *watchingProber) WatchConn(lost func(string)) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.w.lost[p.addr] = lost
	p.w.watches++
}

func (p *watchingProber) Probe(ctx context.Context) error {
	p.w.mu.Lock()
	p.w.order = append(p.w.order, p.addr)
	p.w.mu.Unlock()
	return p.fakeProber.Probe(ctx)
}

func (w *watchingProbers) started() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.order...)
}

func (w *watchingProbers) New(s probe.Spec) (checker.Prober, error) {
	p, err := w.fakeProbers.New(s)
	if err != nil {
		return nil, err
	}
	return &watchingProber{fakeProber: p.(*fakeProber), w: w}, nil
}

// lose reports the loss of name's kept connection, as its prober would.
func (w *watchingProbers) lose(t *testing.T, name, reason string) {
	t.Helper()
	w.mu.Lock()
	lost := w.lost[name+":80"]
	w.mu.Unlock()
	if lost == nil {
		t.Fatalf("%s's prober was not asked to watch its connection", name)
	}
	lost(reason)
}

func newWatchingEnv(t *testing.T, cfg checker.Config) (*testEnv, *watchingProbers) {
	t.Helper()
	clock := fakeclock.New(epoch)
	w := &watchingProbers{fakeProbers: newFakeProbers(clock), lost: map[string]func(string){}}
	cfg.Clock = clock
	cfg.NewProber = w.New
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testEnv{c: c, clock: clock, probes: w.fakeProbers}, w
}

// waitResults waits until name has n active results.
func waitResults(t *testing.T, e *testEnv, name string, n uint64) checker.Status {
	t.Helper()
	var st checker.Status
	waitFor(t, fmt.Sprintf("%s's result %d", name, n), func() bool {
		st, _ = e.c.Status(name)
		return st.ActiveResults >= n && !st.Probing
	})
	return st
}

func healthySpec(name string, interval time.Duration) checker.Spec {
	s := spec(name)
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = interval, 50*time.Millisecond, 2, 3, checker.StateHealthy
	return s
}

// A killed backend resets the kept connection: its target is probed at
// once, not at its next slot, and its failures follow the reprobe fast
// interval, so it is unhealthy (fall-1) x 100ms after the loss, where
// the schedule alone takes (fall-1) x 10s after its next slot. Once
// unhealthy it goes back to its interval.
func TestLostConnectionReprobesAtOnceAndFallsFast(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{})
	e.add(t, healthySpec("web", 10*time.Second))
	e.probes.set("web", pass)
	watch := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	probeNext(t, e, "web")

	e.clock.Advance(3 * time.Second) // between two slots
	e.probes.set("web", fail)        // the process died
	lostAt := e.clock.Now()
	w.lose(t, "web", "reset")
	st := waitResults(t, e, "web", 2)
	if !st.LastResult.Time.Equal(lostAt) || st.FailStreak != 1 {
		t.Fatalf("after the loss: last result at %v, fail streak %d; want a failed probe at the loss, %v", st.LastResult.Time, st.FailStreak, lostAt)
	}
	if st.ProbeInterval != checker.DefaultReprobeFastInterval || !st.NextProbe.Equal(lostAt.Add(checker.DefaultReprobeFastInterval)) {
		t.Fatalf("after a failed reprobe: interval %v, next probe in %v; want %v", st.ProbeInterval, st.NextProbe.Sub(lostAt), checker.DefaultReprobeFastInterval)
	}
	probeNext(t, e, "web")
	down := probeNext(t, e, "web")
	st, _ = e.c.Status("web")
	if st.State != checker.StateUnhealthy || down.Sub(lostAt) != 2*checker.DefaultReprobeFastInterval {
		t.Fatalf("%v, %v after the loss; want unhealthy after (fall-1) x %v", st.State, down.Sub(lostAt), checker.DefaultReprobeFastInterval)
	}
	if st.ProbeInterval != 10*time.Second {
		t.Errorf("unhealthy: probe interval %v, want the interval again, 10s", st.ProbeInterval)
	}
	if diff := cmp.Diff([]string{"web: healthy -> unhealthy"}, kinds(next(t, watch))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := e.c.Reprobes(); got.Reprobes["reset"] != 1 || len(got.Reprobes) != 1 {
		t.Errorf("Reprobes() = %+v, want one for reset", got)
	}
}

// A reprobe starts at the loss, not at the end of the schedule tick that
// batches the scheduled probes: the loss is news, and a tick of 25ms
// would delay every reprobe by up to that much.
func TestReprobeIsNotBatchedOnTheTick(t *testing.T) {
	const tick = 25 * time.Millisecond
	e, w := newWatchingEnv(t, checker.Config{ScheduleTick: tick})
	e.add(t, healthySpec("web", 10*time.Second))
	e.probes.set("web", pass)
	e.c.Start()
	e.clock.Advance(11 * time.Second) // past the first probe's tick
	waitResults(t, e, "web", 1)

	e.clock.Advance(3*time.Second + 3*time.Millisecond) // off the tick's grid
	lostAt := e.clock.Now()
	if lostAt.Truncate(tick).Equal(lostAt) {
		t.Fatalf("the loss at %v is on the tick's grid; the test needs it off", lostAt)
	}
	w.lose(t, "web", "reset")
	st := waitResults(t, e, "web", 2)
	if !st.LastResult.Time.Equal(lostAt) {
		t.Fatalf("reprobe at %v after the loss; want at the loss", st.LastResult.Time.Sub(lostAt))
	}
}

// A server that closes its idle connections a second after each answer
// costs at most one extra probe per interval: a loss within an interval
// of the last reprobe brings nothing forward, a passing reprobe leaves
// the interval as it was, and only probe results count (no transition).
func TestIdleClosesCostAtMostOneProbePerInterval(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{})
	e.add(t, healthySpec("web", 10*time.Second))
	e.probes.set("web", pass)
	watch := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	probeNext(t, e, "web")
	start := e.clock.Now()
	probes := e.probes.callCount("web")
	const window = 60 * time.Second
	for e.clock.Now().Sub(start) < window {
		e.clock.Advance(time.Second)
		w.lose(t, "web", "closed")
		// Each loss is handled (a reprobe, or a skip) before the next.
		waitFor(t, "the loss to be handled", func() bool {
			r := e.c.Reprobes()
			st, _ := e.c.Status("web")
			return r.Reprobes["closed"]+r.Skipped == uint64(e.clock.Now().Sub(start)/time.Second) && !st.Probing
		})
		st, _ := e.c.Status("web")
		if st.ProbeInterval != 10*time.Second {
			t.Fatalf("after a passing reprobe: interval %v, want 10s", st.ProbeInterval)
		}
	}
	scheduled := int(window / (10 * time.Second))
	got := e.c.Reprobes()
	extra := e.probes.callCount("web") - probes - scheduled
	if got.Reprobes["closed"] == 0 || got.Skipped == 0 || extra > scheduled {
		t.Errorf("%d probes in %v with a close every second (%d scheduled), reprobes %+v; want at most one extra a 10s interval", e.probes.callCount("web")-probes, window, scheduled, got)
	}
	if evs := kinds(next(t, watch)); len(evs) != 0 {
		t.Errorf("events: %v, want none: a lost connection is not a failure", evs)
	}
}

// A loss while a probe is in flight brings nothing forward (that probe's
// result tells), but that probe's failure follows the reprobe fast
// interval; a loss told by a prober its target has replaced changes
// nothing.
func TestLostConnectionInFlightOrStale(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{})
	e.add(t, healthySpec("busy", 10*time.Second))
	e.add(t, healthySpec("old", 10*time.Second))
	e.add(t, healthySpec("idle", 10*time.Second))
	e.probes.setAll(map[string]outcome{"busy": pass, "old": pass, "idle": pass})
	e.c.Start()
	for _, n := range []string{"busy", "old", "idle"} {
		probeNext(t, e, n)
	}
	w.mu.Lock()
	staleLost := w.lost["old:80"]
	w.mu.Unlock()
	replaced := healthySpec("old", 10*time.Second)
	replaced.Probe.TCP.Address = "old-2:80"
	e.add(t, replaced)
	e.probes.set("busy", outcome{hang: true}) // then times out: a failure
	busy, _ := e.c.Status("busy")
	e.clock.Advance(busy.NextProbe.Sub(e.clock.Now()))
	slot := e.clock.Now()
	// Its prober has been called, so its timeout is on the fake clock.
	waitFor(t, "busy's probe to hang", func() bool { return e.probes.callCount("busy") == 2 })
	idle := waitResults(t, e, "idle", 1)

	w.lose(t, "busy", "reset")
	staleLost("reset")
	w.lose(t, "idle", "reset") // handled in the same pass as the others, or after
	waitResults(t, e, "idle", idle.ActiveResults+1)
	if got := e.c.Reprobes(); got.Reprobes["reset"] != 2 {
		t.Errorf("Reprobes() = %+v, want two (busy's and idle's; not old's)", got)
	}
	if n := e.probes.callCount("busy"); n != 2 {
		t.Errorf("busy probed %d times, want 2: nothing brought forward while in flight", n)
	}
	e.clock.Advance(time.Second) // busy's probe times out
	st := waitResults(t, e, "busy", busy.ActiveResults+1)
	if st.FailStreak != 1 || st.ProbeInterval != checker.DefaultReprobeFastInterval || !st.NextProbe.After(slot) || st.NextProbe.Sub(slot)%checker.DefaultReprobeFastInterval != 0 {
		t.Errorf("after the probe in flight failed: streak %d, interval %v, next probe %v after its slot; want the reprobe fast interval's grid", st.FailStreak, st.ProbeInterval, st.NextProbe.Sub(slot))
	}
}

// With reprobes disabled no prober is asked to watch its connection; a
// fast interval out of bounds is refused.
func TestReprobePolicy(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{Reprobe: checker.ReprobePolicy{Disabled: true}})
	e.add(t, healthySpec("web", time.Second))
	if w.watches != 0 {
		t.Errorf("disabled: %d probers watch their connection, want none", w.watches)
	}
	for _, d := range []time.Duration{-time.Millisecond, time.Microsecond, 2 * time.Minute} {
		_, err := checker.New(checker.Config{Reprobe: checker.ReprobePolicy{FastInterval: d}})
		if err == nil || !strings.Contains(err.Error(), "reprobe fast interval") {
			t.Errorf("FastInterval %v: %v, want an error naming the reprobe fast interval", d, err)
		}
	}
}

// Reprobes queued at once (a rack that dies resets many connections)
// are no sign of overload: the checker stays not degraded however many
// wait for a slot.
func TestReprobeBurstIsNoOverload(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{MaxConcurrentProbes: 1})
	names := []string{"a", "b", "c"}
	for _, n := range names {
		e.add(t, healthySpec(n, 10*time.Second))
		e.probes.set(n, pass)
	}
	e.c.Start()
	for _, n := range names {
		probeNext(t, e, n)
		e.probes.set(n, outcome{hang: true}) // the reprobes wait for their timeout
	}
	for _, n := range names {
		w.lose(t, n, "reset")
	}
	waitFor(t, "the three reprobes to be queued or running", func() bool {
		for _, n := range names {
			if st, _ := e.c.Status(n); !st.Probing {
				return false
			}
		}
		return true
	})
	if ov := e.c.Overload(); ov.Degraded {
		t.Errorf("degraded by a burst of reprobes: %+v", ov)
	}
	for range names { // let each hanging reprobe time out in turn
		e.clock.Advance(time.Second)
	}
}

// A reprobe waiting for a slot is taken before the scheduled probes that
// wait with it: behind a backlog, each of a dying target's fall probes
// would wait for all of it.
func TestReprobeJumpsTheQueue(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{MaxConcurrentProbes: 1, Overload: checker.OverloadPolicy{Disabled: true}})
	long := healthySpec("busy", time.Minute)
	long.Timeout = time.Minute // holds the one slot for a minute when it hangs
	e.add(t, long)
	e.add(t, healthySpec("queued", 10*time.Second))
	e.add(t, healthySpec("dying", 10*time.Minute)) // not due again during the test
	for _, n := range []string{"busy", "queued", "dying"} {
		e.probes.set(n, pass)
	}
	e.c.Start()
	for _, n := range []string{"busy", "queued", "dying"} {
		probeNext(t, e, n)
	}
	e.probes.set("busy", outcome{hang: true})
	busy, _ := e.c.Status("busy")
	e.clock.Advance(busy.NextProbe.Sub(e.clock.Now()))
	waitFor(t, "busy's probe to hang", func() bool { return e.probes.inFlight() == 1 })
	queued, _ := e.c.Status("queued")
	e.clock.Advance(queued.NextProbe.Sub(e.clock.Now()))
	waitFor(t, "queued's probe to wait for the slot", func() bool { st, _ := e.c.Status("queued"); return st.Probing })
	if st, _ := e.c.Status("dying"); st.Probing {
		t.Fatal("dying has a probe in flight before its loss")
	}
	w.lose(t, "dying", "reset")
	waitFor(t, "dying's reprobe to wait for the slot", func() bool { st, _ := e.c.Status("dying"); return st.Probing })
	from := len(w.started())
	e.clock.Advance(time.Minute) // busy's probe times out: the slot is free
	waitFor(t, "both waiting probes to run", func() bool { return len(w.started()) >= from+2 })
	if got := w.started()[from : from+2]; got[0] != "dying:80" {
		t.Errorf("probes started after the slot freed: %v; want dying's reprobe first", got)
	}
}

// A reprobe that times out while the checker is overloaded does not
// count (stale is not down), and leaves the target at its interval: an
// overloaded checker is not made to probe a hanging target every 100ms.
func TestIgnoredReprobeLeavesTheInterval(t *testing.T) {
	e, w := newWatchingEnv(t, checker.Config{Overload: checker.OverloadPolicy{MaxLag: time.Nanosecond}})
	s := healthySpec("web", 10*time.Second)
	s.Timeout = time.Second
	e.add(t, s)
	e.probes.set("web", pass)
	e.c.Start()
	st, _ := e.c.Status("web")
	e.clock.Advance(st.NextProbe.Sub(e.clock.Now()) + time.Millisecond) // late: a sign of overload
	waitFor(t, "a late probe to make the checker degraded", func() bool {
		st, _ := e.c.Status("web")
		return st.ActiveResults == 1 && !st.Probing && e.c.Overload().Degraded
	})
	e.probes.set("web", outcome{hang: true})
	w.lose(t, "web", "reset")
	// Its prober has been called, so its timeout is on the fake clock.
	waitFor(t, "the reprobe to hang", func() bool { return e.probes.callCount("web") == 2 })
	e.clock.Advance(time.Second) // its timeout
	waitFor(t, "the ignored timeout", func() bool { st, _ := e.c.Status("web"); return st.IgnoredTimeouts == 1 && !st.Probing })
	if st, _ = e.c.Status("web"); st.ProbeInterval != 10*time.Second || st.State != checker.StateHealthy {
		t.Errorf("after an ignored reprobe: %v, interval %v; want healthy at the interval, 10s", st.State, st.ProbeInterval)
	}
}

package checker_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// answerWithin bounds each call these tests make to a checker: a scheduler
// spinning under the checker's lock would block every call for ever.
const answerWithin = 10 * time.Second

// guardedEnv is a testEnv whose calls fail the test, instead of hanging
// it, when the checker stops answering.
type guardedEnv struct {
	*testEnv
	wedged bool // the checker stopped answering: it cannot be closed either
}

func newGuardedEnv(t *testing.T) *guardedEnv {
	t.Helper()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	c, err := checker.New(checker.Config{Clock: clock, NewProber: fp.New})
	if err != nil {
		t.Fatal(err)
	}
	e := &guardedEnv{testEnv: &testEnv{c: c, clock: clock, probes: fp}}
	t.Cleanup(func() {
		if !e.wedged {
			c.Close()
		}
	})
	return e
}

// within runs f, which must not call t.Fatal, and fails the test if it has
// not returned within answerWithin.
func (e *guardedEnv) within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(answerWithin):
		e.wedged = true
		t.Fatalf("%s: no answer within %v: the checker is wedged", what, answerWithin)
	}
}

// start starts the checker and waits for the scheduler's first pass.
func (e *guardedEnv) start(t *testing.T) {
	t.Helper()
	e.c.Start()
	e.within(t, "the scheduler's first pass", func() { <-e.c.Scheduled() })
}

func (e *guardedEnv) status(t *testing.T, name string) checker.Status {
	t.Helper()
	var (
		st  checker.Status
		err error
	)
	e.within(t, "Status("+name+")", func() { st, err = e.c.Status(name) })
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// probeNext moves the clock to name's next probe and waits for its result,
// as probeNext does, and returns the time of the probe.
func (e *guardedEnv) probeNext(t *testing.T, name string) time.Time {
	t.Helper()
	st := e.status(t, name)
	n := st.ActiveResults + 1
	e.clock.Advance(st.NextProbe.Sub(e.clock.Now()))
	waitFor(t, fmt.Sprintf("%s's result %d", name, n), func() bool { return e.status(t, name).ActiveResults == n })
	return e.clock.Now()
}

// onTime probes name n times and checks that each probe came one interval
// after the one before.
func (e *guardedEnv) onTime(t *testing.T, name string, interval time.Duration, n int) {
	t.Helper()
	prev := e.probeNext(t, name)
	for i := range n {
		p := e.probeNext(t, name)
		if got := p.Sub(prev); got != interval {
			t.Errorf("%s's probe %d came %v after the one before, want %v", name, i+1, got, interval)
		}
		prev = p
	}
}

// waitResults waits until name has had n probe results.
func (e *guardedEnv) waitResults(t *testing.T, name string, n uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s's result %d", name, n), func() bool { return e.status(t, name).ActiveResults >= n })
}

// The largest value each field accepts, on several targets, changes
// nothing for the others: a target probed every second stays on its grid,
// before and after a day that passes at once, during which every large
// target is probed and scheduled a day on.
func TestLargestAcceptedValuesKeepOtherTargetsOnTime(t *testing.T) {
	e := newGuardedEnv(t)
	ok := spec("ok")
	ok.Interval, ok.Timeout = time.Second, 500*time.Millisecond
	e.add(t, ok)
	e.probes.set("ok", pass)
	var big []string
	for i := range 3 {
		s := largestSpec(fmt.Sprintf("big-%d", i))
		e.add(t, s)
		e.probes.set(s.Name, fail)
		big = append(big, s.Name)
	}
	e.start(t)

	var (
		st      checker.Status
		counted bool
		err     error
	)
	e.within(t, "ReportOutcome", func() {
		st, counted, err = e.c.ReportOutcome("big-0", checker.Outcome{Pass: true, Latency: checker.MaxOutcomeLatency})
	})
	if err != nil || !counted || st.LastResult == nil || st.LastResult.Pass {
		t.Errorf("an outcome of the largest latency: counted %v, last result %+v, %v; want counted, a slow failure", counted, st.LastResult, err)
	}
	e.onTime(t, "ok", time.Second, 5)

	before := e.status(t, "ok").ActiveResults
	e.clock.Advance(checker.MaxInterval + time.Hour) // ok misses 90,000 slots; every big target falls due
	e.waitResults(t, "ok", before+1)                 // the one slot it catches up with, not 90,000
	for _, name := range big {
		e.waitResults(t, name, 1)
		st := e.status(t, name)
		if now := e.clock.Now(); !st.NextProbe.After(now) || st.NextProbe.After(now.Add(checker.MaxInterval)) {
			t.Errorf("%s's next probe %v after now, want within the largest interval", name, st.NextProbe.Sub(now))
		}
	}
	if got := e.status(t, "ok").ActiveResults; got != before+1 {
		t.Errorf("ok was probed %d times for the day that passed at once, want 1 (missed slots are skipped)", got-before)
	}
	e.onTime(t, "ok", time.Second, 5)
}

// A spec that skipped validation, with the largest durations and counts a
// Go value holds, or a zero interval, or a first probe due at the start of
// representable time, does not wedge the scheduler: it answers, and a
// well-behaved target is probed on time. Before the scheduler's time
// arithmetic saturated, "huge" made it spin under the checker's lock.
func TestUnboundedSpecsDoNotWedgeTheScheduler(t *testing.T) {
	e := newGuardedEnv(t)
	ok := spec("ok")
	ok.Interval, ok.Timeout = time.Second, 500*time.Millisecond
	e.add(t, ok)
	e.probes.set("ok", pass)

	huge := spec("huge")
	huge.Interval, huge.Timeout, huge.MaxLatency = math.MaxInt64, math.MaxInt64, math.MaxInt64
	huge.FastInterval, huge.DownInterval = math.MaxInt64, math.MaxInt64
	huge.FlapWindow, huge.FlapStableFor = math.MaxInt64, math.MaxInt64
	huge.Rise, huge.Fall, huge.FlapThreshold, huge.PassiveRate = math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt
	huge.PassiveOutcomes, huge.InitialState = true, checker.StateHealthy
	ancient := spec("ancient")
	ancient.Interval, ancient.Timeout, ancient.Rise, ancient.Fall = time.Second, time.Second, 1, 1
	zero := spec("zero") // every duration zero: no default filled in
	zero.Rise, zero.Fall = 1, 1
	for _, u := range []struct {
		s     checker.Spec
		first time.Time
	}{
		{huge, epoch},                          // due now, then ~292 years on
		{ancient, time.Unix(0, math.MinInt64)}, // due since 1677
		{zero, epoch},
	} {
		if err := e.c.AddUnchecked(u.s, u.first); err != nil {
			t.Fatal(err)
		}
		e.probes.set(u.s.Name, pass)
	}
	e.start(t)
	for _, name := range []string{"huge", "ancient", "zero"} {
		e.waitResults(t, name, 1)
	}
	e.within(t, "ReportOutcome", func() {
		e.c.ReportOutcome("huge", checker.Outcome{Err: "connection reset"}) // fast_interval from now on
	})
	e.onTime(t, "ok", time.Second, 5)
	before := e.status(t, "ok").ActiveResults
	e.clock.Advance(100 * 24 * time.Hour)
	e.waitResults(t, "ok", before+1) // the one missed slot it catches up with
	e.onTime(t, "ok", time.Second, 5)

	end := time.Unix(0, math.MaxInt64) // the last time UnixNano holds
	if st := e.status(t, "huge"); !st.NextProbe.Equal(end) || st.ActiveResults != 1 {
		t.Errorf("huge: next probe at %v after %d results, want at %v after 1", st.NextProbe, st.ActiveResults, end)
	}
	if st := e.status(t, "ancient"); !st.NextProbe.After(e.clock.Now()) || st.ActiveResults < 2 {
		t.Errorf("ancient: next probe %v after now after %d results, want a slot after now, after 2 or more", st.NextProbe.Sub(e.clock.Now()), st.ActiveResults)
	}
	if st := e.status(t, "zero"); !st.NextProbe.After(e.clock.Now()) || st.NextProbe.Sub(e.clock.Now()) > checker.MinInterval {
		t.Errorf("zero: next probe %v after now, want at most MinInterval (%v)", st.NextProbe.Sub(e.clock.Now()), checker.MinInterval)
	}
}

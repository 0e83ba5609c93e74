package checker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// Passive outcomes feed the same machine as probes when the spec allows
// them, are rate-limited per target, and are counted apart from probes.
func TestReportOutcome(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("web-1")
	s.Rise, s.Fall, s.InitialState = 2, 2, checker.StateHealthy
	s.MaxLatency = 500 * time.Millisecond
	s.PassiveOutcomes, s.PassiveRate = true, 3
	e.add(t, s)
	e.add(t, spec("probes-only"))
	w := watchNow(t, e.c, checker.Filter{})

	report := func(o checker.Outcome) (checker.Status, bool) {
		t.Helper()
		st, counted, err := e.c.ReportOutcome("web-1", o)
		if err != nil {
			t.Fatal(err)
		}
		return st, counted
	}
	report(checker.Outcome{Pass: false, Err: "upstream reset"})
	st, counted := report(checker.Outcome{Pass: true, Latency: 612 * time.Millisecond}) // slow: a failure
	if !counted || st.State != checker.StateUnhealthy || st.PassiveResults != 2 || st.ActiveResults != 0 {
		t.Fatalf("after two failed outcomes: counted %v, %+v", counted, st)
	}
	if lr := st.LastResult; lr == nil || !lr.Passive || lr.Pass || lr.Err != "slow: 612ms > 500ms" {
		t.Errorf("last result %+v", st.LastResult)
	}
	// The bucket holds 3: the third outcome in the same instant is the
	// last counted, the fourth is dropped.
	if _, counted := report(checker.Outcome{Pass: true}); !counted {
		t.Error("third outcome not counted")
	}
	st, counted = report(checker.Outcome{Pass: true})
	if counted || st.PassiveLimited != 1 || st.PassiveResults != 3 || st.State != checker.StateUnhealthy {
		t.Errorf("fourth outcome: counted %v, %+v; want dropped", counted, st)
	}
	e.clock.Advance(400 * time.Millisecond) // 3 a second: one more token
	if st, counted = report(checker.Outcome{Pass: true}); !counted || st.State != checker.StateHealthy {
		t.Errorf("after 400ms: counted %v, state %v; want counted and healthy (rise 2)", counted, st.State)
	}
	// Probes and outcomes feed the same machine and are counted apart.
	e.probes.set("web-1", pass)
	e.c.RunRound(t.Context())
	if st, _ := e.c.Status("web-1"); st.ActiveResults != 1 || st.PassiveResults != 4 || st.PassStreak != 3 {
		t.Errorf("after a probe: %+v", st)
	}
	evs := next(t, w)
	if diff := cmp.Diff([]string{"web-1: healthy -> unhealthy", "web-1: unhealthy -> healthy"}, kinds(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if r := evs[0].Transition.Result; !r.Passive || r.Err != "slow: 612ms > 500ms" {
		t.Errorf("the fall's result %+v, want the passive outcome", r)
	}

	// Errors.
	_, _, err := e.c.ReportOutcome("probes-only", checker.Outcome{Pass: true})
	if !errors.Is(err, checker.ErrPassiveDisabled) || !strings.Contains(err.Error(), `"probes-only"`) {
		t.Errorf("a target without passive outcomes: %v", err)
	}
	if _, _, err := e.c.ReportOutcome("nope", checker.Outcome{Pass: true}); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("unknown target: %v", err)
	}
	for _, tt := range []struct {
		o     checker.Outcome
		field string
	}{
		{checker.Outcome{Latency: -time.Second}, "latency"},
		{checker.Outcome{Latency: checker.MaxOutcomeLatency + 1}, "latency"},
		{checker.Outcome{Latency: math.MaxInt64}, "latency"},
		{checker.Outcome{Pass: true, Err: "but failed"}, "error"},
		{checker.Outcome{Err: strings.Repeat("x", checker.MaxOutcomeErrLen+1)}, "error"},
	} {
		_, _, err := e.c.ReportOutcome("web-1", tt.o)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: %v, want a FieldError on %s", tt.o, err, tt.field)
		}
	}
	if st, _ := e.c.Status("web-1"); st.PassiveResults != 4 {
		t.Errorf("rejected outcomes were counted: %d", st.PassiveResults)
	}
}

// A passive failure starts a failure streak, and the scheduler brings the
// next probe forward to fast_interval.
func TestPassiveFailureBringsTheNextProbeForward(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("web-1")
	s.Interval, s.FastInterval, s.Timeout = 10*time.Second, time.Second, 500*time.Millisecond
	s.InitialState, s.PassiveOutcomes = checker.StateHealthy, true
	e.add(t, s)
	e.probes.set("web-1", pass)
	e.c.Start()
	p0 := probeNext(t, e, "web-1")
	if st, _ := e.c.Status("web-1"); !st.NextProbe.Equal(p0.Add(10 * time.Second)) {
		t.Fatalf("next probe in %v, want 10s", st.NextProbe.Sub(p0))
	}
	e.clock.Advance(2 * time.Second)
	st, _, err := e.c.ReportOutcome("web-1", checker.Outcome{Err: "connection reset"})
	if err != nil || st.FailStreak != 1 || st.ProbeInterval != time.Second || !st.NextProbe.Equal(p0.Add(3*time.Second)) {
		t.Errorf("after a passive failure: %+v, %v; want the next probe at the first fast slot, 3s after the last probe", st, err)
	}
}

// An outcome's latency is accepted up to MaxOutcomeLatency and refused past
// it, naming the bound.
func TestOutcomeLatencyBound(t *testing.T) {
	if err := (checker.Outcome{Pass: true, Latency: checker.MaxOutcomeLatency}).Validate(); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	err := checker.Outcome{Pass: true, Latency: checker.MaxOutcomeLatency + time.Nanosecond}.Validate()
	if want := "latency: must be at most 24h0m0s, got 24h0m0.000000001s"; err == nil || err.Error() != want {
		t.Errorf("past the bound: %v, want %q", err, want)
	}
}

// A new passive_rate applies at once: the bucket takes the new rate and
// burst.
func TestPassiveRateChangeAppliesAtOnce(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("web-1")
	s.PassiveOutcomes, s.PassiveRate = true, 5
	e.add(t, s)
	counted := func() int {
		n := 0
		for range 10 {
			if _, ok, err := e.c.ReportOutcome("web-1", checker.Outcome{Pass: true}); err != nil {
				t.Fatal(err)
			} else if ok {
				n++
			}
		}
		return n
	}
	if n := counted(); n != 5 {
		t.Fatalf("%d of 10 outcomes in one instant counted at rate 5, want 5", n)
	}
	s.PassiveRate = 1
	e.add(t, s)
	e.clock.Advance(time.Second)
	if n := counted(); n != 1 {
		t.Errorf("%d of 10 outcomes counted a second after the rate became 1, want 1", n)
	}
}

package checker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

func TestMachineTransitioning(t *testing.T) {
	tests := []struct {
		name string
		m    checker.Machine
		want bool
	}{
		{"healthy, steady", checker.Machine{State: H, PassStreak: 5}, false},
		{"healthy, one failure toward fall", checker.Machine{State: H, FailStreak: 1}, true},
		{"unhealthy, steady", checker.Machine{State: U, FailStreak: 9}, false},
		{"unhealthy, one pass toward rise", checker.Machine{State: U, PassStreak: 1}, true},
		{"suspect, either way", checker.Machine{Model: checker.ModelThreeState, State: S}, true},
	}
	for _, tt := range tests {
		if got := tt.m.Transitioning(); got != tt.want {
			t.Errorf("%s: Transitioning() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// probeNext moves the fake clock to the target's next probe and waits for
// its result; it returns the time of the probe.
func probeNext(t *testing.T, e *testEnv, name string) time.Time {
	t.Helper()
	st, err := e.c.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	n := st.ActiveResults + 1
	e.clock.Advance(st.NextProbe.Sub(e.clock.Now()))
	waitFor(t, fmt.Sprintf("%s's result %d", name, n), func() bool {
		st, _ := e.c.Status(name)
		return st.ActiveResults == n
	})
	return e.clock.Now()
}

// A target on its way to a transition is probed at fast_interval, so a
// dead one is detected at its first failure + (fall-1) x fast_interval;
// an unhealthy one is probed at down_interval, and on its way back up at
// fast_interval again. Without fast_interval, detection takes (fall-1)
// whole intervals more.
func TestFastAndDownIntervals(t *testing.T) {
	const fall = 3
	tests := []struct {
		name       string
		fast, down time.Duration
		wantDetect time.Duration // from the first failure to unhealthy
		wantRise   time.Duration // from the first pass to healthy again
	}{
		{"fast 1s, down 30s", time.Second, 30 * time.Second, (fall - 1) * time.Second, time.Second},
		{"unset: the interval", 0, 0, (fall - 1) * 10 * time.Second, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, checker.Config{})
			s := spec("db")
			s.Interval, s.Timeout, s.FastInterval, s.DownInterval = 10*time.Second, 500*time.Millisecond, tt.fast, tt.down
			s.Rise, s.Fall, s.InitialState = 2, fall, checker.StateHealthy
			e.add(t, s)
			e.probes.set("db", pass)
			w := watchNow(t, e.c, checker.Filter{})
			e.c.Start()

			p0 := probeNext(t, e, "db")
			e.probes.set("db", fail) // the target dies
			first := probeNext(t, e, "db")
			if first.Sub(p0) != 10*time.Second {
				t.Errorf("first failure %v after the last pass, want the interval, 10s", first.Sub(p0))
			}
			st, _ := e.c.Status("db")
			if want := tt.fast; want > 0 && (st.ProbeInterval != want || !st.NextProbe.Equal(first.Add(want))) {
				t.Errorf("after one failure: probe interval %v, next probe in %v; want fast_interval %v", st.ProbeInterval, st.NextProbe.Sub(first), want)
			}
			var down time.Time
			for range fall - 1 {
				down = probeNext(t, e, "db")
			}
			st, _ = e.c.Status("db")
			if st.State != checker.StateUnhealthy || !st.LastTransition.Equal(down) {
				t.Fatalf("after %d failures: %v since %v", fall, st.State, st.LastTransition)
			}
			if got := down.Sub(first); got != tt.wantDetect {
				t.Errorf("detected %v after the first failure, want (fall-1) x fast_interval = %v", got, tt.wantDetect)
			}
			wantDown := s.Interval
			if tt.down > 0 {
				wantDown = tt.down
			}
			if st.ProbeInterval != wantDown || !st.NextProbe.Equal(down.Add(wantDown)) {
				t.Errorf("unhealthy: probe interval %v, next in %v; want down_interval %v", st.ProbeInterval, st.NextProbe.Sub(down), wantDown)
			}

			e.probes.set("db", pass) // it comes back
			up1 := probeNext(t, e, "db")
			if up1.Sub(down) != wantDown {
				t.Errorf("first probe after the fall %v later, want %v", up1.Sub(down), wantDown)
			}
			up2 := probeNext(t, e, "db")
			if got := up2.Sub(up1); got != tt.wantRise {
				t.Errorf("rose %v after its first pass, want %v", got, tt.wantRise)
			}
			if diff := cmp.Diff([]string{"db: healthy -> unhealthy", "db: unhealthy -> healthy"}, kinds(next(t, w))); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			st, _ = e.c.Status("db")
			if st.ProbeInterval != s.Interval || !st.NextProbe.Equal(up2.Add(s.Interval)) {
				t.Errorf("healthy again: probe interval %v, next in %v; want the interval", st.ProbeInterval, st.NextProbe.Sub(up2))
			}
		})
	}
}

func TestIntervalsAreValidated(t *testing.T) {
	e := newEnv(t, checker.Config{})
	for _, tt := range []struct {
		field string
		edit  func(*checker.Spec)
	}{
		{"fast_interval", func(s *checker.Spec) { s.Timeout, s.FastInterval = time.Second, 500*time.Millisecond }},
		{"fast_interval", func(s *checker.Spec) { s.FastInterval = -time.Second }},
		{"down_interval", func(s *checker.Spec) { s.Timeout, s.DownInterval = time.Second, 999*time.Millisecond }},
		{"flap_threshold", func(s *checker.Spec) { s.FlapThreshold = 1 }},
		{"flap_stable_for", func(s *checker.Spec) { s.FlapStableFor = time.Minute }},
		{"flap_window", func(s *checker.Spec) { s.FlapWindow = -time.Minute }},
		{"passive_rate", func(s *checker.Spec) { s.PassiveRate = 5 }},
	} {
		s := spec("a")
		tt.edit(&s)
		_, _, err := e.c.Add(s)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: %v, want a FieldError on %s", s, err, tt.field)
		}
	}
	// An unset timeout is the default one (1s), not shortened to fit a
	// shorter fast_interval: that is refused, saying what to change, and
	// nothing is added.
	s := spec("b")
	s.Interval, s.FastInterval = 10*time.Second, 300*time.Millisecond
	_, _, err := e.c.Add(s)
	const want = "fast_interval: must be at least the timeout (1s), got 300ms: set timeout to at most 300ms, or a longer fast_interval"
	if err == nil || err.Error() != want {
		t.Errorf("fast_interval 300ms with the default timeout: %v, want %q", err, want)
	}
	if _, err := e.c.Status("b"); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("the refused target was added: %v", err)
	}
	s.Timeout = 300 * time.Millisecond
	if st, _, err := e.c.Add(s); err != nil || st.Spec.Timeout != 300*time.Millisecond || st.Spec.FastInterval != 300*time.Millisecond || st.Spec.DownInterval != 0 {
		t.Errorf("with timeout 300ms: timeout %v fast %v down %v, %v; want 300ms, 300ms and down unset", st.Spec.Timeout, st.Spec.FastInterval, st.Spec.DownInterval, err)
	}
	// Server defaults fill unset intervals, raised to the timeout a spec
	// sets when it is longer than the default one.
	d := checker.StandardDefaults()
	d.FastInterval, d.DownInterval = time.Second, 10*time.Second
	got := spec("c")
	got.Timeout = 1800 * time.Millisecond
	got = got.WithDefaults(d)
	if got.FastInterval != 1800*time.Millisecond || got.DownInterval != 10*time.Second {
		t.Errorf("defaulted intervals fast %v down %v, want 1.8s (the timeout) and 10s", got.FastInterval, got.DownInterval)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("a spec with defaulted intervals: %v", err)
	}
}

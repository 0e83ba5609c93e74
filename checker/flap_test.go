package checker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// flakyServer is a flapping server's probe results, one probe a second:
// pass, fail, pass, fail, pass, four failures, pass.
var flakyServer = []bool{true, false, true, false, true, false, false, false, false, true}

// flapRun probes "web-2" (rise 1, fall 1, starting in the pool) once a
// second with results, and returns its in-pool trace: O in the pool, x out.
func flapRun(t *testing.T, e *testEnv, results []bool) string {
	t.Helper()
	var trace []string
	for _, ok := range results {
		e.clock.Advance(time.Second)
		e.probes.set("web-2", map[bool]outcome{true: pass, false: fail}[ok])
		e.c.RunRound(t.Context())
		st, _ := e.c.Status("web-2")
		trace = append(trace, map[bool]string{true: "O", false: "x"}[st.Routable])
	}
	return strings.Join(trace, " ")
}

func flapEnv(t *testing.T, threshold int) *testEnv {
	t.Helper()
	e := newEnv(t, checker.Config{})
	s := spec("web-2")
	s.Interval, s.Timeout, s.Rise, s.Fall, s.InitialState = time.Second, time.Second, 1, 1, checker.StateHealthy
	s.FlapWindow, s.FlapThreshold = 10*time.Second, threshold
	if threshold > 0 {
		s.FlapStableFor = 3 * time.Second
	}
	e.add(t, s)
	return e
}

// Without damping, the flaky server with threshold 1 enters and
// leaves the pool six times, and its status counts the six transitions in
// the window. With damping (3 transitions in 10s, stable for 3s) it is
// held out after its third transition, FLAPPING events say so, and it
// comes back only once stable for 3s.
func TestFlapDampingFlakyServer(t *testing.T) {
	t.Run("no damping", func(t *testing.T) {
		e := flapEnv(t, 0)
		if got, want := flapRun(t, e, flakyServer), "O x O x O x x x x O"; got != want {
			t.Errorf("pool %q, want %q", got, want)
		}
		st, _ := e.c.Status("web-2")
		if st.Transitions != 6 || st.Flapping {
			t.Errorf("transitions in the window %d, flapping %v; want 6, no damping", st.Transitions, st.Flapping)
		}
		e.clock.Advance(5 * time.Second) // the window slides past the early ones
		if st, _ := e.c.Status("web-2"); st.Transitions != 2 {
			t.Errorf("5s later: %d transitions in the window, want 2", st.Transitions)
		}
	})
	t.Run("damping", func(t *testing.T) {
		e := flapEnv(t, 3)
		w := watchNow(t, e.c, checker.Filter{})
		if got, want := flapRun(t, e, flakyServer), "O x O x x x x x x x"; got != want {
			t.Errorf("pool %q, want %q", got, want)
		}
		st, _ := e.c.Status("web-2")
		if !st.Flapping || st.State != checker.StateUnhealthy || st.Verdict != checker.StateHealthy || st.Transitions != 6 {
			t.Errorf("after the sequence: %+v; want flapping, held unhealthy, verdict healthy, 6 transitions", st)
		}
		// Passing from now on: stable for 3s, it comes back.
		if got := flapRun(t, e, []bool{true, true, true}); got != "x x O" {
			t.Errorf("stable passes: pool %q, want back at the third", got)
		}
		evs := next(t, w)
		if diff := cmp.Diff([]string{
			"web-2: healthy -> unhealthy",
			"web-2: unhealthy -> healthy",
			"web-2: flapping, 3 transitions in 10s; held unhealthy until stable for 3s",
			"web-2: healthy -> unhealthy",
			"web-2: no longer flapping, stable for 3s after flapping",
			"web-2: flapping, 6 transitions in 10s; held unhealthy until stable for 3s",
			"web-2: no longer flapping, stable for 3s after flapping",
			"web-2: unhealthy -> healthy",
		}, policyKinds(evs)); diff != "" {
			t.Fatalf("events (-want +got):\n%s", diff)
		}
		if last := evs[len(evs)-1]; last.Transition.Reason != "stable for 3s after flapping" {
			t.Errorf("the return's reason %q", last.Transition.Reason)
		}
		if evs[2].Kind != checker.EventFlappingStarted || evs[2].Target() != "web-2" || evs[4].Kind != checker.EventFlappingEnded {
			t.Errorf("flapping events %+v %+v", evs[2], evs[4])
		}
	})
	t.Run("damping turned off releases", func(t *testing.T) {
		e := flapEnv(t, 3)
		flapRun(t, e, []bool{false, true, false, true}) // flapping, verdict healthy
		w := watchNow(t, e.c, checker.Filter{})
		s := spec("web-2")
		s.Interval, s.Timeout, s.Rise, s.Fall, s.FlapWindow = time.Second, time.Second, 1, 1, 10*time.Second
		e.add(t, s)
		if diff := cmp.Diff([]string{"updated web-2", "web-2: no longer flapping, flap damping turned off", "web-2: unhealthy -> healthy"}, policyKinds(next(t, w))); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

// Flap damping never takes more of a group out than its panic threshold
// allows: a flapping target of a full group is held routable.
func TestFlapDampingObeysThePanicThreshold(t *testing.T) {
	e := poolEnv(t, checker.Config{}, "a", "b")
	for _, n := range []string{"a", "b"} {
		s := spec(n)
		s.Group, s.FlapThreshold, s.FlapWindow = "edge", 2, time.Minute
		e.add(t, s)
	}
	round(t, e, map[string]outcome{"a": fail}) // a is out: the group is full
	round(t, e, map[string]outcome{"a": fail, "b": fail})
	round(t, e, map[string]outcome{"a": fail, "b": pass}) // b: two transitions, flapping
	st, _ := e.c.Status("b")
	if !st.Flapping || !st.PanicHeld || !st.Routable {
		t.Errorf("b %+v: want flapping, held by panic, routable", st)
	}
}

package checker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// roundSummary describes a round: its transitions, then each result as
// "name: pass|error|skipped: why -> state".
func roundSummary(r checker.Round) []string {
	out := texts(r.Transitions)
	for _, rr := range r.Results {
		what := "skipped: " + rr.Skipped
		switch {
		case rr.Probed && rr.Result.Pass:
			what = "pass"
		case rr.Probed:
			what = rr.Result.Err
		}
		out = append(out, rr.Name+": "+what+" -> "+rr.State.String())
	}
	return out
}

func TestProbeNowProbesTheSelectionOnly(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: 10 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	for _, name := range []string{"c", "a", "b", "other"} {
		s := spec(name)
		if name != "other" {
			s.Group = "edge"
		}
		e.add(t, s)
	}
	e.probes.setAll(map[string]outcome{"a": pass, "b": fail, "c": pass, "other": pass})

	r, err := e.c.ProbeNow(t.Context(), checker.Selection{Group: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a: unhealthy -> healthy", "c: unhealthy -> healthy", "a: pass -> healthy", "b: status 503 -> unhealthy", "c: pass -> healthy"}
	if diff := cmp.Diff(want, roundSummary(r)); diff != "" {
		t.Errorf("group round (-want +got):\n%s", diff)
	}
	if n := e.probes.callCount("other"); n != 0 {
		t.Errorf("a target outside the group was probed %d times", n)
	}

	e.clock.Advance(time.Second) // the rate's next token
	r, err = e.c.ProbeNow(t.Context(), checker.Selection{Names: []string{"other", "b", "other"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"other: unhealthy -> healthy", "b: status 503 -> unhealthy", "other: pass -> healthy"}
	if diff := cmp.Diff(want, roundSummary(r)); diff != "" {
		t.Errorf("names round (-want +got):\n%s", diff)
	}
	if n := e.probes.callCount("other"); n != 1 {
		t.Errorf("a name listed twice was probed %d times, want 1", n)
	}
	if n := e.probes.callCount("a"); n != 1 {
		t.Errorf("a target not named was probed again: %d probes", n)
	}
}

func TestProbeNowUnknownNameProbesNothing(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	_, err := e.c.ProbeNow(t.Context(), checker.Selection{Names: []string{"a", "nope"}})
	if !errors.Is(err, checker.ErrUnknownTarget) || !cmp.Equal(err.Error(), `unknown target "nope"`) {
		t.Fatalf("err %v, want unknown target \"nope\"", err)
	}
	if n := e.probes.callCount("a"); n != 0 {
		t.Errorf("a rejected round probed a %d times", n)
	}
	var fe *checker.FieldError
	if _, err := e.c.ProbeNow(t.Context(), checker.Selection{Names: []string{"a", "bad name"}}); !errors.As(err, &fe) || fe.Field != "names[1]" {
		t.Errorf("a malformed name: %v, want a field error on names[1]", err)
	}
}

func TestProbeNowIsRateLimited(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	for i := range checker.ProbeNowBurst {
		if _, err := e.c.ProbeNow(t.Context(), checker.Selection{}); err != nil {
			t.Fatalf("round %d of the burst: %v", i+1, err)
		}
	}
	_, err := e.c.ProbeNow(t.Context(), checker.Selection{})
	var re *checker.RateError
	if !errors.As(err, &re) || !errors.Is(err, checker.ErrRateLimited) || re.RetryAfter != time.Second {
		t.Fatalf("a round over the burst: %v, want a rate error to retry in 1s", err)
	}
	if n := e.probes.callCount("a"); n != checker.ProbeNowBurst {
		t.Errorf("a refused round probed: %d probes, want %d", n, checker.ProbeNowBurst)
	}
	e.clock.Advance(time.Second / checker.ProbeNowRate)
	if _, err := e.c.ProbeNow(t.Context(), checker.Selection{}); err != nil {
		t.Errorf("after the rate's interval: %v", err)
	}
	// RunRound, the library's own round, is not limited.
	for range checker.ProbeNowBurst + 1 {
		e.c.RunRound(t.Context())
	}
}

func TestProbeNowWaitsForTimeoutsAndSkipsInFlight(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: 10 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("hangs"))
	e.add(t, spec("busy"))
	e.probes.setAll(map[string]outcome{"hangs": {hang: true}, "busy": {hang: true}})

	// busy has a probe in flight: another round's, which hangs until stopped.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	held := make(chan struct{})
	go func() {
		defer close(held)
		e.c.ProbeNow(ctx, checker.Selection{Names: []string{"busy"}})
	}()
	waitFor(t, "busy's probe", func() bool { return e.probes.callCount("busy") == 1 })

	done := make(chan checker.Round)
	go func() {
		r, err := e.c.ProbeNow(t.Context(), checker.Selection{})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitFor(t, "hangs' probe", func() bool { return e.probes.callCount("hangs") == 1 })
	e.clock.Advance(time.Second) // hangs' timeout
	r := <-done
	want := []string{
		"busy: skipped: a probe was already in flight; its result comes as scheduled -> unhealthy",
		"hangs: timeout after 1s -> unhealthy",
	}
	if diff := cmp.Diff(want, roundSummary(r)); diff != "" {
		t.Errorf("round (-want +got):\n%s", diff)
	}
	stop()
	<-held
}

func TestProbeNowKeepsTheScheduleGrid(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: 10 * time.Second, Timeout: time.Second, Rise: 2, Fall: 2}})
	e.add(t, spec("a"))
	e.probes.set("a", pass)
	e.c.Start()
	<-e.c.Scheduled()
	st, _ := e.c.Status("a")
	first := st.NextProbe
	e.clock.Advance(first.Sub(e.clock.Now()))
	waitFor(t, "the scheduled probe", func() bool {
		st, _ := e.c.Status("a")
		return st.ActiveResults == 1 && !st.Probing
	})
	st, _ = e.c.Status("a")
	if want := first.Add(10 * time.Second); !st.NextProbe.Equal(want) {
		t.Fatalf("next probe %v, want %v", st.NextProbe, want)
	}
	e.clock.Advance(3 * time.Second)
	r, err := e.c.ProbeNow(t.Context(), checker.Selection{})
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(r.Transitions); !cmp.Equal(got, []string{"a: unhealthy -> healthy"}) {
		t.Errorf("transitions %v", got)
	}
	st, _ = e.c.Status("a")
	if want := first.Add(10 * time.Second); !st.NextProbe.Equal(want) || st.ActiveResults != 2 {
		t.Errorf("after the round: next probe %v (want %v, on the grid), %d results (want 2)", st.NextProbe, want, st.ActiveResults)
	}
}

// Close during a round cuts its probes short, whatever their timeout, and
// the round ends with ErrClosed: none of it was applied.
func TestProbeNowEndsWithClose(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Minute, Timeout: 30 * time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("hangs"))
	e.probes.set("hangs", outcome{hang: true})
	done := make(chan error, 1)
	go func() {
		_, err := e.c.ProbeNow(t.Context(), checker.Selection{Names: []string{"hangs"}})
		done <- err
	}()
	waitFor(t, "hangs' probe", func() bool { return e.probes.callCount("hangs") == 1 })
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		e.c.Close()
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // real time: the fake clock never moves
		t.Fatal("Close still waits for a ProbeNow's probe (the fake clock stands still: it would wait forever)")
	}
	if err := <-done; !errors.Is(err, checker.ErrClosed) {
		t.Errorf("ProbeNow cut short by Close: %v, want ErrClosed", err)
	}
}

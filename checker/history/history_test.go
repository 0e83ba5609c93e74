package history_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/history"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func probe(r *history.Recorder, name string, at time.Time, pass bool, lat time.Duration) {
	r.ObserveProbe(checker.Spec{Name: name, Group: "g"}, checker.Result{Pass: pass, Latency: lat, Time: at})
}

func TestMinutesCountProbesAndFailures(t *testing.T) {
	r := history.New(history.Options{})
	for i := 0; i < 60; i++ {
		probe(r, "a", t0.Add(time.Duration(i)*time.Second), i%10 != 0, 3*time.Millisecond)
	}
	probe(r, "a", t0.Add(time.Minute), true, 3*time.Millisecond)
	s, err := r.Query("a", t0.Add(time.Minute+30*time.Second), 5*time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 5 {
		t.Fatalf("points = %d, want 5", len(s.Points))
	}
	if p := s.Points[3]; p.Probes != 60 || p.Fails != 6 || !p.Start.Equal(t0) {
		t.Errorf("minute t0 = %+v, want 60 probes, 6 fails", p)
	}
	if p := s.Points[4]; p.Probes != 1 || p.Fails != 0 {
		t.Errorf("minute t0+1 = %+v, want 1 probe", p)
	}
	if s.Probes != 61 || s.Fails != 6 || s.Group != "g" {
		t.Errorf("summary = %d/%d group %q, want 61/6 g", s.Probes, s.Fails, s.Group)
	}
	if want := 55.0 / 61; s.Availability != want {
		t.Errorf("availability = %v, want %v", s.Availability, want)
	}
}

// Each minute keeps its own counts whether Flush runs every minute, every
// few minutes or not at all within the hour, and whether the query comes
// before or after it.
func TestMinutesWhateverTheFlushes(t *testing.T) {
	for _, every := range []int{1, 2, 3, 7, 60} {
		t.Run(fmt.Sprintf("flush every %d min", every), func(t *testing.T) {
			clk := fakeclock.New(t0)
			r := history.New(history.Options{Clock: clk})
			// Minute m has m+1 probes, of which the first m%3 fail.
			for m := 0; m < 10; m++ {
				for i := 0; i <= m; i++ {
					probe(r, "a", t0.Add(time.Duration(m)*time.Minute+time.Duration(i)*time.Second), i >= m%3, time.Millisecond)
				}
				if (m+1)%every == 0 {
					clk.Advance(t0.Add(time.Duration(m+1) * time.Minute).Sub(clk.Now()))
					if err := r.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			s, err := r.Query("a", t0.Add(10*time.Minute-time.Second), 10*time.Minute, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Points) != 10 {
				t.Fatalf("points = %d, want 10", len(s.Points))
			}
			for m, p := range s.Points {
				if p.Probes != uint64(m+1) || p.Fails != uint64(m%3) {
					t.Errorf("minute %d = %d probes, %d fails; want %d, %d", m, p.Probes, p.Fails, m+1, m%3)
				}
			}
		})
	}
}

func TestHourPercentilesFromBuckets(t *testing.T) {
	r := history.New(history.Options{})
	// 90 fast, 6 at 100ms, 4 over a second.
	for i := 0; i < 100; i++ {
		lat := 2 * time.Millisecond
		switch {
		case i >= 96:
			lat = 3 * time.Second
		case i >= 90:
			lat = 80 * time.Millisecond
		}
		probe(r, "a", t0.Add(time.Duration(i)*time.Second), true, lat)
	}
	s, err := r.Query("a", t0.Add(30*time.Minute), 24*time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s.P50 != 5*time.Millisecond || s.P95 != 100*time.Millisecond || s.P99 != 2*time.Second {
		t.Errorf("p50/p95/p99 = %v/%v/%v, want 5ms/100ms/2s", s.P50, s.P95, s.P99)
	}
	last := s.Points[len(s.Points)-1]
	if last.Probes != 100 || last.P50 != 5*time.Millisecond {
		t.Errorf("last hour = %+v", last)
	}
}

func TestOldEntriesAgeOut(t *testing.T) {
	r := history.New(history.Options{})
	probe(r, "a", t0, false, time.Millisecond)
	later := t0.Add(25 * time.Hour)
	probe(r, "a", later, true, time.Millisecond)
	s, err := r.Query("a", later, 24*time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.Probes != 1 || s.Fails != 0 {
		t.Errorf("minutes over 24h = %d/%d, want 1/0: the old minute must be gone", s.Probes, s.Fails)
	}
	s, _ = r.Query("a", later, 30*24*time.Hour, time.Hour)
	if s.Probes != 2 {
		t.Errorf("hours over 30d = %d probes, want 2", s.Probes)
	}
	much := later.Add(31 * 24 * time.Hour)
	probe(r, "a", much, true, time.Millisecond)
	s, _ = r.Query("a", much, 30*24*time.Hour, time.Hour)
	if s.Probes != 1 {
		t.Errorf("hours over 30d after 31 days = %d probes, want 1", s.Probes)
	}
	// A result older than the ring holds is dropped, not written over a
	// newer slot.
	probe(r, "a", t0, false, time.Millisecond)
	s, _ = r.Query("a", much, 30*24*time.Hour, time.Hour)
	if s.Probes != 1 || s.Fails != 0 {
		t.Errorf("after a stale result = %d/%d, want 1/0", s.Probes, s.Fails)
	}
}

func TestEventsKeptBoundedAndRemovedWithTarget(t *testing.T) {
	r := history.New(history.Options{MaxEvents: 3})
	for i := 0; i < 5; i++ {
		r.ObserveTransition(checker.Transition{Target: "a", Group: "g", From: checker.State(0), To: checker.State(1),
			Time: t0.Add(time.Duration(i) * time.Minute), Reason: fmt.Sprint("r", i)})
	}
	s, err := r.Query("a", t0.Add(10*time.Minute), time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 3 || s.Events[0].Reason != "r2" || s.Events[2].Reason != "r4" {
		t.Fatalf("events = %+v, want r2..r4", s.Events)
	}
	r.ObserveRemoval(checker.Spec{Name: "a"})
	if _, err := r.Query("a", t0, time.Hour, time.Minute); !errors.Is(err, history.ErrUnknownTarget) {
		t.Errorf("after removal: err = %v, want ErrUnknownTarget", err)
	}
}

func TestQueryBounds(t *testing.T) {
	r := history.New(history.Options{})
	probe(r, "a", t0, true, 0)
	for _, c := range []struct {
		window, res time.Duration
		field       string
	}{
		{25 * time.Hour, time.Minute, "window"},
		{0, time.Minute, "window"},
		{721 * time.Hour, time.Hour, "window"},
		{90 * time.Minute, time.Hour, "window"},
		{time.Hour, time.Second, "resolution"},
	} {
		_, err := r.Query("a", t0, c.window, c.res)
		var re *history.RangeError
		if !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("Query(%v, %v) err = %v, want a RangeError on %s", c.window, c.res, err, c.field)
		}
	}
}

func TestProbeInFlightAtRemovalDoesNotBringHistoryBack(t *testing.T) {
	clock := fakeclock.New(t0)
	r := history.New(history.Options{Clock: clock})
	probe(r, "a", t0.Add(-time.Minute), true, time.Millisecond)
	r.ObserveRemoval(checker.Spec{Name: "a"})
	// Started a second before the removal, ended a second after it.
	probe(r, "a", t0.Add(time.Second), false, 2*time.Second)
	if _, err := r.Query("a", t0.Add(time.Second), time.Hour, time.Minute); !errors.Is(err, history.ErrUnknownTarget) {
		t.Fatalf("err = %v, want ErrUnknownTarget: a probe begun before the removal came back", err)
	}
	// A new target of the same name, probed after the removal, is kept.
	probe(r, "a", t0.Add(2*time.Second), true, time.Millisecond)
	if s, err := r.Query("a", t0.Add(2*time.Second), time.Hour, time.Minute); err != nil || s.Probes != 1 {
		t.Fatalf("new target: %+v, %v; want 1 probe", s, err)
	}
}

func TestGroupAddsItsTargets(t *testing.T) {
	r := history.New(history.Options{})
	for i := 0; i < 10; i++ {
		probe(r, "a", t0.Add(time.Duration(i)*time.Second), true, 2*time.Millisecond)
		probe(r, "b", t0.Add(time.Duration(i)*time.Second), i >= 5, 400*time.Millisecond)
	}
	r.ObserveProbe(checker.Spec{Name: "other", Group: "h"}, checker.Result{Pass: false, Time: t0})
	r.ObserveTransition(checker.Transition{Target: "b", Group: "g", Time: t0.Add(2 * time.Second), Reason: "second"})
	r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: t0.Add(time.Second), Reason: "first"})
	s, err := r.QueryGroup("g", t0.Add(time.Minute), 2*time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s.Probes != 20 || s.Fails != 5 || s.Availability != 0.75 {
		t.Errorf("group = %d/%d availability %v, want 20/5 0.75", s.Probes, s.Fails, s.Availability)
	}
	if last := s.Points[len(s.Points)-1]; last.Probes != 20 || last.P50 != 5*time.Millisecond || last.P95 != 500*time.Millisecond {
		t.Errorf("last hour = %+v, want 20 probes, p50 5ms, p95 500ms", last)
	}
	if len(s.Events) != 2 || s.Events[0].Reason != "first" {
		t.Errorf("events = %+v, want first then second", s.Events)
	}
	if _, err := r.QueryGroup("none", t0, time.Hour, time.Hour); !errors.Is(err, history.ErrUnknownGroup) {
		t.Errorf("unknown group: err = %v", err)
	}
	var re *history.RangeError
	if _, err := r.QueryGroup("g", t0, time.Hour, time.Second); !errors.As(err, &re) {
		t.Errorf("bad resolution: err = %v, want a RangeError", err)
	}
	if _, err := r.QueryGroup("none", t0, time.Hour, time.Second); !errors.As(err, &re) {
		t.Errorf("bad resolution, unknown group: err = %v, want a RangeError first", err)
	}
}

// A group's SLO: the budget left over the window and the last hour's burn
// rate, from its targets' probes.
func TestGroupSLO(t *testing.T) {
	r := history.New(history.Options{})
	now := t0.Add(3 * time.Hour)
	// Two hours ago: 1,000 probes, 1 failed; the last hour: 100, 2 failed.
	for i := range 1000 {
		probe(r, "a", t0.Add(time.Hour+time.Duration(i)*time.Second), i != 0, time.Millisecond)
	}
	for i := range 100 {
		probe(r, "b", now.Add(-30*time.Minute+time.Duration(i)*time.Second), i >= 2, time.Millisecond)
	}
	s, err := history.GroupSLO(r, "g", 0.99, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	// 3 failed of 1,100: availability 0.99727; budget 0.01; spent 0.2727.
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if !near(s.Availability, 1097.0/1100) || !near(s.BudgetLeft, 1-(3.0/1100)/0.01) || !near(s.BurnRate, 2) {
		t.Errorf("SLO = %+v, want availability %v, budget left %v, burn rate 2", s, 1097.0/1100, 1-(3.0/1100)/0.01)
	}
	if _, err := history.GroupSLO(r, "none", 0.99, time.Hour, now); !errors.Is(err, history.ErrUnknownGroup) {
		t.Errorf("unknown group: %v", err)
	}
}

// A change of a target's mode is kept among its events, with its reason,
// whether or not it changes the target's state.
func TestModeChangesInTheTimeline(t *testing.T) {
	r := history.New(history.Options{})
	probe(r, "a", t0, true, time.Millisecond)
	s := checker.Spec{Name: "a", Group: "g"}.WithAdmin(checker.Admin{Mode: checker.ModeDraining, Reason: "deploy 4711", Since: t0.Add(time.Second)})
	r.ObserveMode(s, checker.ModeActive, t0.Add(time.Second))
	sum, err := r.Query("a", t0.Add(time.Minute), time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Events) != 1 || sum.Events[0].Policy != checker.EventModeChanged || sum.Events[0].Mode != checker.ModeDraining ||
		sum.Events[0].Text != "mode draining, was active: deploy 4711" {
		t.Errorf("events = %+v, want the drain with its reason", sum.Events)
	}
}

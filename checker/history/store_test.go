package history_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openDB opens a history file as pulsed does.
func openDB(t testing.TB, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func openRecorder(t *testing.T, db *bolt.DB, o history.Options) *history.Recorder {
	t.Helper()
	r, err := history.Open(db, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHistorySurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	// Flush prunes by the clock: the clock is the probes'.
	clock := fakeclock.New(t0.Add(time.Minute))
	r := openRecorder(t, db, history.Options{Clock: clock})
	probe(r, "a", t0, true, 3*time.Millisecond)
	probe(r, "a", t0.Add(time.Second), false, 300*time.Millisecond)
	probe(r, "b", t0, true, time.Millisecond)
	r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: t0, Reason: "draining: deploy 4711"})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	r.ObserveRemoval(checker.Spec{Name: "b"})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDB(t, path)
	defer db.Close()
	r2 := openRecorder(t, db, history.Options{Clock: clock})
	got, err := r2.Query("a", t0.Add(time.Minute), time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.Probes != 2 || got.Fails != 1 || got.P99 != 500*time.Millisecond || got.Group != "g" {
		t.Errorf("after restart: %d/%d p99 %v group %q, want 2/1 p99 500ms g", got.Probes, got.Fails, got.P99, got.Group)
	}
	if len(got.Events) != 1 || got.Events[0].Reason != "draining: deploy 4711" {
		t.Errorf("events after restart = %+v", got.Events)
	}
	if _, err := r2.Query("b", t0, time.Hour, time.Minute); !errors.Is(err, history.ErrUnknownTarget) {
		t.Errorf("removed target after restart: err = %v, want ErrUnknownTarget", err)
	}
}

func TestRunFlushesEveryIntervalAndAtEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	defer db.Close()
	clock := fakeclock.New(t0)
	r := openRecorder(t, db, history.Options{Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, clock, time.Minute, func(err error) { t.Error(err) }) }()

	stored := func(name string) bool {
		var ok bool
		_ = db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("series"))
			ok = b != nil && b.Bucket([]byte(name)) != nil
			return nil
		})
		return ok
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the flush timer", func() bool { return clock.Waiters() == 1 })
	probe(r, "a", t0, true, time.Millisecond)
	if stored("a") {
		t.Fatal("written before the interval passed")
	}
	clock.Advance(time.Minute)
	waitFor("a flushed", func() bool { return stored("a") })

	waitFor("the next flush timer", func() bool { return clock.Waiters() == 1 })
	probe(r, "c", t0, true, time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !stored("c") {
		t.Error("the last Flush at the end did not write c")
	}
}

func TestRunRejectsANonPositiveInterval(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "history.db"))
	defer db.Close()
	r := history.New(history.Options{})
	err := r.Run(context.Background(), fakeclock.New(t0), 0, nil)
	if err == nil || !strings.Contains(err.Error(), "interval must be positive") {
		t.Fatalf("err = %v, want the interval named", err)
	}
}

// storedKey reports whether the target's bucket in db holds a key with
// the prefix ('d' day, 'm' hour of minutes, 'e' any event) of at.
func storedKey(t *testing.T, db *bolt.DB, name string, prefix byte, at time.Time) bool {
	t.Helper()
	var ok bool
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("series"))
		if b == nil || b.Bucket([]byte(name)) == nil {
			return nil
		}
		c := b.Bucket([]byte(name)).Cursor()
		k, _ := c.Seek([]byte{prefix})
		for ; k != nil && k[0] == prefix; k, _ = c.Next() {
			n := int64(binary.BigEndian.Uint64(k[1:9]))
			switch prefix {
			case 'e':
				ok = true
			case 'd':
				ok = ok || n == at.Unix()/86400
			default:
				ok = ok || n == at.Unix()/3600
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestFlushesAddUpAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	clock := fakeclock.New(t0)
	r := openRecorder(t, db, history.Options{Clock: clock})
	// 10 probes a flush, 3 flushes, in the same minute and hour.
	for f := 0; f < 3; f++ {
		for i := 0; i < 10; i++ {
			probe(r, "a", t0.Add(time.Duration(f*10+i)*time.Second), i != 0, 20*time.Millisecond)
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	probe(r, "a", t0.Add(40*time.Second), true, 20*time.Millisecond) // memory only
	check := func(r *history.Recorder, probes, fails uint64) {
		t.Helper()
		for _, res := range []time.Duration{time.Minute, time.Hour} {
			s, err := r.Query("a", t0.Add(50*time.Second), time.Hour, res)
			if err != nil {
				t.Fatal(err)
			}
			if s.Probes != probes || s.Fails != fails || s.P50 != 25*time.Millisecond || s.Mean != 20*time.Millisecond {
				t.Errorf("at %v: %d/%d p50 %v mean %v, want %d/%d p50 25ms mean 20ms", res, s.Probes, s.Fails, s.P50, s.Mean, probes, fails)
			}
			if last := s.Points[len(s.Points)-1]; res == time.Hour && last.Probes != probes {
				t.Errorf("last hour = %+v, want %d probes", last, probes)
			}
		}
	}
	check(r, 31, 3)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	defer db.Close()
	r = openRecorder(t, db, history.Options{Clock: clock})
	if got := r.Targets(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("targets after restart = %v, want [a]", got)
	}
	probe(r, "a", t0.Add(45*time.Second), false, 20*time.Millisecond)
	check(r, 32, 4)
}

func TestFlushPrunesByAgeAndRemovalDeletes(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "history.db"))
	defer db.Close()
	clock := fakeclock.New(t0)
	r := openRecorder(t, db, history.Options{Clock: clock})
	probe(r, "a", t0, true, time.Millisecond)
	probe(r, "b", t0, true, time.Millisecond)
	r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: t0, Reason: "added"})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if !storedKey(t, db, "a", 'm', t0) || !storedKey(t, db, "a", 'd', t0) || !storedKey(t, db, "a", 'e', t0) {
		t.Fatal("minutes, hour or event of a not written")
	}

	clock.Advance(25 * time.Hour)
	probe(r, "a", clock.Now(), true, time.Millisecond)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if storedKey(t, db, "a", 'm', t0) {
		t.Error("minutes older than 24 hours kept")
	}
	if !storedKey(t, db, "a", 'd', t0) || !storedKey(t, db, "a", 'm', clock.Now()) {
		t.Error("hour of a day ago or the minutes of now not kept")
	}

	clock.Advance(30 * 24 * time.Hour)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if storedKey(t, db, "a", 'd', t0) || storedKey(t, db, "a", 'e', t0) {
		t.Error("hour or event older than 30 days kept")
	}
	if !storedKey(t, db, "a", 'd', t0.Add(25*time.Hour)) {
		t.Error("hour of 30 days ago, less an hour, not kept")
	}

	r.ObserveRemoval(checker.Spec{Name: "b"})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if storedKey(t, db, "b", 'd', t0) || !storedKey(t, db, "a", 'd', t0.Add(25*time.Hour)) {
		t.Error("the removed target's history kept, or another's deleted")
	}
}

func TestEventsKeptBoundedInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	defer db.Close()
	clock := fakeclock.New(t0.Add(time.Hour))
	r := openRecorder(t, db, history.Options{Clock: clock, MaxEvents: 3})
	for i := 0; i < 5; i++ {
		r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: t0.Add(time.Duration(i) * time.Minute), Reason: fmt.Sprint("r", i)})
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	r2 := openRecorder(t, db, history.Options{Clock: clock, MaxEvents: 3})
	s, err := r2.Query("a", t0.Add(time.Hour), 2*time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 3 || s.Events[0].Reason != "r2" || s.Events[2].Reason != "r4" {
		t.Fatalf("events = %+v, want r2..r4", s.Events)
	}
}

// Events of one target at one instant, written before and after a
// restart, are all kept, in the order they came: the numbers that tell
// them apart start again with each Open.
func TestEventsAtOneInstantAcrossRestarts(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "history.db"))
	defer db.Close()
	clock := fakeclock.New(t0.Add(time.Hour))
	at := t0.Add(time.Minute)
	for i := range 3 {
		r := openRecorder(t, db, history.Options{Clock: clock})
		r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: at, Reason: fmt.Sprint("r", i)})
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := openRecorder(t, db, history.Options{Clock: clock}).Query("a", t0.Add(time.Hour), 2*time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range s.Events {
		reasons = append(reasons, ev.Reason)
	}
	if !slices.Equal(reasons, []string{"r0", "r1", "r2"}) {
		t.Fatalf("events kept: %q, want r0, r1, r2", reasons)
	}
}

// TestMemoryPerTarget holds the goal: at most 1 KiB of memory per probed
// target, its history in a file or in memory, between two Flushes.
func TestMemoryPerTarget(t *testing.T) {
	for _, mode := range []string{"file", "memory"} {
		t.Run(mode, func(t *testing.T) {
			const n = 5000
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var r *history.Recorder
			if mode == "file" {
				db := openDB(t, filepath.Join(t.TempDir(), "history.db"))
				defer db.Close()
				r = openRecorder(t, db, history.Options{Clock: fakeclock.New(t0)})
			} else {
				r = history.New(history.Options{Clock: fakeclock.New(t0)})
			}
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("target-%06d", i)
				probe(r, name, t0, true, time.Millisecond)
				r.ObserveTransition(checker.Transition{Target: name, Group: "g", Time: t0, Reason: "added"})
			}
			if err := r.Flush(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				probe(r, fmt.Sprintf("target-%06d", i), t0.Add(time.Second), true, time.Millisecond)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			per := int64(after.HeapAlloc-before.HeapAlloc) / n
			t.Logf("memory per probed target: %d bytes", per)
			if per > 1024 {
				t.Errorf("memory per target = %d bytes, want at most 1024", per)
			}
			runtime.KeepAlive(r)
		})
	}
}

// Policy events join the timeline: a target's flapping with the target, a
// group's panic with each of its targets and once in the group's history,
// kept in the file across a restart; the checker's overload is about no
// target and is not kept.
func TestPolicyEventsInTheTimeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	clock := fakeclock.New(t0)
	r := openRecorder(t, db, history.Options{Clock: clock})
	probe(r, "a", t0, true, time.Millisecond)
	probe(r, "b", t0, true, time.Millisecond)
	r.ObserveTransition(checker.Transition{Target: "a", Group: "g", From: checker.StateHealthy, To: checker.StateUnhealthy, Time: t0.Add(4 * time.Second)})
	r.ObservePolicy(checker.EventFlappingStarted, t0.Add(5*time.Second), checker.PolicyChange{Group: "g", Target: "a", Text: "a: flapping"})
	r.ObservePolicy(checker.EventPanicEntered, t0.Add(6*time.Second), checker.PolicyChange{Group: "g", Text: "g: panic entered"})
	r.ObservePolicy(checker.EventCheckerDegraded, t0.Add(7*time.Second), checker.PolicyChange{Text: "overloaded"})
	describe := func(evs []history.Event) []string {
		var out []string
		for _, e := range evs {
			if e.Policy != 0 {
				out = append(out, fmt.Sprintf("%s %s %s", e.Target, e.Policy, e.Text))
			} else {
				out = append(out, fmt.Sprintf("%s %v->%v", e.Target, e.From, e.To))
			}
		}
		return out
	}
	check := func(r *history.Recorder) {
		t.Helper()
		for _, tc := range []struct {
			name string
			want []string
		}{
			{"a", []string{"a healthy->unhealthy", "a FLAPPING_STARTED a: flapping", "a PANIC_ENTERED g: panic entered"}},
			{"b", []string{"b PANIC_ENTERED g: panic entered"}},
		} {
			s, err := r.Query(tc.name, t0.Add(time.Minute), time.Hour, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(s.Events); !slices.Equal(got, tc.want) {
				t.Errorf("%s's events = %q, want %q", tc.name, got, tc.want)
			}
		}
		s, err := r.QueryGroup("g", t0.Add(time.Minute), time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a healthy->unhealthy", "a FLAPPING_STARTED a: flapping", " PANIC_ENTERED g: panic entered"}
		if got := describe(s.Events); !slices.Equal(got, want) {
			t.Errorf("the group's events = %q, want %q", got, want)
		}
	}
	check(r)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	defer db.Close()
	check(openRecorder(t, db, history.Options{Clock: clock}))
}

// A group's share of time with its routable minimum is the time it spent
// out of panic since its first recorded probe; the spans survive a
// restart, and one open at the last flush ends there.
func TestGroupTimeAvailabilityFromPanics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	clock := fakeclock.New(t0)
	r := openRecorder(t, db, history.Options{Clock: clock})
	probe(r, "a", t0, true, time.Millisecond) // group g, from t0
	r.ObservePolicy(checker.EventPanicEntered, t0.Add(10*time.Minute), checker.PolicyChange{Group: "g", Text: "g: panic entered"})
	r.ObservePolicy(checker.EventPanicExited, t0.Add(20*time.Minute), checker.PolicyChange{Group: "g", Text: "g: panic exited"})
	r.ObservePolicy(checker.EventPanicEntered, t0.Add(50*time.Minute), checker.PolicyChange{Group: "g", Text: "g: panic entered"})
	at := t0.Add(60 * time.Minute)
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	check := func(r *history.Recorder, want float64) {
		t.Helper()
		s, err := r.QueryGroup("g", at, 24*time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.TimeAvailability, want) {
			t.Errorf("time availability = %v, want %v", s.TimeAvailability, want)
		}
		if ts, err := r.Query("a", at, time.Hour, time.Minute); err != nil || ts.TimeAvailability != -1 {
			t.Errorf("a target's time availability = %v, %v; want -1", ts.TimeAvailability, err)
		}
	}
	// 20 of the 60 minutes in panic: 10 ended, 10 under way.
	check(r, 1-20.0/60)
	clock.Advance(at.Sub(clock.Now()))
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	defer db.Close()
	// After a restart the open panic ended at the flush: asked 30 minutes
	// later, 20 of 90 minutes.
	at = t0.Add(90 * time.Minute)
	check(openRecorder(t, db, history.Options{Clock: clock}), 1-20.0/90)
}

// TestMemoryAndFileKeepTheSameHistory records the same 32 days into a
// Recorder in memory and one on a history file, flushing every hour and
// pruning as pulsed does, and asks both the same queries: the two stores
// keep the same records, so they must answer alike, to the probe.
func TestMemoryAndFileKeepTheSameHistory(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "history.db"))
	defer db.Close()
	memClock, fileClock := fakeclock.New(t0), fakeclock.New(t0)
	o := history.Options{MaxEvents: 5}
	o.Clock = memClock
	mem := history.New(o)
	o.Clock = fileClock
	file := openRecorder(t, db, o)
	both := func(f func(r *history.Recorder)) { f(mem); f(file) }

	const hours = 32 * 24
	for h := range hours {
		at := t0.Add(time.Duration(h) * time.Hour)
		for i, name := range []string{"a", "b", "c"} {
			if name == "c" && h >= hours-30 {
				continue // removed below, after its last probe
			}
			for m := 0; m < 60; m += 7 + i {
				pass := (h*60+m)%(11+i) != 0
				lat := time.Duration((h+m)%900) * time.Millisecond
				both(func(r *history.Recorder) { probe(r, name, at.Add(time.Duration(m)*time.Minute), pass, lat) })
			}
		}
		if h%5 == 0 {
			tr := checker.Transition{Target: "a", Group: "g", Time: at.Add(3 * time.Minute), From: checker.StateHealthy,
				To: checker.StateUnhealthy, Reason: fmt.Sprint("reason ", h), Result: checker.Result{Err: "refused"}}
			both(func(r *history.Recorder) { r.ObserveTransition(tr) })
		}
		if h%9 == 0 {
			both(func(r *history.Recorder) {
				r.ObservePolicy(checker.EventPanicEntered, at.Add(5*time.Minute), checker.PolicyChange{Group: "g", Text: fmt.Sprint("panic ", h)})
			})
		}
		if h == hours-29 {
			both(func(r *history.Recorder) { r.ObserveRemoval(checker.Spec{Name: "c", Group: "g"}) })
		}
		memClock.Advance(time.Hour)
		fileClock.Advance(time.Hour)
		for _, r := range []*history.Recorder{mem, file} {
			if err := r.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Half an hour flushed, then probes not yet flushed: both count.
	both(func(r *history.Recorder) { probe(r, "a", memClock.Now().Add(10*time.Minute), false, time.Second) })
	memClock.Advance(30 * time.Minute)
	fileClock.Advance(30 * time.Minute)
	for _, r := range []*history.Recorder{mem, file} {
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	both(func(r *history.Recorder) { probe(r, "a", memClock.Now(), false, time.Second) })

	now := memClock.Now()
	queries := []struct{ window, res time.Duration }{
		{time.Hour, time.Minute}, {24 * time.Hour, time.Minute}, {90 * time.Minute, time.Minute},
		{time.Hour, time.Hour}, {48 * time.Hour, time.Hour}, {history.HourSlots * time.Hour, time.Hour},
	}
	for _, name := range []string{"a", "b", "c"} {
		for _, q := range queries {
			want, werr := file.Query(name, now, q.window, q.res)
			got, gerr := mem.Query(name, now, q.window, q.res)
			if !reflect.DeepEqual(got, want) || !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
				t.Errorf("%s over %v by %v: memory answers\n%+v, %v\nthe file\n%+v, %v", name, q.window, q.res, got, gerr, want, werr)
			}
		}
	}
	for _, q := range queries {
		want, werr := file.QueryGroup("g", now, q.window, q.res)
		got, gerr := mem.QueryGroup("g", now, q.window, q.res)
		if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) {
			t.Errorf("group over %v by %v: memory answers\n%+v, %v\nthe file\n%+v, %v", q.window, q.res, got, gerr, want, werr)
		}
	}
	// The answers are not empty: 30 days of a, its last events, no c.
	s, err := mem.Query("a", now, history.HourSlots*time.Hour, time.Hour)
	if err != nil || s.Probes < 30*24*8 || len(s.Events) != 5 || s.Events[3].Reason != fmt.Sprint("reason ", hours-3) || s.Events[4].Text != fmt.Sprint("panic ", hours-3) {
		t.Errorf("a over 30 days: %d probes, events %+v, %v", s.Probes, s.Events, err)
	}
	if _, err := mem.Query("c", now, time.Hour, time.Hour); !errors.Is(err, history.ErrUnknownTarget) {
		t.Errorf("removed c: %v, want ErrUnknownTarget", err)
	}
}

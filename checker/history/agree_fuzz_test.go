package history_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/history"
)

// FuzzMemoryAndFileAgree extends TestMemoryAndFileKeepTheSameHistory to
// any sequence of what a recorder sees: probes of three targets, some
// ending late (in an earlier minute, hour or day, but never started before
// the recorders), transitions, policy events, removals, the clock moving
// on by minutes to days, flushes, and restarts of the file's recorder. After each step the memory and the
// file answer every query alike.
func FuzzMemoryAndFileAgree(f *testing.F) {
	f.Add([]byte{0, 0, 1, 10, 0, 2, 9, 3, 0, 1, 0, 50, 2, 200, 3, 1, 2, 4, 2, 5, 3})
	f.Add([]byte{0, 1, 0, 3, 2, 255, 0, 1, 3, 7, 3, 6, 0, 2, 1, 4, 1, 0, 1, 1, 2, 60, 3})
	f.Add([]byte{4, 2, 0, 2, 0, 0, 2, 20, 6, 0, 2, 1, 90, 5, 3, 2, 255, 2, 255, 3, 6})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			t.Skip("long sequences add little and take long")
		}
		db := unsyncedDB(t)
		clock := fakeclock.New(t0)
		started := t0 // the file's recorder's last start
		o := history.Options{MaxEvents: 3, Clock: clock}
		mem := history.New(o)
		file := openRecorder(t, db, o)
		in := &opBytes{ops}
		next := in.next
		names := []string{"a", "b", "c"}
		lateness := []time.Duration{0, 30 * time.Second, 50 * time.Minute, 3 * time.Hour, 26 * time.Hour}
		for step := 0; in.more(); step++ {
			var what string
			switch op := next() % 7; op {
			case 0:
				name, v, late := names[next()%3], next(), lateness[next()%len(lateness)]
				at := clock.Now().Add(-late)
				lat := time.Duration(v%40) * 25 * time.Millisecond
				if at.Add(-lat).Before(started) {
					// No probe started before the recorders did.
					at = started.Add(lat)
				}
				if at.After(clock.Now()) {
					what = "no probe: none started since the restart could have ended"
					break
				}
				what = fmt.Sprintf("probe %s at %v pass %v latency %v", name, at, v%3 != 0, lat)
				for _, r := range []*history.Recorder{mem, file} {
					probe(r, name, at, v%3 != 0, lat)
				}
			case 1:
				name := names[next()%3]
				tr := checker.Transition{Target: name, Group: "g", Time: clock.Now(), From: checker.StateHealthy,
					To: checker.StateUnhealthy, Reason: fmt.Sprint("step ", step), Result: checker.Result{Err: "refused"}}
				what = "transition of " + name
				mem.ObserveTransition(tr)
				file.ObserveTransition(tr)
			case 2:
				d := time.Duration(next()+1) * 7 * time.Minute
				what = fmt.Sprint("clock on by ", d)
				clock.Advance(d)
			case 3:
				what = "flush"
				for _, r := range []*history.Recorder{mem, file} {
					if err := r.Flush(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
			case 4:
				name := names[next()%3]
				what = "removal of " + name
				for _, r := range []*history.Recorder{mem, file} {
					r.ObserveRemoval(checker.Spec{Name: name, Group: "g"})
				}
			case 5:
				kind := checker.EventPanicEntered
				if next()%2 == 1 {
					kind = checker.EventPanicExited
				}
				what = kind.String()
				pc := checker.PolicyChange{Group: "g", Text: fmt.Sprint("step ", step)}
				mem.ObservePolicy(kind, clock.Now(), pc)
				file.ObservePolicy(kind, clock.Now(), pc)
			case 6:
				// pulsed flushes as it stops, and the file's recorder
				// starts again from the file. A restart ends the group's
				// panic (the file would close it at the flush), which the
				// memory, not restarted, is told.
				what = "restart of the file's recorder"
				for _, r := range []*history.Recorder{mem, file} {
					r.ObservePolicy(checker.EventPanicExited, clock.Now(), checker.PolicyChange{Group: "g"})
				}
				for _, r := range []*history.Recorder{mem, file} {
					if err := r.Flush(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				file, started = openRecorder(t, db, o), clock.Now()
			}
			sameAnswers(t, fmt.Sprintf("step %d (%s)", step, what), mem, file, clock.Now())
		}
	})
}

// unsyncedDB opens a history file in t's temporary directory, closed when
// t ends, that commits without syncing to disk: a fuzz target opens
// thousands.
func unsyncedDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "history.db"), 0o600, &bolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// opBytes hands out a fuzz input's bytes one at a time: what to do next
// and its arguments.
type opBytes struct{ b []byte }

// next returns the next byte, or 0 once they are spent.
func (o *opBytes) next() int {
	if len(o.b) == 0 {
		return 0
	}
	b := o.b[0]
	o.b = o.b[1:]
	return int(b)
}

func (o *opBytes) more() bool { return len(o.b) > 0 }

// sameAnswers fails t unless mem and file answer every query at now alike.
func sameAnswers(t *testing.T, after string, mem, file *history.Recorder, now time.Time) {
	t.Helper()
	queries := []struct{ window, res time.Duration }{
		{time.Hour, time.Minute}, {24 * time.Hour, time.Minute}, {90 * time.Minute, time.Minute},
		{time.Hour, time.Hour}, {48 * time.Hour, time.Hour}, {history.HourSlots * time.Hour, time.Hour},
	}
	for _, q := range queries {
		for _, name := range []string{"a", "b", "c"} {
			want, werr := file.Query(name, now, q.window, q.res)
			got, gerr := mem.Query(name, now, q.window, q.res)
			if d := summaryDiff(got, gerr, want, werr); d != "" {
				t.Fatalf("after %s: %s over %v by %v: memory and file differ: %s", after, name, q.window, q.res, d)
			}
		}
		want, werr := file.QueryGroup("g", now, q.window, q.res)
		got, gerr := mem.QueryGroup("g", now, q.window, q.res)
		if d := summaryDiff(got, gerr, want, werr); d != "" {
			t.Fatalf("after %s: group over %v by %v: memory and file differ: %s", after, q.window, q.res, d)
		}
	}
}

// summaryDiff says how the memory's answer (got, gerr) differs from the
// file's (want, werr): the errors, the first point that differs, or the
// rest; "" when they are the same.
func summaryDiff(got history.Summary, gerr error, want history.Summary, werr error) string {
	if !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
		return fmt.Sprintf("memory %v, file %v", gerr, werr)
	}
	if len(got.Points) != len(want.Points) {
		return fmt.Sprintf("memory %d points, file %d", len(got.Points), len(want.Points))
	}
	for i := range got.Points {
		if got.Points[i] != want.Points[i] {
			return fmt.Sprintf("point %d: memory %+v, file %+v", i, got.Points[i], want.Points[i])
		}
	}
	got.Points, want.Points = nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("memory %+v, file %+v", got, want)
	}
	return ""
}

// FuzzHistoryCounts checks the counts the history answers against every
// probe it was given, over any sequence of probes of two targets (some
// ending late, in an earlier minute, hour or day), the clock moving on
// and flushes: each minute of the last 22 hours and each hour of the
// last 28 days holds the probes and failures that ended in it, in memory
// and in the file alike. (The edges of what is kept, 24 hours of minutes
// and 30 days of hours, move with the hourly prune and are left out.)
func FuzzHistoryCounts(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 1, 4, 1, 10, 2, 0, 1, 2, 1, 200, 0, 0, 0, 3, 2, 0, 2, 4})
	f.Add([]byte{0, 1, 2, 2, 1, 255, 0, 0, 1, 4, 2, 1, 3, 0, 1, 0, 2, 1, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 300 {
			t.Skip("long sequences add little and take long")
		}
		db := unsyncedDB(t)
		clock := fakeclock.New(t0)
		o := history.Options{Clock: clock}
		recorders := map[string]*history.Recorder{"memory": history.New(o), "file": openRecorder(t, db, o)}
		in := &opBytes{ops}
		next := in.next
		type count struct{ probes, fails uint64 }
		minutes := map[string]map[int64]count{"a": {}, "b": {}} // by minute since 1970
		lateness := []time.Duration{0, 20 * time.Second, 50 * time.Minute, 3 * time.Hour, 26 * time.Hour}
		for in.more() {
			switch next() % 3 {
			case 0:
				name, v, late := []string{"a", "b"}[next()%2], next(), lateness[next()%len(lateness)]
				at := clock.Now().Add(-late)
				if at.Before(t0) {
					at = t0 // nothing before the recorders started
				}
				pass := v%3 != 0
				for _, r := range recorders {
					probe(r, name, at, pass, time.Duration(v)*time.Millisecond)
				}
				c := minutes[name][at.Unix()/60]
				c.probes++
				if !pass {
					c.fails++
				}
				minutes[name][at.Unix()/60] = c
			case 1:
				clock.Advance(time.Duration(next()+1) * 7 * time.Minute)
			case 2:
				for _, r := range recorders {
					if err := r.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		now := clock.Now()
		nowMin := now.Unix() / 60
		for where, r := range recorders {
			for name, byMinute := range minutes {
				if len(byMinute) == 0 {
					continue
				}
				s, err := r.Query(name, now, 24*time.Hour, time.Minute)
				if err != nil {
					t.Fatalf("%s: %s by the minute: %v", where, name, err)
				}
				for _, p := range s.Points {
					m := p.Start.Unix() / 60
					if want := byMinute[m]; m > nowMin-22*60 && (p.Probes != want.probes || p.Fails != want.fails) {
						t.Fatalf("%s: %s's minute %v: %d probes, %d failed; want %d, %d", where, name, p.Start, p.Probes, p.Fails, want.probes, want.fails)
					}
				}
				s, err = r.Query(name, now, history.HourSlots*time.Hour, time.Hour)
				if err != nil {
					t.Fatalf("%s: %s by the hour: %v", where, name, err)
				}
				for _, p := range s.Points {
					h := p.Start.Unix() / 3600
					if h <= now.Unix()/3600-28*24 {
						continue
					}
					var want count
					for m := h * 60; m < (h+1)*60; m++ {
						want.probes += byMinute[m].probes
						want.fails += byMinute[m].fails
					}
					if p.Probes != want.probes || p.Fails != want.fails {
						t.Fatalf("%s: %s's hour %v: %d probes, %d failed; want %d, %d", where, name, p.Start, p.Probes, p.Fails, want.probes, want.fails)
					}
				}
			}
		}
	})
}

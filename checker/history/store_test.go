package history_test

import (
	"context"
	"errors"
	"path/filepath"
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

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestHistorySurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db := openDB(t, path)
	r := history.New(history.Options{})
	probe(r, "a", t0, true, 3*time.Millisecond)
	probe(r, "a", t0.Add(time.Second), false, 300*time.Millisecond)
	probe(r, "b", t0, true, time.Millisecond)
	r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: t0, Reason: "draining: deploy 4711"})
	if err := r.Flush(db); err != nil {
		t.Fatal(err)
	}
	r.ObserveRemoval(checker.Spec{Name: "b"})
	if err := r.Flush(db); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDB(t, path)
	defer db.Close()
	r2 := history.New(history.Options{})
	if err := r2.Load(db); err != nil {
		t.Fatal(err)
	}
	want, _ := r.Query("a", t0.Add(time.Minute), time.Hour, time.Minute)
	got, err := r2.Query("a", t0.Add(time.Minute), time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.Probes != 2 || got.Fails != 1 || got.P99 != want.P99 || got.Group != "g" {
		t.Errorf("after restart: %d/%d p99 %v group %q, want 2/1 p99 %v g", got.Probes, got.Fails, got.P99, got.Group, want.P99)
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
	r := history.New(history.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, db, clock, time.Minute, func(err error) { t.Error(err) }) }()

	stored := func(name string) bool {
		var ok bool
		_ = db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("history"))
			ok = b != nil && b.Get([]byte(name)) != nil
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
	err := r.Run(context.Background(), db, fakeclock.New(t0), 0, nil)
	if err == nil || !strings.Contains(err.Error(), "interval must be positive") {
		t.Fatalf("err = %v, want the interval named", err)
	}
}

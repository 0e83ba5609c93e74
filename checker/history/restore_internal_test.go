package history

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// failingStore fails its next apply when fail is set, and otherwise keeps
// the history in memory.
type failingStore struct {
	*memStore
	fail bool
}

func (f *failingStore) apply(b *batch) error {
	if f.fail {
		f.fail = false
		return errors.New("disk full")
	}
	return f.memStore.apply(b)
}

// TestAFailedFlushLosesNothingAndCountsNothingTwice: what a failed Flush
// took is put back, written by the next, and counted once; a target
// removed and added again meanwhile does not inherit its old history.
func TestAFailedFlushLosesNothingAndCountsNothingTwice(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := &failingStore{memStore: newMemStore()}
	r := newRecorder(Options{Clock: fakeclock.New(t0)}, st)
	probe := func(name string, at time.Time, pass bool) {
		r.ObserveProbe(checker.Spec{Name: name, Group: "g"}, checker.Result{Pass: pass, Latency: time.Millisecond, Time: at})
	}
	count := func(name string) uint64 {
		t.Helper()
		s, err := r.Query(name, t0.Add(2*time.Hour), 3*time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s.Probes
	}
	probe("a", t0, true)
	probe("a", t0.Add(time.Hour), false) // closes t0's hour: pending
	probe("b", t0, true)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	probe("a", t0.Add(time.Hour+time.Minute), true)
	probe("b", t0.Add(time.Minute), true)
	r.ObserveRemoval(checker.Spec{Name: "b"})
	probe("b", t0.Add(2*time.Hour), true) // a new b, after the removal
	st.fail = true
	if err := r.Flush(); err == nil {
		t.Fatal("the failing Flush succeeded")
	}
	if got := count("a"); got != 3 {
		t.Errorf("a after the failed Flush: %d probes, want 3", got)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := count("a"); got != 3 {
		t.Errorf("a after the next Flush: %d probes, want 3", got)
	}
	if got := count("b"); got != 1 {
		t.Errorf("the new b: %d probes, want 1 (not the old b's)", got)
	}
}

// A history file is written by chunks of targets (flushChunk): when a
// later chunk fails, the earlier ones stay written and only the rest is
// put back, so the next Flush counts every probe once.
func TestAFlushFailingPartWayCountsEveryProbeOnce(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	db, err := bolt.Open(filepath.Join(t.TempDir(), "history.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := Open(db, Options{Clock: fakeclock.New(t0)})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, flushChunk+5)
	for i := range names {
		names[i] = fmt.Sprintf("t%06d", i)
	}
	// Sorted last, so in the last chunk, and a plain value in the file
	// where its bucket would go: bbolt refuses to write it.
	bad := "zzz"
	err = db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(seriesBucket)
		if err != nil {
			return err
		}
		return root.Put([]byte(bad), []byte("not a bucket"))
	})
	if err != nil {
		t.Fatal(err)
	}
	probeAll := func(at time.Time) {
		for _, name := range append(names, bad) {
			r.ObserveProbe(checker.Spec{Name: name, Group: "g"}, checker.Result{Pass: true, Latency: time.Millisecond, Time: at})
		}
	}
	count := func(name string) uint64 {
		t.Helper()
		s, err := r.Query(name, t0.Add(time.Hour), 2*time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s.Probes
	}
	probeAll(t0)
	if err := r.Flush(); err == nil {
		t.Fatal("a Flush that bbolt refuses part way succeeded")
	}
	var written uint64
	err = db.View(func(tx *bolt.Tx) error {
		written = uint64(tx.Bucket(seriesBucket).Stats().BucketN - 1)
		return nil
	})
	if err != nil || written != flushChunk {
		t.Errorf("after the failed Flush the file holds %d targets (%v), want the first chunk's %d", written, err, flushChunk)
	}
	// The fault goes; the next Flush writes the rest.
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(seriesBucket).Delete([]byte(bad)) }); err != nil {
		t.Fatal(err)
	}
	probeAll(t0.Add(time.Minute))
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{names[0], names[flushChunk-1], names[flushChunk], names[len(names)-1], bad} {
		if got := count(name); got != 2 {
			t.Errorf("%s: %d probes, want 2", name, got)
		}
	}
}

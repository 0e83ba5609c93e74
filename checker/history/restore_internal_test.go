package history

import (
	"errors"
	"testing"
	"time"

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

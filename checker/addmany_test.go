package checker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// batchStore is a memStore that writes several specs in one call, and
// counts those calls.
type batchStore struct {
	*memStore
	batches [][]string
}

func (b *batchStore) PutSpecs(specs []checker.Spec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSpec != nil {
		return b.failSpec
	}
	var names []string
	for _, s := range specs {
		b.specs[s.Name] = s
		names = append(names, s.Name)
	}
	b.batches = append(b.batches, names)
	return nil
}

func TestAddManyRegistersEachAndRefusesAlone(t *testing.T) {
	st := &batchStore{memStore: newMemStore()}
	e := newEnv(t, checker.Config{
		Store:      st,
		MaxTargets: 4,
		Defaults:   checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
	})
	e.add(t, spec("x"))
	waitFor(t, "x's event published", func() bool { return e.c.Revision() > 0 })
	w := watchNow(t, e.c, checker.Filter{})

	bad := spec("bad")
	bad.Interval = -time.Second
	httpSpec := checker.Spec{Name: "h", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:1/"}}}
	specs := []checker.Spec{spec("a"), bad, spec("b"), spec("a"), httpSpec, spec("x"), spec("c"), spec("d")}
	res, err := e.c.AddMany(specs)
	if err != nil {
		t.Fatal(err)
	}
	var fe *checker.FieldError
	var le *checker.LimitError
	for i, want := range []struct {
		created bool
		err     func(error) bool
	}{
		{created: true},
		{err: func(err error) bool { return errors.As(err, &fe) && fe.Field == "interval" }},
		{created: true},
		{err: func(err error) bool {
			return errors.As(err, &fe) && fe.Field == "name" && strings.Contains(fe.Reason, "more than once")
		}},
		{err: func(err error) bool { return err != nil && strings.Contains(err.Error(), "tcp") }},
		{},              // x: unchanged
		{created: true}, // c: the fourth target
		{err: func(err error) bool { return errors.As(err, &le) && le.Max == 4 }},
	} {
		r := res[i]
		if want.err != nil {
			if !want.err(r.Err) {
				t.Errorf("spec %d (%s): err = %v, want a refusal", i, specs[i].Name, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Created != want.created || r.Status.Spec.Name != specs[i].Name {
			t.Errorf("spec %d (%s): created %v, name %q, err %v; want created %v", i, specs[i].Name, r.Created, r.Status.Spec.Name, r.Err, want.created)
		}
	}
	// Durable when it returns, in one write, with only what changed.
	if got := fmt.Sprint(st.batches); got != "[[a b c]]" {
		t.Errorf("spec writes = %s, want one of a, b and c", got)
	}
	list, _ := e.c.List("")
	var names []string
	for _, s := range list {
		names = append(names, s.Spec.Name)
	}
	if got := strings.Join(names, " "); got != "a b c x" {
		t.Errorf("targets = %s, want a b c x", got)
	}
	// One ADDED each, at consecutive revisions.
	evs := nextN(t, w, 3)
	if got := strings.Join(kinds(evs), ", "); got != "added a, added b, added c" {
		t.Fatalf("events = %s, want three ADDED", got)
	}
	for i, ev := range evs {
		if ev.Revision != evs[0].Revision+uint64(i) {
			t.Errorf("event %d: revision %d, want %d", i, ev.Revision, evs[0].Revision+uint64(i))
		}
	}
}

func TestAddManyFailedWriteChangesNothing(t *testing.T) {
	st := &batchStore{memStore: newMemStore()}
	e := newEnv(t, checker.Config{Store: st, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("x"))
	waitFor(t, "x's event published", func() bool { return e.c.Revision() > 0 })
	w := watchNow(t, e.c, checker.Filter{})
	st.mu.Lock()
	st.failSpec = errors.New("disk full")
	st.mu.Unlock()
	res, err := e.c.AddMany([]checker.Spec{spec("a"), spec("x"), spec("b")})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		if r := res[2*i]; !errors.Is(r.Err, checker.ErrStore) {
			t.Errorf("%s: err = %v, want ErrStore", name, r.Err)
		}
	}
	if res[1].Err != nil { // unchanged: nothing to write
		t.Errorf("x: err = %v, want none", res[1].Err)
	}
	if list, _ := e.c.List(""); len(list) != 1 {
		t.Errorf("after a failed write: %d targets, want 1", len(list))
	}
	// No event for the refused specs: the next one is the next Add's.
	st.mu.Lock()
	st.failSpec = nil
	st.mu.Unlock()
	e.add(t, spec("y"))
	if got := strings.Join(kinds(nextN(t, w, 1)), ", "); got != "added y" {
		t.Errorf("events = %s, want only added y", got)
	}
}

func TestAddManyRefusesTooManyWhole(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	specs := make([]checker.Spec, checker.MaxAddMany+1)
	for i := range specs {
		specs[i] = spec(fmt.Sprintf("t%d", i))
	}
	_, err := e.c.AddMany(specs)
	var fe *checker.FieldError
	if !errors.As(err, &fe) || fe.Field != "targets" || !strings.Contains(fe.Reason, "10000") {
		t.Fatalf("err = %v, want a FieldError on targets naming the bound", err)
	}
	if list, _ := e.c.List(""); len(list) != 0 {
		t.Errorf("%d targets registered, want none", len(list))
	}
}

// nextN waits until the watcher has at least n events and returns them all.
func nextN(t *testing.T, w *checker.Watcher, n int) []checker.Event {
	t.Helper()
	var evs []checker.Event
	waitFor(t, fmt.Sprintf("%d events", n), func() bool {
		evs = append(evs, next(t, w)...)
		return len(evs) >= n
	})
	return evs
}

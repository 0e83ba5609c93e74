package checker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// Next returns at most max events and leaves the rest for the next call;
// Progress moves a watcher past events it does not match; a watch resumed
// from an older revision is signalled Ready at once, as events wait.
func TestWatcherNextProgressAndResume(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("first")) // so that the resume below starts past revision 0 (0 asks for a snapshot)
	e.c.List("")
	start := e.c.Revision()
	if start == 0 {
		t.Fatal("revision 0 after an add")
	}
	all := watchNow(t, e.c, checker.Filter{})
	other := watchNow(t, e.c, checker.Filter{Group: "g1"})
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		e.add(t, spec(n))
	}
	e.c.List("") // every add is published
	last := e.c.Revision()

	first, err := all.Next(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(first); !slices.Equal(got, []string{"added a", "added b"}) {
		t.Errorf("Next(2) = %v, want the first two", got)
	}
	if rev, ok := all.Progress(); ok {
		t.Errorf("Progress with three events pending = %d, true; want false", rev)
	}
	if got := kinds(next(t, all)); !slices.Equal(got, []string{"added c", "added d", "added e"}) {
		t.Errorf("the next call = %v, want the other three", got)
	}

	if rev, ok := other.Progress(); !ok || rev != last {
		t.Errorf("Progress of a watcher matching none of the events = %d, %v; want %d, true", rev, ok, last)
	}
	if evs := next(t, other); len(evs) != 0 {
		t.Errorf("a watcher of g1 got %v", kinds(evs))
	}

	resumed, err := e.c.Watch(checker.Filter{}, start)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	select {
	case <-resumed.Ready():
	case <-time.After(testscale.D(5 * time.Second)):
		t.Fatal("a watch resumed with five events waiting was not signalled Ready")
	}
	if got := kinds(next(t, resumed)); len(got) != 5 {
		t.Errorf("the resumed watch got %v, want the five adds", got)
	}
}

// A watcher of a group is signalled Ready for its group's events, and for
// a target that leaves the group, also after another watcher of the group
// closed; a transition event carries its revision.
func TestWatchersAreSignalledForTheirGroup(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	g1 := watchNow(t, e.c, checker.Filter{Group: "g1"})
	all := watchNow(t, e.c, checker.Filter{})
	watchNow(t, e.c, checker.Filter{Group: "g1"}).Close() // another of g1 leaving keeps g1 watched
	ready := func(what string) {
		t.Helper()
		select {
		case <-g1.Ready():
		case <-time.After(testscale.D(5 * time.Second)):
			t.Fatalf("%s: the watcher of g1 was not signalled", what)
		}
	}
	s := spec("a")
	s.Group = "g1"
	e.add(t, s)
	e.c.List("")
	ready("a added to g1")
	if got := kinds(next(t, g1)); !slices.Equal(got, []string{"added a"}) {
		t.Errorf("g1 got %v", got)
	}
	select { // a spurious signal is allowed; drain it
	case <-g1.Ready():
	default:
	}
	s.Group = "g2"
	e.add(t, s)
	e.c.List("")
	ready("a moved out of g1")
	if got := kinds(next(t, g1)); !slices.Equal(got, []string{"updated a"}) {
		t.Errorf("g1 got %v, want a's move out", got)
	}

	e.probes.set("a", pass)
	e.c.RunRound(t.Context())
	e.c.List("")
	var trs int
	for _, ev := range next(t, all) {
		if ev.Kind == checker.EventTransition {
			trs++
			if ev.Transition.Revision != ev.Revision || ev.Revision == 0 {
				t.Errorf("transition %v at revision %d carries revision %d", ev.Transition, ev.Revision, ev.Transition.Revision)
			}
		}
	}
	if trs != 1 {
		t.Errorf("%d transitions, want a's rise", trs)
	}
}

// An event leaving the history ends only the watchers that had not been
// handed it: one whose position is that event is not behind.
func TestEvictionSparesAWatcherAtTheEvictedEvent(t *testing.T) {
	e := newEnv(t, checker.Config{HistorySize: 2})
	e.add(t, spec("a"))
	e.c.List("")
	w := watchNow(t, e.c, checker.Filter{})
	e.add(t, spec("b"))
	e.c.List("")
	if got := kinds(next(t, w)); !slices.Equal(got, []string{"added b"}) {
		t.Fatalf("first read %v", got)
	}
	e.add(t, spec("c"))
	e.add(t, spec("d")) // evicts b, which w was handed last
	e.c.List("")
	evs, err := w.Next(10)
	if err != nil {
		t.Fatalf("a watcher at the evicted event was ended: %v", err)
	}
	if got := kinds(evs); !slices.Equal(got, []string{"added c", "added d"}) {
		t.Errorf("then %v, want c and d", got)
	}
}

// Wake signals Ready with nothing to read, also after Close: the owner of a
// watcher can wait on Ready alone and be woken by a timer of its own.
func TestWatcherWake(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("a"))
	e.c.List("")
	w := watchNow(t, e.c, checker.Filter{})
	select {
	case <-w.Ready():
		t.Fatal("Ready signalled before anything happened")
	default:
	}
	w.Wake()
	select {
	case <-w.Ready():
	default:
		t.Fatal("Ready not signalled after Wake")
	}
	if evs := next(t, w); len(evs) != 0 {
		t.Errorf("Next after Wake = %v, want nothing", kinds(evs))
	}
	w.Close()
	<-w.Ready() // Close signals too
	w.Wake()
	select {
	case <-w.Ready():
	default:
		t.Fatal("Ready not signalled by Wake after Close")
	}
}

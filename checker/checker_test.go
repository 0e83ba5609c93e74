package checker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// Two targets, web-1 and web-2, with fall=2 and rise=2, one RunRound per
// round. Rounds 1-4: both come up on round 2, then web-2 times out and
// fails and leaves on round 4, leaving web-1 alone healthy. Rounds 5-8
// continue from there: web-2's failure on round 6 resets its pass streak,
// so it is back only on round 8.
func TestTwoTargetsRise2Fall2Rounds(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2}})
	e.add(t, spec("web-2"))
	e.add(t, spec("web-1"))

	rounds := []struct {
		name string
		set  map[string]outcome
		want []string
	}{
		{"round 1", map[string]outcome{"web-1": pass, "web-2": pass}, []string{}},
		{"round 2", map[string]outcome{"web-1": pass, "web-2": pass}, []string{"web-1: unhealthy -> healthy", "web-2: unhealthy -> healthy"}},
		{"round 3", map[string]outcome{"web-1": pass, "web-2": timeout}, []string{}},
		{"round 4", map[string]outcome{"web-1": pass, "web-2": fail}, []string{"web-2: healthy -> unhealthy"}},
		// web-2 recovers, a failure resetting its pass streak.
		{"round 5", map[string]outcome{"web-1": pass, "web-2": pass}, []string{}},
		{"round 6", map[string]outcome{"web-1": pass, "web-2": fail}, []string{}},
		{"round 7", map[string]outcome{"web-1": pass, "web-2": pass}, []string{}},
		{"round 8", map[string]outcome{"web-1": pass, "web-2": pass}, []string{"web-2: unhealthy -> healthy"}},
	}
	for _, r := range rounds {
		e.probes.setAll(r.set)
		got := texts(e.c.RunRound(t.Context()))
		if diff := cmp.Diff(r.want, got); diff != "" {
			t.Fatalf("%s transitions (-want +got):\n%s", r.name, diff)
		}
		if r.name == "round 4" {
			if diff := cmp.Diff([]string{"web-1"}, e.c.Healthy("")); diff != "" {
				t.Errorf("healthy() after round 4 (-want +got):\n%s", diff)
			}
		}
	}
	st, err := e.c.Status("web-2")
	if err != nil || st.State != checker.StateHealthy {
		t.Errorf("state(web-2) = %v, %v; want healthy", st.State, err)
	}
}

func TestRoundTimeoutAndPanicAreFailuresAndDoNotStopOthers(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	for _, n := range []string{"a-hangs", "b-panics", "c-passes"} {
		s := spec(n)
		s.InitialState = checker.StateHealthy
		e.add(t, s)
	}
	e.probes.set("a-hangs", outcome{hang: true})
	e.probes.set("b-panics", outcome{panics: true})
	e.probes.set("c-passes", pass)

	done := make(chan []checker.Transition)
	go func() { done <- e.c.RunRound(t.Context()) }()
	waitFor(t, "the hung probe to start", func() bool { return e.probes.callCount("a-hangs") == 1 })
	e.clock.Advance(time.Second)
	trs := <-done

	if diff := cmp.Diff([]string{"a-hangs: healthy -> unhealthy", "b-panics: healthy -> unhealthy"}, texts(trs)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{"a-hangs": "timeout after 1s", "b-panics": "probe panicked: boom", "c-passes": ""} {
		st, _ := e.c.Status(name)
		if st.LastResult == nil || st.LastResult.Err != want {
			t.Errorf("%s last result %+v, want error %q", name, st.LastResult, want)
		}
	}
	if diff := cmp.Diff([]string{"c-passes"}, e.c.Healthy("")); diff != "" {
		t.Errorf("healthy (-want +got):\n%s", diff)
	}
}

func TestMaxLatencyFailsASlowPass(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("slow")
	s.MaxLatency = 500 * time.Millisecond
	s.Rise, s.Fall, s.InitialState = 1, 1, checker.StateHealthy
	e.add(t, s)
	e.probes.set("slow", outcome{advance: 612 * time.Millisecond})
	trs := e.c.RunRound(t.Context())
	if len(trs) != 1 || trs[0].Result.Err != "slow: 612ms > 500ms" || trs[0].Result.Pass {
		t.Fatalf("transitions %+v, want one failure \"slow: 612ms > 500ms\"", trs)
	}
	if trs[0].Result.Latency != 612*time.Millisecond {
		t.Errorf("latency %v, want 612ms", trs[0].Result.Latency)
	}
	e.probes.set("slow", outcome{advance: 499 * time.Millisecond})
	if trs := texts(e.c.RunRound(t.Context())); !cmp.Equal(trs, []string{"slow: unhealthy -> healthy"}) {
		t.Errorf("a fast enough answer: transitions %v", trs)
	}
}

func TestAddExistingKeepsStateAndStreaksAndAppliesSpec(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("web-1"))
	e.probes.set("web-1", pass)
	e.c.RunRound(t.Context())

	s := spec("web-1")
	s.Rise = 5
	s.Group = "edge"
	st, created, err := e.c.Add(s)
	if err != nil || created {
		t.Fatalf("re-Add: created %v, err %v; want an update", created, err)
	}
	if st.PassStreak != 1 || st.State != checker.StateUnhealthy || st.Spec.Rise != 5 || st.Spec.Group != "edge" {
		t.Errorf("after re-Add: %+v; want pass streak 1 kept, rise 5 and group edge applied", st)
	}
	for range 3 {
		if trs := e.c.RunRound(t.Context()); len(trs) != 0 {
			t.Fatalf("rose before 5 passes: %v", texts(trs))
		}
	}
	if trs := texts(e.c.RunRound(t.Context())); !cmp.Equal(trs, []string{"web-1: unhealthy -> healthy"}) {
		t.Errorf("fifth pass: %v", trs)
	}
	if got := e.c.Healthy("edge"); !cmp.Equal(got, []string{"web-1"}) {
		t.Errorf("Healthy(edge) = %v", got)
	}
}

func TestAddSameProbeKeepsProberNewProbeReplacesIt(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("web-1"))
	e.add(t, spec("web-1"))
	if n := e.probes.closed["web-1:80"]; n != 0 {
		t.Errorf("re-adding the same probe closed %d probers", n)
	}
	s := spec("web-1")
	s.Probe.TCP.Address = "web-1b:80"
	e.add(t, s)
	if n := e.probes.closed["web-1:80"]; n != 1 {
		t.Errorf("replacing the probe closed %d old probers, want 1", n)
	}
	if ok, _ := e.c.Remove("web-1"); !ok || e.probes.closed["web-1b:80"] != 1 {
		t.Errorf("Remove did not close the prober")
	}
}

func TestAddRejectsBadSpecsNamingTheField(t *testing.T) {
	e := newEnv(t, checker.Config{})
	tests := []struct {
		field string
		edit  func(*checker.Spec)
	}{
		{"name", func(s *checker.Spec) { s.Name = "" }},
		{"name", func(s *checker.Spec) { s.Name = "web 1" }},
		{"name", func(s *checker.Spec) { s.Name = "-web" }},
		{"name", func(s *checker.Spec) { s.Name = strings.Repeat("a", checker.MaxNameLen+1) }},
		{"group", func(s *checker.Spec) { s.Group = "a/b" }},
		{"rise", func(s *checker.Spec) { s.Rise = -1 }},
		{"fall", func(s *checker.Spec) { s.Fall = -2 }},
		{"timeout", func(s *checker.Spec) { s.Interval, s.Timeout = time.Second, 2*time.Second }},
		{"timeout", func(s *checker.Spec) { s.Timeout = 5 * time.Second }}, // default interval 2s
		{"interval", func(s *checker.Spec) { s.Interval = -time.Second }},
		{"max_latency", func(s *checker.Spec) { s.MaxLatency = 2 * time.Second }},
		{"initial_state", func(s *checker.Spec) { s.InitialState = checker.StateSuspect }},
		{"model", func(s *checker.Spec) { s.Model = checker.Model(7) }},
		{"tcp.address", func(s *checker.Spec) { s.Probe.TCP.Address = "no-port" }},
		{"probe", func(s *checker.Spec) { s.Probe = probe.Spec{} }},
	}
	for _, tt := range tests {
		s := spec("web-1")
		tt.edit(&s)
		_, _, err := e.c.Add(s)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: error %v, want a checker.FieldError on %q", s, err, tt.field)
		}
	}
	if l, _ := e.c.List(""); len(l) != 0 {
		t.Errorf("rejected specs registered %d targets", len(l))
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t, checker.Config{})
	if ok, err := e.c.Remove("nope"); ok || err != nil {
		t.Error("Remove of an unknown name reported true")
	}
	e.add(t, spec("web-1"))
	if ok, err := e.c.Remove("web-1"); !ok || err != nil {
		t.Error("Remove of a known name reported false")
	}
	if _, err := e.c.Status("web-1"); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("checker.Status after Remove: %v, want checker.ErrUnknownTarget", err)
	}
}

func TestResultForRemovedTargetIsDiscarded(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	s := spec("web-1")
	s.InitialState = checker.StateHealthy
	e.add(t, s)
	e.probes.set("web-1", outcome{hang: true})
	w := watchNow(t, e.c, checker.Filter{})

	done := make(chan []checker.Transition)
	go func() { done <- e.c.RunRound(t.Context()) }()
	waitFor(t, "the probe to start", func() bool { return e.probes.callCount("web-1") == 1 })
	e.c.Remove("web-1")
	e.add(t, s) // the same name again is a new target
	e.clock.Advance(time.Second)
	if trs := <-done; len(trs) != 0 {
		t.Errorf("a removed target's result made transitions: %v", texts(trs))
	}
	st, err := e.c.Status("web-1")
	if err != nil || st.State != checker.StateHealthy || st.LastResult != nil {
		t.Errorf("re-added target took the old result: %+v, %v", st, err)
	}
	if got := kinds(next(t, w)); !cmp.Equal(got, []string{"removed web-1", "added web-1"}) {
		t.Errorf("watcher saw %v, want the removal and the new target, no transition", got)
	}
}

func TestStatusAndList(t *testing.T) {
	e := newEnv(t, checker.Config{})
	b := spec("b")
	b.Group = "g1"
	e.add(t, b)
	a := spec("a")
	a.Group = "g2"
	e.add(t, a)
	e.probes.setAll(map[string]outcome{"a": pass, "b": fail})
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())
	e.clock.Advance(time.Second)
	e.c.RunRound(t.Context())

	st, err := e.c.Status("a")
	if err != nil {
		t.Fatal(err)
	}
	want := checker.Status{
		Spec:           checker.Spec{Name: "a", Group: "g2", Probe: a.Probe, Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, InitialState: checker.StateUnhealthy},
		State:          checker.StateHealthy,
		Routable:       true,
		PassStreak:     2,
		LastResult:     &checker.Result{Pass: true, Time: epoch.Add(2 * time.Second)},
		LastTransition: epoch.Add(2 * time.Second),
		Verdict:        checker.StateHealthy,
		Transitions:    1, // unhealthy -> healthy, within the minute
		ProbeInterval:  2 * time.Second,
		NextProbe:      st.NextProbe, // the first probe's offset: not scheduled yet
		ActiveResults:  2,
		Weight:         100,
	}
	if st.NextProbe.Before(epoch) || !st.NextProbe.Before(epoch.Add(2*time.Second)) {
		t.Errorf("next probe %v, want within the first interval", st.NextProbe)
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("checker.Status(a) (-want +got):\n%s", diff)
	}
	var names []string
	list, _ := e.c.List("")
	for _, s := range list {
		names = append(names, s.Spec.Name)
	}
	if !cmp.Equal(names, []string{"a", "b"}) {
		t.Errorf("List order %v", names)
	}
	if l, _ := e.c.List("g1"); len(l) != 1 || l[0].Spec.Name != "b" || l[0].FailStreak != 2 || l[0].LastResult.Err != "status 503" {
		t.Errorf("List(g1) = %+v", l)
	}
}

func TestThreeStateSuspectIsRoutable(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("db")
	s.Model = checker.ModelThreeState
	e.add(t, s)
	e.probes.set("db", pass)
	if trs := texts(e.c.RunRound(t.Context())); !cmp.Equal(trs, []string{"db: unhealthy -> suspect"}) {
		t.Fatalf("first pass: %v", trs)
	}
	if got := e.c.Healthy(""); !cmp.Equal(got, []string{"db"}) {
		t.Errorf("Healthy with a suspect target = %v, want [db]", got)
	}
	// Switching to rise_fall keeps it routable, and says so on the stream.
	w := watchNow(t, e.c, checker.Filter{})
	s.Model = checker.ModelRiseFall
	e.add(t, s)
	evs := next(t, w)
	if got := kinds(evs); !cmp.Equal(got, []string{"updated db", "db: suspect -> healthy"}) {
		t.Fatalf("model change events %v", got)
	}
	if evs[1].Transition.Reason != "model changed to rise_fall" || evs[1].Revision != evs[0].Revision+1 {
		t.Errorf("model change transition %+v", evs[1])
	}
}

func TestWatchFiltersAndOrdersEvents(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	all := watchNow(t, e.c, checker.Filter{})
	group := watchNow(t, e.c, checker.Filter{Group: "g"})
	named := watchNow(t, e.c, checker.Filter{Group: "g", Names: []string{"c", "a"}})
	for _, n := range []string{"a", "b", "c"} {
		s := spec(n)
		if n != "a" {
			s.Group = "g"
		}
		e.add(t, s)
	}
	e.probes.setAll(map[string]outcome{"a": pass, "b": pass, "c": pass})
	e.c.RunRound(t.Context())
	e.probes.setAll(map[string]outcome{"a": fail, "b": fail, "c": fail})
	e.c.RunRound(t.Context())
	moved := spec("c") // c moves from g to h: watchers of g see the update
	moved.Group = "h"
	e.add(t, moved)
	e.c.Remove("b")

	if diff := cmp.Diff([]string{
		"added a", "added b", "added c",
		"a: unhealthy -> healthy", "b: unhealthy -> healthy", "c: unhealthy -> healthy",
		"a: healthy -> unhealthy", "b: healthy -> unhealthy", "c: healthy -> unhealthy",
		"updated c", "removed b",
	}, kinds(next(t, all))); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{
		"added b", "added c",
		"b: unhealthy -> healthy", "c: unhealthy -> healthy", "b: healthy -> unhealthy", "c: healthy -> unhealthy",
		"updated c", "removed b",
	}, kinds(next(t, group))); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"added c", "c: unhealthy -> healthy", "c: healthy -> unhealthy", "updated c"}, kinds(next(t, named))); diff != "" {
		t.Errorf("group and names (-want +got):\n%s", diff)
	}
	if evs := next(t, all); len(evs) != 0 {
		t.Errorf("events handed out twice: %v", kinds(evs))
	}
}

func TestWatchSnapshotThenEvents(t *testing.T) {
	e := newEnv(t, checker.Config{Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("b"))
	e.add(t, spec("a"))
	e.probes.setAll(map[string]outcome{"a": pass, "b": fail})
	e.c.RunRound(t.Context())
	w, err := e.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	snap, rev := w.Snapshot()
	if rev != 3 || len(snap) != 2 || snap[0].Spec.Name != "a" || snap[0].State != checker.StateHealthy || snap[1].Spec.Name != "b" {
		t.Fatalf("snapshot at %d: %+v", rev, snap)
	}
	e.c.Remove("a")
	evs := next(t, w)
	if len(evs) != 1 || evs[0].Revision != 4 || evs[0].Kind != checker.EventRemoved {
		t.Errorf("after the snapshot: %+v", evs)
	}
}

func TestWatchResume(t *testing.T) {
	e := newEnv(t, checker.Config{HistorySize: 4, StartRevision: 100})
	if _, err := e.c.Watch(checker.Filter{}, 100); err != nil {
		t.Errorf("resuming at the start revision: %v", err)
	}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		e.add(t, spec(n)) // revisions 101..106; the history holds 103..106
	}
	w, err := e.c.Watch(checker.Filter{}, 104)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(next(t, w)); !cmp.Equal(got, []string{"added e", "added f"}) {
		t.Errorf("resume after 104: %v", got)
	}
	w.Close()
	w, err = e.c.Watch(checker.Filter{}, 102) // 103 is the oldest held: fine
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(next(t, w)); len(got) != 4 || got[0] != "added c" {
		t.Errorf("resume after 102: %v", got)
	}
	w.Close()
	_, err = e.c.Watch(checker.Filter{}, 101)
	var ce *checker.CompactedError
	if !errors.As(err, &ce) || ce.Oldest != 102 || !errors.Is(err, checker.ErrCompacted) {
		t.Errorf("resume after 101: %v, want compacted with oldest 102", err)
	}
	_, err = e.c.Watch(checker.Filter{}, 107)
	var fe *checker.FutureRevisionError
	if !errors.As(err, &fe) || fe.Current != 106 || !errors.Is(err, checker.ErrFutureRevision) {
		t.Errorf("resume after 107: %v, want future with current 106", err)
	}
}

func TestIdenticalAddMakesNoEvent(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	rev := e.c.Revision()
	e.add(t, spec("a"))
	if e.c.Revision() != rev {
		t.Errorf("re-adding the same spec moved the revision from %d to %d", rev, e.c.Revision())
	}
}

// A watcher that never reads costs the checker nothing and cannot make it
// wait: once the next event it needs leaves the history it is ended, naming
// the last revision it was handed, while a reader gets every event in order.
func TestStuckWatcherIsEndedReaderGetsEverything(t *testing.T) {
	e := newEnv(t, checker.Config{HistorySize: 1000, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("flappy"))
	stuck := watchNow(t, e.c, checker.Filter{})
	stuckAt := e.c.Revision()
	reader := watchNow(t, e.c, checker.Filter{})
	quiet := watchNow(t, e.c, checker.Filter{Group: "other"}) // matches nothing: never behind

	const n = 10000
	var got []checker.Event
	for i := range n {
		e.probes.set("flappy", map[bool]outcome{true: pass, false: fail}[i%2 == 0])
		if len(e.c.RunRound(t.Context())) != 1 {
			t.Fatalf("round %d made no transition", i)
		}
		if i%500 == 499 { // the reader keeps within the history
			got = append(got, next(t, reader)...)
		}
	}
	got = append(got, next(t, reader)...)
	if len(got) != n {
		t.Fatalf("reader got %d events, want %d", len(got), n)
	}
	for i, ev := range got {
		if ev.Revision != stuckAt+uint64(i)+1 {
			t.Fatalf("event %d has revision %d, want %d", i, ev.Revision, stuckAt+uint64(i)+1)
		}
	}
	_, err := stuck.Next(10)
	var be *checker.BehindError
	if !errors.As(err, &be) || be.LastDelivered != stuckAt || !errors.Is(err, checker.ErrSubscriberTooSlow) {
		t.Errorf("stuck watcher: %v, want behind at %d", err, stuckAt)
	}
	stuck.Close() // idempotent after the checker ended it
	if _, err := quiet.Next(10); err != nil {
		t.Errorf("a watcher with nothing to read was ended: %v", err)
	}
	if rev, ok := quiet.Progress(); !ok || rev != e.c.Revision() {
		t.Errorf("quiet watcher's progress %d %v, want %d", rev, ok, e.c.Revision())
	}
	if rev, ok := reader.Progress(); !ok || rev != e.c.Revision() {
		t.Errorf("reader's progress %d %v, want %d", rev, ok, e.c.Revision())
	}
}

func TestCloseEndsWatchersAndIsIdempotent(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	w := watchNow(t, e.c, checker.Filter{})
	e.c.Start()
	e.c.Close()
	e.c.Close()
	select {
	case <-w.Ready():
	default:
		t.Error("Close did not wake the watcher")
	}
	if _, err := w.Next(1); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("watcher after Close: %v", err)
	}
	if _, _, err := e.c.Add(spec("b")); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("Add after Close: %v", err)
	}
	if _, err := e.c.Watch(checker.Filter{}, 0); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("Watch after Close: %v", err)
	}
	if e.probes.closed["a:80"] != 1 {
		t.Errorf("Close closed %d probers of a, want 1", e.probes.closed["a:80"])
	}
}

// Each transition is logged as "<name>: <from> -> <to>", a failing one
// with the probe's error.
func TestTransitionsAreLoggedAsNameFromTo(t *testing.T) {
	var buf bytes.Buffer
	e := newEnv(t, checker.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("web-2"))
	e.probes.set("web-2", pass)
	e.c.RunRound(t.Context())
	e.probes.set("web-2", fail)
	e.c.RunRound(t.Context())
	for _, want := range []string{`msg="web-2: unhealthy -> healthy"`, `msg="web-2: healthy -> unhealthy"`, `error="status 503"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, buf.String())
		}
	}
}

func TestRoundCancelledDiscardsResults(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	e.probes.set("a", outcome{hang: true})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []checker.Transition)
	go func() { done <- e.c.RunRound(ctx) }()
	waitFor(t, "the probe to start", func() bool { return e.probes.callCount("a") == 1 })
	cancel()
	<-done
	if st, _ := e.c.Status("a"); st.LastResult != nil || st.FailStreak != 0 {
		t.Errorf("a probe cut short by cancellation counted: %+v", st)
	}
}

type recorder struct {
	mu     sync.Mutex
	probes []string
	trs    []string
}

func (r *recorder) ObserveProbe(s checker.Spec, res checker.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probes = append(r.probes, fmt.Sprintf("%s %s %v %q", s.Name, s.Probe.Kind(), res.Pass, res.Err))
}

func (r *recorder) ObserveTransition(tr checker.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trs = append(r.trs, tr.String())
}

func TestObserverSeesProbesAndTransitions(t *testing.T) {
	rec := &recorder{}
	e := newEnv(t, checker.Config{Observer: rec, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	e.add(t, spec("a"))
	e.add(t, spec("b"))
	e.probes.setAll(map[string]outcome{"a": pass, "b": fail})
	e.c.RunRound(t.Context())
	slices.Sort(rec.probes)
	if diff := cmp.Diff([]string{`a tcp true ""`, `b tcp false "status 503"`}, rec.probes); diff != "" {
		t.Errorf("probes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a: unhealthy -> healthy"}, rec.trs); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if n := e.c.Watchers(); n != 0 {
		t.Errorf("%d watchers before any Watch", n)
	}
	w := watchNow(t, e.c, checker.Filter{Group: "g"})
	if n := e.c.Watchers(); n != 1 {
		t.Errorf("%d watchers, want 1", n)
	}
	w.Close()
	if n := e.c.Watchers(); n != 0 {
		t.Errorf("%d watchers after Close, want 0", n)
	}
}

func TestLimits(t *testing.T) {
	e := newEnv(t, checker.Config{MaxTargets: 3, MaxTargetsPerGroup: 2, MaxWatchers: 1})
	inGroup := func(name, group string) checker.Spec {
		s := spec(name)
		s.Group = group
		return s
	}
	e.add(t, inGroup("a", "g"))
	e.add(t, inGroup("b", "g"))
	var le *checker.LimitError
	if _, _, err := e.c.Add(inGroup("c", "g")); !errors.As(err, &le) || le.Max != 2 || err.Error() != `limit reached: at most 2 targets in group "g"` {
		t.Errorf("third target in g: %v", err)
	}
	e.add(t, inGroup("b", "g")) // an update is not a new target
	e.add(t, inGroup("c", "h"))
	if _, _, err := e.c.Add(inGroup("d", "h")); !errors.Is(err, checker.ErrLimit) || err.Error() != "limit reached: at most 3 targets" {
		t.Errorf("fourth target: %v", err)
	}
	if _, _, err := e.c.Add(inGroup("c", "g")); !errors.Is(err, checker.ErrLimit) {
		t.Errorf("moving c into the full group g: %v", err)
	}
	e.c.Remove("a")
	e.add(t, inGroup("c", "g")) // room again: c moves from h to g
	if st, _ := e.c.Status("c"); st.Spec.Group != "g" {
		t.Errorf("c is in %q", st.Spec.Group)
	}
	watchNow(t, e.c, checker.Filter{})
	if _, err := e.c.Watch(checker.Filter{}, 0); !errors.Is(err, checker.ErrLimit) || err.Error() != "limit reached: at most 1 watchers" {
		t.Errorf("second watcher: %v", err)
	}
}

func TestReAddWithAnotherInitialStateChangesNothing(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("a"))
	rev := e.c.Revision()
	s := spec("a")
	s.InitialState = checker.StateHealthy
	st, created, err := e.c.Add(s)
	if err != nil || created || st.Spec.InitialState != checker.StateUnhealthy || e.c.Revision() != rev {
		t.Errorf("re-Add with initial state healthy: %+v created %v err %v, revision %d -> %d; want no change", st.Spec, created, err, rev, e.c.Revision())
	}
}

// One source cannot take every watcher slot: past MaxWatchersPerSource its
// next watch is refused, naming the source, while another source and
// pulsed's own watchers (no source) still get one; a watcher that ends,
// by Close or by falling behind, frees its source's slot.
func TestWatchersPerSource(t *testing.T) {
	e := newEnv(t, checker.Config{MaxWatchers: 5, MaxWatchersPerSource: 2, HistorySize: 2})
	a := checker.Filter{Source: "192.0.2.1"}
	first := watchNow(t, e.c, a)
	behind := watchNow(t, e.c, a)
	var le *checker.LimitError
	_, err := e.c.Watch(a, 0)
	if !errors.As(err, &le) || le.Limit != checker.LimitWatchersPerSource || err.Error() != "limit reached: at most 2 watchers from 192.0.2.1" {
		t.Fatalf("a third watcher from one source: %v", err)
	}
	watchNow(t, e.c, checker.Filter{Source: "192.0.2.2"})
	watchNow(t, e.c, checker.Filter{}) // pulsed's own: the global bound alone
	watchNow(t, e.c, checker.Filter{})
	if _, err := e.c.Watch(checker.Filter{Source: "192.0.2.3"}, 0); !errors.As(err, &le) || le.Limit != checker.LimitWatchers {
		t.Fatalf("past the global bound: %v", err)
	}
	first.Close()
	watchNow(t, e.c, a)

	// behind falls further behind than the history holds: ended, it
	// frees its slot.
	for _, n := range []string{"x", "y", "z"} {
		e.add(t, spec(n))
	}
	if _, err := behind.Next(10); !errors.Is(err, checker.ErrSubscriberTooSlow) {
		t.Fatalf("a watcher past the history: %v", err)
	}
	watchNow(t, e.c, a)
}

package checker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// The watch hub on its own: events in, watchers' positions out.

func hubEvent(clock *fakeclock.Clock, rev uint64, group, name string) checker.Event {
	return checker.Event{Revision: rev, Kind: checker.EventTransition, Time: clock.Now(), Transition: checker.Transition{
		Revision: rev, Target: name, Group: group, From: checker.StateHealthy, To: checker.StateUnhealthy, Time: clock.Now(),
	}}
}

func revisions(evs []checker.Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.Revision)
	}
	return out
}

func signalled(w *checker.Watcher) bool {
	select {
	case <-w.Ready():
		return true
	default:
		return false
	}
}

func TestHubPublishWakesOnlyMatchingWatchers(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	edge, err := h.Watch(checker.Filter{Group: "edge"}, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	core, _ := h.Watch(checker.Filter{Group: "core"}, 0, true)
	web1, _ := h.Watch(checker.Filter{Names: []string{"web-1"}}, 0, true)

	h.Publish(hubEvent(clock, 1, "edge", "web-1"), hubEvent(clock, 2, "edge", "web-2"))

	if !signalled(edge) || !signalled(web1) {
		t.Fatal("a watcher the events match was not signalled")
	}
	if signalled(core) {
		t.Fatal("a watcher of another group was signalled")
	}
	got, err := edge.Next(10)
	if err != nil || len(got) != 2 || got[0].Target() != "web-1" || got[1].Target() != "web-2" {
		t.Fatalf("edge watcher: %v, %v; want web-1 then web-2", revisions(got), err)
	}
	got, _ = web1.Next(10)
	if want := []uint64{1}; len(got) != 1 || got[0].Revision != want[0] {
		t.Fatalf("name watcher: %v, want %v", revisions(got), want)
	}
	if got, _ := core.Next(10); len(got) != 0 {
		t.Fatalf("core watcher got %v", revisions(got))
	}
	if rev, ok := core.Progress(); !ok || rev != 2 {
		t.Fatalf("core watcher's progress = %d, %v; want 2, true", rev, ok)
	}
	if h.Revision() != 2 {
		t.Fatalf("revision %d, want 2", h.Revision())
	}
}

func TestHubNextTakesAtMostMaxAndSignalsTheRest(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	w, _ := h.Watch(checker.Filter{}, 0, true)
	h.Publish(hubEvent(clock, 1, "", "a"), hubEvent(clock, 2, "", "b"), hubEvent(clock, 3, "", "c"))
	<-w.Ready()
	got, _ := w.Next(2)
	if len(got) != 2 || got[1].Revision != 2 {
		t.Fatalf("first Next: %v, want [1 2]", revisions(got))
	}
	if !signalled(w) {
		t.Fatal("not signalled with an event left")
	}
	if got, _ := w.Next(2); len(got) != 1 || got[0].Revision != 3 {
		t.Fatalf("second Next: %v, want [3]", revisions(got))
	}
}

// A revision can carry several events (with a shared registry, one
// transaction); a batch holds whole revisions, so a max that falls inside
// one never loses the rest of it.
func TestHubNextNeverSplitsARevision(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	w, _ := h.Watch(checker.Filter{}, 0, true)
	h.Publish(hubEvent(clock, 1, "", "a"), hubEvent(clock, 2, "", "b"), hubEvent(clock, 2, "", "c"), hubEvent(clock, 2, "", "d"), hubEvent(clock, 3, "", "e"))
	<-w.Ready()
	var names []string
	for range 3 {
		got, err := w.Next(2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			names = append(names, e.Transition.Target)
		}
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(names, want) {
		t.Fatalf("Next(2) three times: %q, want %q", names, want)
	}
}

// A watcher's position moves a whole revision at a time, also when
// Progress looks ahead past events it does not match: the second event of
// revision 2 is this watcher's, though the first is not.
func TestHubProgressNeverSkipsInsideARevision(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	defer h.Close()
	w, _ := h.Watch(checker.Filter{Group: "y"}, 0, true)
	h.Publish(hubEvent(clock, 1, "x", "a"), hubEvent(clock, 2, "x", "b"), hubEvent(clock, 2, "y", "c"))
	if rev, ok := w.Progress(); ok {
		t.Fatalf("Progress = %d, true with c waiting", rev)
	}
	if got, err := w.Next(10); err != nil || len(got) != 1 || got[0].Transition.Target != "c" {
		t.Fatalf("Next after Progress: %v, %v; want c", got, err)
	}
	if rev, ok := w.Progress(); !ok || rev != 2 {
		t.Fatalf("Progress = %d, %v; want 2, true", rev, ok)
	}
}

// The history may evict part of a revision: a watcher that matched none of
// the evicted events is still handed the rest of that revision.
func TestHubEvictionNeverSkipsInsideARevision(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(2, 0, 0)
	defer h.Close()
	w, _ := h.Watch(checker.Filter{Group: "y"}, 0, true)
	h.Publish(hubEvent(clock, 1, "x", "a"), hubEvent(clock, 1, "y", "b"))
	h.Publish(hubEvent(clock, 2, "y", "c")) // evicts a, which w does not match
	var names []string
	for range 2 {
		got, err := w.Next(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			names = append(names, e.Transition.Target)
		}
	}
	if want := []string{"b", "c"}; !slices.Equal(names, want) {
		t.Fatalf("after a partial eviction: %q, want %q", names, want)
	}
}

func TestHubResumeBounds(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(3, 10, 0)
	defer h.Close()
	var future *checker.FutureRevisionError
	if _, err := h.Watch(checker.Filter{}, 11, false); !errors.As(err, &future) || future.Current != 10 {
		t.Fatalf("resume ahead: %v, want a FutureRevisionError at 10", err)
	}
	for rev := uint64(11); rev <= 14; rev++ {
		h.Publish(hubEvent(clock, rev, "", "a"))
	}
	var compacted *checker.CompactedError
	if _, err := h.Watch(checker.Filter{}, 10, false); !errors.As(err, &compacted) || compacted.Oldest != 11 {
		t.Fatalf("resume from a compacted revision: %v, want a CompactedError, oldest 11", err)
	}
	w, err := h.Watch(checker.Filter{}, 11, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Next(10); len(got) != 3 || got[0].Revision != 12 || got[2].Revision != 14 {
		t.Fatalf("resumed from 11: %v, want [12 13 14]", revisions(got))
	}
}

func TestHubEndsAWatcherThatFallsBehind(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(2, 0, 0)
	defer h.Close()
	slow, _ := h.Watch(checker.Filter{Group: "edge"}, 0, true)
	other, _ := h.Watch(checker.Filter{Group: "core"}, 0, true)
	for rev := uint64(1); rev <= 3; rev++ {
		h.Publish(hubEvent(clock, rev, "edge", "web-1"))
	}
	_, err := slow.Next(10)
	var behind *checker.BehindError
	if !errors.As(err, &behind) || behind.LastDelivered != 0 || !errors.Is(err, checker.ErrSubscriberTooSlow) {
		t.Fatalf("slow watcher: %v, want a BehindError with nothing delivered", err)
	}
	// A watcher that matched none of the evicted events only skips them.
	if got, err := other.Next(10); err != nil || len(got) != 0 {
		t.Fatalf("other watcher: %v, %v; want nothing and no error", revisions(got), err)
	}
	if h.Count() != 1 {
		t.Fatalf("%d watchers live, want 1", h.Count())
	}
}

func TestHubWait(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	wait := func(ctx context.Context, rev uint64) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- h.Wait(ctx, rev) }()
		return ch
	}
	recv := func(ch <-chan error) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return")
			return nil
		}
	}

	two := wait(context.Background(), 2)
	h.Publish(hubEvent(clock, 1, "", "a"))
	select {
	case err := <-two:
		t.Fatalf("Wait(2) returned %v at revision 1", err)
	default:
	}
	h.Publish(hubEvent(clock, 2, "", "a"))
	if err := recv(two); err != nil {
		t.Fatalf("Wait(2) after revision 2: %v", err)
	}

	five := wait(context.Background(), 5)
	h.Advance(5) // a revision without an event counts too
	if err := recv(five); err != nil {
		t.Fatalf("Wait(5) after Advance(5): %v", err)
	}

	ctx, cancel := clock.WithTimeout(context.Background(), time.Second)
	defer cancel()
	timed := wait(ctx, 6)
	clock.Advance(time.Second)
	if err := recv(timed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v, want DeadlineExceeded", err)
	}

	closed := wait(context.Background(), 7)
	h.Close()
	if err := recv(closed); !errors.Is(err, checker.ErrClosed) {
		t.Fatalf("Wait across Close: %v, want ErrClosed", err)
	}
}

func TestHubLimitAndClose(t *testing.T) {
	h := checker.NewHub(10, 0, 2)
	a, _ := h.Watch(checker.Filter{}, 0, true)
	b, _ := h.Watch(checker.Filter{Group: "edge"}, 0, true)
	if _, err := h.Watch(checker.Filter{}, 0, true); !errors.Is(err, checker.ErrLimit) {
		t.Fatalf("third watcher: %v, want ErrLimit", err)
	}
	a.Close()
	a.Close() // idempotent
	if h.Count() != 1 {
		t.Fatalf("%d watchers after one closed, want 1", h.Count())
	}
	if _, err := a.Next(1); !errors.Is(err, checker.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	h.Close()
	if !signalled(b) {
		t.Fatal("a watcher ended by the hub's Close was not signalled")
	}
	if _, err := b.Next(1); !errors.Is(err, checker.ErrClosed) {
		t.Fatalf("Next after the hub closed: %v, want ErrClosed", err)
	}
	if h.Count() != 0 {
		t.Fatalf("%d watchers after Close, want 0", h.Count())
	}
}

// A watcher the hub's Close ends first hands out what was published
// before it, in batches, then ErrClosed; its position is then the last
// published revision, past the events its filter leaves out. A watcher
// its owner closed ends at once.
func TestHubCloseHandsOutWhatWasPublished(t *testing.T) {
	clock := fakeclock.New(epoch)
	h := checker.NewHub(10, 0, 0)
	all, _ := h.Watch(checker.Filter{}, 0, true)
	edge, _ := h.Watch(checker.Filter{Group: "edge"}, 0, true)
	owned, _ := h.Watch(checker.Filter{}, 0, true)
	h.Publish(hubEvent(clock, 1, "edge", "a"), hubEvent(clock, 2, "edge", "b"), hubEvent(clock, 3, "core", "c"))
	owned.Close()
	h.Close()

	var got []uint64
	for range 5 {
		if !signalled(all) {
			t.Fatalf("not signalled after %v", got)
		}
		evs, err := all.Next(2)
		got = append(got, revisions(evs)...)
		if errors.Is(err, checker.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("handed out %v after the hub closed, want [1 2 3] then ErrClosed", got)
	}
	if evs, err := edge.Next(10); err != nil || !slices.Equal(revisions(evs), []uint64{1, 2}) {
		t.Errorf("edge watcher after the hub closed: %v, %v; want [1 2]", revisions(evs), err)
	}
	if _, err := edge.Next(10); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("edge watcher once caught up: %v, want ErrClosed", err)
	}
	if rev, _ := edge.Progress(); rev != 3 {
		t.Errorf("edge watcher's position %d, want 3 (the last published revision)", rev)
	}
	if _, err := owned.Next(10); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("a watcher its owner closed: %v, want ErrClosed at once", err)
	}
}

package checker_test

import (
	"errors"
	"testing"

	"github.com/pulsehealth/pulse/checker"
)

// TestAnnounce: an outside component's policy event gets the next
// revision, is stored with the others, reaches unfiltered watchers only,
// and a kind the checker keeps to itself is refused.
func TestAnnounce(t *testing.T) {
	st := newMemStore()
	e := newEnv(t, checker.Config{Store: st})
	e.add(t, spec("a"))
	e.c.List("") // waits until the addition is stored and published
	all := watchNow(t, e.c, checker.Filter{})
	named := watchNow(t, e.c, checker.Filter{Names: []string{"a"}})
	before := e.c.Revision()

	if err := e.c.Announce(checker.EventPanicEntered, checker.PolicyChange{Group: "g"}); err == nil {
		t.Fatal("Announce(PANIC_ENTERED) succeeded; only discovery events may be announced")
	}
	pc := checker.PolicyChange{Source: "discovery:api", SDConfig: "http_sd 0", Error: "server returned HTTP status 500", Text: "api (http_sd 0) failed"}
	if err := e.c.Announce(checker.EventDiscoveryFailed, pc); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Announce(checker.EventDiscoveryRecovered, checker.PolicyChange{Source: "discovery:api", SDConfig: "http_sd 0"}); err != nil {
		t.Fatal(err)
	}
	var got []checker.Event
	waitFor(t, "two events", func() bool {
		got = append(got, next(t, all)...)
		return len(got) >= 2
	})
	if got[0].Kind != checker.EventDiscoveryFailed || got[1].Kind != checker.EventDiscoveryRecovered {
		t.Fatalf("kinds %v, %v", got[0].Kind, got[1].Kind)
	}
	if got[0].Revision != before+1 || got[1].Revision != before+2 {
		t.Errorf("revisions %d, %d after %d", got[0].Revision, got[1].Revision, before)
	}
	if got[0].Policy.Source != "discovery:api" || got[0].Policy.SDConfig != "http_sd 0" || got[0].Policy.Error == "" || !got[0].Kind.IsPolicy() {
		t.Errorf("event %+v", got[0])
	}
	if evs := next(t, named); len(evs) != 0 {
		t.Errorf("a watcher of one target got %d discovery events", len(evs))
	}
	st.mu.Lock()
	rev := st.rev
	st.mu.Unlock()
	if rev != before+2 {
		t.Errorf("stored revision %d, want %d", rev, before+2)
	}

	e.c.Close()
	if err := e.c.Announce(checker.EventDiscoveryFailed, pc); !errors.Is(err, checker.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

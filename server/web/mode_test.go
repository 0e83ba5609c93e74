package web_test

import (
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// A mode change reaches the page's feed as an update of the target, whose
// row shows DRAIN; the transition it makes follows.
func TestFeedCarriesModeChanges(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("web-1", "edge"))
	f := e.openFeed(t, "/events", "")
	f.next(t) // the snapshot
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining}); err != nil {
		t.Fatal(err)
	}
	ev := f.next(t, "results")
	var d struct{ Target rowJSON }
	ev.decode(t, &d)
	if ev.name != "updated" || d.Target.Name != "web-1" || d.Target.Streak != "DRAIN" {
		t.Errorf("event %s: %+v, want web-1 updated, DRAIN", ev.name, d.Target)
	}
}

package web_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server/web"
)

type transitionData struct {
	Revision            uint64
	Target, Group       string
	From, To, Streak    string
	Error, Reason, Time string
}

type rowsData struct {
	Revision uint64
	Total    *int
	Groups   []struct {
		Name                               string
		Total, Healthy, Suspect, Unhealthy int
	}
	Targets []rowJSON
}

// A new feed starts with a snapshot, then carries transitions with their
// revisions as ids, the named rows' fresh results, and registry changes.
func TestFeedSnapshotThenLive(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{ResultsInterval: 5 * time.Millisecond})
	e.add(t, tcpSpec("web-1", "edge"))
	e.add(t, tcpSpec("web-2", "edge"))
	f := e.openFeed(t, "/events?names=web-1", "")

	ev := f.next(t)
	var snap rowsData
	ev.decode(t, &snap)
	if ev.name != "snapshot" || ev.id != strconv.FormatUint(snap.Revision, 10) || snap.Revision != e.c.Revision() {
		t.Fatalf("first event %s id %s revision %d, want a snapshot at %d", ev.name, ev.id, snap.Revision, e.c.Revision())
	}
	if *snap.Total != 2 || len(snap.Groups) != 1 || snap.Groups[0].Unhealthy != 2 || len(snap.Targets) != 1 || snap.Targets[0].Streak != "DOWN" {
		t.Errorf("snapshot: %+v", snap)
	}

	e.set("web-1:80", outcome{})
	e.rounds(2)
	ev = f.next(t, "results")
	var tr transitionData
	ev.decode(t, &tr)
	if ev.name != "transition" || ev.id != strconv.FormatUint(tr.Revision, 10) || tr.Revision != snap.Revision+1 ||
		tr.Target != "web-1" || tr.From != "unhealthy" || tr.To != "healthy" || tr.Streak != "UP" {
		t.Errorf("event %s id %s: %+v, want web-1's rise at revision %d", ev.name, ev.id, tr, snap.Revision+1)
	}
	// The results events bring web-1's strip (not web-2's: it is not named).
	f.waitFor(t, "web-1's two results", func(ev sseEvent) bool {
		if ev.name != "results" {
			return false
		}
		var d rowsData
		ev.decode(t, &d)
		for _, r := range d.Targets {
			if r.Name != "web-1" {
				t.Errorf("a results event carried %s", r.Name)
			}
		}
		return len(d.Targets) == 1 && len(d.Targets[0].Results) == 2 && d.Targets[0].State == "healthy" && ev.id == ""
	})

	e.add(t, tcpSpec("web-3", "edge"))
	e.c.Remove("web-2")
	for _, want := range []string{"added", "removed"} {
		ev := f.next(t, "results")
		var d struct {
			Revision uint64
			Target   rowJSON
		}
		ev.decode(t, &d)
		if ev.name != want || ev.id != strconv.FormatUint(d.Revision, 10) {
			t.Errorf("event %s id %s, want %s with its revision as id", ev.name, ev.id, want)
		}
	}
}

// A browser that reconnects with Last-Event-ID gets every event after it,
// and no snapshot.
func TestFeedResumesFromLastEventID(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("web-1", "edge"))
	from := e.c.Revision()
	e.set("web-1:80", outcome{})
	e.rounds(2) // web-1 rises
	e.add(t, tcpSpec("web-2", "edge"))

	f := e.openFeed(t, "/events", strconv.FormatUint(from, 10))
	for i, want := range []string{"transition", "added"} {
		ev := f.next(t, "results")
		if ev.name != want || ev.id != strconv.FormatUint(from+uint64(i)+1, 10) {
			t.Errorf("event %d: %s id %s, want %s id %d", i, ev.name, ev.id, want, from+uint64(i)+1)
		}
	}
}

// A Last-Event-ID the history no longer holds, or from another pulsed,
// starts the feed over with a snapshot; a malformed one is refused.
func TestFeedStartsOverWhenItCannotResume(t *testing.T) {
	e := newEnv(t, checker.Config{HistorySize: 2}, web.Config{})
	first := e.c.Revision()
	for _, name := range []string{"a", "b", "c", "d"} {
		e.add(t, tcpSpec(name, ""))
	}
	for _, id := range []string{strconv.FormatUint(first, 10), strconv.FormatUint(e.c.Revision()+100, 10)} {
		ev := e.openFeed(t, "/events", id).next(t)
		var snap rowsData
		ev.decode(t, &snap)
		if ev.name != "snapshot" || *snap.Total != 4 {
			t.Errorf("Last-Event-ID %s: first event %s with %v targets, want a snapshot of 4", id, ev.name, snap.Total)
		}
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/events", nil)
	req.Header.Set("Last-Event-ID", "yesterday")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID yesterday: %d, want 400", resp.StatusCode)
	}
}

// An idle feed gets progress events whose id moves the browser's resume
// point to the current revision.
func TestFeedProgress(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{ProgressInterval: 10 * time.Millisecond})
	e.add(t, tcpSpec("web-1", "edge"))
	f := e.openFeed(t, "/events?group=other", "")
	f.next(t) // the snapshot
	e.add(t, tcpSpec("web-2", "edge"))
	want := strconv.FormatUint(e.c.Revision(), 10)
	f.waitFor(t, "progress at "+want, func(ev sseEvent) bool {
		if ev.name != "progress" {
			t.Errorf("event %s on an idle feed", ev.name)
		}
		return ev.id == want
	})
}

// Closing the checker (pulsed shutting down) ends every feed.
func TestFeedEndsWhenCheckerCloses(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	f := e.openFeed(t, "/events", "")
	f.next(t)
	if got := e.c.Watchers(); got != 1 {
		t.Errorf("%d watchers with one feed open, want 1", got)
	}
	e.c.Close()
	if ev := f.next(t); ev.name != "end" {
		t.Errorf("event %s after Close, want end", ev.name)
	}
	select {
	case _, open := <-f.events:
		if open {
			t.Error("the feed went on after end")
		}
	case <-time.After(10 * time.Second):
		t.Error("the feed did not close within 10s")
	}
	if code, _ := get(t, e.srv.URL+"/events"); code != http.StatusServiceUnavailable {
		t.Errorf("a new feed after Close: %d, want 503", code)
	}
}

// Past -max-watchers a new feed is refused with 503, saying which limit
// it ran into, not that pulsed is shutting down; once a feed ends, its slot
// is free again.
func TestFeedPastMaxWatchers(t *testing.T) {
	e := newEnv(t, checker.Config{MaxWatchers: 1}, web.Config{})
	f := e.openFeed(t, "/events", "")
	f.next(t) // the snapshot: the first feed holds the one slot

	resp, err := http.Get(e.srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := "limit reached: at most 1 watchers at once: try again later, or raise pulsed's -max-watchers\n"
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != want || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a feed past the limit: %d %q (Retry-After %q), want 503 %q", resp.StatusCode, body, resp.Header.Get("Retry-After"), want)
	}

	f.resp.Body.Close()
	waitUntil(t, "the ended feed's slot to be free", func() bool { return e.c.Watchers() == 0 })
	e.openFeed(t, "/events", "").next(t)
}

// Past -max-watchers-per-source a feed from the same address is refused
// with 503 naming that flag, though pulsed has slots left.
func TestFeedPastMaxWatchersPerSource(t *testing.T) {
	e := newEnv(t, checker.Config{MaxWatchers: 10, MaxWatchersPerSource: 1}, web.Config{})
	e.openFeed(t, "/events", "").next(t)
	code, body := get(t, e.srv.URL+"/events")
	want := "limit reached: at most 1 watchers from 127.0.0.1 at once: try again later, or raise pulsed's -max-watchers-per-source\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Errorf("a second feed from one address: %d %q, want 503 %q", code, body, want)
	}
}

// A feed whose client stops reading is cut off after the write timeout,
// and its watcher freed, rather than held for as long as the client keeps
// its connection open.
func TestFeedStalledClientIsCutOff(t *testing.T) {
	e := newEnv(t, checker.Config{HistorySize: 100000}, web.Config{WriteTimeout: 300 * time.Millisecond})
	_, status := stalledGet(t, e.srv.URL, "/events")
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("/events answered %q", status)
	}
	if got := e.c.Watchers(); got != 1 {
		t.Fatalf("%d watchers with the feed open, want 1", got)
	}
	// Events of about 2 KB each, 8 MB in all: more than the socket
	// buffers hold, so the feed's writes block. The history holds them
	// all: the watcher is never ended for falling behind.
	path := strings.Repeat("p", probe.MaxURLLen-100)
	for round := range 4 {
		for i := range 1000 {
			s := tcpSpec(fmt.Sprintf("t%d", i), "")
			s.Probe = probe.Spec{HTTP: &probe.HTTPSpec{URL: fmt.Sprintf("http://10.0.0.1/%s%d", path, round)}}
			e.add(t, s)
		}
	}
	waitUntil(t, "the stalled feed to be cut off", func() bool { return e.c.Watchers() == 0 })
}

// mirror is a shared registry in which this replica owns nothing: the
// checker shows only what the test applies, as other replicas' writes.
type mirror struct{ fakeshared.Mirror }

func (mirror) Load() ([]checker.SharedTarget, uint64, error) { return nil, 10, nil }

// With replicas one revision can carry several events. Only its last
// carries the id, so a browser that drops inside the revision resumes
// before it and gets all of it again.
func TestFeedIdsMarkWholeRevisions(t *testing.T) {
	e := newEnv(t, checker.Config{Shared: mirror{}}, web.Config{})
	f := e.openFeed(t, "/events", "")
	if ev := f.next(t); ev.name != "snapshot" || ev.id != "10" {
		t.Fatalf("first event %s id %q, want the snapshot at 10", ev.name, ev.id)
	}
	put := func(name string) checker.SharedChange {
		return checker.SharedChange{Kind: checker.SharedSpecPut, Rev: 11, Name: name, Spec: tcpSpec(name, "edge")}
	}
	e.c.ApplyShared([]checker.SharedChange{put("web-1"), put("web-2")}, 11)
	var got []string
	for range 2 {
		ev := f.next(t, "results")
		got = append(got, ev.name+" "+ev.id)
	}
	if want := []string{"added ", "added 11"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	g := e.openFeed(t, "/events", "10")
	for _, want := range []string{"added ", "added 11"} {
		if ev := g.next(t, "results"); ev.name+" "+ev.id != want {
			t.Errorf("resumed at 10: %s %q, want %s", ev.name, ev.id, want)
		}
	}
}

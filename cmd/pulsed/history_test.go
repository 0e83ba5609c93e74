package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestHistorySurvivesARestart: the real pulsed probes a loopback target,
// stops (flushing its history to the data directory), starts again, and
// History still answers what was recorded before: the probes and the
// transition, with its time.
func TestHistorySurvivesARestart(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	ok := okServer(t)
	p := startPulsed(t, bin, "-data-dir", dir)
	client := dial(t, p.Addr)
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "web-1", Group: "web", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: ok.URL}},
		Interval: durationpb.New(100 * time.Millisecond),
	}}); err != nil {
		t.Fatal(err)
	}
	req := &pb.HistoryRequest{Target: "web-1", Window: durationpb.New(time.Hour)}
	var before *pb.HistoryResponse
	eventually(t, "5 probes and a transition in the history", func() bool {
		h, err := client.History(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		before = h
		return h.GetProbes() >= 5 && len(h.GetEvents()) > 0
	})
	p.stop(t)
	// Every probe up to the stop is kept: count them once stopped.
	if _, err := os.Stat(filepath.Join(dir, historyFile)); err != nil {
		t.Fatalf("no history file: %v", err)
	}

	p = startPulsed(t, bin, "-data-dir", dir)
	client = dial(t, p.Addr)
	after, err := client.History(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetProbes() < before.GetProbes() {
		t.Errorf("after the restart: %d probes, want at least the %d recorded before", after.GetProbes(), before.GetProbes())
	}
	first := before.GetEvents()[0]
	var found bool
	for _, ev := range after.GetEvents() {
		found = found || ev.GetTime().AsTime().Equal(first.GetTime().AsTime()) && ev.GetTo() == first.GetTo()
	}
	if !found {
		t.Errorf("after the restart, events = %v; want the transition of before, %v", after.GetEvents(), first)
	}
	resp, err := http.Get(httpAddr(t, p) + "/badge/web-1/uptime/24h.svg")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), ">100%<") {
		t.Errorf("the uptime badge after the restart: %d\n%s", resp.StatusCode, body)
	}
	g, err := client.History(t.Context(), &pb.HistoryRequest{Group: "web", Window: durationpb.New(24 * time.Hour)})
	if err != nil || g.GetProbes() < before.GetProbes() {
		t.Errorf("group after the restart: %v, %v; want at least %d probes", g.GetProbes(), err, before.GetProbes())
	}
	p.stop(t)
}

// TestDamagedHistoryFileIsMovedAside: a history file bbolt cannot read
// never stops pulsed: it is moved aside and the history starts afresh in
// a new file.
func TestDamagedHistoryFileIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, historyFile)
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h := startHistory(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	defer h.stop()
	if h.db == nil {
		t.Fatalf("no history file opened:\n%s", logs.String())
	}
	aside, _ := filepath.Glob(path + ".damaged-*")
	if len(aside) != 1 || !strings.Contains(logs.String(), "history file damaged: moved aside") {
		t.Errorf("moved aside: %v; logs:\n%s", aside, logs.String())
	}
}

// membersSeen is a RemovalObserver that counts the members changes it is
// told of.
type membersSeen struct{ n int }

func (*membersSeen) ObserveProbe(checker.Spec, checker.Result) {}
func (*membersSeen) ObserveTransition(checker.Transition)      {}
func (*membersSeen) ObserveRemoval(checker.Spec)               {}
func (m *membersSeen) ObserveMembers()                         { m.n++ }

// The checker's observer in pulsed, the status page's and the history's
// in one, passes a members change on to the status page's (which then
// sends the page's rows again, their owners moved); the history does not
// want it.
func TestTeeObserverPassesMembersChangesOn(t *testing.T) {
	page := &membersSeen{}
	var o checker.Observer = teeObserver{page, history.New(history.Options{})}
	mo, ok := o.(checker.MembersObserver)
	if !ok {
		t.Fatal("pulsed's observer is no checker.MembersObserver: the checker never tells it of a members change")
	}
	mo.ObserveMembers()
	if page.n != 1 {
		t.Errorf("the status page's observer was told of %d members changes, want 1", page.n)
	}
}

package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
)

// watchBatch bounds the events the feed takes from its watcher at once.
const watchBatch = 256

// transitionJSON is the data of a "transition" event.
type transitionJSON struct {
	Revision uint64 `json:"revision"`
	Time     string `json:"time"`
	Target   string `json:"target"`
	Group    string `json:"group"`
	From     string `json:"from"`
	To       string `json:"to"`
	// Streak is the new state's bare label ("UP", "DOWN", "SUSPECT"); the
	// next "results" event brings the progress.
	Streak string `json:"streak"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Mode is the target's mode after the transition, absent while active:
	// the page counts such a target in its mode, not in its state.
	Mode string `json:"mode,omitempty"`
	// Vantages are, for a target probed from several vantages, their
	// verdicts when the transition was applied.
	Vantages []vantageJSON `json:"vantages,omitempty"`
}

// registryJSON is the data of an "added", "updated" or "removed" event.
type registryJSON struct {
	Revision uint64 `json:"revision"`
	Time     string `json:"time"`
	Target   row    `json:"target"`
}

// rowsJSON is the data of a "snapshot" or "results" event.
type rowsJSON struct {
	// Revision: the rows reflect every event up to it (and maybe later).
	Revision uint64 `json:"revision"`
	Now      string `json:"now"`
	// Groups and Total count every target the feed's group filter matches,
	// the groups with their policies as /api/targets gives them (the page
	// takes the snapshot's groups in place of the page's); "snapshot"
	// only.
	Groups  []groupSummary `json:"groups,omitempty"`
	Total   *int           `json:"total,omitempty"`
	Targets []row          `json:"targets"`
}

// serveEvents is the status page's live feed, as server-sent events, built
// on checker.Watch:
//
//	GET /events?group=G&names=a,b,c
//
// group filters the registry events as WatchTransitions does. names (at most
// 1,000, comma-separated) are the targets whose rows the feed carries: the
// page names the rows it shows.
//
// A new feed begins with a "snapshot" event at the current revision R (the
// named rows, and every matching target counted by group and state), then
// sends each later "transition", "added", "updated", "removed" and "policy"
// (a group's panic, a target's flapping, the checker's overload) event with
// its revision as the event id, "results" events with the fresh rows
// of the named targets that got probe results (every ResultsInterval, and
// at once after a named target's transition; all of them after the live
// replicas changed, which moves owners with no event of its own), and
// "progress" events (id: the current revision) when idle. A browser that
// reconnects sends the last id as Last-Event-ID and the feed resumes after
// it, with no snapshot; with replicas, also from an id another replica gave
// (this one first catches up with etcd). If that revision is no longer held
// (or comes from another pulsed) the feed starts over with a snapshot. A
// feed that falls further behind than the history holds gets an "end"
// event and is closed, and the browser's reconnect resumes it. Each feed
// takes one of the checker's watchers (pulsed -max-watchers, shared with
// WatchTransitions, and -max-watchers-per-source of its client's address):
// past them a new feed gets 503 naming the limit.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var names []string
	if s := q.Get("names"); s != "" {
		names = strings.Split(s, ",")
	}
	if len(names) > maxLimit {
		http.Error(w, fmt.Sprintf("names: at most %d, got %d", maxLimit, len(names)), http.StatusBadRequest)
		return
	}
	var start uint64
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		var err error
		if start, err = strconv.ParseUint(id, 10, 64); err != nil {
			http.Error(w, "Last-Event-ID: want a revision", http.StatusBadRequest)
			return
		}
	}
	f := checker.Filter{Group: q.Get("group"), Source: remoteHost(r)}
	caughtUp := start == 0 || h.c.Revision() < start
	if caughtUp {
		// The snapshot is a read, as /api/targets. With replicas behind
		// one address, a browser may also resume here from a revision
		// another replica gave it, which this one may not have applied
		// yet even when nothing under the fleet's prefix changed up to
		// it: catch up with etcd as WatchTransitions does, rather than
		// wait for etcd's next progress notification. A revision still
		// ahead after that is not etcd's: Watch refuses it, and the
		// feed starts over with a snapshot.
		_ = h.c.CatchUp(r.Context())
	}
	wch, err := h.c.Watch(f, start)
	if start > 0 && (errors.Is(err, checker.ErrCompacted) || errors.Is(err, checker.ErrFutureRevision)) {
		start = 0
		if !caughtUp { // the snapshot is a read too
			_ = h.c.CatchUp(r.Context())
		}
		wch, err = h.c.Watch(f, 0)
	}
	switch {
	case errors.Is(err, checker.ErrLimit):
		// Every watcher slot is taken (pulsed -max-watchers), or every
		// one this client may hold (-max-watchers-per-source): say so,
		// not that pulsed is going away.
		w.Header().Set("Retry-After", "10")
		http.Error(w, err.Error()+" at once: try again later, or raise pulsed's "+server.LimitFlag(err), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, "pulsed is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer wch.Close()

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.raw("retry: 2000\n\n")

	var seq uint64
	if h.obs != nil {
		seq = h.obs.seqNow() // results after this are sent as "results"
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	if start == 0 {
		snap, rev := wch.Snapshot()
		total := len(snap)
		data := rowsJSON{Revision: rev, Now: stamp(time.Now()), Groups: h.summarizeWithPolicies(snap), Total: &total, Targets: []row{}}
		for _, st := range snap {
			if want[st.Spec.Name] {
				data.Targets = append(data.Targets, h.row(st))
			}
		}
		s.event("snapshot", rev, data)
	}

	var tick <-chan time.Time
	if h.obs != nil && len(names) > 0 {
		t := time.NewTicker(h.results)
		defer t.Stop()
		tick = t.C
	}
	progress := time.NewTimer(h.progress)
	defer progress.Stop()
	ctx := r.Context()
	for {
		evs, err := wch.Next(watchBatch)
		if err != nil {
			s.event("end", 0, map[string]string{"error": err.Error()})
			s.flush()
			return
		}
		var moved []string // named targets whose state changed
		for i, e := range evs {
			// With replicas one revision can carry several events; a batch
			// holds whole revisions. Only a revision's last event carries
			// the id, so a browser that reconnects inside a revision
			// resumes before it and gets all of it again.
			id := e.Revision
			if i+1 < len(evs) && evs[i+1].Revision == e.Revision {
				id = 0
			}
			name := eventName(e.Kind)
			if name == "" {
				// A kind the page does not show: only move the resume point.
				if id != 0 {
					s.event("progress", id, map[string]uint64{"revision": id})
				}
				continue
			}
			s.event(name, id, h.eventData(e))
			if e.Kind == checker.EventTransition && want[e.Target()] && !slices.Contains(moved, e.Target()) {
				moved = append(moved, e.Target())
			}
		}
		if len(moved) > 0 {
			// The result that tipped the state, and the streaks, at once
			// rather than at the next tick.
			s.event("results", 0, h.rowsNow(moved))
		}
		if s.flush() != nil {
			return
		}
		if len(evs) > 0 {
			progress.Reset(h.progress)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wch.Ready():
		case <-tick:
			var changed []string
			if changed, seq = h.obs.changedSince(seq, names); len(changed) > 0 {
				s.event("results", 0, h.rowsNow(changed))
			}
		case <-progress.C:
			if rev, ok := wch.Progress(); ok {
				s.event("progress", rev, map[string]uint64{"revision": rev})
			}
			progress.Reset(h.progress)
		}
	}
}

// rowsNow returns the current rows of names (those that still exist).
func (h *Handler) rowsNow(names []string) rowsJSON {
	rev := h.c.Revision() // the statuses below reflect at least this
	data := rowsJSON{Revision: rev, Now: stamp(time.Now()), Targets: make([]row, 0, len(names))}
	for _, n := range names {
		if st, err := h.c.Status(n); err == nil {
			data.Targets = append(data.Targets, h.row(st))
		}
	}
	return data
}

// policyJSON is the data of a "policy" event: a group's panic, a
// target's flapping, the checker's overload or a vantage's standing
// changed.
type policyJSON struct {
	Revision uint64 `json:"revision"`
	Time     string `json:"time"`
	Kind     string `json:"kind"`
	Group    string `json:"group,omitempty"`
	Target   string `json:"target,omitempty"`
	Text     string `json:"text"`
	// Replica and Vantage name the replica of a CHECKER or VANTAGE event
	// and the vantage's label; Disagree of Judged targets its numbers.
	Replica  string `json:"replica,omitempty"`
	Vantage  string `json:"vantage,omitempty"`
	Disagree int    `json:"disagree,omitempty"`
	Judged   int    `json:"judged,omitempty"`
}

// eventName names the kinds of events the feed carries; "" for the others,
// which it sends as progress. A mode change is sent as an update of the
// target: the page reloads it and shows DRAIN or MAINT.
func eventName(k checker.EventKind) string {
	if k.IsPolicy() {
		return "policy"
	}
	switch k {
	case checker.EventTransition:
		return "transition"
	case checker.EventAdded:
		return "added"
	case checker.EventUpdated, checker.EventModeChanged:
		return "updated"
	case checker.EventRemoved:
		return "removed"
	}
	return ""
}

func (h *Handler) eventData(e checker.Event) any {
	if e.Kind.IsPolicy() {
		p := e.Policy
		return policyJSON{Revision: e.Revision, Time: stamp(e.Time), Kind: e.Kind.String(), Group: p.Group, Target: p.Target, Text: p.Text,
			Replica: p.Replica, Vantage: p.Vantage, Disagree: p.Disagree, Judged: p.Judged}
	}
	if e.Kind == checker.EventTransition {
		tr := e.Transition
		var mode string
		if tr.Mode != checker.ModeActive {
			mode = tr.Mode.String()
		}
		return transitionJSON{
			Mode:     mode,
			Revision: e.Revision,
			Time:     stamp(tr.Time),
			Target:   tr.Target,
			Group:    tr.Group,
			From:     tr.From.String(),
			To:       tr.To.String(),
			Streak:   Streak(checker.Status{State: tr.To, Spec: checker.Spec{}.WithAdmin(checker.Admin{Mode: tr.Mode})}),
			Error:    tr.Result.Err,
			Reason:   tr.Reason,
			Vantages: vantagesJSON(tr.Vantages, nil),
		}
	}
	return registryJSON{Revision: e.Revision, Time: stamp(e.Time), Target: h.row(e.Status)}
}

// sseWriter writes server-sent events and remembers the first write error,
// after which it writes nothing.
type sseWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (s *sseWriter) raw(v string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, v)
	}
}

// event writes one event; id 0 writes none, so the browser's last event id
// (its resume point) stays where it was.
func (s *sseWriter) event(name string, id uint64, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{}`)
	}
	var sb strings.Builder
	sb.WriteString("event: ")
	sb.WriteString(name)
	sb.WriteByte('\n')
	if id != 0 {
		sb.WriteString("id: ")
		sb.WriteString(strconv.FormatUint(id, 10))
		sb.WriteByte('\n')
	}
	sb.WriteString("data: ")
	sb.Write(b) // JSON has no raw newlines
	sb.WriteString("\n\n")
	s.raw(sb.String())
}

func (s *sseWriter) flush() error {
	if s.err == nil {
		s.err = s.rc.Flush()
	}
	return s.err
}

// remoteHost is the IP address of r's client, for the watchers it may
// hold (pulsed -max-watchers-per-source).
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

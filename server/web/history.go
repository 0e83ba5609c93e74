package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	"github.com/pulsehealth/pulse/server"
)

// GET /api/history?target=NAME: what the status page shows of the target
// it opens, loaded on demand: its uptime over 1h, 24h, 7d and 30d, its
// latency by the hour over the last 24 hours, and its transitions of the
// last 30 days.

// maxPageEvents bounds the transitions /api/history sends: the newest.
const maxPageEvents = 50

type historyJSON struct {
	Target string `json:"target"`
	Group  string `json:"group"`
	// Uptime is the share of probes that passed over each window, by its
	// name (1h, 24h, 7d, 30d); null when none was recorded.
	Uptime map[string]*float64 `json:"uptime"`
	// Latency is the last 24 hours by the hour.
	Latency []latencyJSON `json:"latency"`
	// Events are the transitions of the last 30 days, oldest first, at
	// most maxPageEvents (the newest); for a target probed from several
	// vantages, with a VANTAGE_SUSPECT event for each of its vantages
	// suspect now, at the time it became so.
	Events []eventJSON `json:"events"`
	// KeptBy is, with replicas on etcd, the replica that probes the
	// target and keeps the history of its probes, when it is another and
	// this one recorded no probe of the target in the last 30 days: the
	// uptime and latency here are then empty, and the events only those
	// every replica sees.
	KeptBy string `json:"keptBy,omitempty"`
	// KeptByPage is the URL of KeptBy's status page, when it gives one.
	KeptByPage string `json:"keptByPage,omitempty"`
}

type latencyJSON struct {
	Start string `json:"start"`
	// Probes is the hour's probe count; the percentiles, in seconds, are
	// absent when it is 0.
	Probes     uint64   `json:"probes"`
	Failures   uint64   `json:"failures"`
	P50Seconds *float64 `json:"p50Seconds,omitempty"`
	P95Seconds *float64 `json:"p95Seconds,omitempty"`
}

type eventJSON struct {
	Time   string `json:"time"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// Kind and Text: a policy event (a panic, flapping), instead of From,
	// To and Mode.
	Kind string `json:"kind,omitempty"`
	Text string `json:"text,omitempty"`
}

func (h *Handler) serveHistory(w http.ResponseWriter, r *http.Request) {
	if h.history == nil {
		http.Error(w, "this pulsed keeps no history", http.StatusNotFound)
		return
	}
	name := r.URL.Query().Get("target")
	if err := checker.ValidateName(name); err != nil {
		http.Error(w, "target: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	st, serr := h.c.Status(name)
	out := historyJSON{Target: name, Uptime: map[string]*float64{}, Latency: []latencyJSON{}, Events: []eventJSON{}}
	for _, win := range []string{"1h", "24h", "7d", "30d"} {
		bw := badgeWindows[win]
		sum, err := h.history.Query(name, now, bw.window, bw.res)
		if errors.Is(err, history.ErrUnknownTarget) {
			if serr != nil {
				http.Error(w, fmt.Sprintf("no target %q with history here", name), http.StatusNotFound)
				return
			}
			sum = history.Empty(name, "", now, bw.window, bw.res) // not probed yet
		} else if err != nil {
			h.logger.Warn("/api/history: reading the history", "error", err)
			http.Error(w, "cannot read the history: "+err.Error(), http.StatusInternalServerError)
			return
		}
		out.Group = sum.Group
		if sum.Availability >= 0 {
			a := sum.Availability
			out.Uptime[win] = &a
		} else {
			out.Uptime[win] = nil
		}
		switch win {
		case "24h":
			for _, p := range sum.Points {
				l := latencyJSON{Start: stamp(p.Start), Probes: p.Probes, Failures: p.Fails}
				if p.Probes > 0 {
					p50, p95 := p.P50.Seconds(), p.P95.Seconds()
					l.P50Seconds, l.P95Seconds = &p50, &p95
				}
				out.Latency = append(out.Latency, l)
			}
		case "30d":
			if self, _ := h.c.Replica(); serr == nil && sum.Probes == 0 && !st.ProbedBy(self) {
				out.KeptBy = st.Owner
				_, out.KeptByPage = server.AddressesFor(h.dir, st.Owner, remoteHost(r))
			}
			evs := sum.Events
			if len(evs) > maxPageEvents {
				evs = evs[len(evs)-maxPageEvents:]
			}
			for _, e := range evs {
				if e.Policy != 0 {
					out.Events = append(out.Events, eventJSON{Time: stamp(e.Time), Kind: e.Policy.String(), Text: e.Text})
					continue
				}
				out.Events = append(out.Events, eventJSON{Time: stamp(e.Time), From: e.From.String(), To: e.To.String(),
					Reason: e.Reason, Error: e.Err, Mode: e.Mode.String()})
			}
		}
	}
	out.Events = h.withSuspectVantages(name, out.Events)
	writeJSON(w, out)
}

// withSuspectVantages adds to a target's events, oldest first, one for
// each of its vantages that is suspect now, at the time it became so:
// the history keeps no event that is about no target.
func (h *Handler) withSuspectVantages(name string, evs []eventJSON) []eventJSON {
	st, err := h.c.Status(name)
	if err != nil || len(st.Vantages) == 0 {
		return evs
	}
	for _, v := range h.suspectVantages() {
		if !slices.ContainsFunc(st.Vantages, func(vd checker.VantageVerdict) bool { return vd.Member == v.Member }) {
			continue
		}
		e := eventJSON{Time: stamp(v.Since), Kind: checker.EventVantageSuspect.String(), Text: fmt.Sprintf(
			"vantage %s (replica %s) suspect: unhealthy from it, healthy from the others, for %d of the %d targets it is judged on; its verdict on %s is left out of the quorum",
			v.Label, v.Member, v.Disagree, v.Judged, name)}
		i, _ := slices.BinarySearchFunc(evs, v.Since, func(e eventJSON, t time.Time) int {
			at, _ := time.Parse(time.RFC3339Nano, e.Time)
			return at.Compare(t)
		})
		evs = slices.Insert(evs, i, e)
	}
	return evs
}

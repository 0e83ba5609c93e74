package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// Paging bounds of /api/targets.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// row is one target as the page shows it.
type row struct {
	Name       string `json:"name"`
	Group      string `json:"group"`
	Kind       string `json:"kind"`
	Model      string `json:"model"`
	State      string `json:"state"`
	Routable   bool   `json:"routable"`
	Rise       int    `json:"rise"`
	Fall       int    `json:"fall"`
	PassStreak int    `json:"passStreak"`
	FailStreak int    `json:"failStreak"`
	// Streak is HAProxy's "UP 1/3" form; see Streak.
	Streak string `json:"streak"`
	// LastLatencySeconds and LastError describe the last result; the
	// latency is absent before the first result.
	LastLatencySeconds *float64 `json:"lastLatencySeconds,omitempty"`
	LastError          string   `json:"lastError,omitempty"`
	LastResultTime     string   `json:"lastResultTime,omitempty"`
	// LastTransitionTime is absent if the state never changed.
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	// Quarantined says why a stored target is not probed (see
	// checker.Status.Quarantined).
	Quarantined string       `json:"quarantined,omitempty"`
	Results     []resultJSON `json:"results"`

	// Probe says what is probed: "GET http://10.0.0.5/healthz" (a URL's
	// password and query values of secret names redacted, see
	// server.ReadURL), "10.0.0.5:5432", "10.0.0.7:50051 api.v1.Orders".
	Probe string `json:"probe"`
	// Verdict is the state the results alone give; it differs from State
	// while a policy holds the target (PanicHeld, Flapping).
	Verdict   string `json:"verdict"`
	PanicHeld bool   `json:"panicHeld,omitempty"`
	Flapping  bool   `json:"flapping,omitempty"`
	// CarriedOver says the state is from before pulsed restarted and a
	// probe is due to replace it; see carriedOver.
	CarriedOver bool `json:"carriedOver,omitempty"`
	// Severity ranks the row for the page's default order, 0 first; see
	// severity.
	Severity int `json:"severity"`
	// Uptime is the fraction of Results that passed; absent without
	// results.
	Uptime *float64 `json:"uptime,omitempty"`
	// Mode is "draining" or "maintenance"; absent for an active target.
	Mode string `json:"mode,omitempty"`
	// ModeReason is the reason given with the mode, if any.
	ModeReason string `json:"modeReason,omitempty"`
	// Source says who registered the target: "api", "file", or
	// "discovery:GROUP" for a target a discovery group found.
	Source string `json:"source,omitempty"`
	// Vantages are, for a target probed from several vantages, their
	// verdicts, its owner's first; Verdict is then their quorum's.
	Vantages []vantageJSON `json:"vantages,omitempty"`
	// Outlier is set while its group's outlier detection holds it
	// degraded or ejected.
	Outlier *outlierJSON `json:"outlier,omitempty"`
	// Owner is, with replicas on etcd, the replica that probes the target
	// and stores its state (checker.Status.Owner); absent on a single
	// pulsed.
	Owner string `json:"owner,omitempty"`
}

// outlierJSON is a target's outlier standing (outlier.State).
type outlierJSON struct {
	Ejected bool `json:"ejected"`
	// Reason gives the numbers that made it one: "p50 38ms vs group 4ms".
	Reason string `json:"reason"`
	Since  string `json:"since"`
	// Until is when an ejection ends; absent while degraded.
	Until     string `json:"until,omitempty"`
	Ejections int    `json:"ejections,omitempty"`
}

type resultJSON struct {
	Time           string  `json:"time"`
	Pass           bool    `json:"pass"`
	LatencySeconds float64 `json:"latencySeconds"`
	Error          string  `json:"error,omitempty"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// toRow converts st, with recent as its recent results.
func toRow(st checker.Status, recent []checker.Result) row {
	r := row{
		Name:       st.Spec.Name,
		Group:      st.Spec.Group,
		Kind:       st.Spec.Probe.Kind(),
		Model:      st.Spec.Model.String(),
		State:      st.State.String(),
		Routable:   st.Routable,
		Rise:       st.Spec.Rise,
		Fall:       st.Spec.Fall,
		PassStreak: st.PassStreak,
		FailStreak: st.FailStreak,
		Streak:     Streak(st),
		Results:    make([]resultJSON, len(recent)),
		Source:     st.Spec.Source,
		Owner:      st.Owner,
	}
	if lr := st.LastResult; lr != nil {
		lat := lr.Latency.Seconds()
		r.LastLatencySeconds = &lat
		r.LastError = lr.Err
		r.LastResultTime = stamp(lr.Time)
	}
	if !st.LastTransition.IsZero() {
		r.LastTransitionTime = stamp(st.LastTransition)
	}
	if st.Spec.Admin().Mode != checker.ModeActive {
		r.Mode, r.ModeReason = st.Spec.Admin().Mode.String(), st.Spec.Admin().Reason
	}
	if st.Quarantined != "" {
		r.Quarantined = st.Quarantined
		r.Streak = "QUARANTINED"
		r.LastError = "quarantined, not probed: " + st.Quarantined
	}
	for i, res := range recent {
		r.Results[i] = resultJSON{Time: stamp(res.Time), Pass: res.Pass, LatencySeconds: res.Latency.Seconds(), Error: res.Err}
	}
	r.Probe, r.Verdict, r.Severity = probeText(st.Spec), st.Verdict.String(), severity(st)
	r.PanicHeld, r.Flapping, r.CarriedOver = st.PanicHeld, st.Flapping, carriedOver(st)
	if o := st.Outlier; o != nil {
		r.Outlier = &outlierJSON{Ejected: o.Ejected, Reason: o.Reason, Since: stamp(o.Since), Ejections: o.Ejections}
		if o.Ejected {
			r.Outlier.Until = stamp(o.Until)
		}
	}
	if len(recent) > 0 {
		u := uptime(recent)
		r.Uptime = &u
	}
	return r
}

// carriedOver reports whether the page shows st as carried over: its
// state is from before pulsed restarted (Status.CarriedOver) and its first
// fresh result is due to replace it. A target in maintenance or
// quarantined is not probed, so no result is due: tagged "carried over"
// it would read as a pulsed stuck waiting for one. The API's carried_over
// keeps the checker's meaning.
func carriedOver(st checker.Status) bool {
	return st.CarriedOver && st.Quarantined == "" && st.Spec.Admin().Mode != checker.ModeMaintenance
}

func (h *Handler) row(st checker.Status) row {
	r := toRow(st, h.recent(st.Spec.Name))
	if len(st.Vantages) > 0 { // only then ask which vantages are suspect
		r.Vantages = vantagesJSON(st.Vantages, suspectSet(h.suspectVantages()))
	}
	return r
}

// recent returns a target's recent results; none without an Observer.
func (h *Handler) recent(name string) []checker.Result {
	if h.obs == nil {
		return nil
	}
	return h.obs.Recent(name)
}

// Streak returns a target's state with its progress toward the next one,
// in HAProxy's style: "UP", "UP 1/3" (one failure of the three that take
// it down), "DOWN", "DOWN 1/2" (one pass of the two that bring it up). A
// three_state target between the two shows "SUSPECT", with "1/2 ↑" for
// passes toward UP or "2/3 ↓" for failures toward DOWN. A target a policy
// holds (PanicHeld, Flapping) shows its state alone: its streak moves it
// nowhere while it is held. A draining target shows "DRAIN", one in
// maintenance "MAINT", whatever its state.
func Streak(st checker.Status) string {
	switch st.Spec.Admin().Mode {
	case checker.ModeDraining:
		return "DRAIN" // HAProxy's word: probed, no new traffic
	case checker.ModeMaintenance:
		return "MAINT"
	}
	if st.PanicHeld || st.Flapping {
		st.PassStreak, st.FailStreak = 0, 0
	}
	// A streak can run past its threshold while nothing moves the state
	// (an overloaded checker's timeouts, a threshold lowered by an update):
	// it shows as the threshold, never as 4/3.
	pass, fail := min(st.PassStreak, st.Spec.Rise), min(st.FailStreak, st.Spec.Fall)
	switch st.State {
	case checker.StateHealthy:
		if fail > 0 {
			return fmt.Sprintf("UP %d/%d", fail, st.Spec.Fall)
		}
		return "UP"
	case checker.StateUnhealthy:
		if pass > 0 {
			return fmt.Sprintf("DOWN %d/%d", pass, st.Spec.Rise)
		}
		return "DOWN"
	case checker.StateSuspect:
		switch {
		case pass > 0:
			return fmt.Sprintf("SUSPECT %d/%d ↑", pass, st.Spec.Rise)
		case fail > 0:
			return fmt.Sprintf("SUSPECT %d/%d ↓", fail, st.Spec.Fall)
		}
		return "SUSPECT"
	}
	return strings.ToUpper(st.State.String())
}

// groupSummary counts one group's targets by state. A target an operator
// took out (draining, maintenance) counts in its mode, not in its state, so
// that planned work does not read as failures.
type groupSummary struct {
	Name        string `json:"name"`
	Total       int    `json:"total"`
	Healthy     int    `json:"healthy"`
	Suspect     int    `json:"suspect"`
	Unhealthy   int    `json:"unhealthy"`
	Draining    int    `json:"draining"`
	Maintenance int    `json:"maintenance"`
	// Held counts the targets its panic threshold holds routable (the
	// group is in panic while it is not 0); Flapping those flap damping
	// holds unhealthy; Outliers those its outlier detection holds
	// degraded or ejected.
	Held     int `json:"held"`
	Flapping int `json:"flapping"`
	Outliers int `json:"outliers"`
	// PanicThreshold is the group's panic threshold in force; absent for
	// the targets with no group, which are not a pool.
	PanicThreshold *panicThresholdJSON `json:"panicThreshold,omitempty"`
	// SLO is where the group stands against its availability objective,
	// when it has one.
	SLO *sloJSON `json:"slo,omitempty"`
}

// panicThresholdJSON is a group's panic threshold in force
// (checker.GroupStatus): the bar past which failing targets are held
// routable.
type panicThresholdJSON struct {
	// MaxUnhealthyFraction is the threshold, in (0, 1]; 1 turns it off.
	MaxUnhealthyFraction float64 `json:"maxUnhealthyFraction"`
	// Own is true when the group's policy sets the threshold, false when
	// it is pulsed's default (-max-unhealthy-fraction).
	Own bool `json:"own"`
	// MaxUnhealthy is how many of the group's targets may be unhealthy at
	// once (draining and maintenance count): floor(MaxUnhealthyFraction x
	// targets), and at least one.
	MaxUnhealthy int `json:"maxUnhealthy"`
}

// sloJSON is a group's objective and where it stands; the measures are
// absent until probes were recorded.
type sloJSON struct {
	Objective   float64  `json:"objective"`
	WindowHours int      `json:"window_hours"`
	Available   *float64 `json:"availability,omitempty"`
	BudgetLeft  *float64 `json:"error_budget_remaining,omitempty"`
	BurnRate    *float64 `json:"burn_rate,omitempty"`
}

// addPolicies gives each summarized group its panic threshold and, when
// it has an objective, its measure.
func (h *Handler) addPolicies(groups []groupSummary) {
	idx := make(map[string]int, len(groups))
	for i, g := range groups {
		idx[g.Name] = i
	}
	for _, gs := range h.c.Groups("") {
		i, ok := idx[gs.Group]
		if !ok {
			continue
		}
		groups[i].PanicThreshold = &panicThresholdJSON{
			MaxUnhealthyFraction: gs.MaxUnhealthyFraction,
			Own:                  gs.Policy.MaxUnhealthyFraction > 0, // 0 takes the default
			MaxUnhealthy:         gs.MaxUnhealthy,
		}
		if h.slos == nil || gs.Policy.Objective == 0 {
			continue
		}
		out := &sloJSON{Objective: gs.Policy.Objective, WindowHours: int(gs.Policy.ObjectiveWindow / time.Hour)}
		if slo, ok := h.slos.Group(gs); ok {
			if slo.Availability >= 0 {
				out.Available, out.BudgetLeft = &slo.Availability, &slo.BudgetLeft
			}
			if slo.BurnRate >= 0 {
				out.BurnRate = &slo.BurnRate
			}
		}
		groups[i].SLO = out
	}
}

// summarize counts list by group, groups sorted by name.
func summarize(list []checker.Status) []groupSummary {
	idx := map[string]int{}
	var out []groupSummary
	for _, st := range list {
		i, ok := idx[st.Spec.Group]
		if !ok {
			i = len(out)
			idx[st.Spec.Group] = i
			out = append(out, groupSummary{Name: st.Spec.Group})
		}
		g := &out[i]
		g.Total++
		switch st.Spec.Admin().Mode {
		case checker.ModeDraining:
			g.Draining++
			continue
		case checker.ModeMaintenance:
			g.Maintenance++
			continue
		}
		switch st.State {
		case checker.StateHealthy:
			g.Healthy++
		case checker.StateSuspect:
			g.Suspect++
		case checker.StateUnhealthy:
			g.Unhealthy++
		}
		if st.PanicHeld {
			g.Held++
		}
		if st.Flapping {
			g.Flapping++
		}
		if st.Outlier != nil {
			g.Outliers++
		}
	}
	slices.SortFunc(out, func(a, b groupSummary) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []groupSummary{}
	}
	return out
}

// targetsPage is the answer of /api/targets.
type targetsPage struct {
	Revision uint64 `json:"revision"`
	// Now is the server's time, so the page can show "time since" without
	// trusting the browser's clock.
	Now string `json:"now"`
	// Total counts every target; Matched those the filters kept, of which
	// Targets is the page from Offset.
	Total   int            `json:"total"`
	Matched int            `json:"matched"`
	Offset  int            `json:"offset"`
	Limit   int            `json:"limit"`
	Groups  []groupSummary `json:"groups"`
	Targets []row          `json:"targets"`
	// Checker is pulsed's own health: overload and registry errors.
	Checker checkerJSON `json:"checker"`
}

// checkerJSON is the checker's own health as the page shows it.
type checkerJSON struct {
	// Degraded is true while the checker is overloaded (its own probe
	// timeouts do not count); Reason says why, Since since when.
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason,omitempty"`
	Since    string `json:"since,omitempty"`
	// RegistryError says why pulsed cannot store changes; empty while it
	// can.
	RegistryError string `json:"registryError,omitempty"`
	// Replica is this replica's ID, with replicas on etcd.
	Replica string `json:"replica,omitempty"`
	// DegradedReplicas lists, with replicas on etcd, the replicas whose
	// published state is degraded, this one included, sorted by ID.
	DegradedReplicas []string `json:"degradedReplicas,omitempty"`
	// DiscoveryFailing lists the discovery groups and sources that fail
	// now, each keeping its last good set of targets.
	DiscoveryFailing []discoveryFailure `json:"discoveryFailing,omitempty"`
	// SuspectVantages lists, with replicas on etcd, the vantages whose
	// verdicts are left out of every quorum, by member.
	SuspectVantages []suspectVantageJSON `json:"suspectVantages,omitempty"`
}

// discoveryFailure is a discovery source (or a whole group's answer)
// that fails: "api (http_sd 0)", since when and why.
type discoveryFailure struct {
	Source string `json:"source"`
	Since  string `json:"since,omitempty"`
	Error  string `json:"error"`
}

func (h *Handler) checkerNow() checkerJSON {
	o := h.c.Overload()
	out := checkerJSON{Degraded: o.Degraded, Reason: o.Reason}
	if !o.Since.IsZero() {
		out.Since = stamp(o.Since)
	}
	if err := h.c.StoreErr(); err != nil {
		out.RegistryError = err.Error()
	}
	out.Replica, _ = h.c.Replica()
	for _, r := range h.c.DegradedReplicas() {
		out.DegradedReplicas = append(out.DegradedReplicas, r.Replica)
	}
	for _, v := range h.suspectVantages() {
		out.SuspectVantages = append(out.SuspectVantages, suspectVantageJSON{Member: v.Member, Label: v.Label, Disagree: v.Disagree, Judged: v.Judged, Since: stamp(v.Since)})
	}
	if h.discovery != nil {
		for _, g := range h.discovery.DiscoveryGroups() {
			if g.LastError != "" && !g.ErrorSince.IsZero() {
				out.DiscoveryFailing = append(out.DiscoveryFailing, discoveryFailure{Source: g.Name, Since: stamp(g.ErrorSince), Error: g.LastError})
			}
			for _, s := range g.Sources {
				if s.LastError != "" {
					out.DiscoveryFailing = append(out.DiscoveryFailing, discoveryFailure{Source: g.Name + " (" + s.Name + ")", Since: stamp(s.ErrorSince), Error: s.LastError})
				}
			}
		}
	}
	return out
}

// serveTargets answers one page of targets:
//
//	GET /api/targets?group=G&state=S&q=TEXT&sort=K&desc=1&offset=N&limit=M
//
// sort is one of sortKeys, severity by default (the most severe first),
// then by name; desc=1 reverses it.
// group keeps one group ("" for every group; the group named "" cannot be
// asked for alone), state one of stateFilters (pulsectl ls --state's, and
// the modes),
// q targets whose name contains TEXT (case-insensitive); limit is 100 by
// default and at most 1,000. Groups always counts every target.
func (h *Handler) serveTargets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err := intParam(q.Get("offset"), 0)
	if err != nil || offset < 0 {
		http.Error(w, "offset: want a non-negative integer", http.StatusBadRequest)
		return
	}
	limit, err := intParam(q.Get("limit"), defaultLimit)
	if err != nil || limit < 1 {
		http.Error(w, "limit: want a positive integer", http.StatusBadRequest)
		return
	}
	limit = min(limit, maxLimit)
	state := q.Get("state")
	keep, ok := stateFilters[state]
	if !ok && state != "" {
		http.Error(w, fmt.Sprintf("state: want one of %s, got %q", strings.Join(stateFilterNames(), ", "), state), http.StatusBadRequest)
		return
	}
	group, text := q.Get("group"), strings.ToLower(q.Get("q"))
	key := q.Get("sort")
	if key == "" {
		key = "severity"
	}

	var seq uint64
	if h.obs != nil {
		seq = h.obs.seqNow()
	}
	// With replicas, list every write acknowledged before the request,
	// on any replica; while etcd is unreachable this replica's view.
	_ = h.c.CatchUp(r.Context())
	list, rev := h.c.ListNow("") // List would wait for a store that cannot be written
	if h.obs != nil {
		h.obs.sweep(seq, liveSet(list))
	}
	if err := sortStatuses(list, key, q.Get("desc") == "1", h.recent); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	page := targetsPage{
		Checker:  h.checkerNow(),
		Revision: rev,
		Now:      stamp(time.Now()),
		Total:    len(list),
		Offset:   offset,
		Limit:    limit,
		Groups:   h.summarizeWithPolicies(list),
		Targets:  []row{},
	}
	for _, st := range list {
		if group != "" && st.Spec.Group != group ||
			keep != nil && !keep(st) ||
			text != "" && !strings.Contains(strings.ToLower(st.Spec.Name), text) {
			continue
		}
		if page.Matched >= offset && len(page.Targets) < limit {
			page.Targets = append(page.Targets, h.row(st))
		}
		page.Matched++
	}
	writeJSON(w, page)
}

// stateFilters are the states /api/targets?state= takes: pulsectl ls
// --state's, and the two modes an operator sets.
var stateFilters = map[string]func(checker.Status) bool{
	"healthy":      func(st checker.Status) bool { return st.State == checker.StateHealthy },
	"unhealthy":    func(st checker.Status) bool { return st.State == checker.StateUnhealthy },
	"suspect":      func(st checker.Status) bool { return st.State == checker.StateSuspect },
	"routable":     func(st checker.Status) bool { return st.Routable },
	"not-routable": func(st checker.Status) bool { return !st.Routable },
	"held":         func(st checker.Status) bool { return st.PanicHeld },
	"flapping":     func(st checker.Status) bool { return st.Flapping },
	"carried-over": carriedOver, // as the rows show it
	"outlier":      func(st checker.Status) bool { return st.Outlier != nil },
	"quarantined":  func(st checker.Status) bool { return st.Quarantined != "" },
	"draining":     func(st checker.Status) bool { return st.Spec.Admin().Mode == checker.ModeDraining },
	"maintenance":  func(st checker.Status) bool { return st.Spec.Admin().Mode == checker.ModeMaintenance },
}

func stateFilterNames() []string {
	names := make([]string, 0, len(stateFilters))
	for n := range stateFilters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func intParam(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	return strconv.Atoi(s)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// summarizeWithPolicies is summarize, with the groups' panic thresholds
// and objectives.
func (h *Handler) summarizeWithPolicies(list []checker.Status) []groupSummary {
	groups := summarize(list)
	h.addPolicies(groups)
	return groups
}

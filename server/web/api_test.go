package web_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server/web"
)

func TestStreak(t *testing.T) {
	rf := checker.Spec{Rise: 2, Fall: 3}
	ts := checker.Spec{Rise: 2, Fall: 3, Model: checker.ModelThreeState}
	for _, tt := range []struct {
		name string
		st   checker.Status
		want string
	}{
		{"up", checker.Status{Spec: rf, State: checker.StateHealthy, PassStreak: 5}, "UP"},
		{"up, one failure of three toward down", checker.Status{Spec: rf, State: checker.StateHealthy, FailStreak: 1}, "UP 1/3"},
		{"up, two failures of three", checker.Status{Spec: rf, State: checker.StateHealthy, FailStreak: 2}, "UP 2/3"},
		{"down", checker.Status{Spec: rf, State: checker.StateUnhealthy, FailStreak: 7}, "DOWN"},
		{"down, one pass of two toward up", checker.Status{Spec: rf, State: checker.StateUnhealthy, PassStreak: 1}, "DOWN 1/2"},
		{"suspect, rising", checker.Status{Spec: ts, State: checker.StateSuspect, PassStreak: 1}, "SUSPECT 1/2 ↑"},
		{"suspect, falling", checker.Status{Spec: ts, State: checker.StateSuspect, FailStreak: 2}, "SUSPECT 2/3 ↓"},
		{"suspect, no streak", checker.Status{Spec: ts, State: checker.StateSuspect}, "SUSPECT"},
		{"held by its group's panic", checker.Status{Spec: rf, State: checker.StateHealthy, FailStreak: 7, PanicHeld: true}, "UP"},
		{"flapping", checker.Status{Spec: rf, State: checker.StateUnhealthy, PassStreak: 1, Flapping: true}, "DOWN"},
		{"draining", checker.Status{Spec: rf.WithAdmin(checker.Admin{Mode: checker.ModeDraining}), State: checker.StateUnhealthy, PassStreak: 4}, "DRAIN"},
		{"maintenance", checker.Status{Spec: rf.WithAdmin(checker.Admin{Mode: checker.ModeMaintenance}), State: checker.StateUnhealthy}, "MAINT"},
		{"failures past fall while up (timeouts of an overloaded checker)", checker.Status{Spec: rf, State: checker.StateHealthy, FailStreak: 4}, "UP 3/3"},
		{"passes past rise while down", checker.Status{Spec: rf, State: checker.StateUnhealthy, PassStreak: 9}, "DOWN 2/2"},
		{"suspect, failures past fall", checker.Status{Spec: ts, State: checker.StateSuspect, FailStreak: 5}, "SUSPECT 3/3 ↓"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := web.Streak(tt.st); got != tt.want {
				t.Errorf("Streak = %q, want %q", got, tt.want)
			}
		})
	}
}

// page mirrors the JSON of /api/targets.
type page struct {
	Revision uint64 `json:"revision"`
	Now      string `json:"now"`
	Total    int    `json:"total"`
	Matched  int    `json:"matched"`
	Offset   int    `json:"offset"`
	Limit    int    `json:"limit"`
	Groups   []struct {
		Name                               string
		Total, Healthy, Suspect, Unhealthy int
		Held, Flapping, Outliers           int
	} `json:"groups"`
	Targets []rowJSON `json:"targets"`
}

type rowJSON struct {
	Name, Group, Kind, Model, State, Streak string
	Routable                                bool
	Rise, Fall, PassStreak, FailStreak      int
	LastLatencySeconds                      *float64
	LastError                               string
	LastResultTime, LastTransitionTime      string
	Probe, Verdict                          string
	PanicHeld, Flapping, CarriedOver        bool
	Uptime                                  *float64
	Mode, ModeReason                        string
	Outlier                                 *struct {
		Ejected      bool
		Reason       string
		Since, Until string
		Ejections    int
	}
	Results []struct {
		Time           string
		Pass           bool
		LatencySeconds float64
		Error          string
	}
}

// A quarantined target shows as such on the page, with the reason.
func TestQuarantinedRow(t *testing.T) {
	st := checker.Status{Spec: checker.Spec{Name: "old", Rise: 1, Fall: 1}, State: checker.StateUnhealthy, Quarantined: "interval: must be at most 24h0m0s, got 1000h0m0s"}
	body, err := json.Marshal(web.RowForTest(st))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"streak":"QUARANTINED"`, `"quarantined":"interval: must be at most 24h0m0s, got 1000h0m0s"`, `"lastError":"quarantined, not probed: interval`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("row %s lacks %s", body, want)
		}
	}
}

func TestTargetsRowHasTheDetails(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	fleet(t, e)
	e.rounds(2)
	e.set("http://web-2/healthz", outcome{err: errors.New("status 503")})
	e.rounds(1)

	var p page
	getJSON(t, e.srv.URL+"/api/targets?group=edge&sort=name", &p)
	if p.Total != 3 || p.Matched != 2 || len(p.Targets) != 2 {
		t.Fatalf("total %d matched %d rows %d, want 3, 2, 2", p.Total, p.Matched, len(p.Targets))
	}
	web1, web2 := p.Targets[0], p.Targets[1]
	if web1.Name != "web-1" || web1.State != "healthy" || web1.Streak != "UP" || web1.Kind != "tcp" ||
		web1.LastLatencySeconds == nil || *web1.LastLatencySeconds != 0.25 || len(web1.Results) != 3 || web1.LastTransitionTime == "" {
		t.Errorf("web-1 row: %+v", web1)
	}
	if web2.State != "healthy" || web2.Streak != "UP 1/2" || web2.LastError != "status 503" || web2.Kind != "http" {
		t.Errorf("web-2 row: %+v", web2)
	}
	if n := len(web2.Results); n != 3 || !web2.Results[0].Pass || web2.Results[2].Pass || web2.Results[2].Error != "status 503" {
		t.Errorf("web-2 results (oldest first): %+v", web2.Results)
	}
	if len(p.Groups) != 2 || p.Groups[0].Name != "data" || p.Groups[1].Name != "edge" || p.Groups[1].Healthy != 2 {
		t.Errorf("groups: %+v", p.Groups)
	}
}

// policyFleet sets up group edge (a, b, c, d; at most one unhealthy) with
// a and b failing, so that one is marked unhealthy (down) and the other
// held, and group other with f flapping.
func policyFleet(t *testing.T, e *env) (held, down string) {
	t.Helper()
	for _, name := range []string{"a", "b", "c", "d"} {
		s := tcpSpec(name, "edge")
		s.Rise, s.Fall = 1, 1
		e.add(t, s)
		e.set(name+":80", outcome{})
	}
	flap := tcpSpec("f", "other")
	flap.Rise, flap.Fall, flap.FlapThreshold = 1, 1, 2
	e.add(t, flap)
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.25}); err != nil {
		t.Fatal(err)
	}
	e.set("f:80", outcome{})
	e.rounds(1)
	e.set("a:80", outcome{err: errors.New("status 503")})
	e.set("b:80", outcome{err: errors.New("status 503")})
	e.set("f:80", outcome{err: errors.New("status 503")})
	e.rounds(1)
	e.set("f:80", outcome{})
	e.rounds(1)
	for _, n := range []string{"a", "b"} {
		if st, _ := e.c.Status(n); st.PanicHeld {
			held = n
		}
	}
	if st, _ := e.c.Status("f"); !st.Flapping || held == "" {
		t.Fatalf("set-up: f flapping %v, held %q; want f flapping and a or b held", st.Flapping, held)
	}
	return held, map[string]string{"a": "b", "b": "a"}[held]
}

// A removal drops the target's results at once: a target added again
// under its name starts with none of the old one's.
func TestRemovalDropsResultsAtOnce(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("web-1", ""))
	e.set("web-1:80", outcome{})
	e.rounds(3)
	if n := len(e.obs.Recent("web-1")); n != 3 {
		t.Fatalf("%d recent results, want 3", n)
	}
	if ok, err := e.c.Remove("web-1"); !ok || err != nil {
		t.Fatalf("Remove: %v, %v", ok, err)
	}
	e.add(t, tcpSpec("web-1", ""))
	if got := e.obs.Recent("web-1"); got != nil {
		t.Errorf("the target added again shows the removed one's %d results", len(got))
	}
	var p page
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if len(p.Targets) != 1 || len(p.Targets[0].Results) != 0 || p.Targets[0].Uptime != nil {
		t.Errorf("the row of the target added again: %+v", p.Targets)
	}
}

// The rows say what holds a target (panic, flapping), what is probed and
// the uptime over the recent results; the page sorts by severity; the
// groups count their held and flapping targets.
func TestRowsShowPoliciesAndSortBySeverity(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	held, down := policyFleet(t, e)
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "c", Mode: checker.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}

	var p page
	getJSON(t, e.srv.URL+"/api/targets", &p)
	var order []string
	for _, r := range p.Targets {
		order = append(order, r.Name)
	}
	// A draining target is out of traffic on purpose: below every failure.
	if want := []string{"f", down, held, "c", "d"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v (flapping, unhealthy, held, draining, healthy)", order, want)
	}
	byName := map[string]rowJSON{}
	for _, r := range p.Targets {
		byName[r.Name] = r
	}
	if r := byName[held]; !r.PanicHeld || r.State != "healthy" || r.Verdict != "unhealthy" || !r.Routable {
		t.Errorf("held row: %+v", r)
	}
	if r := byName["f"]; !r.Flapping || r.State != "unhealthy" || r.Verdict != "healthy" {
		t.Errorf("flapping row: %+v", r)
	}
	if r := byName["c"]; r.Probe != "c:80" || r.Uptime == nil || *r.Uptime != 1 {
		t.Errorf("c's probe %q, uptime %v; want c:80 and 1", r.Probe, r.Uptime)
	}
	if r := byName["c"]; r.Mode != "draining" || r.ModeReason != "deploy 4711" || r.Routable || r.Streak != "DRAIN" {
		t.Errorf("draining row: %+v", r)
	}
	if r := byName[down]; r.Uptime == nil || *r.Uptime != 1.0/3 {
		t.Errorf("%s's uptime %v, want 1/3 (a pass, then two failures)", down, r.Uptime)
	}
	for _, g := range p.Groups {
		if g.Name == "edge" && g.Held != 1 || g.Name == "other" && g.Flapping != 1 {
			t.Errorf("group %+v", g)
		}
	}
}

// The strip keeps the last 20 results of a target, and a removed target's
// results go at the next listing.
func TestRecentResultsAreBounded(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("web-1", ""))
	e.set("web-1:80", outcome{})
	e.rounds(25)
	if n := len(e.obs.Recent("web-1")); n != web.DefaultRecentResults {
		t.Errorf("%d recent results after 25 rounds, want %d", n, web.DefaultRecentResults)
	}
	e.c.Remove("web-1")
	var p page
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if got := e.obs.Recent("web-1"); got != nil {
		t.Errorf("a removed target kept %d results", len(got))
	}
}

// An Observer told to keep no recent results (pulsed without a status
// page) drops those it kept and keeps none, and still counts the probes.
func TestKeepRecentOff(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	e.add(t, tcpSpec("web-1", ""))
	e.set("web-1:80", outcome{})
	e.rounds(3)
	if n := len(e.obs.Recent("web-1")); n != 3 {
		t.Fatalf("%d recent results after 3 rounds, want 3", n)
	}
	e.obs.KeepRecent(0)
	if got := e.obs.Recent("web-1"); got != nil {
		t.Errorf("KeepRecent(0) kept %d results", len(got))
	}
	e.rounds(2)
	if got := e.obs.Recent("web-1"); got != nil {
		t.Errorf("%d results kept after KeepRecent(0)", len(got))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.obs)
	want := `
# HELP pulse_probes_total Probes that ran to completion, by probe kind (http, tcp, grpc, dns) and result (pass, fail).
# TYPE pulse_probes_total counter
pulse_probes_total{kind="grpc",result="fail"} 0
pulse_probes_total{kind="grpc",result="pass"} 0
pulse_probes_total{kind="http",result="fail"} 0
pulse_probes_total{kind="http",result="pass"} 0
pulse_probes_total{kind="tcp",result="fail"} 0
pulse_probes_total{kind="tcp",result="pass"} 5
`
	if got := gatherText(t, reg, "pulse_probes_total"); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("the probes are not all counted:\n%s", got)
	}
	e.obs.KeepRecent(2)
	e.rounds(3)
	if n := len(e.obs.Recent("web-1")); n != 2 {
		t.Errorf("%d recent results with KeepRecent(2), want 2", n)
	}
}

// At 10,000 targets the page's data endpoint answers one page, and
// filters and pages on the server.
func TestTargetsAtTenThousand(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	const n = 10000
	for i := range n {
		e.add(t, tcpSpec(fmt.Sprintf("t-%05d", i), fmt.Sprintf("g%d", i%10)))
	}
	for _, i := range []int{42, 4242} {
		e.set(fmt.Sprintf("t-%05d:80", i), outcome{})
	}
	e.rounds(2) // two targets healthy, the rest unhealthy

	code, body := get(t, e.srv.URL+"/api/targets")
	if code != http.StatusOK || len(body) > 200<<10 {
		t.Fatalf("first page: %d, %d bytes; want 200 and at most 200 KiB", code, len(body))
	}
	for _, tt := range []struct {
		query                 string
		matched, rows         int
		first, last           string
		wantTotal, wantGroups int
	}{
		// By severity (the default): the healthy t-00042 and t-04242 last.
		{"", n, 100, "t-00000", "t-00100", n, 10},
		{"?offset=9950", n, 50, "t-09952", "t-04242", n, 10},
		{"?q=T-0424", 10, 10, "t-04240", "t-04242", n, 10},
		{"?sort=severity&desc=1&limit=3", n, 3, "t-00042", "t-00000", n, 10},
		// By name.
		{"?sort=name", n, 100, "t-00000", "t-00099", n, 10},
		{"?sort=name&offset=9950", n, 50, "t-09950", "t-09999", n, 10},
		{"?sort=name&desc=1&limit=2", n, 2, "t-09999", "t-09998", n, 10},
		{"?sort=name&limit=5000", n, 1000, "t-00000", "t-00999", n, 10},
		{"?sort=name&group=g2&limit=3", 1000, 3, "t-00002", "t-00022", n, 10},
		{"?state=healthy", 2, 2, "t-00042", "t-04242", n, 10},
		{"?sort=name&q=T-0424", 10, 10, "t-04240", "t-04249", n, 10},
		{"?q=4242&state=unhealthy", 0, 0, "", "", n, 10},
	} {
		var p page
		getJSON(t, e.srv.URL+"/api/targets"+tt.query, &p)
		if p.Total != tt.wantTotal || p.Matched != tt.matched || len(p.Targets) != tt.rows || len(p.Groups) != tt.wantGroups {
			t.Errorf("%q: total %d matched %d rows %d groups %d; want %d %d %d %d", tt.query,
				p.Total, p.Matched, len(p.Targets), len(p.Groups), tt.wantTotal, tt.matched, tt.rows, tt.wantGroups)
			continue
		}
		if tt.rows > 0 && (p.Targets[0].Name != tt.first || p.Targets[tt.rows-1].Name != tt.last) {
			t.Errorf("%q: rows %s..%s, want %s..%s", tt.query, p.Targets[0].Name, p.Targets[tt.rows-1].Name, tt.first, tt.last)
		}
	}

	// The feed's snapshot carries only the rows the page names, and counts
	// every target.
	f := e.openFeed(t, "/events?names=t-00042,t-04242,nope", "")
	ev := f.next(t)
	var snap struct {
		Total   int
		Groups  []struct{ Name string }
		Targets []rowJSON
	}
	ev.decode(t, &snap)
	if ev.name != "snapshot" || snap.Total != n || len(snap.Groups) != 10 || len(snap.Targets) != 2 || snap.Targets[1].Name != "t-04242" {
		t.Errorf("snapshot %s: total %d, %d groups, %d rows", ev.name, snap.Total, len(snap.Groups), len(snap.Targets))
	}
}

func TestTargetsBadQueries(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	for _, q := range []string{"offset=-1", "offset=x", "limit=0", "state=down", "sort=size"} {
		code, body := get(t, e.srv.URL+"/api/targets?"+q)
		if code != http.StatusBadRequest || !strings.Contains(body, strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("%s: %d %q, want 400 naming the parameter", q, code, body)
		}
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	var started atomic.Bool
	e := newEnv(t, checker.Config{}, web.Config{Ready: func() error {
		if !started.Load() {
			return errors.New("starting")
		}
		return nil
	}})
	if code, body := get(t, e.srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, e.srv.URL+"/readyz"); code != http.StatusServiceUnavailable || body != "not ready: starting\n" {
		t.Errorf("/readyz while starting: %d %q", code, body)
	}
	started.Store(true)
	if code, body := get(t, e.srv.URL+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
	// Without a Gatherer there is no /metrics.
	if code, _ := get(t, e.srv.URL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without a gatherer: %d, want 404", code)
	}
}

func TestStaticPage(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	for path, want := range map[string]string{
		"/":          `<script src="app.js" defer></script>`,
		"/app.js":    `new Feed("/events?names="`,
		"/style.css": `tr[data-state="unhealthy"] .badge`,
	} {
		if code, body := get(t, e.srv.URL+path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 containing %q", path, code, want)
		}
	}
}

// failingStore stores specs but cannot store states, as a full disk would.
type failingStore struct{}

func (failingStore) Load() ([]checker.StoredTarget, uint64, error) { return nil, 0, nil }
func (failingStore) PutSpec(checker.Spec) error                    { return nil }
func (failingStore) PutSpecs([]checker.Spec) error                 { return nil }
func (failingStore) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) {
	return nil, nil
}
func (failingStore) PutGroupPolicy(string, checker.GroupPolicy) error { return nil }
func (failingStore) DeleteTarget(string) error                        { return nil }
func (failingStore) CommitStates([]checker.StoredState, []string, uint64) error {
	return errors.New("no space left on device")
}

// While the store cannot be written, the page's data and the metrics
// still answer, and say so: they are how an operator learns of it.
func TestRegistryErrorIsShown(t *testing.T) {
	e := newEnv(t, checker.Config{Store: failingStore{}}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewCollector(e.c, false, e.obs))
	e.add(t, tcpSpec("web-1", "edge"))
	waitFor(t, "the store's error", func() bool { return e.c.StoreErr() != nil })
	var p struct {
		Targets []rowJSON
		Checker struct {
			Degraded      bool
			RegistryError string
		}
	}
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if len(p.Targets) != 1 || !strings.Contains(p.Checker.RegistryError, "no space left on device") {
		t.Errorf("/api/targets with a failing store: %+v", p)
	}
	if got := gatherText(t, reg, "pulse_registry_error"); !strings.Contains(got, "pulse_registry_error 1") {
		t.Errorf("metrics with a failing store:\n%s", got)
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// noTargets is a shared registry, as replicas on etcd use, that holds no
// targets and in which this replica owns nothing.
type noTargets struct{ fakeshared.Mirror }

func (noTargets) Load() ([]checker.SharedTarget, uint64, error) { return nil, 10, nil }

// Another replica's overload reaches the page's data, as it reaches every
// stream and ListTargets, and leaves it when that replica recovers.
func TestDegradedReplicasAreShown(t *testing.T) {
	e := newEnv(t, checker.Config{Shared: noTargets{}}, web.Config{})
	degraded := func() []string {
		var p struct {
			Checker struct{ DegradedReplicas []string }
		}
		getJSON(t, e.srv.URL+"/api/targets", &p)
		return p.Checker.DegradedReplicas
	}
	if got := degraded(); len(got) != 0 {
		t.Fatalf("degradedReplicas before any overload: %v", got)
	}
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedOverloadPut, Rev: 11, Overload: checker.ReplicaOverload{
		Replica: "r3", Degraded: true, Since: epoch, Reason: "checker degraded: 9 probes waiting for a slot (threshold 8)",
	}}}, 11)
	if got := degraded(); !slices.Equal(got, []string{"r3"}) {
		t.Errorf("degradedReplicas with r3 degraded: %v, want [r3]", got)
	}
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedOverloadPut, Rev: 12, Overload: checker.ReplicaOverload{
		Replica: "r3", Since: epoch,
	}}}, 12)
	if got := degraded(); len(got) != 0 {
		t.Errorf("degradedReplicas after r3 recovered: %v, want none", got)
	}
}

// A discovered target's row says which discovery group found it.
func TestRowShowsSource(t *testing.T) {
	st := checker.Status{Spec: checker.Spec{Name: "api-127.0.0.1:80", Rise: 1, Fall: 1, Source: "discovery:api"}, State: checker.StateHealthy}
	body, err := json.Marshal(web.RowForTest(st))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"source":"discovery:api"`) {
		t.Errorf("row %s does not give its source", body)
	}
}

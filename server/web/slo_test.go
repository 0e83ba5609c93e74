package web_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// A group with an availability objective shows, on the page's API and as
// metrics, the share of its error budget left and its burn rate.
func TestGroupObjectiveOnThePageAndAsMetrics(t *testing.T) {
	e, rec := historyEnv(t, web.Config{})
	e.add(t, tcpSpec("web-1", "edge"))
	e.add(t, tcpSpec("web-2", "edge"))
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{Objective: 0.9, ObjectiveWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// historyEnv's probes: web-1 passed 99 of 100, web-2 none of 100.
	const avail, budget = 99.0 / 200, 0.1
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	_, body := do(t, e, "/api/targets", "")
	var page struct {
		Groups []struct {
			Name string
			SLO  *struct {
				Objective            float64
				WindowHours          int      `json:"window_hours"`
				Availability         *float64 `json:"availability"`
				ErrorBudgetRemaining *float64 `json:"error_budget_remaining"`
				BurnRate             *float64 `json:"burn_rate"`
			} `json:"slo"`
		}
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Groups) != 1 || page.Groups[0].SLO == nil {
		t.Fatalf("groups = %s, want edge with its objective", body)
	}
	s := page.Groups[0].SLO
	if s.Objective != 0.9 || s.WindowHours != 24 || s.Availability == nil || !near(*s.Availability, avail) ||
		s.ErrorBudgetRemaining == nil || !near(*s.ErrorBudgetRemaining, 1-(1-avail)/budget) || s.BurnRate == nil || !near(*s.BurnRate, (1-avail)/budget) {
		t.Errorf("edge's objective on the page = %s", body)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewSLOs(e.c, rec))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"pulse_group_availability_objective": 0.9,
		"pulse_group_error_budget_remaining": 1 - (1-avail)/budget,
		"pulse_group_error_budget_burn_rate": (1 - avail) / budget,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || !near(g, v) {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	// A group without an objective has none of them.
	if _, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{}); err != nil {
		t.Fatal(err)
	}
	if mfs, _ = reg.Gather(); len(mfs) != 0 {
		t.Errorf("metrics without an objective: %v", mfs)
	}
}

package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/server/web"
)

// outlierFleet makes d, of a, b, c and d in group edge, a degraded
// outlier: its probes take 40ms, the others' none. With enforce, it is
// ejected instead.
func outlierFleet(t *testing.T, e *env, enforce bool) {
	t.Helper()
	for _, n := range []string{"a", "b", "c", "d"} {
		s := tcpSpec(n, "edge")
		s.Interval, s.Rise, s.Fall, s.InitialState = time.Hour, 1, 1, checker.StateHealthy
		e.add(t, s)
		e.set(n+":80", outcome{})
	}
	e.set("d:80", outcome{latency: 40 * time.Millisecond})
	policy := checker.GroupPolicy{MaxUnhealthyFraction: 1, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: 10 * time.Second, Enforce: enforce}}
	if _, err := e.c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	e.c.Start()
	e.rounds(3)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "d an outlier", func() bool {
		st, _ := e.c.Status("d")
		return st.Outlier != nil && st.Outlier.Ejected == enforce
	})
}

// pulse_outlier_targets counts each group's degraded and ejected
// outliers, at 0 for a group without.
func TestOutlierMetrics(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		e := newEnv(t, checker.Config{}, web.Config{})
		reg := prometheus.NewRegistry()
		reg.MustRegister(web.NewCollector(e.c, false, e.obs))
		e.add(t, tcpSpec("x", "other"))
		outlierFleet(t, e, enforce)
		deg, ej := 1, 0
		if enforce {
			deg, ej = 0, 1
		}
		want := fmt.Sprintf(`
# HELP pulse_outlier_targets Targets of the group its outlier detection caught, by state: degraded (routable at a lowered weight) or ejected (not routable).
# TYPE pulse_outlier_targets gauge
pulse_outlier_targets{group="edge",state="degraded"} %d
pulse_outlier_targets{group="edge",state="ejected"} %d
pulse_outlier_targets{group="other",state="degraded"} 0
pulse_outlier_targets{group="other",state="ejected"} 0
`, deg, ej)
		if got := gatherText(t, reg, "pulse_outlier_targets"); got != strings.TrimPrefix(want, "\n") {
			t.Errorf("enforce %v: metrics:\n%s\nwant:\n%s", enforce, got, want)
		}
	}
}

// The page's rows say which targets are outliers and why, a degraded one
// ranks with the suspect and an ejected one with the unhealthy, the
// groups count them, and ?state=outlier lists them.
func TestOutlierRows(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		e := newEnv(t, checker.Config{}, web.Config{})
		outlierFleet(t, e, enforce)
		var p page
		getJSON(t, e.srv.URL+"/api/targets", &p)
		if len(p.Targets) != 4 || p.Targets[0].Name != "d" {
			t.Fatalf("enforce %v: rows %+v, want d first", enforce, p.Targets)
		}
		d := p.Targets[0]
		if o := d.Outlier; o == nil || o.Ejected != enforce || !strings.HasPrefix(o.Reason, "p50 40ms vs group ") || o.Since == "" || (o.Until != "") != enforce {
			t.Errorf("enforce %v: d's outlier %+v", enforce, d.Outlier)
		}
		if d.Routable == enforce {
			t.Errorf("enforce %v: d routable %v", enforce, d.Routable)
		}
		for _, r := range p.Targets[1:] {
			if r.Outlier != nil {
				t.Errorf("%s is an outlier: %+v", r.Name, r.Outlier)
			}
		}
		if len(p.Groups) != 1 || p.Groups[0].Outliers != 1 {
			t.Errorf("enforce %v: groups %+v, want edge with 1 outlier", enforce, p.Groups)
		}
		getJSON(t, e.srv.URL+"/api/targets?state=outlier", &p)
		if len(p.Targets) != 1 || p.Targets[0].Name != "d" {
			t.Errorf("enforce %v: ?state=outlier listed %+v, want d alone", enforce, p.Targets)
		}
	}
}

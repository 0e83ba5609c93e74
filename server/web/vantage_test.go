package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/checker/history"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server/web"
)

// zoneFleet is a shared registry that assigns vantages: r2 owns web-1 to
// web-3, r3 and r4 probe them too, and this replica (r9) none. zone-c
// (r4) says unhealthy of all three while the others say healthy: its own
// path is broken, and its judge has stored it as suspect.
type zoneFleet struct{ fakeshared.Mirror }

var fleetZones = []checker.Vantage{{Member: "r2", Label: "zone-a"}, {Member: "r3", Label: "zone-b"}, {Member: "r4", Label: "zone-c"}}

func (zoneFleet) Load() ([]checker.SharedTarget, uint64, error) {
	var out []checker.SharedTarget
	for i := range 3 {
		name := fmt.Sprintf("web-%d", i+1)
		st := checker.SharedTarget{
			Spec:     checker.Spec{Name: name, Group: "edge", Vantages: 3, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: name + ":80"}}},
			State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
			StateRev: uint64(10 + i),
		}
		for j, v := range fleetZones {
			vd := checker.VantageVerdict{Member: v.Member, Label: v.Label, State: checker.StateHealthy, Time: epoch, Rev: uint64(20 + 3*i + j)}
			if v.Member == "r4" {
				vd.State, vd.Error = checker.StateUnhealthy, "no route to host"
			}
			st.Verdicts = append(st.Verdicts, vd)
		}
		out = append(out, st)
	}
	return out, 30, nil
}
func (zoneFleet) Vantages(string, int) []checker.Vantage { return fleetZones }
func (zoneFleet) Self() checker.Vantage                  { return checker.Vantage{Member: "r9", Label: "zone-d"} }

// LoadedVantages: zone-c's judge has stored it as suspect.
func (zoneFleet) LoadedVantages() []checker.VantageRecord {
	return []checker.VantageRecord{{Member: "r4", Label: "zone-c", Suspect: true, Disagree: 3, Judged: 3, Time: epoch}}
}

type vantageRow struct {
	Name     string
	Vantages []struct {
		Member, Label, State, Error, Time string
		Suspect                           bool
	}
}

func chips(r vantageRow) string {
	var out []string
	for _, v := range r.Vantages {
		s := v.Label + "=" + v.State
		if v.Error != "" {
			s += "(" + v.Error + ")"
		}
		if v.Suspect {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// The page's data shows each vantage's verdict in a target's row, the
// suspect vantage marked and among pulsed's alerts; a target's history
// lists the suspect vantage among its events; a transition on the feed
// carries the verdicts.
func TestPageVantages(t *testing.T) {
	e := newEnv(t, checker.Config{Shared: zoneFleet{}}, web.Config{History: history.New(history.Options{})})
	var p struct {
		Targets []vantageRow
		Checker struct {
			SuspectVantages []struct {
				Member, Label    string
				Disagree, Judged int
				Since            string
			}
		}
	}
	getJSON(t, e.srv.URL+"/api/targets", &p)
	if len(p.Targets) != 3 {
		t.Fatalf("%d targets, want 3", len(p.Targets))
	}
	want := "zone-a=healthy zone-b=healthy zone-c=unhealthy(no route to host)!"
	for _, r := range p.Targets {
		if got := chips(r); got != want {
			t.Errorf("%s: vantages %q, want %q", r.Name, got, want)
		}
	}
	if s := p.Checker.SuspectVantages; len(s) != 1 || s[0].Member != "r4" || s[0].Label != "zone-c" || s[0].Disagree != 3 || s[0].Judged != 3 || s[0].Since == "" {
		t.Errorf("suspect vantages %+v, want zone-c (r4), 3 of 3", s)
	}

	var h struct{ Events []struct{ Kind, Text string } }
	getJSON(t, e.srv.URL+"/api/history?target=web-1", &h)
	if len(h.Events) != 1 || h.Events[0].Kind != "VANTAGE_SUSPECT" || !strings.Contains(h.Events[0].Text, "vantage zone-c (replica r4) suspect") {
		t.Errorf("history events %+v, want zone-c's suspicion", h.Events)
	}

	f := e.openFeed(t, "/events?names=web-1", "")
	f.next(t) // the snapshot
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedVerdictPut, Rev: 31, Name: "web-1", Verdict: checker.VantageVerdict{
		Member: "r3", Label: "zone-b", State: checker.StateUnhealthy, Error: "connection refused", Time: epoch, Rev: 31,
	}}}, 31)
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 32, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Time: epoch, Writer: "r2",
		Reason: "vantages: zone-a=healthy zone-b=unhealthy(connection refused) zone-c=unhealthy(no route to host)",
	}}}, 32)
	ev := f.waitFor(t, "web-1's transition", func(ev sseEvent) bool { return ev.name == "transition" })
	var tr struct {
		Target, To, Reason string
		vantageRow
	}
	ev.decode(t, &tr)
	if got := chips(tr.vantageRow); tr.Target != "web-1" || tr.To != "unhealthy" || got != "zone-a=healthy zone-b=unhealthy(connection refused) zone-c=unhealthy(no route to host)" {
		t.Errorf("transition %+v (vantages %q)", tr, got)
	}
}

// Each vantage that probes targets with others has its standing: zone-c
// disagrees on the three targets it is judged on and is suspect. The
// series pass promlint.
func TestVantageMetrics(t *testing.T) {
	e := newEnv(t, checker.Config{Shared: zoneFleet{}}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewCollector(e.c, false, e.obs))
	want := `
# HELP pulse_vantage_disagree_targets Targets the vantage says unhealthy (or suspect) while most of their other vantages say healthy.
# TYPE pulse_vantage_disagree_targets gauge
pulse_vantage_disagree_targets{replica="r2",vantage="zone-a"} 0
pulse_vantage_disagree_targets{replica="r3",vantage="zone-b"} 0
pulse_vantage_disagree_targets{replica="r4",vantage="zone-c"} 3
# HELP pulse_vantage_judged_targets Targets on which the vantage and another vantage both have a verdict: those it is judged on.
# TYPE pulse_vantage_judged_targets gauge
pulse_vantage_judged_targets{replica="r2",vantage="zone-a"} 3
pulse_vantage_judged_targets{replica="r3",vantage="zone-b"} 3
pulse_vantage_judged_targets{replica="r4",vantage="zone-c"} 3
# HELP pulse_vantage_suspect 1 while the vantage is suspect (it says unhealthy of targets the other vantages see healthy) and its verdicts are left out of every quorum, 0 if not; with -registry etcd, for the vantages that probe targets with others.
# TYPE pulse_vantage_suspect gauge
pulse_vantage_suspect{replica="r2",vantage="zone-a"} 0
pulse_vantage_suspect{replica="r3",vantage="zone-b"} 0
pulse_vantage_suspect{replica="r4",vantage="zone-c"} 1
`
	if got := gatherText(t, reg, "pulse_vantage_suspect", "pulse_vantage_disagree_targets", "pulse_vantage_judged_targets"); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("metrics:\n%s\nwant:\n%s", got, want)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

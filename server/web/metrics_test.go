package web_test

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
)

// fleet registers three targets of three kinds in two groups:
// web-1 (tcp, edge, answers in 250ms), web-2 (http, edge), db-1 (grpc, data,
// three_state). Rise and fall are 2.
func fleet(t *testing.T, e *env) {
	t.Helper()
	e.add(t, tcpSpec("web-1", "edge"))
	e.add(t, checker.Spec{Name: "web-2", Group: "edge", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://web-2/healthz"}}})
	e.add(t, checker.Spec{Name: "db-1", Group: "data", Model: checker.ModelThreeState, Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: "db-1:50051"}}})
	e.set("web-1:80", outcome{latency: 250 * time.Millisecond})
	e.set("http://web-2/healthz", outcome{})
	e.set("db-1:50051", outcome{})
}

// The metrics after two passing rounds and two rounds in which web-2 fails:
// every target rose (db-1 through suspect), then web-2 fell.
func TestMetricsAfterRounds(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.obs, web.NewCollector(e.c, true, e.obs))
	fleet(t, e)
	e.rounds(2)
	e.set("http://web-2/healthz", outcome{err: errors.New("status 503")})
	e.rounds(2)
	w, err := e.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	want := `
# HELP pulse_probes_total Probes that ran to completion, by probe kind (http, tcp, grpc, dns) and result (pass, fail).
# TYPE pulse_probes_total counter
pulse_probes_total{kind="grpc",result="fail"} 0
pulse_probes_total{kind="grpc",result="pass"} 4
pulse_probes_total{kind="http",result="fail"} 2
pulse_probes_total{kind="http",result="pass"} 2
pulse_probes_total{kind="tcp",result="fail"} 0
pulse_probes_total{kind="tcp",result="pass"} 4
# HELP pulse_target_last_latency_seconds How long the target's last probe took; absent before its first result.
# TYPE pulse_target_last_latency_seconds gauge
pulse_target_last_latency_seconds{group="data",target="db-1"} 0
pulse_target_last_latency_seconds{group="edge",target="web-1"} 0.25
pulse_target_last_latency_seconds{group="edge",target="web-2"} 0
# HELP pulse_target_up 1 if the target is routable (healthy, or suspect in the three_state model), 0 if not.
# TYPE pulse_target_up gauge
pulse_target_up{group="data",target="db-1"} 1
pulse_target_up{group="edge",target="web-1"} 1
pulse_target_up{group="edge",target="web-2"} 0
# HELP pulse_targets Registered targets by group and state.
# TYPE pulse_targets gauge
pulse_targets{group="data",state="healthy"} 1
pulse_targets{group="data",state="suspect"} 0
pulse_targets{group="data",state="unhealthy"} 0
pulse_targets{group="edge",state="healthy"} 1
pulse_targets{group="edge",state="suspect"} 0
pulse_targets{group="edge",state="unhealthy"} 1
# HELP pulse_transitions_total Target state transitions, by group and the states before and after.
# TYPE pulse_transitions_total counter
pulse_transitions_total{from="healthy",group="edge",to="unhealthy"} 1
pulse_transitions_total{from="suspect",group="data",to="healthy"} 1
pulse_transitions_total{from="unhealthy",group="data",to="suspect"} 1
pulse_transitions_total{from="unhealthy",group="edge",to="healthy"} 2
# HELP pulse_watchers Live event-stream subscribers: WatchTransitions streams and status-page event feeds.
# TYPE pulse_watchers gauge
pulse_watchers 1
`
	got := gatherText(t, reg, "pulse_probes_total", "pulse_transitions_total", "pulse_target_up",
		"pulse_target_last_latency_seconds", "pulse_targets", "pulse_watchers")
	if diff := cmp.Diff(strings.TrimPrefix(want, "\n"), got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	// web-1's four probes took 250ms each, in the 250ms bucket.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pulse_probe_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m.GetLabel()) != "kind=tcp,result=pass" {
				continue
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != 4 || h.GetSampleSum() != 1 {
				t.Errorf("tcp pass durations: count %d sum %v, want 4 and 1", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}

func TestMetricsWithoutPerTargetSeries(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.obs, web.NewCollector(e.c, false, e.obs))
	fleet(t, e)
	e.rounds(2)
	if got := gatherText(t, reg, "pulse_target_up", "pulse_target_last_latency_seconds", "pulse_target_mode"); got != "" {
		t.Errorf("per-target series with perTarget false:\n%s", got)
	}
	if n := strings.Count(gatherText(t, reg, "pulse_targets"), "pulse_targets{"); n != 6 {
		t.Errorf("%d pulse_targets series, want 6 (2 groups x 3 states)", n)
	}
	// The group panic and checker degraded flags are there.
	flags := gatherText(t, reg, "pulse_group_panic", "pulse_checker_degraded", "pulse_schedule_tick_seconds")
	if !regexp.MustCompile(`(?m)^pulse_checker_degraded [01]$`).MatchString(flags) ||
		!regexp.MustCompile(`(?m)^pulse_schedule_tick_seconds 0$`).MatchString(flags) || // no ScheduleTick: no batching
		!regexp.MustCompile(`(?m)^pulse_group_panic\{group="edge"\} [01]$`).MatchString(flags) {
		t.Errorf("no panic or degraded flag or schedule tick in\n%s", flags)
	}
}

// pulse_target_mode has a series for each target out of traffic, 1 with
// its mode, and none for an active target; it follows SetMode. It tells a
// draining or maintained target from a dead one, which pulse_target_up
// cannot.
func TestTargetModeMetric(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewCollector(e.c, true, e.obs))
	fleet(t, e)
	e.rounds(2)
	for _, r := range []checker.ModeRequest{
		{Target: "web-1", Mode: checker.ModeDraining},
		{Target: "db-1", Mode: checker.ModeMaintenance},
	} {
		if _, err := e.c.SetMode(r); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP pulse_target_mode 1 for a target an operator took out of traffic, labelled with its mode: draining or maintenance; absent for a target in mode active, routed by its health.
# TYPE pulse_target_mode gauge
pulse_target_mode{group="data",mode="maintenance",target="db-1"} 1
pulse_target_mode{group="edge",mode="draining",target="web-1"} 1
`
	if diff := cmp.Diff(strings.TrimPrefix(want, "\n"), gatherText(t, reg, "pulse_target_mode")); diff != "" {
		t.Errorf("pulse_target_mode (-want +got):\n%s", diff)
	}
	// Both down, told apart by their mode: web-1 drains, web-2 is dead.
	e.set("http://web-2/healthz", outcome{err: errors.New("status 503")})
	e.rounds(2)
	up := gatherText(t, reg, "pulse_target_up")
	for _, s := range []string{`pulse_target_up{group="edge",target="web-1"} 0`, `pulse_target_up{group="edge",target="web-2"} 0`} {
		if !strings.Contains(up, s) {
			t.Errorf("pulse_target_up lacks %s:\n%s", s, up)
		}
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeActive}); err != nil {
		t.Fatal(err)
	}
	if got := gatherText(t, reg, "pulse_target_mode"); strings.Contains(got, "web-1") || !strings.Contains(got, `target="db-1"} 1`) {
		t.Errorf("after web-1 went back to active, pulse_target_mode is:\n%s", got)
	}
}

// The whole /metrics output pulsed serves (pulse_, gRPC server, Go and
// process metrics) passes client_golang's promlint, the checks of
// `promtool check metrics`.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, checker.Config{}, web.Config{Gatherer: reg})
	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	gs, _ := server.NewGRPCServer(server.New(e.c), server.Options{
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{grpcMetrics.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{grpcMetrics.StreamServerInterceptor()},
	})
	defer gs.Stop()
	grpcMetrics.InitializeMetrics(gs)
	reg.MustRegister(e.obs, web.NewCollector(e.c, true, e.obs), grpcMetrics,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fleet(t, e)
	e.rounds(2)

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

	// /metrics serves the same registry, gRPC series included.
	code, body := get(t, e.srv.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, s := range []string{
		`pulse_target_up{group="edge",target="web-1"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="AddTarget",grpc_service="pulse.v1.HealthChecker",grpc_type="unary"} 0`,
		"grpc_server_handling_seconds_bucket",
		"go_goroutines",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

// labels renders label pairs as "name=value,...".
func labels(ls []*dto.LabelPair) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.GetName() + "=" + l.GetValue()
	}
	return strings.Join(parts, ",")
}

// gatherText returns the named metric families of g in the text format,
// in name order.
func gatherText(t *testing.T, g prometheus.Gatherer, names ...string) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// Each group's held and flapping targets are counted.
func TestHeldAndFlappingMetrics(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewCollector(e.c, false, e.obs))
	policyFleet(t, e)
	want := `
# HELP pulse_group_flapping_targets Targets of the group flap damping holds unhealthy.
# TYPE pulse_group_flapping_targets gauge
pulse_group_flapping_targets{group="edge"} 0
pulse_group_flapping_targets{group="other"} 1
# HELP pulse_group_held_targets Targets of the group its panic threshold holds routable though their results say unhealthy.
# TYPE pulse_group_held_targets gauge
pulse_group_held_targets{group="edge"} 1
pulse_group_held_targets{group="other"} 0
`
	if got := gatherText(t, reg, "pulse_group_held_targets", "pulse_group_flapping_targets"); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("metrics:\n%s\nwant:\n%s", got, want)
	}
}

// Probes of every kind, and of a spec of none, counted from many
// goroutines at once, are each counted once under their own kind and
// result.
func TestObserverCountsProbesByKind(t *testing.T) {
	o := web.NewObserver(web.ObserverOptions{RecentResults: -1})
	specs := []probe.Spec{
		{HTTP: &probe.HTTPSpec{URL: "http://a/"}}, {TCP: &probe.TCPSpec{Address: "a:1"}},
		{GRPC: &probe.GRPCSpec{Address: "a:1"}}, {DNS: &probe.DNSSpec{Name: "a."}}, {},
	}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				for _, sp := range specs {
					o.ObserveProbe(checker.Spec{Name: "t", Probe: sp}, checker.Result{Pass: (i+w)%2 == 0, Latency: time.Millisecond})
				}
			}
		})
	}
	wg.Wait()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(o)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "pulse_probes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kind, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "kind":
					kind = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			got[kind+"/"+result] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	for _, k := range []string{"http", "tcp", "grpc", "dns", ""} {
		want[k+"/pass"], want[k+"/fail"] = workers*each/2, workers*each/2
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pulse_probes_total (-want +got):\n%s", diff)
	}
}

package deploy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/server/web"
)

const alertRules = "prometheus/alerts.yaml"

// The shipped alert rules pass `promtool check rules`, and their unit tests
// (prometheus/alerts_test.yaml) pass `promtool test rules`: each alert fires
// after its for: duration, with the labels and annotations it should have,
// and stays quiet where it should, a draining or maintained target above
// all. promtool is Prometheus's own, as operators run it (Debian's
// prometheus package; .ci/run installs it).
func TestPrometheusRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus): the alert rules are not checked")
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(alertRules)},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = filepath.Dir(alertRules)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every metric the shipped rules use is one pulsed exports, so no rule
// waits on a series that never comes. What pulsed exports is read from
// pulsed itself: the Descs of server/web's Collector and Observer (every
// family, even those only some fleets have, such as the vantages' and the
// certificates'), and the families a running pulsed serves on /metrics
// (those registered in cmd/pulsed, such as pulse_stalled, and discovery's).
func TestPrometheusRulesUseExportedMetrics(t *testing.T) {
	used := ruleMetrics(t, alertRules)
	if len(used) == 0 {
		t.Fatalf("%s: no metric found in its rules", alertRules)
	}
	exported := describedMetrics(t)
	for _, name := range scrapedMetrics(t) {
		exported[name] = true
	}
	for _, name := range used {
		if !exported[name] {
			t.Errorf("%s uses %s, which pulsed does not export", alertRules, name)
		}
	}
}

// ruleMetrics returns the metric names the rules of file select, sorted,
// after checking the file as Prometheus loads it.
func ruleMetrics(t *testing.T, file string) []string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.FailNow()
	}
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, r.Alert, err)
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					if vs.Name == "" {
						t.Errorf("%s: %s: selector %s names no metric", file, r.Alert, vs)
					}
					names = append(names, vs.Name)
				}
				return nil
			})
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// descName is the metric name in a Desc's String, which is the only way
// client_golang gives it.
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// describedMetrics returns the names of the metric families server/web's
// Collector (with per-target series) and Observer describe.
func describedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	c, err := checker.New(checker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch := make(chan *prometheus.Desc)
	go func() {
		web.NewCollector(c, true, nil).Describe(ch)
		web.NewObserver(web.ObserverOptions{}).Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no metric name in %s", d)
		}
		names[m[1]] = true
	}
	if !names["pulse_target_up"] {
		t.Fatalf("the Collector describes no pulse_target_up: %v", names)
	}
	return names
}

// scrapedMetrics starts pulsed with a discovery group, so that discovery's
// families are registered, and returns the families its /metrics serves.
func scrapedMetrics(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{
		"api.json": "[]\n",
		"discovery.yaml": "groups:\n  - name: api\n    file_sd_configs:\n      - files: [api.json]\n" +
			"    template:\n      http: {url: /healthz}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, httpAddr := startPulsed(ctx, t, buildPulsed(t), "-discovery-config", filepath.Join(dir, "discovery.yaml"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, body)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(string(body), -1) {
		names = append(names, m[1])
	}
	if !slices.Contains(names, "pulse_stalled") || !slices.Contains(names, "pulse_discovery_source_up") {
		t.Fatalf("pulsed's /metrics lacks pulse_stalled or pulse_discovery_source_up:\n%s", body)
	}
	return names
}

// startPulsed starts bin on loopback ports with a temporary -data-dir and
// args, kills it when the test ends, and returns it and the address of its
// HTTP server (/metrics).
func startPulsed(ctx context.Context, t *testing.T, bin string, args ...string) (*pulsedproc.Process, string) {
	t.Helper()
	p, err := pulsedproc.Start(ctx, bin, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0",
		"-data-dir", filepath.Join(t.TempDir(), "data")}, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	// pulsed logs its HTTP address before its gRPC one, which Start waits for.
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("pulsed did not log its HTTP address:\n%s", p.Logs())
	}
	return p, m[1]
}

package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/pulsehealth/pulse/client"
)

// The shipped alert rules work in a real Prometheus (Debian's prometheus
// package; .ci/run installs it) scraping a real pulsed: Prometheus loads
// alerts.yaml as it is, every rule evaluates against pulsed's series with
// health ok and no error, and PulseTargetDown is pending for an active
// target whose probes fail, and neither pending nor firing for a draining
// or a maintained target, whose pulse_target_up is 0 too, nor for a
// healthy one. The alert's for: is minutes, so pending is as far as a
// short test sees it go; that is enough to show its expression matches.
func TestPrometheusAlertsAgainstPulsed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pulsed and Prometheus")
	}
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus): the alert rules are not run against pulsed")
	}
	bin := buildPulsed(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()

	// -max-unhealthy-fraction 1: three of four targets not routable would
	// put the group in panic at the default 0.5, holding the failed one
	// routable.
	p, httpAddr := startPulsed(ctx, t, bin, "-max-unhealthy-fraction", "1")
	c, err := client.New(ctx, []string{p.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The draining and maintained targets probe the failing backend, as a
	// backend under planned work does: only their mode keeps them quiet.
	backends := map[string]string{"failed": failing.URL, "drained": failing.URL, "maintained": failing.URL, "healthy": ok.URL}
	for name, u := range backends {
		_, _, err := c.Add(ctx, client.Target{Name: name, Group: "api", HTTP: &client.HTTPProbe{URL: u},
			Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 1,
			InitialState: client.StateHealthy})
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]client.Mode{"drained": client.ModeDraining, "maintained": client.ModeMaintenance} {
		if _, err := c.SetMode(ctx, client.ModeRequest{Target: name, Mode: mode, Reason: "planned"}); err != nil {
			t.Fatal(err)
		}
	}
	// Prometheus starts once the failed target is down by a probe, so that
	// every scrape it makes sees the states the assertions expect.
	poll(t, 10*time.Second, "the failed target marked down", func() error {
		st, err := c.State(ctx, "failed")
		if err != nil {
			return err
		}
		if st.Routable || st.LastResult == nil {
			return fmt.Errorf("routable %v, last result %v", st.Routable, st.LastResult)
		}
		return nil
	})

	api := startPrometheus(ctx, t, prom, httpAddr)

	poll(t, 30*time.Second, "PulseTargetDown pending for the failed target", func() error {
		var alerts struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		if err := api.get(ctx, "/api/v1/alerts", &alerts); err != nil {
			return err
		}
		var down []string
		for _, a := range alerts.Alerts {
			if a.Labels["alertname"] == "PulseTargetDown" {
				down = append(down, a.Labels["target"]+" "+a.State)
			}
		}
		slices.Sort(down)
		if !slices.Contains(down, "failed pending") {
			return fmt.Errorf("PulseTargetDown for %q", down)
		}
		// All targets' series come in one scrape and are judged in one
		// evaluation: none other was pending then, none other is.
		if len(down) != 1 {
			t.Fatalf("PulseTargetDown for %q, want for the failed target only", down)
		}
		return nil
	})

	// The quiet targets are quiet by the mode join, not for lack of
	// series: Prometheus has their pulse_target_up of 0.
	var up struct {
		Result []struct {
			Metric map[string]string
			Value  [2]any // time, value
		}
	}
	if err := api.get(ctx, "/api/v1/query?query="+url.QueryEscape(`pulse_target_up{group="api"}`), &up); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range up.Result {
		got[s.Metric["target"]] = fmt.Sprint(s.Value[1])
	}
	if want := map[string]string{"failed": "0", "drained": "0", "maintained": "0", "healthy": "1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pulse_target_up in Prometheus: %v, want %v", got, want)
	}

	// Every rule of the file is loaded, in its group, and evaluated
	// without error against pulsed's series.
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Name, Health, LastError string
			}
		}
	}
	if err := api.get(ctx, "/api/v1/rules", &rules); err != nil {
		t.Fatal(err)
	}
	loaded := map[string][]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			loaded[g.Name] = append(loaded[g.Name], r.Name)
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s of group %s: health %q, error %q", r.Name, g.Name, r.Health, r.LastError)
			}
		}
	}
	if want := ruleNames(t, alertRules); fmt.Sprint(loaded) != fmt.Sprint(want) {
		t.Errorf("Prometheus loaded the rules %v, want %v", loaded, want)
	}
}

// ruleNames returns the alert names of file's rules by group, in order.
func ruleNames(t *testing.T, file string) map[string][]string {
	t.Helper()
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", file, errs)
	}
	names := map[string][]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names[g.Name] = append(names[g.Name], r.Alert)
		}
	}
	return names
}

// promAPI is the HTTP API of a Prometheus server.
type promAPI struct {
	base string
	done <-chan struct{} // closed once the server has exited
	logs string          // the file its output goes to
}

// startPrometheus runs the prometheus binary bin on a loopback port, with
// storage in a temporary directory and a config that loads the shipped
// alert rules as they are, scrapes the pulsed at scrape and evaluates the
// rules every second. It stops it when the test ends.
func startPrometheus(ctx context.Context, t *testing.T, bin, scrape string) *promAPI {
	t.Helper()
	rules, err := filepath.Abs(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: pulsed
    static_configs:
      - targets: [%q]
`, rules, scrape), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	// Port 0: Prometheus logs the port it was given ("Listening on").
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	api := &promAPI{done: done, logs: logs.Name()}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			out, _ := os.ReadFile(api.logs)
			t.Logf("prometheus's output:\n%s", out)
		}
	})
	listening := regexp.MustCompile(`msg="Listening on" address=(\S+)`)
	poll(t, 20*time.Second, "prometheus listening", func() error {
		select {
		case <-done:
			t.Fatalf("prometheus exited: %v", cmd.ProcessState)
		default:
		}
		out, err := os.ReadFile(api.logs)
		if err != nil {
			return err
		}
		m := listening.FindSubmatch(out)
		if m == nil {
			return errors.New(`no "Listening on" line in its log yet`)
		}
		api.base = "http://" + string(m[1])
		return nil
	})
	poll(t, 20*time.Second, "prometheus ready", func() error {
		select {
		case <-done:
			t.Fatalf("prometheus exited: %v", cmd.ProcessState)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.base+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	return api
}

// get GETs path of the API and decodes the data of its answer into data.
func (a *promAPI) get(ctx context.Context, path string, data any) error {
	select {
	case <-a.done:
		return errors.New("prometheus exited")
	default:
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string
		Error  string
		Data   json.RawMessage
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("GET %s: %s %v: %s", path, resp.Status, err, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(env.Data, data)
}

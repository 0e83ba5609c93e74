package discovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/pulsehealth/pulse/checker"
)

func mustGroup(t *testing.T, yaml string) *Group {
	t.Helper()
	cfg, err := ParseConfig([]byte(yaml), "./")
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Groups[0]
}

func TestTargets(t *testing.T) {
	g := mustGroup(t, `
groups:
  - name: api
    file_sd_configs: [{files: [x.json]}]
    relabel_configs:
      - source_labels: [env]
        regex: canary
        action: drop
      - source_labels: [host]
        target_label: __pulse_name__
    template: {http: {url: /healthz}, rise: 1}
`)
	tgs := []*targetgroup.Group{{
		Source: "x.json:0",
		Labels: model.LabelSet{"env": "prod"},
		Targets: []model.LabelSet{
			{model.AddressLabel: "127.0.0.1:8080"},
			{model.AddressLabel: "127.0.0.2:8080", "host": "b"},
			{model.AddressLabel: "127.0.0.3:8080", "env": "canary"},
			{model.AddressLabel: "[::1]:8080", model.SchemeLabel: "https"},
			{model.AddressLabel: "no-port"},
		},
	}}
	specs, skipped, err := g.Targets(tgs, checker.StandardDefaults())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range specs {
		got[s.Name] = s.Probe.HTTP.URL
		if s.Source != "discovery:api" || s.Rise != 1 {
			t.Errorf("%s: source %q rise %d", s.Name, s.Source, s.Rise)
		}
	}
	want := map[string]string{
		"api-127.0.0.1:8080": "http://127.0.0.1:8080/healthz",
		"api-b":              "http://127.0.0.2:8080/healthz",
		"api-::1:8080":       "https://[::1]:8080/healthz",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), `"no-port"`) {
		t.Errorf("skipped %v, want the address without a port", skipped)
	}
}

func TestTargetsDuplicateNames(t *testing.T) {
	g := mustGroup(t, "groups:\n  - name: a\n    file_sd_configs: [{files: [x.json]}]\n    relabel_configs: [{target_label: __pulse_name__, replacement: same}]\n    template: {tcp: {}}\n")
	specs, skipped, err := g.Targets([]*targetgroup.Group{{Targets: []model.LabelSet{{model.AddressLabel: "127.0.0.1:1"}, {model.AddressLabel: "127.0.0.1:2"}}}}, checker.StandardDefaults())
	if err != nil || len(specs) != 1 || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "__pulse_name__") {
		t.Fatalf("specs %v skipped %v err %v", specs, skipped, err)
	}
}

func TestTargetsOverMaximumRefusedWhole(t *testing.T) {
	g := mustGroup(t, "groups:\n  - name: a\n    file_sd_configs: [{files: [x.json]}]\n    template: {tcp: {}}\n")
	tg := &targetgroup.Group{}
	for i := range MaxTargetsPerGroup + 1 {
		tg.Targets = append(tg.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(fmt.Sprintf("127.0.%d.%d:80", i/250, i%250+1))})
	}
	specs, _, err := g.Targets([]*targetgroup.Group{tg}, checker.StandardDefaults())
	if err == nil || specs != nil || !strings.Contains(err.Error(), fmt.Sprintf("maximum of %d", MaxTargetsPerGroup)) {
		t.Fatalf("specs %d err %v", len(specs), err)
	}
	tg.Targets = tg.Targets[:MaxTargetsPerGroup]
	if specs, _, err := g.Targets([]*targetgroup.Group{tg}, checker.StandardDefaults()); err != nil || len(specs) != MaxTargetsPerGroup {
		t.Fatalf("at the maximum: %d specs, err %v", len(specs), err)
	}
}

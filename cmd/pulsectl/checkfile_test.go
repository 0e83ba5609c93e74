package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker/oneshot"
	"github.com/pulsehealth/pulse/checker/probe"
)

func TestLoadTargets(t *testing.T) {
	web := func(url string, status int) probe.Spec {
		return probe.Spec{HTTP: &probe.HTTPSpec{URL: url, ExpectedStatus: []int{status}}}
	}
	apiAndOld := []oneshot.Target{
		{Name: "api", Probe: web("https://api.internal/healthz", 200), Timeout: 2 * time.Second, Critical: true},
		{Name: "old", Probe: web("https://old.internal/healthz", 204), Timeout: 1500 * time.Millisecond, Critical: false},
	}
	tests := []struct {
		name, file, content string
		want                []oneshot.Target
	}{
		{"json list", "t.json", `[
			{"name": "api", "url": "https://api.internal/healthz", "expected_status": 200, "timeout_s": 2.0, "critical": true},
			{"name": "old", "url": "https://old.internal/healthz", "expected_status": 204, "timeout_s": 1.5, "critical": false}
		]`, apiAndOld},
		{"json object, sniffed", "targets", `{"targets": [
			{"name": "api", "url": "https://api.internal/healthz"},
			{"name": "old", "url": "https://old.internal/healthz", "expected_status": 204, "timeout": "1500ms", "critical": false}
		]}`, apiAndOld},
		{"yaml list", "t.yml", `
- name: api
  url: https://api.internal/healthz
- name: old
  kind: http
  url: https://old.internal/healthz
  expected_status: 204
  timeout_s: 1.5
  critical: false
`, apiAndOld},
		{"yaml object, other kinds", "t.yaml", `
targets:
  - name: db
    kind: tcp
    address: 10.0.0.5:5432
    timeout: 500ms
  - name: orders
    kind: GRPC
    address: 10.0.0.7:50051
    service: orders.v1.Orders
    tls: true
  - name: vhost
    url: http://10.0.0.6/
    headers: {Host: web.internal}
`, []oneshot.Target{
			{Name: "db", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "10.0.0.5:5432"}}, Timeout: 500 * time.Millisecond, Critical: true},
			{Name: "orders", Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: "10.0.0.7:50051", Service: "orders.v1.Orders", TLS: true}}, Timeout: 2 * time.Second, Critical: true},
			{Name: "vhost", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://10.0.0.6/", ExpectedStatus: []int{200}, Headers: map[string]string{"Host": "web.internal"}}}, Timeout: 2 * time.Second, Critical: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadTargets(writeFile(t, tt.file, tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadTargetsErrors(t *testing.T) {
	tests := []struct {
		name, file, content, want string
	}{
		{"empty", "t.yaml", "", "no targets"},
		{"empty list", "t.json", "[]", "no targets"},
		{"bad json", "t.json", "[\n{\"name\": }]", "line 2"},
		{"bad yaml", "t.yaml", "- name: [", "line 1: did not find expected node content"},
		{"unknown field json", "t.json", `[{"name": "a", "url": "http://x/"}, {"name": "b", "url": "http://x/", "expect_status": 200}]`,
			`target 2 (b): unknown field "expect_status"; a target's fields are name, kind,`},
		{"unknown field yaml", "t.yaml", "- name: a\n  url: http://x/\n- name: b\n  url: http://x/\n  expect_status: 200\n",
			`target 2 (b), line 5: unknown field "expect_status"; a target's fields are name, kind,`},
		// Wrong types: the target, the field and what it takes, in words.
		{"json type", "t.json", `[{"name": "a", "url": "http://x/", "critical": "yes"}]`, "target 1 (a): critical: want true or false, got a string"},
		{"json status type", "t.json", `{"targets": [{"name": "a", "url": "http://x/"}, {"name": "b", "url": "http://x/", "expected_status": 2.5}]}`,
			"target 2 (b): expected_status: want a whole number, got the number 2.5"},
		{"json header type", "t.json", `[{"name": "a", "url": "http://x/", "headers": {"X": 1}}]`, "target 1 (a): headers: want a string as each header's value, got a number"},
		{"json not a target", "t.json", `[{"name": "a", "url": "http://x/"}, 7]`, "target 2: want an object with name and url (or kind and address), got a number"},
		{"json targets not a list", "t.json", `{"targets": "a"}`, "targets: want a list of targets, got a string"},
		{"json unknown top level", "t.json", `{"target": []}`, `unknown field "target" at the top level: it takes only targets`},
		{"yaml type", "t.yaml", "- name: a\n  url: http://x/\n- name: b\n  url: http://x/\n  critical: maybe\n",
			"target 2 (b), line 5: critical: want true or false, got a string (maybe)"},
		{"yaml list type", "t.yaml", "targets:\n  - name: a\n    url: http://x/\n    headers: [a, b]\n", "target 1 (a), line 4: headers: want a map of names to strings, got a list"},
		{"yaml targets not a list", "t.yaml", "targets: web\n", "line 1: want a list of targets, got a string (web)"},
		{"no name", "t.yaml", "- url: http://x/\n", "target 1: name is required"},
		{"duplicate", "t.yaml", "- {name: a, url: 'http://x/'}\n- {name: a, url: 'http://y/'}\n", `target 2 (a): name "a" is already used by target 1`},
		{"no probe", "t.yaml", "- name: a\n", "set url (an http target), or address with kind tcp or grpc"},
		{"address without kind", "t.yaml", "- {name: a, address: 'x:1'}\n", "set url"},
		{"unknown kind", "t.yaml", "- {name: a, kind: icmp, address: 'x:1'}\n", `kind must be http, tcp or grpc, got "icmp"`},
		{"url on tcp", "t.yaml", "- {name: a, kind: tcp, url: 'http://x/', address: 'x:1'}\n", "url applies to kind http only"},
		{"status on tcp", "t.yaml", "- {name: a, kind: tcp, address: 'x:1', expected_status: 200}\n", "expected_status applies to kind http only"},
		{"service on http", "t.yaml", "- {name: a, url: 'http://x/', service: s}\n", "service applies to kind grpc only"},
		{"address on http", "t.yaml", "- {name: a, url: 'http://x/', address: 'x:1'}\n", "an http target takes url, not address"},
		{"bad url", "t.yaml", "- {name: a, url: 'ftp://x/'}\n", `target 1 (a): url: unknown scheme "ftp"`},
		{"bad address", "t.yaml", "- {name: a, kind: tcp, address: 'x'}\n", "address: must be host:port"},
		{"bad status", "t.yaml", "- {name: a, url: 'http://x/', expected_status: 999}\n", "expected_status: each code must be between 100 and 599"},
		{"both timeouts", "t.yaml", "- {name: a, url: 'http://x/', timeout: 1s, timeout_s: 1}\n", "not both"},
		{"bad timeout", "t.yaml", "- {name: a, url: 'http://x/', timeout: 2}\n", "timeout must be a positive duration"},
		{"negative timeout_s", "t.yaml", "- {name: a, url: 'http://x/', timeout_s: -1}\n", "timeout_s must be a positive number"},
		{"trailing json", "t.json", `[{"name": "a", "url": "http://x/"}] []`, "unexpected data"},
		// Past the bounds: the field as the file spells it, and the bound.
		{"timeout too long", "t.yaml", "- {name: a, url: 'http://x/', timeout: 1h0m0.001s}\n", "target 1 (a): timeout must be at most 1h0m0s, got 1h0m0.001s"},
		{"timeout_s too long", "t.yaml", "- {name: a, url: 'http://x/', timeout_s: 3600.5}\n", "target 1 (a): timeout_s must be a positive number of seconds, at most 3600 (1h0m0s), got 3600.5"},
		{"timeout_s huge", "t.json", `[{"name": "a", "url": "http://x/", "timeout_s": 1e300}]`, "at most 3600 (1h0m0s), got 1e+300"},
		{"url too long", "t.yaml", "- {name: a, url: 'http://x/" + strings.Repeat("a", 2040) + "'}\n", "target 1 (a): url: must be at most 2048 bytes, got 2049"},
		{"too many headers", "t.yaml", "- name: a\n  url: http://x/\n  headers: {" + manyHeaders(33) + "}\n", "target 1 (a): headers: must be at most 32 headers, got 33"},
		{"service too long", "t.yaml", "- {name: a, kind: grpc, address: 'x:1', service: " + strings.Repeat("s", 1025) + "}\n", "target 1 (a): service: must be at most 1024 bytes, got 1025"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file, tt.content)
			_, err := loadTargets(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("loadTargets = %v, want an error starting with the path and containing %q", err, tt.want)
			}
		})
	}
	if _, err := loadTargets(filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

// manyHeaders returns n YAML flow-mapping entries "X-Hi: v".
func manyHeaders(n int) string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("X-H%d: v", i)
	}
	return strings.Join(h, ", ")
}

// A timeout at its bound is accepted in either spelling.
func TestLoadTargetsAtTheBounds(t *testing.T) {
	path := writeFile(t, "t.yaml", "- {name: a, url: 'http://x/', timeout: 1h}\n- {name: b, url: 'http://x/', timeout_s: 3600}\n- name: c\n  url: http://x/\n  headers: {"+manyHeaders(32)+"}\n")
	got, err := loadTargets(path)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Timeout != oneshot.MaxTimeout || got[1].Timeout != oneshot.MaxTimeout || len(got[2].Probe.HTTP.Headers) != 32 {
		t.Errorf("timeouts %v and %v, %d headers; want %v, %v, 32", got[0].Timeout, got[1].Timeout, len(got[2].Probe.HTTP.Headers), oneshot.MaxTimeout, oneshot.MaxTimeout)
	}
}

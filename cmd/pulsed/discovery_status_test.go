package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestDiscoveryFailureSaysSo runs a real pulsed on a real HTTP SD
// endpoint on loopback that fails (HTTP 500, then a redirect to an
// address -deny-targets refuses, quoting the request's credentials) and
// recovers: the targets stay through the failure, ListDiscovery says it
// fails and since when, the stream gets one DISCOVERY_FAILED and one
// DISCOVERY_RECOVERED, the denied address is never asked, and the
// source's secret appears nowhere: not in the log, ListDiscovery or the
// events.
func TestDiscoveryFailureSaysSo(t *testing.T) {
	const secret = "sd-cred-4be1d07a"
	var deniedHits atomic.Int64
	deniedLis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	denied := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { deniedHits.Add(1) }))
	denied.Listener.Close()
	denied.Listener = deniedLis
	denied.Start()
	defer denied.Close()

	var mode atomic.Value
	mode.Store("ok")
	var failedAsks atomic.Int64
	sd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "500":
			failedAsks.Add(1)
			w.WriteHeader(500)
		case "redirect":
			failedAsks.Add(1)
			w.Header().Set("Location", denied.URL+"/?auth="+strings.ReplaceAll(r.Header.Get("Authorization"), " ", "+"))
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[{"targets": ["127.0.0.1:9"]}]`)
		}
	}))
	defer sd.Close()

	cfgPath := filepath.Join(t.TempDir(), "discovery.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`groups:
  - name: api
    http_sd_configs:
      - url: %s/sd
        refresh_interval: 100ms
        authorization: {credentials: %s}
    template: {tcp: {}, interval: 1s}
`, sd.URL, secret))
	p := startPulsed(t, buildPulsed(t), "-discovery-config", cfgPath, "-deny-targets", "127.0.0.2/32")
	client := dial(t, p.Addr)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []*pb.PolicyEvent
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			if pe := resp.GetPolicy(); pe != nil {
				mu.Lock()
				events = append(events, pe)
				mu.Unlock()
			}
		}
	}()
	kinds := func() string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, e := range events {
			out = append(out, e.GetKind().String())
		}
		return strings.Join(out, " ")
	}
	source := func() *pb.DiscoverySource {
		resp, err := client.ListDiscovery(t.Context(), &pb.ListDiscoveryRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetGroups()) != 1 || len(resp.GetGroups()[0].GetSources()) != 1 {
			t.Fatalf("ListDiscovery: %v", resp)
		}
		return resp.GetGroups()[0].GetSources()[0]
	}
	targets := func() string {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range list.GetTargets() {
			out = append(out, st.GetSpec().GetName()+" "+st.GetSource())
		}
		return strings.Join(out, ", ")
	}
	eventually(t, "the first answer", func() bool {
		s := source()
		return s.GetTargets() == 1 && s.GetLastRefresh() != nil && s.GetLastError() == "" && targets() == "api-127.0.0.1:9 discovery:api"
	})
	if s := source(); s.GetName() != "http_sd 0" || s.GetDetail() != "url "+sd.URL+"/sd" {
		t.Errorf("source %v", s)
	}

	mode.Store("500")
	eventually(t, "DISCOVERY_FAILED", func() bool { return kinds() == "KIND_DISCOVERY_FAILED" })
	mu.Lock()
	ev := events[0]
	mu.Unlock()
	if ev.GetSource() != "discovery:api" || ev.GetSdConfig() != "http_sd 0" || !strings.Contains(ev.GetError(), "500") {
		t.Errorf("event %v", ev)
	}
	mode.Store("redirect")
	eventually(t, "the redirect refused", func() bool { return strings.Contains(source().GetLastError(), "denied by egress policy") })
	n := failedAsks.Load()
	eventually(t, "three more failed refreshes", func() bool { return failedAsks.Load() >= n+3 })
	s := source()
	if s.GetErrorSince() == nil || targets() != "api-127.0.0.1:9 discovery:api" {
		t.Errorf("while failing: source %v, targets %q (want the last good set)", s, targets())
	}
	if got := kinds(); got != "KIND_DISCOVERY_FAILED" {
		t.Errorf("events %q while failing, want one DISCOVERY_FAILED", got)
	}
	if deniedHits.Load() != 0 {
		t.Error("the address -deny-targets refuses was asked")
	}

	mode.Store("ok")
	eventually(t, "DISCOVERY_RECOVERED", func() bool { return kinds() == "KIND_DISCOVERY_FAILED KIND_DISCOVERY_RECOVERED" })
	eventually(t, "the source's error cleared", func() bool { return source().GetLastError() == "" && source().GetErrorSince() == nil })

	resp, err := client.ListDiscovery(t.Context(), &pb.ListDiscoveryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var shown strings.Builder
	for _, e := range events {
		shown.WriteString(protojson.Format(e))
	}
	mu.Unlock()
	shown.WriteString(protojson.Format(resp))
	p.stop(t)
	shown.WriteString(p.Logs())
	if !strings.Contains(shown.String(), "denied by egress policy") {
		t.Errorf("the log does not tell the refused redirect:\n%s", p.Logs())
	}
	if strings.Contains(shown.String(), secret) {
		t.Errorf("the secret is shown:\n%s", shown.String())
	}
}

// TestDiscoveryDeniedSDURL: an http_sd URL at an address -deny-targets
// refuses is a configuration error naming the field; pulsed does not
// start.
func TestDiscoveryDeniedSDURL(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "discovery.yaml")
	writeFile(t, cfgPath, "groups:\n  - name: api\n    http_sd_configs: [{url: 'http://127.0.0.2:8080/sd'}]\n    template: {tcp: {}}\n")
	out, err := exec.CommandContext(t.Context(), buildPulsed(t), "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-data-dir", "", "-deny-targets", "127.0.0.2/32", "-discovery-config", cfgPath).CombinedOutput()
	if err == nil {
		t.Fatalf("pulsed started:\n%s", out)
	}
	if !strings.Contains(string(out), `http_sd_configs[0].url`) || !strings.Contains(string(out), "denied by egress policy") {
		t.Errorf("output does not name the field and the policy:\n%s", out)
	}
}

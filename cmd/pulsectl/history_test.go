package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestHistory(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	quiet(t, p.Addr,
		[]string{"--name", "web-1", "--group", "edge", "--http", web.URL + "/healthz", "--rise", "1"},
		[]string{"--name", "db", "--group", "edge", "--tcp", closedAddr(t), "--rise", "1", "--fall", "1"},
	)
	for range 3 {
		mustRun(t, "probe", addr)
	}
	// The history records a result just after the round sees it.
	eventually(t, "the group's 6 probes recorded", func() bool {
		var h struct{ Probes string }
		r := pulsectl(t, "history", addr, "--group", "edge", "-o", "json")
		return r.code == exitOK && json.Unmarshal([]byte(r.stdout), &h) == nil && h.Probes == "6"
	})
	out := mustRun(t, "history", addr, "web-1", "--window", "1h")
	for _, want := range []string{"web-1 (group edge), last 1h, by the minute\n", "uptime:   100.00% (", "latency:  mean ", "█", "healthy"} {
		if !strings.Contains(out, want) {
			t.Errorf("history web-1 printed\n%s\nwant %q in it", out, want)
		}
	}
	out = mustRun(t, "history", addr, "--group", "edge", "--window", "30d")
	for _, want := range []string{"group edge, last 30d, by the hour\n", "uptime:   50.", "p95:", "events:", "routable minimum met 100.00% of the time"} {
		if !strings.Contains(out, want) {
			t.Errorf("history --group edge printed\n%s\nwant %q in it", out, want)
		}
	}
	// With an objective: 3 of 6 probes failed where 1% may.
	mustRun(t, "policy", "set", "edge", "--objective", "0.99", addr)
	out = mustRun(t, "history", addr, "--group", "edge", "--window", "1h")
	if want := "objective:  99% over 30d: 50.00% so far, -4900.0% of the error budget left (overspent); burn rate 50.0x over the last hour\n"; !strings.Contains(out, want) {
		t.Errorf("history --group edge with an objective printed\n%s\nwant %q in it", out, want)
	}
	var h struct {
		Target, Group string
		Points        []struct{ Start string }
		Availability  float64
	}
	if err := json.Unmarshal([]byte(mustRun(t, "history", addr, "db", "--window", "7d", "-o", "json")), &h); err != nil {
		t.Fatal(err)
	}
	if h.Target != "db" || h.Group != "edge" || len(h.Points) != 7*24 || h.Availability != 0 {
		t.Errorf("history db -o json = %+v; want db of edge, 168 points, availability 0", h)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"history", addr}, exitUsage, "name one target, or a group with --group; got 0 arguments"},
		{[]string{"history", addr, "web-1", "--group", "edge"}, exitUsage, "not both"},
		{[]string{"history", addr, "web-1", "--window", "2h"}, exitUsage, `--window must be 1h, 24h, 7d or 30d, got "2h"`},
		{[]string{"history", addr, "nope"}, exitNotFound, `no target named "nope"`},
		{[]string{"history", addr, "--group", "none"}, exitNotFound, `no history of group "none" here`},
	} {
		if r := pulsectl(t, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("pulsectl %s: exit %d, %q; want exit %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}

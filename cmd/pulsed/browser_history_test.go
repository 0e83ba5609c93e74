package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// browserHistory opens web-1's history on the status page (a click on its
// name): its uptime over 1h to 30d, the latency chart and the transitions
// load on demand, the failure included; closing it empties it.
func browserHistory(t *testing.T, page *page, artifacts string) {
	t.Helper()
	if got := page.evaluate(t, `String(document.getElementById("detail").hidden)`); got != "true" {
		t.Errorf("the history shows before a target is opened")
	}
	page.evaluate(t, `document.querySelector('tr[data-name="web-1"] td.name').click(); ""`)
	page.waitFor(t, `document.getElementById("detail").dataset.loaded`, "1")
	uptime := page.evaluate(t, `[...document.querySelectorAll("#detail-uptime dd")].map((d) => d.dataset.window + "=" + d.textContent).join(" ")`)
	for _, w := range []string{"1h=", "24h=", "7d=", "30d="} {
		if !strings.Contains(uptime, w) || strings.Contains(uptime, w+"—") || strings.Contains(uptime, w+"100.00%") {
			t.Errorf("uptimes %q: want %s a share below 100%% (web-1 failed)", uptime, w)
		}
	}
	if got := page.evaluate(t, `String(document.querySelectorAll("#detail-chart polyline.p95").length > 0 && document.querySelectorAll("#detail-chart polyline.p50").length > 0)`); got != "true" {
		t.Errorf("%s latency lines in the chart, want p50 and p95", got)
	}
	if got := page.evaluate(t, `String(document.querySelectorAll("#detail-chart rect.fail").length > 0)`); got != "true" {
		t.Errorf("the chart shades no hour with failures")
	}
	events := page.evaluate(t, `document.getElementById("detail-events").innerText`)
	if !strings.Contains(events, "healthy → unhealthy (status 503)") || !strings.Contains(events, "unhealthy → healthy") {
		t.Errorf("transitions shown: %q; want web-1's rise and its fall with status 503", events)
	}
	page.screenshot(t, filepath.Join(artifacts, "status-page-history.png"))
	page.evaluate(t, `document.getElementById("detail-close").click(); ""`)
	if got := page.evaluate(t, `String(document.getElementById("detail").hidden && document.getElementById("detail-events").children.length === 0)`); got != "true" {
		t.Errorf("closing the history leaves it shown or filled")
	}
}
